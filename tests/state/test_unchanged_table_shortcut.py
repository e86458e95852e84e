"""A re-registration whose table hashes like one applied before skips decoding the table (each
piece of a table sent in pieces, as 5.x's enableSplitRegistration sends it, likewise). That must
never change the outcome: random sequences of registrations and admin operations give the same
tables with the shortcut as with every body decoded in full (the reference)."""

from __future__ import annotations

import random

import pytest
from twisted.internet import task

from tests import built
from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body
from twisted_namesrv.bodies.route import DataVersion
from twisted_namesrv.context import Peer
from twisted_namesrv.remoting import RemotingCommand, RequestCode
from twisted_namesrv.remoting.crc import crc32_masked
from twisted_namesrv.schema import SERVER_SCHEMA
from twisted_namesrv.state.config import NamesrvConfig

ADDRS = {0: "127.0.0.1:10911", 1: "127.0.0.1:10921", 2: "127.0.0.1:10931"}


def new_dispatcher(tmp_path, name: str, compat: str, delete: bool = False):
    config = NamesrvConfig({"compatVersion": compat, "kvConfigPath": str(tmp_path / f"{name}.json"),
                            "configStorePath": str(tmp_path / f"{name}.properties"),
                            "deleteTopicWithBrokerRegistration": delete}, schema=SERVER_SCHEMA)
    return built.dispatcher(config, task.Clock())


def register(broker_id: int, tables: list[dict], version: int, compressed: bool, acting: bool, v5: bool,
             piece: slice = slice(None)):
    table = {n: TopicConfig(n, q, q, p) for n, q, p in tables[broker_id][piece]}
    body = encode_register_body(RegisterBrokerBody(DataVersion(1000, version), table), compressed, v5)
    ext = {"brokerName": "b", "brokerAddr": ADDRS[broker_id], "clusterName": "c", "haServerAddr": "h",
           "brokerId": str(broker_id), "compressed": str(compressed).lower(), "bodyCrc32": str(crc32_masked(body))}
    if v5:
        ext["enableActingMaster"] = str(acting).lower()
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, version=479 if v5 else 409)


def snapshot(state) -> tuple:
    routes = state.routes
    return ({t: {b: (q.readQueueNums, q.writeQueueNums, q.perm) for b, q in qs.items()}
             for t, qs in routes.topicQueueTable.items()},
            {n: dict(b.brokerAddrs) for n, b in routes.brokerAddrTable.items()})


@pytest.mark.parametrize(("compat", "delete"), [("4.9.8", False), ("5.3.3", False), ("5.3.3", True)])
@pytest.mark.parametrize("seed", range(8))
def test_shortcut_never_changes_the_outcome(tmp_path, compat: str, delete: bool, seed: int) -> None:
    """Tables in one frame or in pieces (a piece: a REGISTER_BROKER of its own, with the
    table's dataVersion), their topics moving between pieces as the table changes."""
    rng = random.Random(seed)
    v5 = compat == "5.3.3"
    fast_dispatcher, reference_dispatcher = (new_dispatcher(tmp_path, "fast", compat, delete),
                                             new_dispatcher(tmp_path, "ref", compat, delete))
    fast, reference = fast_dispatcher.state, reference_dispatcher.state
    reference.routes.registration_memo = lambda *args: None  # always decode in full
    topics = [f"T{i}" for i in range(6)]
    tables = {i: [(t, 4, 6) for t in topics[:3]] for i in ADDRS}
    versions = dict.fromkeys(ADDRS, 1)
    acting = dict.fromkeys(ADDRS, False)
    skipped = 0
    for _ in range(150):
        op = rng.random()
        broker_id = rng.choice(list(ADDRS))
        if op < 0.15:
            tables[broker_id] = [(t, rng.choice([4, 8]), rng.choice([2, 4, 6])) for t in rng.sample(topics, 3)]
            versions[broker_id] += 1
        elif op < 0.25:
            versions[broker_id] += 1  # a new dataVersion, the same table
        elif op < 0.30:
            acting[broker_id] = not acting[broker_id]
        if op < 0.6:
            pieces = [slice(None)] if not v5 or rng.random() < 0.4 else [slice(0, 2), slice(2, None)]
            requests = [register(broker_id, tables, versions[broker_id], rng.random() < 0.5, acting[broker_id], v5,
                                 piece) for piece in pieces]
        else:
            code, ext = rng.choice([
                (RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "b"}),
                (RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "b"}),
                (RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": rng.choice(topics)}),
                (RequestCode.UNREGISTER_BROKER, {"brokerName": "b", "brokerAddr": ADDRS[broker_id],
                                                 "clusterName": "c", "brokerId": str(broker_id)}),
            ])
            requests = [RemotingCommand.request(code, ext)]
        for request in requests:
            before = fast.routes.registration_memo("c" if v5 else None, ADDRS[broker_id], "b", broker_id,
                                                   acting[broker_id])
            skipped += before is not None and request.code == RequestCode.REGISTER_BROKER
            answers = [dispatcher.dispatch(request, Peer(broker_id, ADDRS[broker_id]))
                       for dispatcher in (fast_dispatcher, reference_dispatcher)]
            assert answers[0].encode() == answers[1].encode()
            assert snapshot(fast) == snapshot(reference)
    assert skipped > 0  # the shortcut was exercised


SEQUENCES = {
    # a piece's topic overwritten by another table, then the piece again with a new dataVersion:
    # Java writes it back, so its memo must have gone with the overwrite
    "overwritten": (False, [("X4 Y4", 1), ("Z4", 1), ("X8 Y4 Z4", 2), ("X4 Y4", 3)]),
    # deleteTopicWithBrokerRegistration: a body removes whatever it lacks, so a part of the table
    # sent again is no repeat while the broker holds more than it
    "deleting": (True, [("X4 Y4 Z4", 1), ("X4 Y4", 1), ("X4 Y4 Z4", 1), ("X4 Y4", 1)]),
}


@pytest.mark.parametrize("sequence", sorted(SEQUENCES))
def test_a_piece_is_skipped_only_while_sending_it_again_would_change_nothing(tmp_path, sequence: str) -> None:
    delete, steps = SEQUENCES[sequence]
    dispatchers = new_dispatcher(tmp_path, "fast", "5.3.3", delete), new_dispatcher(tmp_path, "ref", "5.3.3", delete)
    fast, reference = (dispatcher.state for dispatcher in dispatchers)
    reference.routes.registration_memo = lambda *args: None
    for topics, version in steps:
        tables = {0: [(word[0], int(word[1:]), 6) for word in topics.split()]}
        request = register(0, tables, version, False, False, True)
        answers = [dispatcher.dispatch(request, Peer(0, ADDRS[0])) for dispatcher in dispatchers]
        assert answers[0].encode() == answers[1].encode()
        assert snapshot(fast) == snapshot(reference), topics
