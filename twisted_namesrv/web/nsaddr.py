"""The address server, built in: ``/rocketmq/nsaddr`` and Java's unit form ``/rocketmq/nsaddr-UNIT``.

RocketMQ clients and brokers without a NameServer address poll an HTTP address server for one
(Java's ``TopAddressing``: ``rocketmq.namesrv.domain``, ``fetchNamesrvAddrByAddressServer``; the
C++ client's ``set_namesrv_domain``).  The body is ``host:port;host:port`` in plain text.  Operators
usually run a separate web server for it; here the NameServer answers it on its HTTP port with
``nsaddrList`` (``--nsaddr-list``); else with ``advertisedAddress`` (``--advertised-address`` or
``$NAMESRV_ADVERTISED_ADDRESS``: the address clients reach it at, e.g. a pod IP or a Service name,
with the listen port when it names none); else with its own address: ``bindAddress:listenPort``, or,
bound to every interface, the address the poller reached it on - which, behind NAT or in a
container, is an address only that network knows.  Every unit gets the same list.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.web import pages, resource, server

from ..state.config import NamesrvConfig, nsaddr_entries, split_advertised
from ..state.hosts import host_port

NSADDR = b"nsaddr"
WILDCARDS = frozenset({"0.0.0.0", "::", ""})


class NsaddrResource(resource.Resource):
    isLeaf = True

    def __init__(self, config: NamesrvConfig, listen_port: Callable[[], int]) -> None:
        super().__init__()
        self.config = config
        self.listen_port = listen_port

    def answer(self, request: server.Request) -> str:
        listed = ";".join(nsaddr_entries(str(self.config["nsaddrList"])))  # as checked: no white space around
        if listed:
            return listed
        advertised = str(self.config["advertisedAddress"]).strip()
        if advertised:
            host, port = split_advertised(advertised)
            return host_port(host, self.listen_port() if port is None else port)
        host = str(self.config["bindAddress"])
        if host in WILDCARDS:
            host = request.getHost().host  # the interface this poller reached: reachable from it
        return host_port(host, self.listen_port())

    def render_GET(self, request: server.Request) -> bytes:
        if request.postpath:  # /rocketmq/nsaddr/anything
            return pages.notFound().render(request)
        request.setHeader(b"content-type", b"text/plain; charset=utf-8")
        return self.answer(request).encode()


class RocketmqDirectory(resource.Resource):
    """``/rocketmq/``: ``nsaddr`` and ``nsaddr-UNIT`` (Java appends ``?nofix=1``, ignored); nothing else."""

    def __init__(self, nsaddr: NsaddrResource) -> None:
        super().__init__()
        self.nsaddr = nsaddr

    def getChild(self, path: bytes, request: server.Request) -> resource.IResource:
        if path == NSADDR or (path.startswith(NSADDR + b"-") and len(path) > len(NSADDR) + 1):
            return self.nsaddr
        return pages.notFound()


def nsaddr_resources(config: NamesrvConfig, listen_port: Callable[[], int]) -> dict[bytes, resource.IResource]:
    """The children to put on the site's root."""
    return {b"rocketmq": RocketmqDirectory(NsaddrResource(config, listen_port))}
