"""The peers view: where this NameServer's routes differ from the other NameServers' of its cluster.

Brokers register with every NameServer on their own; one that missed registrations (a partition,
a restart, a broker configured with part of the list) gives clients other routes than its peers,
and each status page alone shows only its own view.  Given the others (``namesrvAddr``, from
``-n`` as ``mqnamesrv`` takes it, else ``nsaddrList`` without this server), this reads each of
them as a client does, every ``peersCompareInterval`` ms, and compares them with this server's own
routes - with ``namesrv-admin compare``'s own code (admin/compare.py: the requests a reading makes,
the differences, the report).  Each peer is compared with this server alone, so one unreachable
peer does not hide what another one says.

No thread and no socket to itself: this server's own routes are read in process, through its
handlers (no ACL to pass, whatever ``tls.server.mode`` says), a few requests per reactor turn (a
Cooperator); the peers through a Twisted client (client.py) with the project's codec, over TLS
unless ``tls.server.mode=disabled`` (tls.py: ``connect_with``) and, with ``aclEnable``, every
request signed with an account of this server's own accounts file (its first admin account, else
its first: a cluster's NameServers share that file).  Nothing runs beside the forked route-snapshot
writer (warm_restart.py).

Cost: each comparison reads every topic's route from every server (a request per topic each):
raise the interval for clusters with very many topics.  A reading keeps at most
``compare.PATHS_MAX`` fields of a server (this server's own and a peer's are held together), each
answer's values counted over its bytes before it is decoded: past them, that peer's error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from twisted.internet import defer, interfaces, task
from twisted.logger import Logger

from .admin import compare
from .admin.client import AdminError, split_namesrv_list
from .client import RemotingClient, TlsWrap
from .context import NamesrvState, Peer
from .dispatch import NAMESRV_TABLE
from .processor import Answer
from .remoting import RemotingCommand
from .state.acl import AccessControl
from .state.config import NamesrvConfig, split_advertised
from .timers import ClockedTimerService

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


#: the peer a request read in process is said to come from (no connection: nothing is kept for it)
IN_PROCESS = Peer(None, "in process")


def read_in_process(state: NamesrvState, asks: compare.Asking,
                    cooperator: task.Cooperator | None = None) -> defer.Deferred[compare.Snapshot]:
    """A reading (admin/compare.py) answered by this server's own handlers, one request a step, the
    steps run by ``cooperator`` (Twisted's default: a few milliseconds a reactor turn)."""
    result: list[compare.Snapshot] = []

    def steps() -> Iterator[defer.Deferred[None] | None]:
        try:
            ask = next(asks)
            while True:
                request = RemotingCommand.request(ask.code, ask.ext, ask.body, version=state.profile.mq_version)
                answer = NAMESRV_TABLE.handlers[ask.code](state, request, IN_PROCESS)  # no refusal: no ACL
                if isinstance(answer, defer.Deferred):  # built in a thread (a topic list): the task waits for it
                    made: list[RemotingCommand] = []
                    yield answer.addCallback(made.append)
                    answer = made[0]
                response = answer.response if isinstance(answer, Answer) else answer
                yield None
                ask = asks.send(response)
        except StopIteration as done:
            result.append(done.value)

    running = (cooperator or task).cooperate(steps())
    return running.whenDone().addCallback(lambda _: result[0])


@defer.inlineCallbacks
def read_remote(client: RemotingClient, asks: compare.Asking) -> Any:
    """A reading answered by another NameServer, through the Twisted client."""
    try:
        ask = next(asks)
        while True:
            response = yield client.call(ask.code, ask.ext, ask.body)
            ask = asks.send(response)
    except StopIteration as done:
        return done.value
    finally:
        client.close()


def signing_account(acl: AccessControl | None) -> tuple[str, str] | None:
    """(accessKey, secretKey) the view signs with: this server's first admin account, else its first."""
    if acl is None or not acl.accounts:
        return None
    accounts = list(acl.accounts.values())
    chosen = next((account for account in accounts if account.admin), accounts[0])
    return chosen.access_key, chosen.secret_key


@defer.inlineCallbacks
def compare_with_peers(own: str, state: NamesrvState, peers: list[str],
                       connect: Callable[[str], RemotingClient]) -> Any:
    """This server's routes read in process (named ``own``), each peer's through ``connect``; each
    peer compared with this server."""
    report = PeersReport(own, list(peers))
    try:
        mine = yield read_in_process(state, compare.snapshot_asks(own, max_paths=compare.PATHS_MAX))
    except AdminError as exc:
        report.error = f"this server's own routes could not be read: {exc}"
        return report
    for peer in peers:
        try:
            theirs = yield read_remote(connect(peer), compare.snapshot_asks(peer, max_paths=compare.PATHS_MAX))
        except AdminError as exc:
            report.results.append(PeerResult(peer, False, error=str(exc)))
            continue
        pair = {own: mine, peer: theirs}
        found = compare.Report.of([own, peer], compare.differences(pair), strict=False)
        if found.shown:
            lines = found.lines()
            report.results.append(PeerResult(peer, True, len(found.shown), found.summary(),
                                             tuple(lines[1:LINES_SHOWN + 1])))
        else:
            report.results.append(PeerResult(peer, True, 0, compare.agreement([own, peer], mine)))
    return report


class PeersService(ClockedTimerService):
    """Compares every ``interval`` seconds while running (Twisted's TimerService: the first at its
    start; nothing to do while no peer is configured); ``report`` is the last comparison."""

    def __init__(self, state: NamesrvState, own: Callable[[], str], peers: Callable[[], list[str]],
                 clock: interfaces.IReactorTime, interval: float, tls: TlsWrap | None = None,
                 timeout: float = PEER_TIMEOUT) -> None:
        super().__init__(interval, self.compare, clock)
        self.state = state
        self.own = own
        self.peers = peers
        self.report: PeersReport | None = None
        self._tls = tls
        self._timeout = timeout
        self._busy = False

    def connect(self, addr: str) -> RemotingClient:
        return RemotingClient(addr, self.clock, self._timeout, self._tls, signing_account(self.state.acl))

    def compare(self) -> defer.Deferred | None:
        """One comparison, unless the last one is still running (a slow peer)."""
        peers = self.peers()
        if self._busy or not peers:
            return None
        self._busy = True
        d = compare_with_peers(self.own(), self.state, peers, self.connect)
        d.addCallback(self._done)
        d.addErrback(lambda failure: log.failure("peers view: comparison failed", failure))
        d.addBoth(self._idle)
        return d

    def _done(self, report: PeersReport) -> None:
        report.compared_ts = self.clock.seconds()
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
