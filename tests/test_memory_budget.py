"""receiveMemoryBudget: unfinished frames and inflating bodies of all peers together stay within
one budget; over it, the peers holding the largest unfinished frames are closed first (logged with
the peer, counted), and an inflation that would pass it is refused.  Behaviour, not timings: the
peak memory figures come from tools/memory_peak.py (docs/benchmarks.md)."""

from __future__ import annotations

import struct
import zlib

import pytest
from twisted.internet import address, task
from twisted.internet.testing import StringTransport
from twisted.logger import capturedLogs

from tests.support import server_config
from twisted_namesrv import budget as budget_module
from twisted_namesrv.bodies.register import RegisterBodyError, decode_register_body
from twisted_namesrv.budget import AUTO_MAX, MemoryBudget, default_budget, memory_limit_warning
from twisted_namesrv.remoting import FrameDecoder, RemotingCommand, RequestCode, ResponseCode
from twisted_namesrv.remoting.codes import V5_3_3
from twisted_namesrv.service import NamesrvService
from twisted_namesrv.state.config import ConfigError

KiB, MiB = 1024, 1024 * 1024


def start_of_frame(size: int) -> bytes:
    """All but the last byte of a frame of ``size`` bytes (its prefix not counted): a stalled peer."""
    return struct.pack(">iI", size, 2) + b"{}" + bytes(size - 4 - 2 - 1)


@pytest.fixture
def service(tmp_path):
    config = server_config(tmp_path, frameMaxLength=MiB, receiveMemoryBudget=2 * MiB)
    return NamesrvService.from_config(config, reactor=task.Clock())


def connect(service, port: int):
    proto = service.factory.buildProtocol(address.IPv4Address("TCP", "10.0.0.9", port))
    transport = StringTransport(peerAddress=address.IPv4Address("TCP", "10.0.0.9", port))
    proto.makeConnection(transport)
    return proto, transport


def test_over_the_budget_the_largest_stalled_peer_goes_first_logged_and_counted(service):
    small, small_wire = connect(service, 1)
    big, big_wire = connect(service, 2)
    middle, middle_wire = connect(service, 3)
    small.dataReceived(start_of_frame(300 * KiB))
    big.dataReceived(start_of_frame(1000 * KiB))
    with capturedLogs() as events:
        middle.dataReceived(start_of_frame(950 * KiB)[:800 * KiB])  # the total passes 2 MiB here
        assert not (small_wire.disconnecting or middle_wire.disconnecting)
        assert big_wire.disconnecting
        middle.dataReceived(start_of_frame(950 * KiB)[800 * KiB:])  # now it holds the most, but fits
    assert not middle_wire.disconnecting
    budget = service.state.budget
    assert budget.held == small.held + middle.held <= budget.limit and big.held == 0
    assert service.state.refusals.counts["remoting", "memory_budget"] == 1
    assert service.metrics.rejected["memory_budget"] == 1
    (event,) = [e for e in events if e.get("refused") == "memory_budget"]
    assert event["peer"] == "10.0.0.9:2" and event["log_level"].name == "warn" and event["held"] > 1000 * KiB

    ask = RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {}, opaque=5, version=V5_3_3)
    small.dataReceived(b"\0" + ask.encode())  # its frame's last byte, then a request: it is served
    *_, answer = FrameDecoder().feed(small_wire.value())  # (its stalled frame was answered first)
    assert RemotingCommand.decode(answer).opaque == 5
    assert small.held == 0
    middle.connectionLost()  # a peer that goes gives its bytes back
    big.connectionLost()
    assert budget.held == 0 and budget.holders == {}


def test_the_budget_spans_every_peer_not_each(service):
    """Twenty peers each far below frameMaxLength, together over the budget: some are closed."""
    peers = [connect(service, port) for port in range(100, 120)]
    for proto, _ in peers:
        proto.dataReceived(start_of_frame(200 * KiB))
    closed = [transport for _, transport in peers if transport.disconnecting]
    assert len(closed) >= 10 and service.state.budget.held <= 2 * MiB


def test_an_inflation_that_would_pass_the_budget_is_refused_and_gives_everything_back():
    budget = MemoryBudget(8 * MiB)
    bomb = zlib.compress(bytes(64 * MiB), 9)
    with pytest.raises(RegisterBodyError, match="receiveMemoryBudget"):
        decode_register_body(bomb, True, V5_3_3, 256 * MiB, budget=budget)
    assert budget.held == 0 and budget.refused_inflations == 1
    with pytest.raises(RegisterBodyError, match="inflates beyond 4194304 bytes"):
        decode_register_body(bomb, True, V5_3_3, 4 * MiB, budget=budget)  # inflateMaxLength still applies
    assert budget.held == 0


def test_a_zip_bomb_registration_is_answered_with_an_error_within_the_budget(tmp_path):
    config = server_config(tmp_path, frameMaxLength=MiB, receiveMemoryBudget=4 * MiB)
    service = NamesrvService.from_config(config, reactor=task.Clock())
    proto, transport = connect(service, 7)
    ext = {"clusterName": "c", "brokerAddr": "10.0.0.9:10911", "brokerName": "b", "brokerId": "0",
           "compressed": "true"}
    proto.dataReceived(RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, zlib.compress(bytes(32 * MiB), 9),
                                              opaque=3, version=V5_3_3).encode())
    (frame,) = FrameDecoder().feed(transport.value())
    answer = RemotingCommand.decode(frame)
    assert answer.code == ResponseCode.SYSTEM_ERROR and "receiveMemoryBudget" in answer.remark
    assert service.state.budget.held == 0 and service.state.routes.brokerAddrTable == {}


def test_the_default_budget_is_a_quarter_of_the_machine_within_bounds(monkeypatch):
    for limit, expected in ((None, AUTO_MAX), (64 * 1024 * MiB, AUTO_MAX), (512 * MiB, 128 * MiB),
                            (160 * MiB, 40 * MiB), (100 * MiB, 32 * MiB)):
        monkeypatch.setattr(budget_module, "machine_limit", lambda limit=limit: limit)
        assert default_budget(16 * MiB) == expected
    assert default_budget(200 * MiB) == 400 * MiB  # two of the largest frames always fit


def test_under_a_small_limit_the_default_budget_leaves_room_for_the_server(tmp_path, monkeypatch):
    """In a 128 MiB cgroup the default was 64 MiB (a floor of its own): 40 peers each sending all but
    the last byte of a 16 MiB frame had the kernel kill the server (56 MiB at rest, its frames' buffers
    twice what the budget counts); within 32 MiB it refused 39 of them, named and counted, peak 99 MiB."""
    monkeypatch.setattr(budget_module, "machine_limit", lambda: 128 * MiB)
    held = default_budget(16 * MiB)
    assert held == 32 * MiB
    assert memory_limit_warning(held, 56 * MiB, 128 * MiB) is None
    service = NamesrvService.from_config(server_config(tmp_path), reactor=task.Clock())
    assert service.state.budget.limit == 32 * MiB
    stalled = start_of_frame(16 * MiB - 8)  # within frameMaxLength, its prefix counted
    wires = []
    for peer in range(40):  # each stalls a frame short of its last byte: a count, not a time
        proto, wire = connect(service, peer)
        proto.dataReceived(stalled)
        wires.append(wire)
        assert service.state.budget.held <= 32 * MiB
    closed = sum(wire.disconnecting for wire in wires)
    assert closed >= 39 and service.state.refusals.counts["remoting", "memory_budget"] == closed


def test_a_limit_the_budget_does_not_fit_in_is_said_at_the_start():
    """In a 96 MiB cgroup with the default frameMaxLength (16 MiB: a budget of two frames at least) the
    stall above had the kernel kill the server, no line of its own: the start says so, and what to raise."""
    text = memory_limit_warning(32 * MiB, 55 * MiB, 96 * MiB)
    assert text is not None
    assert text.startswith("memory limit 96 MiB ")
    assert "leaves 41 MiB above what the server holds at start (55 MiB)" in text
    assert "within receiveMemoryBudget (32 MiB)" in text and "OOM kill" in text
    assert "raise the limit to at least 119 MiB (systemd MemoryMax=, the pod's limits.memory)" in text
    assert memory_limit_warning(32 * MiB, 55 * MiB, 119 * MiB) is None  # 55 + 2 x 32 fits
    assert memory_limit_warning(32 * MiB, None, 96 * MiB) is None  # nothing to compare
    assert memory_limit_warning(32 * MiB, 55 * MiB, None) is None


def test_the_limit_is_read_from_the_cgroup_the_process_is_in(tmp_path, monkeypatch):
    """Only the top of /sys/fs/cgroup was read: under a systemd unit's MemoryMax (cgroup v2, no cgroup
    namespace) the top is the host's, with no limit, and under cgroup v1 the file is another; in a
    96 MiB v1 cgroup the server served the machine's 25 GB as namesrv_memory_limit_bytes, budgeted
    256 MiB and was killed by the kernel under 40 stalled 16 MiB frames."""
    unit = tmp_path / "system.slice" / "namesrv.service"
    unit.mkdir(parents=True)
    (unit / "memory.max").write_text("100663296\n")  # MemoryMax=96M
    (unit.parent / "memory.max").write_text("max\n")
    (tmp_path / "memory" / "docker").mkdir(parents=True)  # a v1 container: its own cgroup at the top
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (tmp_path / "memory" / "docker" / "memory.limit_in_bytes").write_text("67108864\n")
    membership = tmp_path / "self-cgroup"
    membership.write_text("0::/system.slice/namesrv.service\n")
    assert min(budget_module.cgroup_memory_limits(tmp_path, membership)) == 100663296
    membership.write_text("4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n0::/\n")
    assert sorted(budget_module.cgroup_memory_limits(tmp_path, membership)) == [67108864, 9223372036854771712]
    membership.write_text("4:memory:/../../etc\n")  # never read outside the mount
    assert sorted(budget_module.cgroup_memory_limits(tmp_path, membership)) == [9223372036854771712]
    monkeypatch.setattr(budget_module, "CGROUP_ROOT", tmp_path)
    monkeypatch.setattr(budget_module, "PROC_SELF_CGROUP", membership)
    membership.write_text("0::/system.slice/namesrv.service\n")
    assert budget_module.machine_limit() <= 100663296
    assert default_budget(16 * MiB) == 32 * MiB


def test_a_budget_below_one_frame_stops_the_start_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match="receiveMemoryBudget: 1000 is below frameMaxLength"):
        server_config(tmp_path, receiveMemoryBudget=1000)


# -- every byte held for a peer: frames behind an answer in progress, answers it does not read ----

class UnreadTransport(StringTransport):
    """A peer that reads nothing until the test drains it: past 64 KiB buffered the transport
    pauses its producer, and resumes it once drained, as Twisted's TCP transport does."""

    def write(self, data: bytes) -> None:
        super().write(data)
        if self.producer is not None and len(self.io.getvalue()) > 64 * KiB:
            self.producer.pauseProducing()

    def drain(self) -> list[RemotingCommand]:
        data = self.value()
        self.clear()
        self.producer.resumeProducing()
        return [RemotingCommand.decode(frame) for frame in FrameDecoder().feed(data)]


def stepped(tmp_path, budget: int, transports: int = 1, transport=StringTransport):
    """A listener whose answers in steps the test runs (Turns), its budget ``budget``."""
    from tests.test_register_in_steps import Turns
    from twisted_namesrv.budget import MemoryBudget
    from twisted_namesrv.dispatch import Dispatcher
    from twisted_namesrv.server import RemotingFactory
    from twisted_namesrv.service import build

    turns = Turns()
    owners = build(server_config(tmp_path, compatVersion="4.9.8"), task.Clock())
    state = owners.state
    dispatcher = Dispatcher(state, owners.seen.metrics, cooperator=turns.cooperator)
    factory = RemotingFactory(dispatcher, task.Clock(), 16 * MiB, 0, refusals=state.refusals,
                              budget=MemoryBudget(budget))
    peers = []
    for port in range(transports):
        proto = factory.buildProtocol(address.IPv4Address("TCP", "10.0.0.9", 100 + port))
        wire = transport(peerAddress=address.IPv4Address("TCP", "10.0.0.9", 100 + port))
        proto.makeConnection(wire)
        peers.append((proto, wire))
    return turns, factory, peers


def registration_in_steps(topics: int, broker: str = "a", opaque: int = 1) -> bytes:
    """A plain JSON REGISTER_BROKER of more than STEP_BYTES: answered in steps."""
    from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body
    from twisted_namesrv.bodies.route import DataVersion

    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), {
        f"T{i:06d}": TopicConfig(f"T{i:06d}", 8, 8, 6) for i in range(topics)}), False, False)
    ext = {"brokerName": broker, "brokerAddr": f"10.0.0.9:{10911 + opaque}", "clusterName": "c", "brokerId": "0"}
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, opaque=opaque, version=409).encode()


def oneway(size: int, opaque: int) -> bytes:
    """A oneway request of ``size`` bytes, its prefix included, that nothing answers."""
    request = RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {}, b"", opaque=opaque,
                                      version=409, oneway=True).encode()
    body = bytes(size - len(request))
    return RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {}, body, opaque=opaque,
                                   version=409, oneway=True).encode()


def test_frames_behind_an_answer_in_steps_are_held_against_the_budget_and_reading_pauses(tmp_path):
    """While a broker's table is worked out in steps, what its connection sends after it waits:
    counted, byte for byte, and the connection is not read; over the budget it is closed."""
    turns, factory, [(broker, wire)] = stepped(tmp_path, budget=4 * MiB)
    registration = registration_in_steps(3000)
    assert len(registration) > 256 * KiB  # answered in steps
    broker.dataReceived(registration)
    behind = [oneway(500 * KiB, 10 + i) for i in range(3)]
    broker.dataReceived(b"".join(behind))
    held = len(registration) - 4 + sum(len(frame) - 4 for frame in behind)  # frames, their prefixes cut
    assert broker.held == factory.budget.held == held
    assert wire.producerState == "paused"  # not read while it holds frames behind its answer

    turns.all()  # the registration is answered, then the frames behind it: reading again, nothing held
    (answer,) = [RemotingCommand.decode(frame) for frame in FrameDecoder().feed(wire.value())]
    assert (answer.opaque, answer.code) == (1, ResponseCode.SUCCESS)
    assert broker.held == factory.budget.held == 0 and wire.producerState == "producing"

    broker.dataReceived(registration_in_steps(3000, opaque=2))
    with capturedLogs() as events:
        for i in range(8):  # 4 MB behind it: over the budget, the peer holding the most goes
            broker.dataReceived(oneway(500 * KiB, 20 + i))
    assert wire.disconnecting and factory.budget.held == 0
    assert factory.refusals.counts["remoting", "memory_budget"] == 1
    (event,) = [e for e in events if e.get("refused") == "memory_budget"]
    assert event["held"] > 3 * MiB


def test_answers_a_peer_does_not_read_hold_the_requests_after_them(tmp_path, monkeypatch):
    """A read of pipelined lookups is answered a room of answers at a time: while the peer does
    not read them, the rest of its requests wait (counted) and it is not read."""
    import twisted_namesrv.server as server

    monkeypatch.setattr(server, "ANSWER_ROOM", 32 * KiB, raising=False)  # (raising: the old code has none)
    turns, factory, [(broker, _), (client, wire)] = stepped(tmp_path, budget=4 * MiB, transports=2,
                                                            transport=UnreadTransport)
    topics = [f"T{i:06d}" for i in range(2)]
    for name in "abcdefghijklmnopqrst":  # a route of 20 broker groups: about 3 KB an answer
        broker.dataReceived(registration_in_steps(2, broker=name, opaque=ord(name)))
    turns.all()
    lookups = [RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topics[0]}, opaque=opaque,
                                       version=409).encode() for opaque in range(1, 401)]
    client.dataReceived(lookups[0])
    (first,) = wire.drain()  # the first is worked out and kept: the next are answered from memory
    client.dataReceived(b"".join(lookups[1:]))
    written = len(wire.value())
    assert 64 * KiB < written < 64 * KiB + 32 * KiB + len(first.encode()), written
    assert wire.producerState == "paused"
    # held: the answers written since the write buffer last held less than Twisted's 64 KiB, and the
    # requests after them
    assert client.held == factory.budget.held == client.unsent + sum(map(len, client.waiting))
    assert client.unsent >= written - 64 * KiB and client.waiting
    got = [first]
    while wire.value():
        got += wire.drain()
    assert [answer.opaque for answer in got] == list(range(1, 401))
    assert {answer.body for answer in got} == {first.body}
    assert client.held == factory.budget.held == 0 and wire.producerState == "producing"


def test_the_default_budget_follows_the_limit_read_again(tmp_path, monkeypatch):
    """A pod's limit lowered in place from 1 GiB to 128 MiB: read at the start only, the budget stayed
    256 MiB and the stall above had the kernel kill the server. Read again every 30 s, the budget
    follows: a quarter of the new limit, the peers past it closed, largest first, one line each time."""
    from twisted_namesrv import service as service_module

    limit = [1024 * MiB]
    monkeypatch.setattr(budget_module, "machine_limit", lambda: limit[0])
    monkeypatch.setattr(service_module, "machine_limit", lambda: limit[0])
    monkeypatch.setattr(service_module, "resident_bytes", lambda: 56 * MiB)
    service = NamesrvService.from_config(server_config(tmp_path, frameMaxLength=4 * MiB), reactor=task.Clock())
    budget, watch = service.state.budget, service.memory_limit
    assert budget.limit == 256 * MiB
    assert [s.step for s in service if getattr(s, "call", (None,))[0] == watch.tick] == [30.0]
    with capturedLogs() as logged:
        watch.tick()  # at the start: the limit the budget was made from
        watch.tick()
    assert logged == [] and budget.limit == 256 * MiB
    wires = []
    for peer in range(10):
        proto, wire = connect(service, peer)
        proto.dataReceived(start_of_frame(4 * MiB - 8))
        wires.append(wire)
    assert budget.held > 32 * MiB and not any(wire.disconnecting for wire in wires)
    limit[0] = 128 * MiB
    with capturedLogs() as logged:
        watch.tick()
    assert budget.limit == 32 * MiB and budget.held <= 32 * MiB
    assert sum(wire.disconnecting for wire in wires) == 3  # 40 MiB held: the three largest went
    lines = [e["log_format"].format(**e) for e in logged if e["log_format"] == "{text}"]
    assert lines == ["memory limit now 128 MiB (was 1024 MiB; the least of the machine's, the cgroup's memory "
                     "limit and ulimit -v): receiveMemoryBudget follows it, 32 MiB (was 256 MiB)"]
    assert watch.changes == 1
    limit[0] = None  # the limit taken away: the ceiling again
    watch.tick()
    assert budget.limit == 256 * MiB and watch.changes == 2


def test_a_budget_set_stays_when_the_limit_moves_and_a_limit_too_small_is_said(tmp_path, monkeypatch):
    told, limit = [], [1024 * MiB]
    budget = MemoryBudget(64 * MiB)
    watch = budget_module.LimitWatch(budget, 16 * MiB, False, lambda: limit[0], lambda: 56 * MiB,
                                     lambda level, text: told.append((level, text)))
    watch.tick()
    limit[0] = 160 * MiB
    watch.tick()
    assert budget.limit == 64 * MiB
    assert told[0] == ("info", "memory limit now 160 MiB (was 1024 MiB; the least of the machine's, the cgroup's "
                               "memory limit and ulimit -v): receiveMemoryBudget stays 64 MiB as set")
    assert told[1][0] == "warn" and told[1][1].startswith("memory limit 160 MiB ") and "OOM kill" in told[1][1]
    assert len(told) == 2
