"""GET_BROKER_CLUSTER_INFO joined of kept pieces (cluster_info.py): the same bytes as encoding the
tables whole, after any change, and a change of one group re-encodes that group, not the table."""

from __future__ import annotations

import random

import pytest

from tests.test_answer_cache import connection, send
from twisted_namesrv.bodies import route
from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body
from twisted_namesrv.bodies.route import DataVersion
from twisted_namesrv.remoting import RemotingCommand, RequestCode

GROUPS = [f"g{i}" for i in range(12)] + ["c0", "\u00e9\u00e8", "q\"\\"]  # (a cluster's name too; escapes)
CLUSTERS = ["c0", "c1", "c2"]


def register(group: str, cluster: str, broker_id: int, counter: int, v5: bool, rng: random.Random,
             host: int | None = None) -> RemotingCommand:
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, counter), {
        "T0": TopicConfig("T0", 4, 4, 6)}), False, v5)
    host = GROUPS.index(group) if host is None else host
    ext = {"brokerName": group, "brokerAddr": f"127.0.{host // 250}.{host % 250}:{10 + broker_id}",
           "clusterName": cluster, "haServerAddr": "h", "brokerId": str(broker_id)}
    if v5:
        ext.update({"enableActingMaster": rng.choice(["true", "false"]), "__ZONE_NAME": rng.choice(["z1", "z2"])})
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, opaque=counter, version=479 if v5 else 409)


def change(rng: random.Random, counter: int, v5: bool) -> RemotingCommand | None:
    """A registration, an unregistration (named under any cluster: a group may sit in two), a
    wipe or add of write perm; None: every broker times out."""
    group, cluster, broker_id = rng.choice(GROUPS), rng.choice(CLUSTERS), rng.choice([0, 0, 1, 2])
    op = rng.random()
    if op < 0.5:
        return register(group, cluster, broker_id, counter, v5, rng)
    if op < 0.85:
        return RemotingCommand.request(RequestCode.UNREGISTER_BROKER, {
            "brokerName": group, "brokerAddr": f"127.0.0.{GROUPS.index(group)}:{10 + broker_id}",
            "clusterName": cluster, "brokerId": str(broker_id)}, opaque=counter, version=409)
    if op < 0.95:
        code = rng.choice([RequestCode.WIPE_WRITE_PERM_OF_BROKER, RequestCode.ADD_WRITE_PERM_OF_BROKER])
        return RemotingCommand.request(code, {"brokerName": group}, opaque=counter, version=409)
    return None


def cycle_group_7(protocol, transport, cluster: str, rng: random.Random) -> None:
    """Three cycles of group-7 in ``cluster`` (unregistered, registered again), each followed by
    the cluster info asked for, whole: the 300 groups in it."""
    for counter in range(2, 5):
        protocol.dataReceived(RemotingCommand.request(RequestCode.UNREGISTER_BROKER, {
            "brokerName": "group-7", "brokerAddr": "127.0.0.7:10", "clusterName": cluster, "brokerId": "0"},
            version=479).encode())
        protocol.dataReceived(register("group-7", cluster, 0, counter, True, rng, 7).encode())
        transport.clear()
        send(protocol, RequestCode.GET_BROKER_CLUSTER_INFO)
        assert transport.value().count(b'"brokerName":"group-') == 300


@pytest.mark.parametrize("compat", ["4.9.8", "5.3.3"])
@pytest.mark.parametrize("seed", range(4))
def test_the_joined_cluster_info_is_the_tables_encoded_whole(tmp_path, compat: str, seed: int) -> None:
    """Against a server that keeps nothing (it encodes cluster_info_bean every time): groups come,
    go, move addresses, register under a second cluster, leave by name under another, lose write
    perm, time out; asked after a random number of changes, the bytes are the same."""
    rng = random.Random(seed)
    v5 = compat == "5.3.3"
    kept, kept_out, kept_clock = connection(tmp_path, "kept", compat, keep=True)
    reference, reference_out, reference_clock = connection(tmp_path, "reference", compat, keep=False)
    pieces = kept.factory.dispatcher.state.answers.cluster_info_pieces
    joined = 0  # asks answered while some group's entry was kept
    for counter in range(1, 400):
        request = change(rng, counter, v5)
        if request is None:
            for protocol, clock in ((kept, kept_clock), (reference, reference_clock)):
                clock.advance(200)
                protocol.factory.dispatcher.state.routes.scan_not_active_broker()
        else:
            for protocol in (kept, reference):
                protocol.dataReceived(request.encode())
        if rng.random() < 0.4:
            kept_out.clear()
            reference_out.clear()
            ask = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, opaque=counter, version=409).encode()
            joined += bool(pieces.brokers)
            for protocol in (kept, reference):
                protocol.dataReceived(ask)
            assert kept_out.value() == reference_out.value(), request
    assert joined > 20


def test_a_group_unregistered_and_registered_again_re_encodes_that_group_only(tmp_path, monkeypatch) -> None:
    """At 300 groups, a cycle of one group leaving, registering again and the cluster info asked
    encodes one BrokerData (it encoded all 300: at 20,000 groups about 2 million Python calls on the
    reactor's thread per cycle, which any peer that may register can repeat)."""
    protocol, transport, _ = connection(tmp_path, "one", "5.3.3", keep=True)
    rng = random.Random(1)
    for index in range(300):
        protocol.dataReceived(register(f"group-{index}", f"cluster-{index % 3}", 0, 1, True, rng, index).encode())
    send(protocol, RequestCode.GET_BROKER_CLUSTER_INFO)
    encoded = []
    bean = route.BrokerData.bean
    monkeypatch.setattr(route.BrokerData, "bean", lambda self, v5: encoded.append(self.brokerName) or bean(self, v5))
    cycle_group_7(protocol, transport, "cluster-1", rng)
    assert encoded == ["group-7"] * 3


def test_a_group_cycle_moves_it_in_the_kept_order_not_every_group(tmp_path, monkeypatch) -> None:
    """The ask after a cycle of one group (unregistered, registered again: it goes to the end of its
    bucket) ordered every group and every cluster again (a Python step a name, about half the ask at
    20,000 clusters); the order is kept now and the group moved in it: no ordering of the whole table."""
    from twisted_namesrv import cluster_info

    protocol, transport, _ = connection(tmp_path, "one", "5.3.3", keep=True)
    rng = random.Random(2)
    for index in range(300):
        protocol.dataReceived(register(f"group-{index}", f"cluster-{index}", 0, 1, True, rng, index).encode())
    send(protocol, RequestCode.GET_BROKER_CLUSTER_INFO)
    ordered: list[int] = []
    order = cluster_info.bucket_order
    monkeypatch.setattr(cluster_info, "bucket_order", lambda spreads, mask: ordered.append(len(spreads)) or
                        order(spreads, mask))
    cycle_group_7(protocol, transport, "cluster-7", rng)
    assert max(ordered, default=0) <= 1  # the cluster's one member, re-encoded; never the table's 300


@pytest.mark.parametrize("seed", range(6))
def test_the_kept_order_is_the_order_worked_out_whole_after_any_changes(seed: int) -> None:
    """cluster_info._Order against the order worked out whole (fastjson.bucket_order), after random
    removals, insertions, removals and insertions again (a dict's order: last), several at once or
    many (past MOVES_MAX), and the table's size changing."""
    from twisted_namesrv.cluster_info import _Order
    from twisted_namesrv.remoting.fastjson import bucket_order, java_spread, table_size

    rng = random.Random(seed)
    pool = [f"k{i}" for i in range(400)]
    names = {key: (java_spread(key), b"") for key in pool}
    table: dict[str, None] = dict.fromkeys(rng.sample(pool, 150))
    kept = _Order()
    for _ in range(300):
        for _ in range(rng.choice([0, 1, 1, 2, 5, 80])):
            key = rng.choice(pool)
            if key in table and rng.random() < 0.6:
                del table[key]
                if rng.random() < 0.5:
                    table[key] = None  # gone and back: last
            else:
                table[key] = None
        keys = list(table)
        size = table_size(len(keys), 16)
        whole = [keys[i] for i in bucket_order([names[key][0] for key in keys], size - 1)]
        assert kept.of(keys, names, size) == whole


@pytest.mark.parametrize("seed", range(3))
def test_the_kept_orders_join_the_tables_encoded_whole(tmp_path, monkeypatch, seed: int) -> None:
    """The test above with 120 groups in two clusters, every cluster's members in a kept order
    (KEPT_MEMBERS_MIN 8) and a few moves the most (MOVES_MAX 3): the orders kept, moved and worked
    out whole again give the bytes of the whole encoding."""
    from twisted_namesrv import cluster_info

    monkeypatch.setattr(cluster_info, "KEPT_MEMBERS_MIN", 8)
    monkeypatch.setattr(cluster_info, "MOVES_MAX", 3)
    monkeypatch.setattr(__import__(__name__, fromlist=["GROUPS"]), "GROUPS", [f"g{i}" for i in range(120)])
    monkeypatch.setattr(__import__(__name__, fromlist=["CLUSTERS"]), "CLUSTERS", ["c0", "c1"])
    test_the_joined_cluster_info_is_the_tables_encoded_whole(tmp_path, "5.3.3", seed)
