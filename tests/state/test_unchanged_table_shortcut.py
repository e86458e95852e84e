"""A re-registration whose table hashes like the last one applied skips decoding the table.
That must never change the outcome: random sequences of registrations and admin operations give
the same tables with the shortcut as with every body decoded in full (the reference)."""

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


def new_dispatcher(tmp_path, name: str, compat: str):
    config = NamesrvConfig({"compatVersion": compat, "kvConfigPath": str(tmp_path / f"{name}.json"),
                            "configStorePath": str(tmp_path / f"{name}.properties")}, schema=SERVER_SCHEMA)
    return built.dispatcher(config, task.Clock())


def register(broker_id: int, tables: list[dict], version: int, compressed: bool, acting: bool, v5: bool):
    table = {n: TopicConfig(n, q, q, p) for n, q, p in tables[broker_id]}
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


@pytest.mark.parametrize("compat", ["4.9.8", "5.3.3"])
@pytest.mark.parametrize("seed", range(8))
def test_shortcut_never_changes_the_outcome(tmp_path, compat: str, seed: int) -> None:
    rng = random.Random(seed)
    v5 = compat == "5.3.3"
    fast_dispatcher, reference_dispatcher = (new_dispatcher(tmp_path, "fast", compat),
                                             new_dispatcher(tmp_path, "ref", compat))
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
            request = register(broker_id, tables, versions[broker_id], rng.random() < 0.5, acting[broker_id], v5)
        else:
            code, ext = rng.choice([
                (RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "b"}),
                (RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "b"}),
                (RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": rng.choice(topics)}),
                (RequestCode.UNREGISTER_BROKER, {"brokerName": "b", "brokerAddr": ADDRS[broker_id],
                                                 "clusterName": "c", "brokerId": str(broker_id)}),
            ])
            request = RemotingCommand.request(code, ext)
        before = fast.routes.registration_memo("c" if v5 else None, ADDRS[broker_id], "b", broker_id,
                                               acting[broker_id])
        skipped += before is not None and request.code == RequestCode.REGISTER_BROKER
        answers = [dispatcher.dispatch(request, Peer(broker_id, ADDRS[broker_id]))
                   for dispatcher in (fast_dispatcher, reference_dispatcher)]
        assert answers[0].encode() == answers[1].encode()
        assert snapshot(fast) == snapshot(reference)
    assert skipped > 0  # the shortcut was exercised
