"""A re-registration whose table hashes like the last one applied skips decoding the table.
That must never change the outcome: random sequences of registrations and admin operations give
the same tables with the shortcut as with every body decoded in full (the reference). And it must
be taken where it can: after a 5.x broker's incremental registration (its new topic alone, with a
new dataVersion), its periodic whole table under that version is held as sent."""

from __future__ import annotations

import random

import pytest
from twisted.internet import task

from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, decode_register_body, encode_register_body
from twisted_namesrv.bodies.route import DataVersion
from twisted_namesrv.context import Peer
from twisted_namesrv.dispatch import Dispatcher
from twisted_namesrv.remoting import RemotingCommand, RequestCode
from twisted_namesrv.remoting.crc import crc32_masked
from twisted_namesrv.service import build_state
from twisted_namesrv.state.config import NamesrvConfig

ADDRS = {0: "127.0.0.1:10911", 1: "127.0.0.1:10921", 2: "127.0.0.1:10931"}


def new_state(tmp_path, name: str, compat: str):
    config = NamesrvConfig({"compatVersion": compat, "kvConfigPath": str(tmp_path / f"{name}.json"),
                            "configStorePath": str(tmp_path / f"{name}.properties")})
    return build_state(config, task.Clock())


def register(broker_id: int, tables: dict[int, list], version: int, compressed: bool, acting: bool, v5: bool,
             only_last: bool = False):
    table = {n: TopicConfig(n, q, q, p) for n, q, p in tables[broker_id][-1 if only_last else 0:]}
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
    fast, reference = new_state(tmp_path, "fast", compat), new_state(tmp_path, "ref", compat)
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
        elif op < 0.35:  # another table under the same dataVersion: Java applies only its new topics
            tables[broker_id] = [(t, rng.choice([4, 8]), rng.choice([2, 4, 6])) for t in rng.sample(topics, 3)]
        elif op < 0.42:  # registerIncrementBrokerData: a new topic alone, a new version; the whole table next
            tables[broker_id] = [*tables[broker_id], (rng.choice(topics), rng.choice([4, 8]), 6)]
            versions[broker_id] += 1
            request = register(broker_id, tables, versions[broker_id], False, acting[broker_id], v5, only_last=True)
            for state in (fast, reference):
                Dispatcher(state).dispatch(request, Peer(broker_id, ADDRS[broker_id]))
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
        answers = [Dispatcher(state).dispatch(request, Peer(broker_id, ADDRS[broker_id]))
                   for state in (fast, reference)]
        assert answers[0].encode() == answers[1].encode()
        assert snapshot(fast) == snapshot(reference)
    assert skipped > 0  # the shortcut was exercised


@pytest.mark.parametrize("compat", ["4.9.8", "5.3.3"])
def test_a_whole_table_after_an_incremental_registration_is_held_as_sent(tmp_path, compat: str) -> None:
    """Java 5.x registers a new topic alone with the new dataVersion (registerIncrementBrokerData),
    then its whole table every 30 s under that version: the first of those is compared topic by
    topic, the next ones find the memo (the table is not decoded again) and change nothing."""
    v5 = compat == "5.3.3"
    state = new_state(tmp_path, "s", compat)
    tables = {0: [(f"T{i}", 4, 6) for i in range(3)]}
    peer = Peer(0, ADDRS[0])
    Dispatcher(state).dispatch(register(0, tables, 1, False, False, v5), peer)
    tables[0].append(("T3", 4, 6))
    Dispatcher(state).dispatch(register(0, tables, 2, False, False, v5, only_last=True), peer)
    before = snapshot(state)
    found = []
    for _ in range(3):
        request = register(0, tables, 2, False, False, v5)
        digest = decode_register_body(request.body, False, request.version).tableDigest
        memo = state.routes.registration_memo("c" if v5 else None, ADDRS[0], "b", 0, False)
        found.append(memo is not None and memo.digest == digest)
        Dispatcher(state).dispatch(request, peer)
    assert found == [False, True, True]
    assert snapshot(state) == before
