"""``/healthz`` and ``/readyz`` on the HTTP port (``--metrics-port``), for probes.

``/healthz`` (liveness): the process answers and every listener it was asked for is bound.
``/readyz`` (readiness): that, and the KV store and route snapshot are loaded, the server is
not stopping, and the broker groups it knows are routed again (or it waited ``readinessBrokerWait``
for them): a client sent here now is answered from the state it should have.  Its document also
says "N of M known broker groups back" and names the groups still absent.

Both answer 200 when every check passes, else 503, with a small JSON document naming each check,
so a probe needs only the status and a person reading ``curl`` sees why.  They carry nothing
secret and stay public when the HTTP side asks for credentials.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from twisted.web import resource, server

#: a check's name -> whether it passes now
Checks = Callable[[], Mapping[str, bool]]
#: the checks, and more for a person reading the probe's answer (never decides its status), from
#: one computation: /readyz's both read the route health, worked out once per request
Probe = Callable[[], tuple[Mapping[str, bool], Mapping[str, Any]]]


class HealthResource(resource.Resource):
    """One probe endpoint: 200 when every check passes, 503 naming those that do not."""

    isLeaf = True

    def __init__(self, probe: Probe) -> None:
        super().__init__()
        self.probe = probe

    def render_GET(self, request: server.Request) -> bytes:
        checks, details = self.probe()
        results = dict(checks)
        failing = sorted(name for name, ok in results.items() if not ok)
        request.setResponseCode(503 if failing else 200)
        request.setHeader(b"content-type", b"application/json")
        document = {"status": "fail" if failing else "ok", "checks": results, "failing": failing, **details}
        return (json.dumps(document) + "\n").encode()

    render_HEAD = render_GET


def health_resources(live: Checks, ready: Probe) -> dict[bytes, resource.IResource]:
    """The children to put on the site's root."""
    return {b"healthz": HealthResource(lambda: (live(), {})), b"readyz": HealthResource(ready)}
