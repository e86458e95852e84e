"""``--metrics-port``: Prometheus text at ``/metrics``, the status page at ``/``, its JSON under
``/api/``, all on Twisted Web and all served from the package (no CDN, no build step); with
``aclEnable`` behind the ACL file's accounts (web/auth.py)."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator, Mapping
from importlib.resources import files
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import pages, resource, server

from ..apart import NoRoom, Scrape
from ..budget import FdBudget
from ..context import NamesrvState
from ..escapes import CONTROLS
from ..observations import Observations
from ..outages import HealthWatch
from ..peers import PeersService
from ..peers import as_json as peers_json
from ..refusals import Refusals, peer_text
from ..server import RemotingFactory
from ..state.config import NamesrvConfig
from ..state.hosts import AllowedHosts
from .api import TOPIC_SEARCH_LIMIT, StatusApi
from .auth import guarded
from .collector import EscapedRegistry, registry
from .connections import BoundedSite
from .searches import SearchBudget

log = Logger()

STATUS_PAGE = files(__package__).joinpath("status.html")


class MetricsPage(resource.Resource):
    """The Prometheus text, its series read in the reactor's turn and written out in a thread
    (apart.py; scrapes asked meanwhile share one): peers make most of its series (about six a broker
    registered as a group and cluster of its own, labels up to maxNameLength), and written in the
    reactor's thread, 2,000 such brokers held every lookup 1.7-2.4 s a scrape."""

    isLeaf = True

    def __init__(self, state: NamesrvState, factory: RemotingFactory, seen: Observations, health: HealthWatch,
                 controller: Any = None, peers: PeersService | None = None) -> None:
        super().__init__()
        self.build_apart, self.refusals = state.build_apart, state.refusals
        self.registry = registry(state, factory, seen, health, peers)
        if controller is not None:  # RocketMQ 5.x's controller in this process
            from ..controller.web import ControllerCollector

            self.registry.register(ControllerCollector(controller))

    def render_GET(self, request: server.Request) -> Any:
        request.setHeader(b"content-type", CONTENT_TYPE_LATEST.encode())
        return answer_later(request, self.build_apart(Scrape("metrics"), self._begin), bytes, "/metrics",
                            self.refusals)

    def _begin(self) -> Callable[[], bytes]:
        """In the reactor's turn: what every family says now; their series (those per broker, group
        and cluster: collector.Later) and the text are made from it in the thread."""
        read = _Read(self.registry.read())
        return lambda: generate_latest(read)


class _Read:
    """Metric families read already, as generate_latest asks a registry for them: their series
    made (and escaped) as it asks."""

    def __init__(self, read: list[Any]) -> None:
        self.read = read

    def collect(self) -> Iterator[Any]:
        return EscapedRegistry.made(self.read)


def answer_later(request: server.Request, made: defer.Deferred[Any], encode: Callable[[Any], bytes],
                 what: str, refusals: Refusals | None = None) -> Any:
    """Write ``encode(what made makes)`` once it is made (NOT_DONE_YET); a client that went meanwhile
    lets a build not begun go (apart.py), and a build that fails is answered 500, never left open (the
    port's connections are few); one the memory budget had no room to wait for (apart.py: NoRoom)
    503, a refusal (``memory_budget``)."""
    gone: list[object] = []  # the client went before the document was made: nothing to write

    def went(failure: Failure) -> None:
        gone.append(failure)
        made.cancel()  # not begun yet: never begun (apart.py)
    request.notifyFinish().addErrback(went)

    def write(body: bytes) -> None:
        if not gone:
            request.write(body)
            request.finish()

    def failed(failure: Failure) -> None:
        if gone and failure.check(defer.CancelledError):
            return  # let go with its client
        if failure.check(NoRoom):
            (refusals or Refusals())("http", "memory_budget", peer_text(request.getClientAddress()),
                                     "{what} refused: {why} (503)", what=what, why=str(failure.value))
            request.setResponseCode(503)
            request.setHeader(b"retry-after", b"1")
            request.setHeader(b"content-type", b"application/json")
            write(json.dumps({"error": f"server busy: {failure.value}"}).encode())
            return
        log.failure("{what} failed", failure, what=what)
        if not gone:
            request.setResponseCode(500)
            request.setHeader(b"content-type", b"application/json")
            write(json.dumps({"error": f"the document could not be made: {failure.type.__name__}"}).encode())
    made.addCallbacks(lambda result: write(encode(result)), failed)
    return server.NOT_DONE_YET


#: where the page's first answers go: before its script, which reads them instead of asking
PRELOAD_BEFORE = b'<script>\n"use strict";'


class StatusPage(resource.Resource):
    """The page, with its first answers in it (``/api/overview``, ``/api/clusters``, ``/api/events``,
    none of them admin-only): it renders them as it loads, so whatever looks at it at its load event
    - a plain ``chromium --headless --screenshot``, ``--dump-dom``, a slow browser - sees the
    brokers, not "loading…", whatever the machine's load.  It refreshes from /api after that."""

    isLeaf = True

    def __init__(self, api: StatusApi) -> None:
        super().__init__()
        self.api = api

    def render_GET(self, request: server.Request) -> bytes:
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        first = json.dumps({"api/overview": self.api.overview(), "api/events": self.api.events(),
                            "controls": CONTROLS.pattern}).encode()  # what the page shows as escapes
        # no "</script>" can end it early: "<" as \u003c (JSON reads it as "<")
        data = (first[:-1] + b', "api/clusters": ' + self.api.clusters_json() + b"}").replace(b"<", b"\\u003c")
        page = STATUS_PAGE.read_bytes()
        return page.replace(PRELOAD_BEFORE, b'<script id="preload" type="application/json">' + data +
                            b"</script>\n" + PRELOAD_BEFORE, 1)


class ApiError(Exception):
    """An answer other than 200: its HTTP status, and a message that names what is missing."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


#: what an endpoint answers: a document, one made apart, or one encoded already (kept: state/costly.py)
Document = bytes | dict[str, Any] | defer.Deferred[dict[str, Any]]


class ApiResource(resource.Resource):
    """``/api/<name>``: one JSON document each; an error is ``{"error": message}`` with 400 (a bad or
    missing parameter), 404 (no such endpoint, no such topic), or 429/503 (too many topic searches
    held: web/searches.py).  A document made apart whose client went away is let go (apart.py)."""

    isLeaf = True

    def __init__(self, api: StatusApi, controller: Any = None, peers: PeersService | None = None,
                 searches: SearchBudget | None = None, refusals: Refusals | None = None) -> None:
        super().__init__()
        self.api = api
        self.searches = searches or SearchBudget()
        self.refusals = refusals or Refusals()
        self.endpoints: dict[str, Callable[[server.Request], Document]] = {
            "overview": lambda request: api.overview(),
            "clusters": lambda request: api.clusters_json(),  # (encoded: kept, state/costly.py)
            "topics": self._topics,
            "route": self._route,
            "kv": lambda request: api.kv(),
            "events": lambda request: api.events(_int_arg(request, "since", 0)),
            "peers": lambda request: peers_json(peers.report if peers else None, peers.peers() if peers else []),
        }
        if controller is not None:
            from ..controller.web import controller_status

            self.endpoints["controller"] = lambda request: controller_status(controller)

    def render_GET(self, request: server.Request) -> bytes:
        name = "/".join(p.decode("utf-8", "replace") for p in request.postpath)
        try:
            endpoint = self.endpoints.get(name)
            if endpoint is None:
                raise ApiError(404, f"no endpoint /api/{name}; there are " +
                               ", ".join(f"/api/{known}" for known in self.endpoints))
            document = endpoint(request)
        except ApiError as error:
            request.setResponseCode(error.status)
            document = {"error": str(error)}
        request.setHeader(b"content-type", b"application/json")
        if isinstance(document, bytes):
            return document
        if not isinstance(document, defer.Deferred):
            return json.dumps(document).encode()
        return answer_later(request, document, lambda made: json.dumps(made).encode(), f"/api/{name}",
                            self.refusals)

    def _topics(self, request: server.Request) -> defer.Deferred[dict[str, Any]]:
        """A topic search, held against the search budget (web/searches.py) until it is answered."""
        query, limit = _arg(request, "q"), _int_arg(request, "limit", TOPIC_SEARCH_LIMIT)
        client = request.getClientAddress()
        host = str(getattr(client, "host", client))
        refused = self.searches.take(host)
        if refused is not None:
            self.refusals("http", refused.reason, peer_text(client),
                          "topic search refused: {why} ({status})", why=refused.message, status=refused.status)
            request.setHeader(b"retry-after", b"1")
            raise ApiError(refused.status, refused.message)
        try:
            made = self.api.topics(query, limit)
        except BaseException:
            self.searches.release(host)
            raise

        def release(result: Any) -> Any:
            self.searches.release(host)
            return result
        return made.addBoth(release)

    def _route(self, request: server.Request) -> dict[str, Any]:
        topic = _arg(request, "topic")
        if not topic:
            raise ApiError(400, "missing query parameter 'topic' (/api/route?topic=NAME)")
        route = self.api.route(topic)
        if route is None:
            raise ApiError(404, f"topic {topic!r} has no route")
        return route


def _arg(request: server.Request, name: str) -> str:
    return request.args.get(name.encode(), [b""])[0].decode("utf-8", "replace")


def _int_arg(request: server.Request, name: str, default: int) -> int:
    """``default`` when absent; anything but a whole number >= 0 is refused, naming the parameter."""
    raw = _arg(request, name)
    if not raw:
        return default
    if not (raw.isascii() and raw.isdigit()):
        raise ApiError(400, f"query parameter {name!r} must be a whole number >= 0, not {raw[:40]!r}")
    if len(raw) > 12:  # int() refuses past 4,300 digits with a ValueError: a 500 and a traceback a request
        raise ApiError(400, f"query parameter {name!r} has {len(raw)} digits, at most 12")
    return int(raw)


def allowed_hosts(config: NamesrvConfig) -> AllowedHosts:
    """What a Host header may name (state/hosts.py): this listener's bind address, the names and
    addresses configured for this server, this machine's hostname, httpAllowedHosts."""
    return AllowedHosts.from_values(str(config["metricsBindAddress"]), str(config["advertisedAddress"]),
                                    [str(config["nsaddrList"]), str(config["namesrvAddr"])], socket.gethostname(),
                                    str(config["httpAllowedHosts"]))


class Root(resource.Resource):
    def getChild(self, path: bytes, request: server.Request) -> resource.IResource:
        return pages.notFound()


class QuietSite(BoundedSite):
    """No access log: the status page polls every few seconds and would drown the broker events."""

    #: the topic searches held (web/searches.py), set by make_site
    searches: SearchBudget | None = None

    def log(self, request: server.Request) -> None:
        pass


def make_site(state: NamesrvState, factory: RemotingFactory, seen: Observations,
              children: Mapping[bytes, resource.IResource] | None = None, controller: Any = None,
              peers: PeersService | None = None, reactor: Any = None, fds: FdBudget | None = None) -> QuietSite:
    """``seen``: what the server observed of itself (the composition root's owners; ``seen.health``,
    the one computation of the outages for /metrics, /api and the page); ``children``: more
    top-level resources (the probes, the address server), each in its own module; ``controller``:
    the embedded ControllerService, if any (its metrics and /api/controller); ``peers``: the peers
    view's service (/api/peers and the namesrv_peer_* gauges); ``reactor``: the timeouts' clock;
    ``fds``: the descriptors its port admits connections against, told of each close."""
    root = Root()
    for name, child in (children or {}).items():
        root.putChild(name, child)
    api = StatusApi(state, factory, seen, seen.health)
    root.putChild(b"", StatusPage(api))
    root.putChild(b"metrics", MetricsPage(state, factory, seen, seen.health, controller, peers))
    searches = SearchBudget()
    root.putChild(b"api", ApiResource(api, controller, peers, searches, state.refusals))
    opened = bool(state.config["httpOpenBeyondLoopback"])
    config = state.config
    site = QuietSite(guarded(root, state.acl, state.refusals, allowed_hosts(config), opened),  # web/auth.py
                     state.refusals, config["httpMaxConnections"], config["httpIdleTimeoutSeconds"],
                     config["httpRequestTimeoutSeconds"], reactor, fds, state.budget)  # web/connections.py
    site.displayTracebacks = False
    site.noisy = False
    site.searches = searches
    return site
