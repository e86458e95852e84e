"""The controller's leadership and event log on a real etcd (tests/controller/etcd_support.py).

Real time with a 2 s lease: a crashed leader is replaced once etcd expires its lease. Every wait
has a bound (the TTL plus a margin) so a broken handover fails the test instead of hanging it.
"""

from __future__ import annotations

import uuid

import pytest
import pytest_twisted
from twisted.application.service import MultiService
from twisted.internet import defer, reactor, task
from twisted.protocols.portforward import ProxyFactory, ProxyServer

from tests.controller.etcd_harness import peer_processes, wait_for
from tests.controller.etcd_support import etcd, start_etcd_cluster  # noqa: F401  (etcd: the fixture)
from tests.support import free_port
from twisted_namesrv.controller.config import etcd_endpoints
from twisted_namesrv.controller.etcd import (
    MAX_EVENTS_PER_APPEND,
    EtcdConsensus,
    EtcdControllerLog,
    EtcdLeadership,
    ReplayFirst,
    group_prefix,
)
from twisted_namesrv.controller.etcd_gateway import EtcdError, EtcdGateway, b64, prefix_end
from twisted_namesrv.controller.log import NotLeader
from twisted_namesrv.schema import SERVER_SCHEMA
from twisted_namesrv.state.config import ConfigError, NamesrvConfig

TTL = 2  # seconds: etcd's shortest lease with its default election timeout
HANDOVER = TTL + 4  # a crashed leader's successor leads within this many seconds, or the test fails


def group() -> str:
    return f"g{uuid.uuid4().hex[:12]}"  # each test its own keys in the shared etcd


def peers(etcd, count: int, name: str | None = None, ttl: int = TTL) -> list[EtcdConsensus]:  # noqa: F811
    name = name or group()
    return [EtcdConsensus([etcd.endpoint], "/test/controller/", name, f"127.0.0.1:{10911 + i}", ttl, reactor)
            for i in range(count)]


async def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = reactor.seconds() + timeout
    while not predicate():
        if reactor.seconds() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        await task.deferLater(reactor, 0.05, lambda: None)


def leaders(group_peers: list[EtcdConsensus]) -> list[EtcdConsensus]:
    return [p for p in group_peers if p.leadership.is_leader]


async def start_all(group_peers: list[EtcdConsensus]) -> EtcdConsensus:
    await defer.gatherResults([p.start() for p in group_peers], consumeErrors=True)
    await wait_until(lambda: len(leaders(group_peers)) == 1, HANDOVER, "one leader")
    return leaders(group_peers)[0]


async def stop_all(group_peers: list[EtcdConsensus]) -> None:
    for p in group_peers:
        await p.stop()


async def failure_of(deferred):
    try:
        await deferred
    except Exception as exc:
        return exc
    raise AssertionError("expected a failure")


# -- without etcd -------------------------------------------------------------------------------------


def test_endpoints_and_prefixes_parse_as_documented():
    assert etcd_endpoints("127.0.0.1:2379; http://10.0.0.2:2379/ ,") == ["http://127.0.0.1:2379",
                                                                          "http://10.0.0.2:2379"]
    with pytest.raises(ValueError, match="only http://"):
        etcd_endpoints("https://a:2379")
    with pytest.raises(ValueError, match="no etcd endpoint"):
        etcd_endpoints(" , ")
    assert group_prefix("/rocketmq/controller", "G1") == b"/rocketmq/controller/G1/"
    with pytest.raises(ValueError, match="without '/'"):
        group_prefix("/p/", "a/b")
    assert prefix_end(b"/a/") == b"/a0" and prefix_end(b"a\xff") == b"b" and prefix_end(b"\xff") == b"\0"


def test_the_store_keys_are_checked_at_start_naming_the_key():
    with pytest.raises(ConfigError, match="controllerEtcdEndpoints: no etcd endpoint given"):
        NamesrvConfig({"controllerType": "etcd"}, schema=SERVER_SCHEMA)
    with pytest.raises(ConfigError, match="controllerType: 'jRaft'"):
        NamesrvConfig({"controllerType": "jRaft"}, schema=SERVER_SCHEMA)
    with pytest.raises(ConfigError, match="controllerEtcdLeaseTtlSeconds: 1 is out of range"):
        NamesrvConfig({"controllerEtcdLeaseTtlSeconds": 1}, schema=SERVER_SCHEMA)
    config = NamesrvConfig({}, {"controllerType": "etcd", "controllerEtcdEndpoints": "127.0.0.1:2379",
                                "controllerEtcdLeaseTtlSeconds": "5"}, schema=SERVER_SCHEMA)
    consensus = EtcdConsensus.from_config({**config.values, "controllerDLegerGroup": "G"}, "127.0.0.1:9878", reactor)
    assert consensus.gateway.endpoints == ["http://127.0.0.1:2379"]
    assert consensus.leadership.prefix == b"/rocketmq/controller/G/" and consensus.leadership.ttl == 5


@pytest_twisted.ensureDeferred
async def test_an_append_too_large_for_one_transaction_is_refused_before_sending():
    gateway = EtcdGateway(["http://127.0.0.1:1"], reactor)
    log = EtcdControllerLog(gateway, EtcdLeadership(gateway, b"/p/g/", "127.0.0.1:1"))
    error = await failure_of(log.append([b"e"] * (MAX_EVENTS_PER_APPEND + 1)))
    assert isinstance(error, ValueError) and "at most 127" in str(error)
    assert isinstance(await failure_of(log.append([b"e"])), NotLeader)  # never started: not the leader
    await gateway.close()


# -- on a real etcd -----------------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_one_leader_among_three_and_the_followers_know_its_address(etcd):  # noqa: F811
    group_peers = peers(etcd, 3)
    seen: dict[str, list] = {p.leadership.address: [] for p in group_peers}
    at_once: list[int] = []  # how many peers believed they led, at every change
    for p in group_peers:
        p.leadership.subscribe(lambda lead, addr, a=p.leadership.address: seen[a].append((lead, addr)))
        p.leadership.subscribe(lambda lead, addr: at_once.append(len(leaders(group_peers))))
    try:
        leader = await start_all(group_peers)
        address = leader.leadership.address
        await wait_until(lambda: all(p.leadership.leader_address == address for p in group_peers), HANDOVER,
                         "every peer knows the leader")
        assert leader.leadership.term is not None
        for p in group_peers:
            expected = (p is leader, address)
            assert (p.leadership.is_leader, p.leadership.leader_address) == expected
            assert seen[p.leadership.address][-1] == expected
        assert max(at_once) == 1
    finally:
        await stop_all(group_peers)


@pytest_twisted.ensureDeferred
async def test_a_followers_append_fails_with_not_leader_and_lands_nothing(etcd):  # noqa: F811
    group_peers = peers(etcd, 2)
    try:
        leader = await start_all(group_peers)
        follower = next(p for p in group_peers if p is not leader)
        await wait_until(lambda: follower.leadership.leader_address is not None, HANDOVER, "follower knows")
        assert await leader.log.replay() == []
        error = await failure_of(follower.log.append([b"from-a-follower"]))
        assert isinstance(error, NotLeader) and error.leader_address == leader.leadership.address
        await leader.log.append([b"e1", b"e2"])
        assert await leader.log.replay() == [b"e1", b"e2"]
        assert await follower.log.replay() == [b"e1", b"e2"]  # followers may read
    finally:
        await stop_all(group_peers)


@pytest_twisted.ensureDeferred
async def test_a_stopped_leader_hands_over_and_the_next_replays_every_event(etcd):  # noqa: F811
    group_peers = peers(etcd, 3)
    try:
        leader = await start_all(group_peers)
        await leader.log.replay()
        for i in range(3):
            await leader.log.append([f"a{i}".encode(), f"b{i}".encode()])
        await leader.stop()
        rest = [p for p in group_peers if p is not leader]
        await wait_until(lambda: len(leaders(rest)) == 1, HANDOVER, "a successor leads")
        successor = leaders(rest)[0]
        written = [b"a0", b"b0", b"a1", b"b1", b"a2", b"b2"]
        assert await successor.log.replay() == written
        await successor.log.append([b"c"])
        assert await successor.log.replay() == written + [b"c"]
        other = next(p for p in rest if p is not successor)
        await wait_until(lambda: other.leadership.leader_address == successor.leadership.address, HANDOVER,
                         "the other follower learns the successor")
        assert leader.leadership.leader_address is None and not leader.leadership.is_leader
        status = successor.leadership.status()
        assert status["role"] == "leader" and status["term"] == successor.leadership.term
        whys = [change["why"] for change in status["changes"]]
        assert whys[0] == f"{leader.leadership.address} leads"
        assert whys[-1] == f"won the campaign (term {status['term']})"
        assert leader.leadership.status()["changes"][-1]["why"] == "stopped"
    finally:
        await stop_all(group_peers)


@pytest_twisted.ensureDeferred
async def test_a_crashed_leader_is_replaced_and_its_late_append_does_not_land(etcd):  # noqa: F811
    group_peers = peers(etcd, 2)
    try:
        leader = await start_all(group_peers)
        await leader.log.replay()
        await leader.log.append([b"e1"])
        await leader.log.append([b"e2"])
        leader.leadership.crash()  # frozen: no keep-alive, no watch, still believes it leads
        successor = next(p for p in group_peers if p is not leader)
        await wait_until(lambda: successor.leadership.is_leader, HANDOVER, "the successor leads")
        assert await successor.log.replay() == [b"e1", b"e2"]
        assert leader.leadership.is_leader  # it has not noticed: only etcd's guard stops it now
        error = await failure_of(leader.log.append([b"late"]))
        assert isinstance(error, NotLeader) and error.leader_address == successor.leadership.address
        assert not leader.leadership.is_leader and leader.leadership.leader_address == successor.leadership.address
        await successor.log.append([b"e3"])
        assert await successor.log.replay() == [b"e1", b"e2", b"e3"]
    finally:
        await stop_all(group_peers)


@pytest_twisted.ensureDeferred
async def test_a_leader_that_missed_events_cannot_append_until_it_replays(etcd):  # noqa: F811
    group_peers = peers(etcd, 2)
    try:
        first = await start_all(group_peers)
        second = next(p for p in group_peers if p is not first)
        assert isinstance(await failure_of(first.log.append([b"e0"])), ReplayFirst)  # never replayed
        assert await second.log.replay() == []  # at start, as a follower
        await first.log.replay()
        await first.log.append([b"e1"])
        await first.stop()
        await wait_until(lambda: second.leadership.is_leader, HANDOVER, "the second leads")
        # it leads on a view of the log from before e1: its append is refused and it resigns
        error = await failure_of(second.log.append([b"stale"]))
        assert isinstance(error, NotLeader) and not second.leadership.is_leader
        await wait_until(lambda: second.leadership.is_leader, HANDOVER, "it leads again (a new term)")
        assert await second.log.replay() == [b"e1"]
        await second.log.append([b"e2"])
        assert await second.log.replay() == [b"e1", b"e2"]
    finally:
        await stop_all(group_peers)


@pytest_twisted.ensureDeferred
async def test_appends_racing_a_handover_land_only_from_the_leader_that_holds_the_key(etcd):  # noqa: F811
    group_peers = peers(etcd, 2)
    try:
        leader = await start_all(group_peers)
        successor = next(p for p in group_peers if p is not leader)
        await leader.log.replay()
        await leader.log.append([b"before"])
        leader.leadership.crash()
        # the old leader's lease revoked by hand: the key goes at once and the successor campaigns,
        # while the old leader still sends appends as fast as it can
        await leader.gateway.lease_revoke(leader.leadership._lease)
        outcomes = []
        while not successor.leadership.is_leader:
            try:
                await leader.log.append([b"racing"])
                outcomes.append("landed")
            except NotLeader:
                outcomes.append("refused")
                break
        assert "refused" in outcomes
        await wait_until(lambda: successor.leadership.is_leader, HANDOVER, "the successor leads")
        events = await successor.log.replay()
        assert events == [b"before"] + [b"racing"] * outcomes.count("landed")
        await successor.log.append([b"after"])
        assert (await successor.log.replay())[-1] == b"after"
    finally:
        await stop_all(group_peers)


@pytest_twisted.ensureDeferred
async def test_a_restarted_leader_takes_its_own_stale_key_back_without_waiting(etcd):  # noqa: F811
    name = group()
    [first] = peers(etcd, 1, name, ttl=30)  # a long lease: only the revoke can free the key in time
    [again] = peers(etcd, 1, name, ttl=30)
    try:
        await first.start()
        assert first.leadership.is_leader
        await first.log.replay()
        await first.log.append([b"kept"])
        first.leadership.crash()
        await again.start()  # same address, new lease: revokes the old one and campaigns
        await wait_until(lambda: again.leadership.is_leader, HANDOVER, "the restarted controller leads")
        assert again.leadership.term != first.leadership.term
        assert await again.log.replay() == [b"kept"]
    finally:
        await stop_all([first, again])


@pytest_twisted.ensureDeferred
async def test_replay_reads_many_events_in_order_across_pages(etcd):  # noqa: F811
    [peer] = peers(etcd, 1)
    try:
        await peer.start()
        await peer.log.replay()
        written = [f"event-{i}".encode() for i in range(25)]
        for start in range(0, 25, 7):
            await peer.log.append(written[start:start + 7])
        paged = EtcdControllerLog(peer.gateway, peer.leadership, page_size=4)
        assert await paged.replay() == written
    finally:
        await peer.stop()


class _TrackedProxy(ProxyServer):
    def connectionMade(self) -> None:
        self.factory.open.add(self)
        super().connectionMade()

    def connectionLost(self, reason) -> None:
        self.factory.open.discard(self)
        super().connectionLost(reason)


@pytest_twisted.ensureDeferred
async def test_a_leader_cut_off_from_etcd_steps_down_before_its_lease_ends(etcd):  # noqa: F811
    host, port = etcd.endpoint.removeprefix("http://").split(":")
    proxy = ProxyFactory(host, int(port))
    proxy.protocol = _TrackedProxy
    proxy.open = set()
    listening = reactor.listenTCP(0, proxy, interface="127.0.0.1")
    name = group()
    cut = EtcdConsensus([f"http://127.0.0.1:{listening.getHost().port}"], "/test/controller/", name,
                        "127.0.0.1:10001", TTL, reactor)
    [direct] = peers(etcd, 1, name)
    changes: list[tuple[float, bool, str | None]] = []
    cut.leadership.subscribe(lambda lead, addr: changes.append((reactor.seconds(), lead, addr)))
    try:
        await cut.start()
        assert cut.leadership.is_leader
        both = []
        direct.leadership.subscribe(lambda lead, addr: both.append(lead and cut.leadership.is_leader))
        await direct.start()
        await listening.stopListening()
        for connection in list(proxy.open):
            connection.transport.abortConnection()
        cut_at = reactor.seconds()
        await wait_until(lambda: not cut.leadership.is_leader, HANDOVER, "the cut-off leader steps down")
        assert changes[-1][1:] == (False, None) and changes[-1][0] - cut_at < TTL
        await wait_until(lambda: direct.leadership.is_leader, HANDOVER, "the peer takes over")
        assert both and not any(both)  # when the peer took over, the cut-off one no longer led
    finally:
        cut.leadership.crash()
        await cut.gateway.close()
        await direct.stop()


def test_three_peer_processes_the_leaders_killed_with_sigkill_a_survivor_leads_with_every_event(etcd):  # noqa: F811
    with peer_processes(etcd.endpoint, "/test/controller/", group(), 3, TTL) as trio:
        wait_for(trio, lambda: sum(p.is_leader for p in trio) == 1 and all(
            p.status.get("leader") for p in trio), HANDOVER, "one leader, known to all")
        leader = next(p for p in trio if p.is_leader)
        follower = next(p for p in trio if p is not leader)
        assert follower.status["leader"] == leader.address
        assert follower.ask("append nope") == {"refused": leader.address}
        assert leader.ask("replay") == {"events": []}
        for i in range(5):
            assert leader.ask(f"append e{i}") == {"appended": f"e{i}"}
        leader.kill()
        rest = [p for p in trio if p is not leader]
        wait_for(rest, lambda: sum(p.is_leader for p in rest) == 1 and all(
            p.status.get("leader") not in (None, leader.address) for p in rest), HANDOVER,
            "a survivor leads, known to the other")
        successor = next(p for p in rest if p.is_leader)
        assert successor.ask("replay") == {"events": [f"e{i}" for i in range(5)]}
        assert successor.ask("append after") == {"appended": "after"}
        other = next(p for p in rest if p is not successor)
        assert other.ask("replay")["events"][-1] == "after"


@pytest_twisted.ensureDeferred
async def test_an_etcd_member_killed_the_peers_go_on_through_the_others(tmp_path):
    members = start_etcd_cluster(tmp_path, 3)
    endpoints = [m.endpoint for m in members]
    name = group()
    first = EtcdConsensus(endpoints, "/test/controller/", name, "127.0.0.1:10001", TTL, reactor)
    second = EtcdConsensus(endpoints[1:] + endpoints[:1], "/test/controller/", name, "127.0.0.1:10002", TTL,
                           reactor)
    try:
        await first.start()
        await second.start()
        assert first.leadership.is_leader and second.leadership.leader_address == "127.0.0.1:10001"
        await first.log.replay()
        await first.log.append([b"before"])
        members[0].kill()  # the member both peers' first calls went to, maybe etcd's raft leader
        # while etcd elects a new raft leader the controller leader may step down (its keep-alives go
        # unanswered) and campaign again: a NotLeader on the way is an answer brokers retry after
        deadline = reactor.seconds() + 3 * HANDOVER
        while True:
            await wait_until(lambda: len(leaders([first, second])) == 1, HANDOVER, "one leader")
            leader = leaders([first, second])[0]
            try:
                events = await leader.log.replay()
                await leader.log.append([b"after"])
                break
            except NotLeader:
                assert reactor.seconds() < deadline, "no leader could append through the surviving members"
        assert events == [b"before"]
        assert await leader.log.replay() == [b"before", b"after"]
    finally:
        await stop_all([first, second])
        for member in members:
            member.stop()


@pytest_twisted.ensureDeferred
async def test_a_log_that_does_not_add_up_is_refused_naming_the_key(etcd):  # noqa: F811
    [peer] = peers(etcd, 1)
    try:
        await peer.start()
        await peer.log.replay()
        await peer.log.append([b"e1", b"e2"])
        gateway, log = peer.gateway, peer.log
        await gateway.txn([], [{"request_put": {"key": b64(log.last_key), "value": b64(b"3")}}])
        error = await failure_of(log.replay())
        assert isinstance(error, EtcdError) and "2 events but" in str(error) and log.last_key.decode() in str(error)
        await gateway.txn([], [{"request_put": {"key": b64(log.last_key), "value": b64(b"two")}}])
        error = await failure_of(log.replay())
        assert isinstance(error, EtcdError) and "not an index" in str(error)
    finally:
        await peer.stop()


@pytest_twisted.ensureDeferred
async def test_a_controller_started_before_etcd_answers_leads_once_it_does(etcd):  # noqa: F811
    host, port = etcd.endpoint.removeprefix("http://").split(":")
    proxy_port = free_port()
    consensus = EtcdConsensus([f"http://127.0.0.1:{proxy_port}"], "/test/controller/", group(), "127.0.0.1:10001",
                              TTL, reactor)
    listening = None
    try:
        await consensus.start()  # nothing listens there yet: refused, and the beats go on
        assert not consensus.leadership.is_leader and consensus.leadership.leader_address is None
        assert isinstance(await failure_of(consensus.log.append([b"e"])), NotLeader)
        listening = reactor.listenTCP(proxy_port, ProxyFactory(host, int(port)), interface="127.0.0.1")
        await wait_until(lambda: consensus.leadership.is_leader, HANDOVER, "it leads once etcd answers")
        assert await consensus.log.replay() == []
    finally:
        await consensus.stop()
        if listening is not None:
            await listening.stopListening()


@pytest_twisted.ensureDeferred
async def test_as_a_child_service_it_joins_on_start_and_leaves_on_stop(etcd):  # noqa: F811
    first, second = peers(etcd, 2)
    parent = MultiService()
    first.setServiceParent(parent)
    try:
        parent.startService()
        await wait_until(lambda: first.leadership.is_leader, HANDOVER, "the service's controller leads")
        await second.start()
        assert second.leadership.leader_address == first.leadership.address
        await parent.stopService()
        assert not first.leadership.is_leader
        await wait_until(lambda: second.leadership.is_leader, HANDOVER, "the other takes over")
    finally:
        if parent.running:
            await parent.stopService()
        await second.stop()


@pytest_twisted.inlineCallbacks
def test_a_stalled_answer_body_is_cut_at_the_timeout_and_its_connection_closed():
    """Why the gateway reads bodies with read_body and not twisted.web.client.readBody: an Agent's
    body protocol gets HTTP11ClientProtocol's TransportProxyProducer, which has no abortConnection,
    so readBody warns at every answer and its cancellation (the call's timeout) closes nothing.
    read_body's stops the producer: the connection closes, and the call fails instead of hanging."""
    from twisted.internet import protocol

    lost: defer.Deferred = defer.Deferred()

    class Stall(protocol.Protocol):
        def dataReceived(self, data: bytes) -> None:
            if b"\r\n\r\n" in data and not getattr(self, "answered", False):
                self.answered = True  # the headers and 2 of 100 promised bytes, then nothing
                self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                     b"Content-Length: 100\r\n\r\n{}")

        def connectionLost(self, reason=None) -> None:
            lost.callback(None)

    port = reactor.listenTCP(0, protocol.Factory.forProtocol(Stall), interface="127.0.0.1")
    gateway = EtcdGateway([f"http://127.0.0.1:{port.getHost().port}"], reactor, timeout=0.3)
    try:
        with pytest.raises(Exception):  # noqa: B017 - whatever the timeout turns into, the call ends
            yield gateway.call("kv/range", {"key": b64(b"k")}, retry=False)
        yield lost  # closed by the client: the test's own timeout fails it otherwise
    finally:
        yield gateway.close()
        yield port.stopListening()
