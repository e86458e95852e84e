"""The peers view: where this NameServer's routes differ from the other NameServers' of its cluster.

Brokers register with every NameServer on their own; one that missed registrations (a partition,
a restart, a broker configured with part of the list) gives clients other routes than its peers,
and each status page alone shows only its own view.  Given the others (``namesrvAddr``, from
``-n`` as ``mqnamesrv`` takes it, else ``nsaddrList`` without this server), this asks each of them
and this server itself, as a client does, every ``peersCompareInterval`` ms and compares - with
``namesrv-admin compare``'s own code (admin/compare.py: the snapshot, the differences, the
report), in a thread, as its client is blocking.  Each peer is compared with this server alone,
so one unreachable peer does not hide what another one says.

Cost: each comparison reads every topic's route from every server (a request per topic each):
raise the interval for clusters with very many topics.  With TLS enforcing or ACL on reads, this
server's own answers need credentials the view does not have: it then says so instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twisted.application.internet import TimerService
from twisted.internet import defer, interfaces, threads
from twisted.logger import Logger

from .admin import compare
from .admin.client import AdminError, NamesrvClient, split_namesrv_list
from .state.config import NamesrvConfig, split_advertised

log = Logger()
#: seconds each request to a peer may take
PEER_TIMEOUT = 3.0
#: the differences listed per peer (the count is exact)
LINES_SHOWN = 50
LOOPBACKS = frozenset({"127.0.0.1", "localhost", "::1", "0.0.0.0", "::", ""})


@dataclass(frozen=True, slots=True)
class PeerResult:
    addr: str
    up: bool
    differences: int = 0
    summary: str = ""
    lines: tuple[str, ...] = ()
    error: str | None = None


@dataclass
class PeersReport:
    own: str
    peers: list[str]
    compared_ts: float | None = None
    results: list[PeerResult] = field(default_factory=list)
    #: why this server's own routes could not be read (then no peer is compared)
    error: str | None = None


def peer_addresses(config: NamesrvConfig, own_port: int, own_hosts: frozenset[str] = frozenset()) -> list[str]:
    """The other NameServers: ``namesrvAddr`` else ``nsaddrList``, without this server's own address
    (its port on a loopback or wildcard name, its bind address or its advertised address)."""
    listed = str(config["namesrvAddr"]).strip() or str(config["nsaddrList"]).strip()
    hosts = set(own_hosts) | LOOPBACKS | {str(config["bindAddress"])}
    advertised = str(config["advertisedAddress"]).strip()
    if advertised:
        host, port = split_advertised(advertised)
        if port in (None, own_port):
            hosts.add(host)
    peers = []
    for addr in split_namesrv_list(listed) if listed else []:
        host, _, port = addr.rpartition(":")
        if port == str(own_port) and host.strip("[]") in hosts:
            continue
        if addr not in peers:
            peers.append(addr)
    return peers


def compare_with_peers(own: str, peers: list[str], timeout: float = PEER_TIMEOUT,
                       connect: Callable[[str, float], NamesrvClient] = NamesrvClient) -> PeersReport:
    """Blocking: read ``own`` and each peer as a client does, then compare each peer with ``own``."""
    report = PeersReport(own, list(peers))
    snapshots: dict[str, compare.Snapshot] = {}
    errors: dict[str, str] = {}
    for addr in [own, *peers]:
        client = connect(addr, timeout)
        try:
            snapshots[addr] = compare.snapshot(client)
        except AdminError as exc:
            errors[addr] = str(exc)
        finally:
            client.close()
    if own not in snapshots:
        report.error = f"this server's own routes could not be read: {errors[own]}"
        return report
    for peer in peers:
        if peer not in snapshots:
            report.results.append(PeerResult(peer, False, error=errors[peer]))
            continue
        pair = {own: snapshots[own], peer: snapshots[peer]}
        found = compare.Report.of([own, peer], compare.differences(pair), strict=False)
        if found.shown:
            lines = found.lines()
            report.results.append(PeerResult(peer, True, len(found.shown), found.summary(),
                                             tuple(lines[1:LINES_SHOWN + 1])))
        else:
            report.results.append(PeerResult(peer, True, 0, compare.agreement([own, peer], snapshots[own])))
    return report


class PeersService(TimerService):
    """Compares every ``interval`` seconds while running (Twisted's TimerService: the first at its
    start; nothing to do while no peer is configured); ``report`` is the last comparison."""

    def __init__(self, config: NamesrvConfig, own: Callable[[], str], peers: Callable[[], list[str]],
                 clock: interfaces.IReactorTime, interval: float,
                 run: Callable[..., defer.Deferred] | None = None) -> None:
        super().__init__(interval, self.compare)
        self.clock = clock
        self.config = config
        self.own = own
        self.peers = peers
        self.interval = interval
        self.report: PeersReport | None = None
        self._run = run or threads.deferToThread
        self._busy = False
        self._clock = clock

    def compare(self) -> defer.Deferred | None:
        """One comparison, unless the last one is still running (a slow peer)."""
        peers = self.peers()
        if self._busy or not peers:
            return None
        self._busy = True
        d = self._run(compare_with_peers, self.own(), peers)
        d.addCallback(self._done)
        d.addErrback(lambda failure: log.failure("peers view: comparison failed", failure))
        d.addBoth(self._idle)
        return d

    def _done(self, report: PeersReport) -> None:
        report.compared_ts = self._clock.seconds()
        if report.error:
            log.warn("peers view: {error}", error=report.error)
        for result in report.results:
            previous = self._result(result.addr)
            if not result.up and (previous is None or previous.up):
                log.warn("peers view: NameServer {addr} unreachable: {error}", addr=result.addr, error=result.error)
            elif result.differences and (previous is None or previous.summary != result.summary):
                log.warn("peers view: {summary}", summary=result.summary)
        self.report = report

    def _result(self, addr: str) -> PeerResult | None:
        return next((r for r in self.report.results if r.addr == addr), None) if self.report else None

    def _idle(self, passed: Any) -> None:
        self._busy = False


def as_json(report: PeersReport | None, peers: list[str]) -> dict[str, Any]:
    """``/api/peers``."""
    if report is None:
        return {"configured": bool(peers), "peers": [{"addr": addr, "up": None} for addr in peers],
                "compared_ms": None, "own": None, "error": None}
    return {"configured": True, "own": report.own, "error": report.error,
            "compared_ms": None if report.compared_ts is None else int(report.compared_ts * 1000),
            "peers": [{"addr": r.addr, "up": r.up, "differences": r.differences, "summary": r.summary,
                       "lines": list(r.lines), "error": r.error} for r in report.results]}
