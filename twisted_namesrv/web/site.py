"""``--metrics-port``: Prometheus text at ``/metrics``, the status page at ``/``, its JSON under
``/api/``, all on Twisted Web and all served from the package (no CDN, no build step)."""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from twisted.web import pages, resource, server

from ..context import NamesrvState
from ..server import RemotingFactory
from .api import TOPIC_SEARCH_LIMIT, StatusApi
from .collector import registry

STATUS_PAGE = files(__package__).joinpath("status.html")


class MetricsPage(resource.Resource):
    isLeaf = True

    def __init__(self, state: NamesrvState, factory: RemotingFactory) -> None:
        super().__init__()
        self.registry = registry(state, factory)

    def render_GET(self, request: server.Request) -> bytes:
        request.setHeader(b"content-type", CONTENT_TYPE_LATEST.encode())
        return generate_latest(self.registry)


class StatusPage(resource.Resource):
    isLeaf = True

    def render_GET(self, request: server.Request) -> bytes:
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        request.setHeader(b"cache-control", b"no-cache")
        return STATUS_PAGE.read_bytes()


class ApiResource(resource.Resource):
    """``/api/<name>``: one JSON document each; unknown names and topics answer 404."""

    isLeaf = True

    def __init__(self, api: StatusApi) -> None:
        super().__init__()
        self.api = api

    def render_GET(self, request: server.Request) -> bytes:
        name = "/".join(p.decode() for p in request.postpath)
        document = self._document(name, request)
        if document is None:
            request.setResponseCode(404)
            document = {"error": f"not found: /api/{name}"}
        request.setHeader(b"content-type", b"application/json")
        request.setHeader(b"cache-control", b"no-cache")
        return json.dumps(document).encode()

    def _document(self, name: str, request: server.Request) -> dict[str, Any] | None:
        api = self.api
        if name == "overview":
            return api.overview()
        if name == "clusters":
            return api.clusters()
        if name == "topics":
            return api.topics(_arg(request, "q"), _int_arg(request, "limit", TOPIC_SEARCH_LIMIT))
        if name == "route":
            return api.route(_arg(request, "topic"))
        if name == "kv":
            return api.kv()
        if name == "events":
            return api.events(_int_arg(request, "since", 0))
        return None


def _arg(request: server.Request, name: str) -> str:
    return request.args.get(name.encode(), [b""])[0].decode("utf-8", "replace")


def _int_arg(request: server.Request, name: str, default: int) -> int:
    try:
        return max(0, int(_arg(request, name)))
    except ValueError:
        return default


class Root(resource.Resource):
    def getChild(self, path: bytes, request: server.Request) -> resource.IResource:
        return pages.notFound()


class QuietSite(server.Site):
    """No access log: the status page polls every few seconds and would drown the broker events."""

    def log(self, request: server.Request) -> None:
        pass


def make_site(state: NamesrvState, factory: RemotingFactory) -> server.Site:
    root = Root()
    root.putChild(b"", StatusPage())
    root.putChild(b"metrics", MetricsPage(state, factory))
    root.putChild(b"api", ApiResource(StatusApi(state, factory)))
    site = QuietSite(root)
    site.displayTracebacks = False
    site.noisy = False
    return site
