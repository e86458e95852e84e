"""A broker's registration sent again as it was: renewed, not applied again (RouteInfoManager.renew).

Brokers send their registration every 30 s, the same bytes but the opaque as long as their topics
do not change; a storm of thousands of brokers is mostly that.  Such a registration, on the
connection that sent the last one applied in full, renews the broker without its body decoded, its
CRC computed or a plan made (work counted here, never time), and it must answer and leave the
tables byte for byte as the registration in full would: each scenario runs on two servers in
lockstep, one of them with renewals turned off, and every answer, every route event and every
table is compared.  Whatever the registration read that changed since it was applied takes the full
path: a body or header one byte different, another connection, an expiry in between, a change
by hand of the group's queues, the group's members, the configuration."""

from __future__ import annotations

import dataclasses
import hashlib
import types
from collections.abc import Callable
from typing import Any

import pytest
from twisted.internet import task
from twisted.internet.testing import StringTransport

from tests.support import server_config
from twisted_namesrv import answer_cache, dispatch, processor
from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body
from twisted_namesrv.bodies.route import DataVersion
from twisted_namesrv.remoting import RemotingCommand, RequestCode
from twisted_namesrv.remoting.crc import crc32_masked
from twisted_namesrv.service import NamesrvService
from twisted_namesrv.state.acl import signed
from twisted_namesrv.state.kv import NAMESPACE_ORDER_TOPIC_CONFIG


@pytest.fixture
def work(monkeypatch) -> dict[str, int]:
    """What a registration in full does, counted: bodies decoded, plans made (its CRC is checked
    either way, as Java does: a 5.x broker's body is never the same twice, below)."""
    counts = {"decoded": 0, "planned": 0}

    def counting(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return function(*args, **kwargs)
        return counted
    for name, function in (("decoded", "decode_register_body_steps"), ("planned", "plan_steps")):
        monkeypatch.setattr(processor, function, counting(name, getattr(processor, function)))
    return counts


def body_of(topics: list[str], counter: int = 1, perm: int = 6, mapped_at: int | None = None) -> bytes:
    """A broker's body, as 4.9.8 writes it, or as 5.x does with a mappingDataVersion stamped ``mapped_at``."""
    body = RegisterBrokerBody(DataVersion(1700000000000, counter), {t: TopicConfig(t, 8, 8, perm) for t in topics})
    if mapped_at is not None:
        body.mappingDataVersion = DataVersion(mapped_at)
    return encode_register_body(body, False, mapped_at is not None)


class Server:
    """A whole NamesrvService on a fake clock, its connections in memory, its route events heard."""

    def __init__(self, tmp_path, renews: bool, **config: Any) -> None:
        self.clock = task.Clock()
        self.clock.advance(1_000)
        self.service = NamesrvService.from_config(server_config(tmp_path, **config), reactor=self.clock)
        self.routes = self.service.state.routes
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.routes.listen(lambda kind, info: self.events.append((kind, dict(info))))
        if not renews:
            self.routes.renew = lambda *args, **kwargs: None  # type: ignore[method-assign]

    def connect(self) -> tuple[Any, StringTransport]:
        protocol = self.service.factory.buildProtocol(None)
        transport = StringTransport()
        protocol.makeConnection(transport)
        return protocol, transport

    def send(self, connection: tuple[Any, StringTransport], frame: bytes) -> bytes:
        protocol, transport = connection
        transport.clear()
        protocol.dataReceived(frame)
        while any(call.getTime() <= self.clock.seconds() for call in self.clock.getDelayedCalls()):
            self.clock.advance(0)
        return transport.value()

    def tables(self) -> dict[str, Any]:
        routes = self.routes
        live = {key: {name: getattr(info, name) for name in info.__struct_fields__ if name != "digest"}
                for key, info in routes.brokerLiveTable.items()}
        return {"topics": {t: dict(q) for t, q in routes.topicQueueTable.items()},
                "brokers": {n: dataclasses.asdict(b) for n, b in routes.brokerAddrTable.items()},
                "clusters": {c: list(n) for c, n in routes.clusterAddrTable.items()}, "live": live,
                "filters": dict(routes.filterServerTable), "mappings": dict(routes.topicQueueMappingInfoTable),
                "generation": routes.generation}


class Twins:
    """The same requests to a server that renews and one that applies every registration in full,
    in lockstep: every answer compared byte for byte, and the events and tables after each."""

    def __init__(self, tmp_path, work: dict[str, int], **config: Any) -> None:
        (tmp_path / "renews").mkdir()
        (tmp_path / "full").mkdir()
        self.servers = (Server(tmp_path / "renews", True, **config), Server(tmp_path / "full", False, **config))
        self.work = work
        self.connections: dict[str, tuple[tuple[Any, StringTransport], ...]] = {}
        self.opaque = 0

    def connect(self, name: str) -> None:
        self.connections[name] = tuple(server.connect() for server in self.servers)

    def send(self, name: str, code: int, ext: dict[str, str], body: bytes | None = None) -> dict[str, int]:
        """The request on both servers' connection ``name``; the work the renewing server did for it."""
        self.opaque += 1
        frame = RemotingCommand.request(code, ext, body, opaque=self.opaque, version=409).encode()
        before = dict(self.work)
        answer = self.servers[0].send(self.connections[name][0], frame)
        did = {key: self.work[key] - before[key] for key in before}
        assert answer == self.servers[1].send(self.connections[name][1], frame)
        assert RemotingCommand.decode(answer[4:]).opaque == self.opaque
        renewing, full = self.servers
        assert renewing.events == full.events
        assert renewing.tables() == full.tables()
        return did

    def register(self, name: str, broker: str, broker_id: int, topics: list[str], counter: int = 1,
                 ha: str = "ha:1", crc: int | None = None, **more: str) -> dict[str, int]:
        """A registration; a 5.x one (``enableActingMaster`` in ``more``) as 5.x brokers send it, its
        mappingDataVersion stamped with the time, so its body and bodyCrc32 differ every time."""
        self.stamp = getattr(self, "stamp", 0) + 1
        body = body_of(topics, counter, mapped_at=self.stamp if "enableActingMaster" in more else None)
        ext = {"brokerName": broker, "brokerAddr": f"127.0.0.1:{name}", "clusterName": "c", "haServerAddr": ha,
               "brokerId": str(broker_id), "bodyCrc32": str(crc32_masked(body) if crc is None else crc), **more}
        return self.send(name, RequestCode.REGISTER_BROKER, ext, body)

    def advance(self, seconds: float) -> None:
        for server in self.servers:
            server.clock.advance(seconds)

    def answer(self, name: str) -> RemotingCommand:
        return RemotingCommand.decode(self.connections[name][0][1].value()[4:])


NOTHING = {"decoded": 0, "planned": 0}


@pytest.mark.parametrize("compat", ["4.9.8", "5.3.3"])
def test_a_registration_sent_again_is_renewed_without_its_table_and_answers_as_in_full(tmp_path, work, compat):
    """A master, its slave and another broker register, then send the same again, and again: each
    time the broker is renewed (its lastUpdateTimestamp, as Java touches it) and nothing of its body
    is decoded, its CRC not computed, no plan made; the answers, the events and the tables are the
    full path's (on the old code every one was decoded, checked and planned again).  The slave's
    answer names its master's addresses as they are now: another broker's registration changes
    them, and the master leaving takes them away; the order topics' table in the answer is the KV
    store's as it is now."""
    twins = Twins(tmp_path, work, compatVersion=compat)
    more = {"enableActingMaster": "false"} if compat == "5.3.3" else {}
    for name in ("10911", "10921", "20911"):
        twins.connect(name)
    assert twins.register("10911", "g", 0, ["A", "B"], **more)["decoded"] == 1
    twins.register("10921", "g", 1, ["A", "B", "S"], **more)  # a slave's table is not applied
    twins.register("20911", "x", 0, ["X", "Y"], **more)
    for _ in range(2):
        twins.advance(10)
        assert twins.register("10911", "g", 0, ["A", "B"], **more) == NOTHING
        assert twins.register("10921", "g", 1, ["A", "B", "S"], **more) == NOTHING
        assert twins.register("20911", "x", 0, ["X", "Y"], **more) == NOTHING
    live = twins.servers[0].routes.brokerLiveTable
    assert {info.lastUpdateTimestamp for info in live.values()} == {1_020_000}
    assert twins.answer("10921").ext == {"masterAddr": "127.0.0.1:10911", "haServerAddr": "ha:1"}

    twins.register("10911", "g", 0, ["A", "B"], ha="ha:2", **more)  # a header one field different: in full
    assert twins.register("10911", "g", 0, ["A", "B"], ha="ha:2", crc=12345, **more) == NOTHING  # refused
    assert RemotingCommand.decode(twins.connections["10911"][0][1].value()[4:]).remark == "crc32 not match"
    assert twins.register("10921", "g", 1, ["A", "B", "S"], **more) == NOTHING
    assert twins.answer("10921").ext == {"masterAddr": "127.0.0.1:10911", "haServerAddr": "ha:2"}
    twins.send("20911", RequestCode.PUT_KV_CONFIG, {"namespace": NAMESPACE_ORDER_TOPIC_CONFIG, "key": "A",
                                                    "value": "g:4"})
    assert twins.register("20911", "x", 0, ["X", "Y"], **more) == NOTHING
    assert b"g:4" in (twins.answer("20911").body or b"")
    twins.send("20911", RequestCode.UNREGISTER_BROKER, {"brokerName": "g", "brokerAddr": "127.0.0.1:10911",
                                                        "clusterName": "c", "brokerId": "0"})
    slave = twins.register("10921", "g", 1, ["A", "B", "S"], **more)
    assert twins.answer("10921").ext == {}  # no master now
    if compat == "4.9.8":
        assert slave == NOTHING
    else:  # the group's prime slave now: its table applies, in full every time
        assert slave["decoded"] == 1 and "S" in twins.servers[0].routes.topicQueueTable


@pytest.mark.parametrize("compat", ["4.9.8", "5.3.3"])
@pytest.mark.parametrize("change", ["one byte of the body", "another connection", "expired", "deleted topic",
                                    "write perm wiped", "id slot taken", "group's flags changed", "config updated"])
def test_whatever_the_registration_read_that_changed_takes_the_full_path(tmp_path, work, compat, change):
    """Renewed first (decoded on the old code); then, after the change, the same registration (or,
    for the first change, one byte different) is applied in full, and the answers, events and
    tables are those of the server that applies every one in full."""
    config = {"compatVersion": compat}
    twins = Twins(tmp_path, work, **config)
    more = {"enableActingMaster": "false"} if compat == "5.3.3" else {}
    for name in ("10911", "10921", "admin"):
        twins.connect(name)
    twins.register("10911", "g", 0, ["A", "B", "C"], **more)
    twins.register("10921", "g", 1, ["A", "C"], **more)  # its slave
    twins.register("10911", "g", 0, ["A", "C"], counter=2, **more)  # B stays in the group's queues
    assert twins.register("10911", "g", 0, ["A", "C"], counter=2, **more) == NOTHING
    counter = 2
    if change == "one byte of the body":
        counter = 3
    elif change == "another connection":
        twins.connect("10911")
    elif change == "expired":
        twins.advance(130)
        for server in twins.servers:
            server.routes.scan_not_active_broker()
    elif change == "deleted topic":
        twins.send("admin", RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "A"})
    elif change == "write perm wiped":
        twins.send("admin", RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "g"})
    elif change == "id slot taken":  # the broker's address out of its group, its live entry left (another's key)
        addr, cluster = ("127.0.0.1:1", "c") if compat == "4.9.8" else ("127.0.0.1:10911", "other")  # by id, by address
        twins.send("admin", RequestCode.UNREGISTER_BROKER, {"brokerName": "g", "brokerAddr": addr,
                                                            "clusterName": cluster, "brokerId": "0"})
    elif change == "group's flags changed":  # by its slave (5.x: the group's flag and zone are the last member's)
        twins.register("10921", "g", 1, ["A", "C"], **{**more, "enableActingMaster": "true"})
    elif change == "config updated":
        twins.send("admin", RequestCode.UPDATE_NAMESRV_CONFIG, {},
                   b"deleteTopicWithBrokerRegistration=true\n" if compat == "5.3.3" else b"orderMessageEnable=true\n")
    did = twins.register("10911", "g", 0, ["A", "C"], counter=counter, **more)
    if change == "group's flags changed" and compat == "4.9.8":
        assert did == NOTHING  # 4.9.8 keeps no such flag
    else:
        assert did["decoded"] == 1 and did["planned"] == 1, did
    assert twins.register("10911", "g", 0, ["A", "C"], counter=counter, **more) == NOTHING  # renewed from now on
    if change == "deleted topic" and compat == "5.3.3":
        assert "A" in twins.servers[0].routes.topicQueueTable  # 5.x writes the topics the group lacks


def test_a_storm_of_unchanged_registrations_decodes_no_body(tmp_path, work):
    """A hundred brokers registered, then all of them again as they were, twice: no body decoded, no
    CRC computed, no plan made (on the old code: two hundred of each), every one answered."""
    server = Server(tmp_path, True)
    brokers = [server.connect() for _ in range(100)]

    def storm() -> list[bytes]:
        answers = []
        for index, connection in enumerate(brokers):
            body = body_of(["Storm", f"Own{index}"])
            ext = {"brokerName": f"b{index:03d}", "brokerAddr": f"127.0.0.1:{3000 + index}", "clusterName": "c",
                   "haServerAddr": "h", "brokerId": "0", "bodyCrc32": str(crc32_masked(body))}
            answers.append(server.send(connection, RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body,
                                                                            opaque=index, version=409).encode()))
        return answers
    first = storm()
    assert work["decoded"] == 100
    for _ in range(2):
        assert storm() == first
    assert work == {"decoded": 100, "planned": 100}


def test_a_5x_table_sent_again_with_a_new_mapping_stamp_is_known_by_its_digest(tmp_path, work, monkeypatch):
    """5.x brokers stamp a new mappingDataVersion into every registration (nothing reads it): on
    the full path too (renewals off, a new connection each time), the table sent again is known
    by its digest, not decoded, and the broker keeps one memo (on the old code every heartbeat
    was decoded and left a memo more, up to MAX_MEMOS a broker)."""
    unchanged: list[bool] = []
    decode = processor.decode_register_body_steps

    def seen(*args: Any, **kwargs: Any) -> Any:
        body = yield from decode(*args, **kwargs)
        unchanged.append(body.tableUnchanged)
        return body
    monkeypatch.setattr(processor, "decode_register_body_steps", seen)
    server = Server(tmp_path, False, compatVersion="5.3.3")
    for stamp in range(1, 5):
        body = body_of(["A", "B"], mapped_at=1_700_000_000_000 + stamp * 30_000)
        ext = {"brokerName": "g", "brokerAddr": "127.0.0.1:10911", "clusterName": "c", "haServerAddr": "h",
               "brokerId": "0", "enableActingMaster": "false", "bodyCrc32": str(crc32_masked(body))}
        answer = server.send(server.connect(), RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body,
                                                                       opaque=stamp, version=479).encode())
        assert RemotingCommand.decode(answer[4:]).code == 0
    assert unchanged == [False, True, True, True]
    assert len(server.routes.brokerLiveTable["c", "127.0.0.1:10911"].memos) == 1



def storm_frames(count: int, opaque: int, topics: int = 0) -> list[bytes]:
    """``count`` brokers' registrations, each with its own table (``topics`` more topics of its
    own), their opaques from ``opaque`` on."""
    frames = []
    for index in range(count):
        body = body_of(["Storm", f"Own{index}", *(f"Own{index}_{t:05d}" for t in range(topics))])
        ext = {"brokerName": f"b{index:03d}", "brokerAddr": f"127.0.0.1:{3000 + index}", "clusterName": "c",
               "haServerAddr": "h", "brokerId": "0", "bodyCrc32": str(crc32_masked(body))}
        frames.append(RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, opaque=opaque + index,
                                              version=409).encode())
    return frames


def handled_registrations(monkeypatch) -> list[int]:
    """The opaques of the registrations the handler runs for from now on, in its steps or fused
    (processor.register_fused: a first registration of the common shape; a heartbeat answered from
    memory runs neither)."""
    handled: list[int] = []
    handler, fused = processor.HANDLERS_IN_STEPS[RequestCode.REGISTER_BROKER], processor.register_fused

    def counted(*args: Any) -> Any:
        handled.append(args[1].opaque)
        return handler(*args)

    def counted_fused(state: Any, frame: bytes, peer: Any) -> Any:
        answered = fused(state, frame, peer)
        if answered is not None:
            handled.append(RemotingCommand.decode(frame).opaque)
        return answered
    monkeypatch.setitem(processor.HANDLERS_IN_STEPS, RequestCode.REGISTER_BROKER, counted)
    monkeypatch.setattr(processor, "register_fused", counted_fused)
    return handled


def test_a_heartbeat_storm_is_answered_from_memory_in_the_turn_that_reads_it(tmp_path, monkeypatch):
    """A hundred brokers registered, then each sends its registration again with a new opaque, all
    read in one reactor turn: each renews its broker from the bytes kept for its connection (the
    registration handler never runs, no header is decoded) and is answered in that turn, with the
    answer the full path gives but the opaque (on the old code every one was decoded and handled,
    and those past AT_ONCE_PER_TURN waited for later turns)."""
    server = Server(tmp_path, True)
    brokers = [server.connect() for _ in range(100)]
    first = [server.send(connection, frame) for connection, frame in zip(brokers, storm_frames(100, 100), strict=True)]
    handled = handled_registrations(monkeypatch)
    decoded: list[int] = []
    decode = RemotingCommand.decode
    monkeypatch.setattr(RemotingCommand, "decode", staticmethod(lambda *a, **k: decoded.append(1) or decode(*a, **k)))
    server.clock.advance(10)
    for (protocol, transport), frame in zip(brokers, storm_frames(100, 500), strict=True):
        transport.clear()
        protocol.dataReceived(frame)
    assert handled == [] and decoded == []
    for index, ((_, transport), answer) in enumerate(zip(brokers, first, strict=True)):
        assert transport.value() == answer.replace(b'"opaque":%d,' % (100 + index), b'"opaque":%d,' % (500 + index))
    monkeypatch.undo()
    assert {RemotingCommand.decode(transport.value()[4:]).opaque for _, transport in brokers} == set(range(500, 600))
    live = server.routes.brokerLiveTable
    assert {info.lastUpdateTimestamp for info in live.values()} == {1_010_000}


def test_big_tables_sent_again_are_renewed_from_memory_within_a_turns_bytes(tmp_path, monkeypatch):
    """Ten brokers of 2,000 topics (registrations of STEP_BYTES and more, answered in steps the
    first time) send them again, all read in one reactor turn: those within the turn's
    RENEWED_BYTES_PER_TURN are renewed from memory in that turn (no handler, no header decoded), the
    rest from memory too, in steps, in the turns after (their headers decoded, no handler); every
    answer is the full path's but the opaque, every broker renewed."""
    server = Server(tmp_path, True)
    brokers = [server.connect() for _ in range(10)]
    frames = storm_frames(10, 100, topics=2_000)
    size = len(frames[0]) - 4
    assert dispatch.STEP_BYTES <= size and 2 * size <= dispatch.RENEWED_BYTES_PER_TURN
    first = [server.send(connection, frame) for connection, frame in zip(brokers, frames, strict=True)]
    handled = handled_registrations(monkeypatch)
    decoded: list[int] = []
    decode = RemotingCommand.decode
    monkeypatch.setattr(RemotingCommand, "decode", staticmethod(lambda *a, **k: decoded.append(1) or decode(*a, **k)))
    server.clock.advance(10)
    for (protocol, transport), frame in zip(brokers, storm_frames(10, 500, topics=2_000), strict=True):
        transport.clear()
        protocol.dataReceived(frame)
    fit = dispatch.RENEWED_BYTES_PER_TURN // size
    assert [bool(transport.value()) for _, transport in brokers] == [True] * fit + [False] * (10 - fit)
    assert handled == [] and len(decoded) == 10 - fit  # the rest's headers, decoded to go in steps
    while any(call.getTime() <= server.clock.seconds() for call in server.clock.getDelayedCalls()):
        server.clock.advance(0)  # the turns after: the Cooperator's steps
    assert handled == [] and len(decoded) == 10 - fit
    for index, ((_, transport), answer) in enumerate(zip(brokers, first, strict=True)):
        assert transport.value() == answer.replace(b'"opaque":%d,' % (100 + index), b'"opaque":%d,' % (500 + index))
    live = server.routes.brokerLiveTable
    assert {info.lastUpdateTimestamp for info in live.values()} == {1_010_000}


class Hashed:
    """hashlib.sha1 as answer_cache calls it, each update's bytes recorded."""

    def __init__(self, pieces: list[int]) -> None:
        self.pieces, self.digest_ = pieces, hashlib.sha1()

    def update(self, data: Any) -> None:
        self.pieces.append(len(data))
        self.digest_.update(data)

    def digest(self) -> bytes:
        return self.digest_.digest()


def test_a_table_past_a_turns_bytes_is_kept_and_renewed_in_steps_of_step_bytes(tmp_path, monkeypatch):
    """A registration bigger than a turn's RENEWED_BYTES_PER_TURN (here 2,000 topics against a
    budget of STEP_BYTES) keeps its answer for its connection when applied, and sent again is renewed
    from memory in the Cooperator's steps: the handler does not run, the answer is the full path's
    but the opaque, and neither keeping it nor checking it hashes more than STEP_BYTES between two
    steps (the reactor serves lookups between them).  On the old code such a table kept nothing and
    was decoded and applied in full every time it was sent."""
    monkeypatch.setattr(dispatch, "RENEWED_BYTES_PER_TURN", dispatch.STEP_BYTES)
    pieces: list[int] = []
    monkeypatch.setattr(answer_cache, "hashlib", types.SimpleNamespace(sha1=lambda: Hashed(pieces)))
    server = Server(tmp_path, True)
    connection = server.connect()
    frame, again = storm_frames(1, 100, topics=2_000)[0], storm_frames(1, 500, topics=2_000)[0]
    assert len(frame) > dispatch.RENEWED_BYTES_PER_TURN
    first = server.send(connection, frame)
    assert list(server.service.state.answers.renewals) == [connection[0].channel]
    assert max(pieces) <= dispatch.STEP_BYTES and sum(pieces) > len(frame) - 100
    pieces.clear()
    handled = handled_registrations(monkeypatch)
    server.clock.advance(10)
    assert server.send(connection, again) == first.replace(b'"opaque":100,', b'"opaque":500,')
    assert handled == [] and max(pieces) <= dispatch.STEP_BYTES and sum(pieces) > len(frame) - 100
    assert {info.lastUpdateTimestamp for info in server.routes.brokerLiveTable.values()} == {1_010_000}


def test_a_registration_past_renewed_in_steps_bytes_keeps_nothing_and_is_not_hashed_to_be(tmp_path, monkeypatch):
    """A table bigger than RENEWED_IN_STEPS_BYTES (5.x brokers' pieces of 50k topics, each replacing
    the last one's kept answer on their connection) keeps no answer, and is not hashed for a key:
    only the registration's own pass over its body (split_data_version's pieces) hashes it."""
    monkeypatch.setattr(dispatch, "RENEWED_BYTES_PER_TURN", dispatch.STEP_BYTES)
    monkeypatch.setattr(dispatch, "RENEWED_IN_STEPS_BYTES", dispatch.STEP_BYTES)
    server = Server(tmp_path, True)
    connection = server.connect()
    frame = storm_frames(1, 100, topics=2_000)[0]
    assert len(frame) > dispatch.RENEWED_IN_STEPS_BYTES
    pieces: list[int] = []
    monkeypatch.setattr(answer_cache, "hashlib", types.SimpleNamespace(sha1=lambda: Hashed(pieces)))
    server.send(connection, frame)
    assert server.service.state.answers.renewals == {} and pieces == []


def test_a_renewal_in_steps_answers_as_the_full_path_and_a_changed_table_goes_in_full(tmp_path, work, monkeypatch):
    """Big tables past a turn's bytes, on a server that renews and one that applies every
    registration in full: sent again, renewed in steps with the same answers, events and tables;
    a topic added, a bodyCrc32 not its body's (refused), another broker id: the full path, as on the other."""
    monkeypatch.setattr(dispatch, "RENEWED_BYTES_PER_TURN", dispatch.STEP_BYTES)
    twins = Twins(tmp_path, work)
    twins.connect("9001")
    topics = [f"T{index:05d}" for index in range(2_000)]
    assert twins.register("9001", "g", 0, topics)["decoded"] == 1
    twins.advance(5)
    assert twins.register("9001", "g", 0, topics) == {"decoded": 0, "planned": 0}
    assert twins.register("9001", "g", 0, [*topics, "Added"], counter=2)["decoded"] == 1
    twins.register("9001", "g", 0, [*topics, "Added"], counter=2, crc=1)
    assert twins.answer("9001").code != 0
    assert twins.register("9001", "g", 1, [*topics, "Added"], counter=2)["decoded"] == 1
    twins.advance(5)
    assert twins.register("9001", "g", 1, [*topics, "Added"], counter=2) == {"decoded": 0, "planned": 0}


def test_the_answer_kept_for_a_connection_goes_with_it_and_none_is_kept_when_the_acl_checks_brokers(tmp_path):
    """A broker connection's kept registration answer is dropped when it closes (thousands of
    brokers coming and going keep nothing), and none is kept when the ACL checks who sends a
    registration: each is checked again."""
    (tmp_path / "plain").mkdir()
    server = Server(tmp_path / "plain", True)
    connection = server.connect()
    server.send(connection, storm_frames(1, 1)[0])
    kept = server.service.state.answers.renewals
    assert list(kept) == [connection[0].channel]
    connection[0].connectionLost()
    assert kept == {}

    (tmp_path / "acl").mkdir()
    accounts = tmp_path / "acl" / "plain_acl.yml"
    accounts.write_text("globalWhiteRemoteAddresses: []\naccounts:\n  - accessKey: a\n    secretKey: s\n"
                        "    admin: true\n")
    guarded = Server(tmp_path / "acl", True, aclEnable=True, aclAccountsFile=str(accounts), compatVersion="4.9.8")
    body = body_of(["Storm"])
    ext = signed({"brokerName": "b", "brokerAddr": "127.0.0.1:3000", "clusterName": "c", "haServerAddr": "h",
                  "brokerId": "0", "bodyCrc32": str(crc32_masked(body))}, "a", "s", body)
    frame = RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, opaque=1, version=409).encode()
    connection = guarded.connect()
    for _ in range(2):
        assert RemotingCommand.decode(guarded.send(connection, frame)[4:]).code == 0
        assert guarded.service.state.answers.renewals == {}


def test_a_5x_heartbeat_with_a_new_mapping_stamp_and_crc_is_answered_from_memory_its_crc_checked(tmp_path,
                                                                                                    monkeypatch):
    """A 5.x broker's registrations differ every time in the mappingDataVersion stamp and so in
    bodyCrc32: each sent again is still answered from the connection's kept answer (the handler
    never runs; on the old code every one was decoded and handled), its opaque of any length; one
    whose bodyCrc32 does not match its body goes the usual way and is answered "crc32 not match"."""
    server = Server(tmp_path, True, compatVersion="5.3.3")
    connection = server.connect()
    handled = handled_registrations(monkeypatch)

    def register(stamp: int, opaque: int, crc_flip: int = 0) -> RemotingCommand:
        body = body_of(["A", "B"], mapped_at=1_700_000_000_000 + stamp * 30_011)
        ext = {"brokerName": "g", "brokerAddr": "127.0.0.1:10911", "clusterName": "c", "haServerAddr": "h",
               "brokerId": "0", "enableActingMaster": "false", "bodyCrc32": str(crc32_masked(body) ^ crc_flip)}
        frame = RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, opaque=opaque, version=479).encode()
        return RemotingCommand.decode(server.send(connection, frame)[4:])
    first = register(0, 7)
    for stamp, opaque in ((1, 8), (2, 123_456), (3, 9)):
        answer = register(stamp, opaque)
        assert (answer.code, answer.opaque, answer.ext, answer.body) == (0, opaque, first.ext, first.body)
    assert handled == [7]
    refused = register(4, 10, crc_flip=1)
    assert (refused.code, refused.remark, handled) == (1, "crc32 not match", [7, 10])


def test_a_big_table_changed_is_not_hashed_in_vain_against_the_kept_one(tmp_path, monkeypatch):
    """A big registration kept for its connection, then the broker's table changed (a new
    dataVersion, so another bodyCrc32): the check against the kept one stops at the CRC, before
    hashing its megabyte (the bytes are hashed once, to keep the new one); the old code hashed it
    twice.  A 5.x body's CRC changes every time (its mapping stamp): it is hashed, as before."""
    from twisted_namesrv import answer_cache

    server = Server(tmp_path, True)
    connection = server.connect()
    tables = [storm_frames(1, opaque, topics=2_000)[0] for opaque in (1, 2)]
    for frame in tables:
        server.send(connection, frame)
    hashed: list[int] = []
    sha1 = answer_cache.hashlib.sha1

    class Counting:
        @staticmethod
        def sha1(*args: Any) -> Any:
            hashed.append(1)
            return sha1(*args)
    monkeypatch.setattr(answer_cache, "hashlib", Counting)
    changed = storm_frames(1, 3, topics=2_000)[0].replace(b'"counter":1', b'"counter":2')
    body = RemotingCommand.decode(changed[4:]).body
    changed = RemotingCommand.request(RequestCode.REGISTER_BROKER, {
        "brokerName": "b000", "brokerAddr": "127.0.0.1:3000", "clusterName": "c", "haServerAddr": "h",
        "brokerId": "0", "bodyCrc32": str(crc32_masked(body))}, body, opaque=3, version=409).encode()
    assert RemotingCommand.decode(server.send(connection, changed)[4:]).code == 0
    assert len(hashed) == 1
    assert server.service.state.answers.renewals  # the changed one kept: its next heartbeat from memory


def test_a_registrations_digest_tells_its_fields_apart_whatever_they_hold():
    """registration_digest hashes the header's fields as JSON, and as their repr where JSON cannot
    hold them (a lone surrogate, which a header's ``\\ud800`` escape gives): the same fields give
    the same digest, bodyCrc32 aside; another value, another MQVersion or revision another digest,
    in either form, and neither form's input is ever the other's."""
    from twisted_namesrv.state.registration import registration_digest
    from twisted_namesrv.steps import run_steps

    def digest(ext: dict[str, str | None], version: int = 409, revision: int = 0) -> bytes:
        return run_steps(registration_digest(revision, version, ext, b"{}"))
    ext: dict[str, str | None] = {"brokerName": "b", "brokerAddr": "127.0.0.1:1", "clusterName": "c", "brokerId": "0"}
    lone = {**ext, "brokerName": "b\ud800"}
    assert digest(ext) == digest({**ext, "bodyCrc32": "7"}) and digest(lone) == digest({**lone, "bodyCrc32": "7"})
    others = [digest(ext), digest(lone), digest({**ext, "brokerName": "b\\ud800"}), digest({**ext, "zoneName": None}),
              digest(ext, version=410), digest(ext, revision=1), digest(lone, version=410), digest(lone, revision=1)]
    assert len(set(others)) == len(others)


#: the lines of the server's code a small heartbeat's renewal from memory runs, read to answered
#: (``AnswerCache.renewal_from_memory`` through the connection's read), by the broker's generation:
#: its key read where the broker's last one was, its CRC checked, the broker renewed, the answer
#: spliced (195 and 213 while every heartbeat's key was looked for through its bytes: its opaque,
#: its bodyCrc32, its body's stamp; 171 and 192 before the key took the split form, whose body is
#: hashed as its first registration's split hashes it, so that key goes on from the split's SHA-1:
#: a few lines more a heartbeat, about 3.4k instructions, for 20k fewer a first registration)
RENEWAL_LINES = {"4.9.8": 176, "5.3.3": 200}


@pytest.mark.parametrize("compat", ["4.9.8", "5.3.3"])
def test_a_heartbeat_of_the_same_length_is_read_where_the_last_one_was(tmp_path, monkeypatch, compat):
    """A broker's heartbeat as long as its last registration (the common case: its opaque as many
    digits) is read where that one was (``RenewalKey.shape``): its keys not looked for again, its body
    not looked into for a 5.x stamp it did not have, and the lines it runs are counted.  A 5.x body's
    new stamp is read again (it is the one span whose reading looks into it).  One whose opaque has
    a digit more is read through, as before, and renewed all the same."""
    from tests.support import server_lines_run

    server = Server(tmp_path, True, compatVersion=compat)
    connection = server.connect()
    mapped = compat == "5.3.3"

    def frame(opaque: int, stamp: int = 0, crc_digits: int = 10) -> bytes:
        """The broker's registration; a 5.x one stamped ``stamp`` or the first stamp after it whose
        body's CRC has ``crc_digits`` digits (a 5.x frame's length moves with them: 47% of CRCs,
        those under 10^9 of 2^31, have fewer than ten)."""
        while True:
            body = body_of(["A", "B"], mapped_at=1_700_000_000_000 + stamp if mapped else None)
            if not mapped or len(str(crc32_masked(body))) == crc_digits:
                break
            stamp += 1
        ext = {"brokerName": "g", "brokerAddr": "127.0.0.1:10911", "clusterName": "c", "haServerAddr": "h",
               "brokerId": "0", "bodyCrc32": str(crc32_masked(body))}
        return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, opaque=opaque, version=409).encode()
    first = server.send(connection, frame(100))
    looked: list[str] = []
    digits, span, spans = answer_cache._DIGITS, answer_cache.mapping_version_span, answer_cache.version_spans

    class Digits:
        @staticmethod
        def match(*args: Any) -> Any:
            looked.append("opaque")
            return digits.match(*args)

    def mapping(body: Any) -> Any:
        looked.append("stamp")
        return span(body)

    def versions(body: Any) -> Any:  # (read through: the body's versions, its stamp with them)
        looked.append("stamp")
        return spans(body)
    monkeypatch.setattr(answer_cache, "_DIGITS", Digits)
    monkeypatch.setattr(answer_cache, "mapping_version_span", mapping)
    monkeypatch.setattr(answer_cache, "version_spans", versions)
    handled = handled_registrations(monkeypatch)
    assert server.send(connection, frame(101, 1000)) == first.replace(b'"opaque":100,', b'"opaque":101,')
    assert looked == (["stamp"] if mapped else [])
    looked.clear()
    again = frame(102, 2000)
    lines = server_lines_run(lambda: server.send(connection, again))
    assert looked == (["stamp"] if mapped else []) and handled == []
    assert lines <= RENEWAL_LINES[compat], lines
    kept = RemotingCommand.decode(first[4:])
    for opaque, stamp in ((1000, 3000), (1001, 4000)):  # a digit more: read through, its shape kept for the next
        looked.clear()
        answer = RemotingCommand.decode(server.send(connection, frame(opaque, stamp))[4:])
        assert (answer.code, answer.opaque, answer.ext, answer.body) == (0, opaque, kept.ext, kept.body)
        assert handled == [] and looked == (["opaque", "stamp"] if opaque == 1000 else ["stamp"] if mapped else [])
    if mapped:  # a digit more in the opaque, one fewer in the CRC: as long, its spans moved, it goes the usual way
        answer = RemotingCommand.decode(server.send(connection, frame(10_000, 5000, crc_digits=9))[4:])
        assert (answer.code, answer.opaque, answer.ext, answer.body) == (0, 10_000, kept.ext, kept.body)
        assert handled == [10_000]



@pytest.mark.parametrize("mapped_at", [None, 1_700_000_000_000])
def test_a_first_registrations_key_going_on_from_its_split_is_the_key_read_through(mapped_at) -> None:
    """The fused path's renewal key goes on from its body's split (``renewal_key_after_split``): it is
    the key ``renewal_key_steps`` reads through the same frame, whatever its header's order, with or
    without a bodyCrc32, and where the body's versions lie past its first kilobyte (read through then),
    and a heartbeat read where it was gets it too; a heartbeat whose stamp, opaque or CRC alone changed
    has the same key, one whose dataVersion or table changed another."""
    from twisted_namesrv.bodies.register import split_small

    def frame_of(body: bytes, crc: bool = True, opaque_first: bool = False, opaque: int = 7) -> bytes:
        ext = {"brokerName": "g", "brokerAddr": "127.0.0.1:10911", "clusterName": "c", "brokerId": "0"}
        if crc:
            ext["bodyCrc32"] = str(crc32_masked(body))
        fields = fastjson_dumps({"code": 103, "extFields": ext, "opaque": opaque, "version": 409})
        if opaque_first:
            fields = fastjson_dumps({"opaque": opaque, "code": 103, "extFields": ext, "version": 409})
        return len(fields).to_bytes(4, "big") + fields + body

    def fastjson_dumps(obj: dict[str, Any]) -> bytes:
        import json
        return json.dumps(obj, separators=(",", ":")).encode()

    bodies = [body_of(["A"], mapped_at=mapped_at), body_of([f"T{i}" for i in range(40)], mapped_at=mapped_at)]
    far = body_of(["A"], mapped_at=mapped_at).replace(b'"filterServerList":[]', b'"filterServerList":["%s"]'
                                                       % (b"f" * 2000))
    keys = set()
    for body in [*bodies, far]:
        for crc in (True, False):
            for opaque_first in (False, True):
                frame = frame_of(body, crc, opaque_first)
                whole = split_small(frame[4 + int.from_bytes(frame[:4], "big"):])
                assert whole is not None
                read = answer_cache._renewal_key(frame)
                assert read is not None and answer_cache.renewal_key_after_split(frame, whole) == read
                again = frame_of(body, crc, opaque_first, opaque=8)
                assert answer_cache._renewal_key(again, None, read.shape).digest == read.digest
                keys.add(read.digest)
    assert len(keys) == 3 * 4  # each body, with and without a CRC, in either order: a key of its own
    if mapped_at is not None:  # a new stamp: the same registration
        restamped = frame_of(body_of(["A"], mapped_at=mapped_at + 1), opaque=9)
        first = answer_cache._renewal_key(frame_of(bodies[0], opaque=7))
        assert first is not None and answer_cache._renewal_key(restamped, None, first.shape).digest == first.digest
    first = answer_cache._renewal_key(frame_of(bodies[0]))
    assert first is not None
    for changed in (body_of(["A"], counter=2, mapped_at=mapped_at), body_of(["B"], mapped_at=mapped_at)):
        key = answer_cache._renewal_key(frame_of(changed), None, first.shape)
        assert key is None or key.digest != first.digest
