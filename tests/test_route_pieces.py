"""Route bodies joined of kept pieces (route_pieces.py), the group order's remembered hashes
(RouteInfoManager.group_order) and GET_SYSTEM_TOPIC_LIST_FROM_NS kept until a group changes.

What a peer that may register (any peer without ACL) could make every lookup cost is counted in
encoder calls and name hashes, not timed: a cycle of one group (unregister, register, look up) on
a topic served by N groups encoded the whole route, about 20 encoder calls and one name hash a
group; a lookup filtered by zone (any client's ``__ZONE_MODE``, never kept whole) did so with no
change at all; the system topic list hashed every cluster and group name at every ask.  The bytes
are held to the whole encoding here on generated routes, and through the dispatcher by the
differential tests of tests/test_answer_cache.py."""

from __future__ import annotations

import functools
import random

import pytest
from twisted.internet.testing import StringTransport

from tests import built
from tests.support import python_calls_run
from tests.test_processor import Namesrv
from twisted_namesrv import processor, route_pieces, zone_routes
from twisted_namesrv.bodies.route import BrokerData, QueueData, topic_list_body, topic_route_bean
from twisted_namesrv.remoting import RemotingCommand, RequestCode, fastjson
from twisted_namesrv.remoting.codes import V5_3_3
from twisted_namesrv.route_pieces import RoutePieces

GROUPS = 300

#: texts a name may hold: JSON's specials, what the body's join looks for, non-ASCII, a lone surrogate
ODD = ['"queueDatas":[]', '"', "\\", "/", "é", "\u2028", "\x1b[2J", chr(0xD800), "日本", "\U0001f600", ""]


def odd_name(rng: random.Random) -> str:
    return "".join(rng.choice(ODD + ["a", "b", "-"]) for _ in range(rng.randint(0, 6)))


def random_route(rng: random.Random) -> tuple[list[QueueData], list[BrokerData], dict, str | None, dict | None]:
    names = [f"g{i}{odd_name(rng)}" for i in range(rng.randint(0, 6))]
    brokers = [BrokerData(odd_name(rng), name,
                          {rng.choice([0, 1, 2, 2**40, 2**60, -1]): odd_name(rng) for _ in range(rng.randint(0, 3))},
                          rng.choice([None, "z1", odd_name(rng)]), rng.choice([True, False])) for name in names]
    queues = [QueueData(name, rng.randint(0, 16), rng.randint(0, 16), rng.choice([2, 4, 6]), rng.randint(0, 3))
              for name in names]
    filters = {odd_name(rng): [odd_name(rng)] for _ in range(rng.randint(0, 2))}
    conf = rng.choice([None, "a:4;b:4", odd_name(rng)])
    mapping = rng.choice([None, {}, {odd_name(rng): {"bname": odd_name(rng), "epoch": 3, "currIdMap": {0: 1}}}])
    return queues, brokers, filters, conf, mapping


@pytest.mark.parametrize("seed", range(40))
def test_the_pieces_join_to_the_whole_encoding(seed: int) -> None:
    rng = random.Random(seed)
    pieces = RoutePieces()
    for _ in range(30):
        queues, brokers, filters, conf, mapping = random_route(rng)
        for v5 in (False, True):
            for standard in (False, True):
                whole = fastjson.dumps_bytes(topic_route_bean(queues, brokers, filters, conf, mapping, v5), standard)
                for _ in range(2):  # encoded, then joined of the kept pieces
                    assert pieces.body(queues, brokers, filters, conf, mapping, v5, standard, 10) == whole


def test_the_pieces_start_over_past_their_bounds(monkeypatch) -> None:
    rng = random.Random(1)
    pieces = RoutePieces()
    for _ in range(50):
        queues, brokers, filters, conf, mapping = random_route(rng)
        pieces.body(queues, brokers, filters, conf, mapping, True, True, 0)
    assert len(pieces._pieces) <= route_pieces.SPARE_PIECES + 12
    monkeypatch.setattr(route_pieces, "PIECES_MAX_BYTES", 1000)
    for _ in range(50):
        queues, brokers, filters, conf, mapping = random_route(rng)
        pieces.body(queues, brokers, filters, conf, mapping, True, True, 0)
        assert pieces.bytes <= 1000 + 12 * (2 * 400 + route_pieces.KEY_BYTES)
    assert pieces.started_over > 0


def many_groups(tmp_path, zone: str | None = None) -> Namesrv:
    ns = Namesrv(tmp_path, "5.3.3")
    extra = {"__ZONE_NAME": zone} if zone else None
    for group in range(GROUPS):
        ns.register(cluster=f"c{group}", name=f"g{group}-{'x' * 100}", addr=f"10.0.{group // 250}.{group % 250}:10911",
                    topics=("T", f"U{group}"), channel=group, extra=extra)
    return ns


class Counted:
    """Calls of fastjson's encoder (one a value written) and of its name hash, while counting."""

    def __init__(self, monkeypatch) -> None:
        self.writes = self.hashes = 0
        write, ascii_hash = fastjson._write, fastjson._ascii_hash

        def counted_write(*args):
            self.writes += 1
            return write(*args)

        def counted_hash(data):
            self.hashes += 1
            return ascii_hash(data)

        monkeypatch.setattr(fastjson, "_write", counted_write)
        monkeypatch.setattr(fastjson, "_ascii_hash", counted_hash)

    def reset(self) -> None:
        self.writes = self.hashes = 0


def cycle(ns: Namesrv, counter: int) -> None:
    name, addr = f"g5-{'x' * 100}", "10.0.0.5:10911"
    ns.call(RequestCode.UNREGISTER_BROKER, {"brokerName": name, "brokerAddr": addr, "clusterName": "c5",
                                            "brokerId": "0"})
    ns.register(cluster="c5", name=name, addr=addr, topics=("T", "U5"), channel=5, version=(1, counter))


@pytest.mark.parametrize("standard", ["true", "false"])
def test_a_lookup_after_one_groups_change_encodes_that_group_not_the_route(tmp_path, monkeypatch, standard) -> None:
    """Before: 6,612 encoder calls for the lookup after a cycle at 300 groups."""
    ns = many_groups(tmp_path)
    lookup = {"topic": "T", "acceptStandardJsonOnly": standard}
    ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, lookup)
    counted = Counted(monkeypatch)
    for counter in range(2, 5):
        cycle(ns, counter)
        counted.reset()
        answer = ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, lookup)
        assert len(fastjson.loads(answer.body)["brokerDatas"]) == GROUPS
        assert counted.writes < 60, counted.writes
        assert counted.hashes <= 2, counted.hashes


@pytest.mark.parametrize("zone", ["Z", "elsewhere"])
def test_a_lookup_filtered_by_zone_again_encodes_nothing_anew(tmp_path, monkeypatch, zone: str) -> None:
    """A zone's route asked without the cache's frame path (each ask here is decoded and handled,
    not kept): joined of kept pieces.  Before the pieces: 6,914 encoder calls a lookup of the zone
    every group is in, and 300 name hashes one of a zone none is in, every time."""
    ns = many_groups(tmp_path, zone="Z")
    lookup = {"topic": "T", "__ZONE_MODE": "true", "__ZONE_NAME": zone}
    first = ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, lookup).body
    assert len(fastjson.loads(first)["brokerDatas"]) == (GROUPS if zone == "Z" else 0)
    counted = Counted(monkeypatch)
    for _ in range(3):
        counted.reset()
        assert ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, lookup).body == first
        assert counted.writes < 60, counted.writes
        assert counted.hashes == 0, counted.hashes


def lookup_frame(ext: dict, opaque: int) -> bytes:
    return RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext, opaque=opaque, version=V5_3_3).encode()


@pytest.mark.parametrize("zone", ["Z", "elsewhere"])
def test_a_zone_lookup_repeated_costs_what_a_plain_kept_lookup_costs(tmp_path, monkeypatch, zone: str) -> None:
    """A lookup filtered by zone is kept as a variant of its topic's route: asked again with no
    change between, it neither picks the route up nor filters nor joins it, and costs the Python
    calls a plain kept lookup costs.  Before (never kept): each one walked every group, 10,000+
    calls at 300 groups; after a group's change it is built again, as a plain one is."""
    ns = many_groups(tmp_path, zone="Z")
    protocol = built.factory(ns.dispatcher, ns.clock, 1 << 24, 0).buildProtocol(None)
    transport = StringTransport()
    protocol.makeConnection(transport)
    picked = []
    pickup = ns.routes.pickup_topic_route_data
    monkeypatch.setattr(ns.routes, "pickup_topic_route_data", lambda topic: picked.append(topic) or pickup(topic))

    def asked(ext: dict, opaque: int) -> tuple[int, bytes]:
        transport.clear()
        picked.clear()
        calls = python_calls_run(functools.partial(protocol.dataReceived, lookup_frame(ext, opaque)))
        return calls, transport.value()

    zoned, plain = {"topic": "T", "__ZONE_MODE": "true", "__ZONE_NAME": zone}, {"topic": "T"}
    asked(plain, 1)
    zones = ns.state.answers.zone_routes
    first_calls, first = asked(zoned, 2)
    assert (picked, zones.visits) == ([], GROUPS)  # each group patched in once (zone_routes.py)
    assert len(fastjson.loads(RemotingCommand.decode(first[4:]).body)["brokerDatas"]) == (GROUPS if zone == "Z" else 0)
    for opaque in (3, 4):
        plain_calls = asked(plain, 10 + opaque)[0]
        zoned_calls, again = asked(zoned, opaque)
        assert again == first.replace(b'"opaque":2', b'"opaque":%d' % opaque)
        assert picked == []
        assert zoned_calls <= plain_calls + 5, (zoned_calls, plain_calls, first_calls)
    cycle(ns, 2)  # a group's change drops the zone's route with the topic's others (g5 now in no zone)
    after = fastjson.loads(RemotingCommand.decode(asked(zoned, 5)[1][4:]).body)["brokerDatas"]
    assert (picked, zones.visits) == ([], GROUPS + 1)  # that group patched, no other
    assert len(after) == (GROUPS - 1 if zone == "Z" else 0)


def whole_zone_body(ns: Namesrv, zone: str) -> bytes:
    """The route of T filtered by ``zone``, picked up, filtered and encoded whole (the general path)."""
    route = processor.filter_by_zone(ns.routes.pickup_topic_route_data("T"), zone)
    return fastjson.dumps_bytes(topic_route_bean(route.queueDatas, route.brokerDatas, route.filterServerTable,
                                                 None, route.topicQueueMappingByBroker, True), False)


def test_the_first_zone_lookup_after_a_change_patches_the_groups_it_changed(tmp_path) -> None:
    """A lookup filtered by zone after one group's change picked the whole route up, filtered and
    joined it (about 8 Python calls a group: 2,400+ at 300 groups, 160,000 at 20,000); now the kept
    zone route is patched by that group (a member joining, its zone, its queues' permissions, a new
    group, a group's cycle): one visit each, and the body is the whole route's, filtered."""
    ns = many_groups(tmp_path, zone="Z")
    zones = ns.state.answers.zone_routes
    name = f"g{{}}-{'x' * 100}".format

    def zoned(zone: str = "Z") -> tuple[int, bytes]:
        answers = []
        calls = python_calls_run(lambda: answers.append(ns.call(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T", "__ZONE_MODE": "true", "__ZONE_NAME": zone})))
        assert answers[0].body == whole_zone_body(ns, zone)
        return calls, answers[0].body

    zoned()
    zoned("elsewhere")
    assert zones.visits == 2 * GROUPS
    changes = [
        lambda: ns.register(cluster="c7", name=name(7), addr="10.9.9.7:10911", broker_id=1, topics=("T", "S"),
                            channel="slave", extra={"__ZONE_NAME": "Z"}),
        lambda: ns.register(cluster="c8", name=name(8), addr="10.0.0.8:10911", topics=("T", "U8"), channel=8,
                            version=(1, 2), extra={"__ZONE_NAME": "Y"}),  # its zone: out of Z's route
        lambda: ns.call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": name(9)}),  # its QueueData replaced
        lambda: ns.register(cluster="cn", name="new", addr="10.9.9.9:10911", topics=("T", "S"), channel="new",
                            extra={"__ZONE_NAME": "Z"}),  # a group comes: the order is worked out again
        lambda: cycle(ns, 2),
    ]
    for change in changes:
        change()
        visits = zones.visits
        calls, body = zoned()
        assert zones.visits - visits == 1 and calls < 200, (zones.visits - visits, calls)
        zoned("elsewhere")
    assert name(8).encode() not in body and b'"new"' in body


def test_the_zones_kept_are_bounded_and_go_with_the_route_pieces(tmp_path, monkeypatch) -> None:
    """Each zone a peer names keeps the topic's groups once more: past twice the tables' groups (and
    SPARE_ENTRIES) they start over, counted, and the lookups answer as before; and they go when the
    route pieces start over, whose pieces they hold."""
    monkeypatch.setattr(zone_routes, "SPARE_ENTRIES", 0)
    ns = many_groups(tmp_path, zone="Z")
    answers = ns.state.answers

    def zoned(zone: str) -> bytes:
        return ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T", "__ZONE_MODE": "true",
                                                            "__ZONE_NAME": zone}).body

    first = zoned("Z")
    for zone in ("a", "b", "c", "d"):
        zoned(zone)
    assert answers.started_over["zone_routes"] == 2 and answers.zone_routes.entries <= 2 * GROUPS  # 3rd, 5th
    assert first == whole_zone_body(ns, "Z")
    cycle(ns, 2)
    cycle(ns, 3)
    assert zoned("Z") == whole_zone_body(ns, "Z")
    answers.route_pieces.clear()
    answers.route_pieces.started_over += 1
    assert zoned("a") == whole_zone_body(ns, "a")
    assert answers.zone_routes.entries == GROUPS  # the others went
    assert zoned("Z") == whole_zone_body(ns, "Z")


def test_the_system_topic_list_is_kept_until_a_group_changes(tmp_path, monkeypatch) -> None:
    """Before: 900 name hashes and 606 encoder calls at every ask, with nothing changed."""
    ns = many_groups(tmp_path)
    first = ns.call(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS).body
    counted = Counted(monkeypatch)
    for _ in range(3):
        assert ns.call(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS).body == first
    assert (counted.writes, counted.hashes) == (0, 0)
    ns.call(RequestCode.UNREGISTER_BROKER, {"brokerName": f"g7-{'x' * 100}", "brokerAddr": "10.0.0.7:10911",
                                            "clusterName": "c7", "brokerId": "0"})
    after = fastjson.loads(ns.call(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS).body)["topicList"]
    assert f"g7-{'x' * 100}" not in after and "c7" not in after and len(after) == 2 * GROUPS - 2


def test_the_system_topic_list_is_built_again_only_when_what_it_shows_changed(tmp_path, monkeypatch) -> None:
    """It shows every cluster and group name and one group's first address (Java's getSystemTopicList,
    4.9.8 and 5.3.3): a member joining or leaving another group, or a group's zone changing, leaves it
    as it was.  Before: kept as a broker table, dropped at every group's change, and the next ask
    hashed every name again (900 name hashes at 300 groups), a peer's registration and an ask in a loop."""
    ns = many_groups(tmp_path)
    answers, routes = ns.state.answers, ns.routes

    hashed = []

    def asked() -> bytes:
        before = counted.hashes if counted is not None else 0
        body = ns.call(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS).body
        hashed.append((counted.hashes - before) if counted is not None else None)
        topics, addr = routes.system_topic_list()
        assert body == topic_list_body(topics, addr, True)  # what a server keeping nothing answers
        return body

    counted = None

    first = asked()
    shown = routes.system_topic_list_shown()[2].first
    other = next(group for group in range(GROUPS) if f"g{group}-{'x' * 100}" != shown)
    name, cluster = f"g{other}-{'x' * 100}", f"c{other}"
    counted, builds = Counted(monkeypatch), answers.system_topic_list_builds
    assert ns.register(cluster=cluster, name=name, addr="10.9.9.9:10911", broker_id=1, topics=("T", "S"),
                       channel="slave").code == 0
    assert routes.brokerAddrTable[name].brokerAddrs[1] == "10.9.9.9:10911"
    assert asked() == first
    ns.register(cluster=cluster, name=name, addr="10.9.9.9:10911", broker_id=1, topics=("T", "S"), channel="slave",
                version=(1, 2), extra={"__ZONE_NAME": "Z", "enableActingMaster": "true"})  # its group's zone
    assert asked() == first
    ns.call(RequestCode.UNREGISTER_BROKER, {"brokerName": name, "brokerAddr": "10.9.9.9:10911",
                                            "clusterName": cluster, "brokerId": "1"})
    assert asked() == first
    assert (hashed[1:], answers.system_topic_list_builds - builds) == ([0, 0, 0], 0)
    # the group it shows an address of, a new group, a group leaving: built again
    ns.register(cluster="c0", name=shown, addr="10.9.9.8:10911", broker_id=1, topics=("T", "S"), channel="slave2")
    asked()
    ns.register(cluster="new", name="new-group", addr="10.9.9.7:10911", topics=("T", "S"), channel="new")
    assert b'"new-group"' in asked()
    cycle(ns, 2)
    asked()
    assert answers.system_topic_list_builds - builds == 3


def test_a_config_update_encodes_no_group_again(tmp_path, monkeypatch) -> None:
    """Any peer's UPDATE_NAMESRV_CONFIG (without ACL) lets every kept answer go; the pieces the
    cluster info and the routes are joined of show the tables only, and stay.  Before: 3,610
    encoder calls and 600 name hashes for the cluster info asked after an update, at 300 groups."""
    ns = many_groups(tmp_path)
    ns.call(RequestCode.GET_BROKER_CLUSTER_INFO)
    ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
    counted = Counted(monkeypatch)
    for value in (b"true", b"false", b"true"):
        assert ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=" + value).code == 0
        counted.reset()
        info = fastjson.loads(ns.call(RequestCode.GET_BROKER_CLUSTER_INFO).body)
        route = fastjson.loads(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}).body)
        assert len(info["brokerAddrTable"]) == len(route["brokerDatas"]) == GROUPS
        assert counted.writes < 60 and counted.hashes <= 2, (counted.writes, counted.hashes)
