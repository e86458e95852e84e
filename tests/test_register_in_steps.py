"""A big REGISTER_BROKER is checked, decoded and compared with the queues in steps across reactor
turns (steps.py, dispatch.py): other connections are answered meanwhile and see the routes as
before it; the tables change in its last step. The result must be what the same requests give a
server that registers in one go, with the registration taken after whatever was answered during
its steps (as Java's write lock orders them)."""

from __future__ import annotations

import hashlib
import random
import zlib

import pytest
from twisted.internet import task
from twisted.logger import capturedLogs, formatEvent

from tests import built
from twisted_namesrv.bodies import register
from twisted_namesrv.bodies.register import (
    RegisterBodyError,
    RegisterBrokerBody,
    TopicConfig,
    decode_register_body,
    decode_register_body_steps,
    encode_register_body,
)
from twisted_namesrv.bodies.route import DataVersion
from twisted_namesrv.remoting import RemotingCommand, RequestCode, ResponseCode
from twisted_namesrv.remoting.crc import crc32_masked
from twisted_namesrv.schema import SERVER_SCHEMA
from twisted_namesrv.service import settle_in_steps
from twisted_namesrv.state import registration, settling
from twisted_namesrv.state.config import NamesrvConfig
from twisted_namesrv.steps import run_steps

from .test_answer_cache import connect, lookup_request, other_request, register_request

#: attribute values with the bytes the decoder cuts at, inside strings
TRICKY = {"+message.type": "NORMAL", "x": 'a},"b":{', "y": "}}"}


@pytest.fixture
def small_steps(monkeypatch) -> None:
    """Steps small enough that test-sized tables take many."""
    monkeypatch.setattr(register, "STEP_BYTES", 200)
    monkeypatch.setattr(register, "_LINES_PER_STEP", 3)
    monkeypatch.setattr(registration, "TOPICS_PER_STEP", 2)
    monkeypatch.setattr(settling, "WRITE_PER_STEP", 2)
    monkeypatch.setattr(settling, "WALK_PER_STEP", 3)
    monkeypatch.setattr(settling, "REMOVE_PER_STEP", 2)


def table(count: int, v5: bool) -> dict[str, TopicConfig]:
    return {f"T{i}": TopicConfig(f"T{i}", 4 + i % 3, 4, 6, attributes=TRICKY if v5 and i % 2 else None)
            for i in range(count)}


def steps_taken(steps) -> tuple[int, object]:
    count = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return count, done.value
        count += 1


# -- the body ------------------------------------------------------------------------------------

@pytest.mark.parametrize("v5", [False, True])
@pytest.mark.parametrize("compressed", [False, True])
def test_a_big_table_decodes_in_steps_as_in_one_go(monkeypatch, v5: bool, compressed: bool) -> None:
    body = encode_register_body(RegisterBrokerBody(DataVersion(3, 9), table(60, v5), ["10.0.0.9:1"]), compressed, v5)
    whole = decode_register_body(body, compressed, 400)
    monkeypatch.setattr(register, "STEP_BYTES", 200)
    monkeypatch.setattr(register, "_LINES_PER_STEP", 3)
    count, in_steps = steps_taken(decode_register_body_steps(body, compressed, 400))
    assert count > 20
    assert (in_steps.tablePieces is not None) is not compressed
    in_steps.tablePieces = None
    assert in_steps == whole
    assert list(in_steps.topicConfigTable) == list(table(60, v5))
    assert in_steps.tableDigest == whole.tableDigest is not None


def test_a_big_bodys_digest_stands_on_its_pieces_which_the_decoder_does_not_hash_again(monkeypatch) -> None:
    """A big JSON body's memo digest is made of its table pieces' SHA-1s, cut as the decoder cuts:
    the same from the body as bytes or as a view of its frame, and each piece's SHA-1 is the one
    the decoder keeps for it (TablePieces), which it then takes instead of hashing the piece."""
    topics = {f"T{i:05d}": TopicConfig(f"T{i:05d}") for i in range(6000)}
    body = encode_register_body(RegisterBrokerBody(DataVersion(3, 9), topics), False, False)
    assert len(body) > 2 * register.HASHED_PIECE
    split = run_steps(register.split_data_version(body))
    assert split is not None and run_steps(register.split_data_version(memoryview(body))) == split
    assert len(split.pieces) >= 2
    hashed: list[int] = []
    sha1 = hashlib.sha1

    def counted(data: bytes | memoryview = b"") -> object:
        hashed.append(len(data))
        return sha1(data)
    monkeypatch.setattr(hashlib, "sha1", counted)
    decoded = run_steps(decode_register_body_steps(body, False, 400, split=split))
    assert decoded.tableDigest == split.digest and decoded.tablePieces is not None
    assert {piece for _, piece in split.pieces.values()} < set(decoded.tablePieces.counts)
    assert sum(hashed) < register.HASHED_PIECE * 2  # the last piece only (its end found by decoding it)


def edited(topics: dict[str, TopicConfig], edit: str) -> dict[str, TopicConfig]:
    topics = dict(topics)
    if edit == "added at the end":
        topics["Z"] = TopicConfig("Z")
    elif edit == "added in the middle":
        topics = {**dict(list(topics.items())[:30]), "M": TopicConfig("M"), **dict(list(topics.items())[30:])}
    elif edit == "changed":
        topics["T33"] = TopicConfig("T33", 16, 16, 6)
    elif edit == "removed":
        del topics["T33"]
    elif edit == "cut key removed":
        del topics["T30"], topics["T31"], topics["T32"], topics["T34"]
    elif edit == "grown":
        topics = {**dict(list(topics.items())[:30]), **{f"N{i}": TopicConfig(f"N{i}") for i in range(40)},
                  **dict(list(topics.items())[30:])}
    return topics


@pytest.mark.parametrize("v5", [False, True])
@pytest.mark.parametrize("edit", ["same", "added at the end", "added in the middle", "changed", "removed",
                                  "cut key removed", "grown"])
def test_a_table_sent_again_is_decoded_where_it_changed(small_steps, v5: bool, edit: str) -> None:
    """Cut where the broker's last table was, its unchanged pieces are counted, not decoded: the
    decoded topics include every added or changed one, and the count is the table's."""
    last = decode_register_body(encode_register_body(RegisterBrokerBody(DataVersion(1, 1), table(60, v5)), False, v5),
                                False, 400)
    assert last.tablePieces is not None and len(last.tablePieces.counts) > 10
    topics = edited(table(60, v5), edit)
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 2), topics, ["10.0.0.9:1"]), False, v5)
    again = run_steps(decode_register_body_steps(body, False, 400, known_pieces=last.tablePieces))
    whole = decode_register_body(body, False, 400)
    assert again.tableSkipped + len(again.topicConfigTable) == len(topics)
    assert again.tableSkipped > len(topics) // 2
    assert all(whole.topicConfigTable[name] == config for name, config in again.topicConfigTable.items())
    changed = {name for name, config in topics.items() if table(60, v5).get(name) != config}
    assert changed <= set(again.topicConfigTable)
    assert again.filterServerList == ["10.0.0.9:1"] and again.dataVersion == DataVersion(1, 2)
    assert again.tableDigest == whole.tableDigest


class Searched(bytes):
    """A body counting the bytes its ``find`` looks through (to the match, or the whole range)."""

    looked = 0

    def find(self, sub, start=0, end=None, /):  # type: ignore[override]
        at = super().find(sub, start, end)
        stop = len(self) if end is None else min(end, len(self))
        Searched.looked += (at + len(sub) if at >= 0 else stop) - start
        return at


@pytest.mark.parametrize("v5", [False, True])
def test_a_table_sent_in_pieces_is_not_cut_at_another_pieces_keys(small_steps, v5: bool) -> None:
    """5.x enableSplitRegistration sends a big table as bodies of its pieces, and the broker's
    second piece came to the decoder with the first piece's keys to cut at: it looked for three
    of them through the rest of the body, in one step (8 MB each: 7 ms at 1 M topics).  Another
    table's keys are not looked for: the second piece costs the looking that cutting by size does."""
    topics = table(60, v5)
    pieces = [dict(list(topics.items())[:30]), dict(list(topics.items())[30:])]
    bodies = [encode_register_body(RegisterBrokerBody(DataVersion(1, 1), piece), False, v5) for piece in pieces]
    first = decode_register_body(bodies[0], False, 400)
    assert first.tablePieces is not None and first.tablePieces.cuts
    looked, whole = [], decode_register_body(bodies[1], False, 400).topicConfigTable
    for known in (None, first.tablePieces):
        Searched.looked = 0
        second = run_steps(decode_register_body_steps(Searched(bodies[1]), False, 400, known_pieces=known))
        assert second.topicConfigTable == whole and len(whole) == 30 and second.tableSkipped == 0
        looked.append(Searched.looked)
    assert looked[1] <= looked[0], looked


def test_a_table_the_pieces_cannot_take_is_decoded_in_one_go_with_javas_leniency(small_steps, monkeypatch) -> None:
    """A number written as a string in the middle of the table: that piece fails, the body is
    decoded whole as before, and no try decoded more than two pieces' worth before."""
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), table(30, False)), False, False)
    lenient = body.replace(b'"readQueueNums":5,"topicFilterType":"SINGLE_TAG","topicName":"T16"',
                           b'"readQueueNums":"5","topicFilterType":"SINGLE_TAG","topicName":"T16"')
    assert lenient != body
    tried: list[int] = []
    decode_piece = register._decode_piece

    def counted(data: bytes, start: int, end: int):
        tried.append(end - start)
        return decode_piece(data, start, end)

    monkeypatch.setattr(register, "_decode_piece", counted)
    decoded = decode_register_body(lenient, False, 400)
    assert decoded.topicConfigTable == decode_register_body(body, False, 400).topicConfigTable
    assert tried and max(tried) <= 2 * register.STEP_BYTES


def test_no_step_of_a_big_table_passes_over_the_whole_table(small_steps, monkeypatch) -> None:
    """The typed decoder's pass that gives a topic without a topicName its key runs over each
    piece as it is decoded, never over the whole table in the last step (80k topics cost that
    step ~20 ms: a lookup's wait growing with the table)."""
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), table(30, False)), False, False)
    named: list[int] = []
    name_them = register._named

    def counted(entries: dict[str, TopicConfig]) -> dict[str, TopicConfig]:
        named.append(len(entries))
        return name_them(entries)

    monkeypatch.setattr(register, "_named", counted)
    decoded = decode_register_body(body, False, 400)
    assert decoded.tablePieces is not None and decoded.topicConfigTable == table(30, False)
    assert len(named) > 5 and max(named) <= 3, named


def test_a_table_key_outside_the_wrapper_is_not_cut_out(small_steps) -> None:
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), table(30, False)), False, False)
    decoy = body.replace(b'{"filterServerList"', b'{"topicConfigTable":{"X":{"topicName":"X"}},"filterServerList"', 1)
    assert list(decode_register_body(decoy, False, 400).topicConfigTable) == list(table(30, False))


def test_the_inflate_limit_holds_in_steps(small_steps) -> None:
    with pytest.raises(RegisterBodyError, match="inflates beyond"):
        decode_register_body(zlib.compress(b"\0" * 100_000), True, 400, max_inflated=50_000)


# -- the server --------------------------------------------------------------------------------

class Turns:
    """A Cooperator whose reactor turns the test runs: one step per turn."""

    def __init__(self) -> None:
        self.pending: list = []
        self.cooperator = task.Cooperator(scheduler=self.pending.append,
                                          terminationPredicateFactory=lambda: lambda: True)

    def one(self) -> bool:
        if not self.pending:
            return False
        self.pending.pop(0)()
        return True

    def all(self) -> int:
        count = 0
        while self.one():
            count += 1
        return count


def make_server(tmp_path, name: str, compat: str = "4.9.8", turns: Turns | None = None, keep: bool = True,
                settings: dict | None = None):
    config = NamesrvConfig({"compatVersion": compat, "kvConfigPath": str(tmp_path / f"{name}.json"),
                            "configStorePath": str(tmp_path / f"{name}.properties"), **(settings or {})},
                           schema=SERVER_SCHEMA)
    dispatcher = built.dispatcher(config, task.Clock(), keep_answers=keep, count_requests=True, step_from=0,
                                  cooperator=turns.cooperator if turns else None)
    return built.factory(dispatcher, task.Clock(), 1 << 24, 0)


def big_registration(topics: dict[str, TopicConfig], counter: int = 1, opaque: int = 1) -> bytes:
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, counter), topics), False, False)
    ext = {"brokerName": "a", "brokerAddr": "127.0.0.1:10911", "clusterName": "c", "haServerAddr": "h",
           "brokerId": "0", "bodyCrc32": str(crc32_masked(body))}
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, opaque=opaque, version=409).encode()


def request(code: int, ext: dict | None = None, opaque: int = 1) -> bytes:
    return RemotingCommand.request(code, ext, opaque=opaque, version=409).encode()


def answers(transport) -> list[RemotingCommand]:
    data, out = transport.value(), []
    while data:
        length = int.from_bytes(data[:4], "big")
        out.append(RemotingCommand.decode(data[4:4 + length]))
        data = data[4 + length:]
    transport.clear()
    return out


def test_others_are_answered_from_the_old_routes_until_the_last_step(tmp_path, small_steps) -> None:
    turns = Turns()
    factory = make_server(tmp_path, "stepped", turns=turns)
    broker, broker_out = connect(factory)
    client, client_out = connect(factory)
    broker.dataReceived(big_registration(table(20, False)))
    assert broker_out.value() == b""
    turns.one()
    turns.one()
    client.dataReceived(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T3"}, opaque=5))
    assert [(a.opaque, a.code) for a in answers(client_out)] == [(5, ResponseCode.TOPIC_NOT_EXIST)]
    assert turns.all() > 10
    assert [(a.opaque, a.code) for a in answers(broker_out)] == [(1, ResponseCode.SUCCESS)]
    client.dataReceived(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T3"}, opaque=6))
    assert [(a.opaque, a.code) for a in answers(client_out)] == [(6, ResponseCode.SUCCESS)]
    assert factory.metrics.requests[RequestCode.REGISTER_BROKER, ResponseCode.SUCCESS] == 1


def test_a_connections_later_requests_wait_for_its_answer_in_steps(tmp_path, small_steps) -> None:
    turns = Turns()
    factory = make_server(tmp_path, "stepped", turns=turns)
    broker, out = connect(factory)
    broker.dataReceived(big_registration(table(20, False)) + request(RequestCode.GET_BROKER_CLUSTER_INFO, opaque=2))
    broker.dataReceived(request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, opaque=3))
    assert out.value() == b""
    turns.all()
    got = answers(out)
    assert [(a.opaque, a.code) for a in got] == [(1, 0), (2, 0), (3, 0)]
    assert b"127.0.0.1:10911" in got[1].body and b"T19" in got[2].body


def test_a_broker_that_leaves_during_its_steps_registers_nothing(tmp_path, small_steps) -> None:
    turns = Turns()
    factory = make_server(tmp_path, "stepped", turns=turns)
    broker, out = connect(factory)
    with capturedLogs() as events:
        broker.dataReceived(big_registration(table(20, False)))
        turns.one()
        broker.connectionLost()
        turns.all()
    assert out.value() == b"" and factory.dispatcher.state.routes.brokerAddrTable == {}
    assert not [formatEvent(e) for e in events if "failed" in formatEvent(e)]


def test_big_registrations_take_their_steps_one_after_the_other(tmp_path, small_steps) -> None:
    """One decoded table in memory at a time; one whose broker left while it waited never starts."""
    turns = Turns()
    factory = make_server(tmp_path, "stepped", turns=turns)
    (first, first_out), (second, second_out), (third, third_out) = connect(factory), connect(factory), connect(factory)
    first.dataReceived(big_registration(table(20, False)))
    second.dataReceived(big_registration(table(20, False)).replace(b"127.0.0.1:10911", b"127.0.0.1:10912"))
    third.dataReceived(big_registration(table(20, False)).replace(b"127.0.0.1:10911", b"127.0.0.1:10913"))
    third.connectionLost()
    first_turns = 0
    while not first_out.value():
        assert turns.one()
        first_turns += 1
    assert second_out.value() == b""
    assert turns.all() >= first_turns - 1  # the second took all its steps after the first
    assert [a.code for a in answers(second_out)] == [ResponseCode.SUCCESS] and third_out.value() == b""
    assert sorted(factory.dispatcher.state.routes.brokerLiveTable) == ["127.0.0.1:10911", "127.0.0.1:10912"]


CHANGES = {"wipe": RequestCode.WIPE_WRITE_PERM_OF_BROKER, "add": RequestCode.ADD_WRITE_PERM_OF_BROKER,
           "delete": RequestCode.DELETE_TOPIC_IN_NAMESRV, "unregister": RequestCode.UNREGISTER_BROKER}


@pytest.mark.parametrize("change", sorted(CHANGES))
@pytest.mark.parametrize("turns_before", [1, 3, 10, 18, 24])
@pytest.mark.parametrize("last_topics", [20, 21])
def test_a_change_during_the_steps_is_seen_by_the_registration(tmp_path, small_steps, change: str,
                                                              turns_before: int, last_topics: int) -> None:
    """The same table again (its digest says unchanged), or one with a topic more (compared
    with the queues in steps), while a hand change strikes at some step: the answers are those
    of a server registering in one go after the change."""
    turns = Turns()
    stepped, reference = make_server(tmp_path, "stepped", turns=turns), make_server(tmp_path, "reference")
    (broker, broker_out), (admin, admin_out) = connect(stepped), connect(stepped)
    (ref_broker, ref_broker_out), (ref_admin, ref_admin_out) = connect(reference), connect(reference)
    registrations = [big_registration(table(20, False), counter=1, opaque=1),
                      big_registration(table(20, False), counter=2, opaque=2),
                      big_registration(table(last_topics, False), counter=3, opaque=3)]
    change_frame = request(CHANGES[change], {"brokerName": "a", "topic": "T4", "clusterName": "c",
                                             "brokerAddr": "127.0.0.1:10911", "brokerId": "0"}, opaque=9)
    for frame in registrations[:2]:
        broker.dataReceived(frame)
        turns.all()
        ref_broker.dataReceived(frame)
    broker.dataReceived(registrations[2])  # the same table again, its steps interrupted by the change
    for _ in range(turns_before):
        turns.one()
    still_in_steps = bool(turns.pending)
    admin.dataReceived(change_frame)
    turns.all()
    if still_in_steps:
        ref_admin.dataReceived(change_frame)
        ref_broker.dataReceived(registrations[2])
    else:
        ref_broker.dataReceived(registrations[2])
        ref_admin.dataReceived(change_frame)
    for admin_connection in (admin, ref_admin):
        admin_connection.dataReceived(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T4"}, opaque=10))
        admin_connection.dataReceived(request(RequestCode.GET_BROKER_CLUSTER_INFO, opaque=11))
    assert broker_out.value() == ref_broker_out.value()
    assert admin_out.value() == ref_admin_out.value()
    if turns_before == 1:
        assert still_in_steps


@pytest.mark.parametrize(("compat", "settings"), [("4.9.8", {}), ("5.3.3", {}),
                                                  ("5.3.3", {"deleteTopicWithBrokerRegistration": True})])
@pytest.mark.parametrize("seed", range(4))
def test_registrations_in_steps_answer_as_registrations_in_one_go(tmp_path, small_steps, compat: str,
                                                                 settings: dict, seed: int) -> None:
    """Random registrations answered in steps while other requests (lookups, wipes, deletions,
    topic registrations, config changes...) arrive on another connection, against a server that
    keeps no answers and registers in one go after those of them that arrived before it answered.
    The stepped server leaves every change as a layer over topicQueueTable, written in steps
    (state/settling.py): lookups between those steps must not tell."""
    rng = random.Random(seed)
    turns = Turns()
    stepped = make_server(tmp_path, "stepped", compat, turns, settings=settings)
    reference = make_server(tmp_path, "ref", compat, keep=False, settings=settings)
    routes = stepped.dispatcher.state.routes  # every change a layer, written in the turns' steps
    routes.write_at_once, routes.on_settle = 0, settle_in_steps(routes, turns.cooperator)
    connections = {factory: (connect(factory), connect(factory)) for factory in (stepped, reference)}
    for counter in range(1, 120):
        registration = register_request(rng, counter, counter, compat == "5.3.3").encode()
        during = [(lookup_request(rng, 1000 + i) if rng.random() < 0.6 else other_request(rng, 1000 + i)).encode()
                  for i in range(rng.randint(0, 3))]
        (broker, broker_out), (client, client_out) = connections[stepped]
        broker.dataReceived(registration)
        before = 0  # the frames that came while the registration was in its steps
        for frame in during:
            turns.one()
            before += not broker_out.value()
            client.dataReceived(frame)
        turns.all()
        (ref_broker, ref_broker_out), (ref_client, ref_client_out) = connections[reference]
        for frame in during[:before]:
            ref_client.dataReceived(frame)
        ref_broker.dataReceived(registration)
        for frame in during[before:]:
            ref_client.dataReceived(frame)
        assert broker_out.value() == ref_broker_out.value()
        assert client_out.value() == ref_client_out.value()
        for transport in (broker_out, client_out, ref_broker_out, ref_client_out):
            transport.clear()
        for topic in ("T0", "T1", "T2"):
            frame = request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, opaque=counter)
            client.dataReceived(frame)
            ref_client.dataReceived(frame)
        assert client_out.value() == ref_client_out.value()
        client_out.clear()
        ref_client_out.clear()


def test_run_steps_returns_the_result() -> None:
    def job():
        yield
        yield
        return 7
    assert run_steps(job()) == 7
