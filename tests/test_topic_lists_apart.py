"""Topic lists (GET_ALL_TOPIC_LIST_FROM_NAMESERVER, GET_TOPICS_BY_CLUSTER, the unit lists: mqadmin's
topicList, and any peer's without ACL) are ordered as Java's hash tables iterate and encoded: at
200k topics 1.8-5.0 s of the reactor's time for each GET_TOPICS_BY_CLUSTER (none was kept), 0.9-2.0 s
for a unit list, 5.9 s for the first GET_ALL_TOPIC_LIST (load 12), every lookup waiting meanwhile.
Now they are built in a thread (apart.py), ordered and encoded in pieces, kept until a topic changes."""

from __future__ import annotations

import random
import threading

import pytest
import pytest_twisted
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet import defer, reactor
from twisted.internet.task import deferLater

from tests.test_processor import Namesrv, body_json
from twisted_namesrv import processor
from twisted_namesrv.apart import Behind, BuildsApart
from twisted_namesrv.bodies import route
from twisted_namesrv.bodies.route import topic_list_body
from twisted_namesrv.context import Peer
from twisted_namesrv.remoting import RemotingCommand, RequestCode, ResponseCode, fastjson
from twisted_namesrv.remoting.fastjson import java_hash_order, table_size


def reference_body(topics: list[str], broker_addr: str | None, concurrent: bool) -> bytes:
    """TopicList as written before: topicQueueTable's order, then the set's, by java_hash_order, one dumps."""
    ordered = java_hash_order(topics, table_size(len(topics), 1024, concurrent))
    return fastjson.dumps_bytes({"brokerAddr": broker_addr, "topicList": java_hash_order(
        ordered, table_size(len(ordered), None, concurrent))})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=12), unique=True, max_size=300), st.booleans(),
       st.sampled_from([None, "10.0.0.1:10911"]), st.sampled_from([3, 64, 16384]))
def test_a_list_ordered_and_encoded_in_pieces_is_the_one_made_at_once(topics, concurrent, broker_addr, piece):
    original = route.ORDER_PIECE, fastjson.ORDER_PIECE
    route.ORDER_PIECE = fastjson.ORDER_PIECE = piece
    try:
        assert topic_list_body(topics, broker_addr, concurrent) == reference_body(topics, broker_addr, concurrent)
    finally:
        route.ORDER_PIECE, fastjson.ORDER_PIECE = original


@pytest.mark.parametrize("concurrent", [False, True])
def test_lists_past_a_tables_growth_are_ordered_alike(concurrent):
    """Around the sizes where the tables double (the order changes there), ordered in many pieces."""
    rng = random.Random(7)
    for size in (767, 768, 769, 1535, 1536, 1537, 3073, 40_000):
        topics = list(dict.fromkeys(f"T{rng.getrandbits(40):x}" for _ in range(size)))
        assert topic_list_body(topics, None, concurrent) == reference_body(topics, None, concurrent), size


def request(code: int, ext: dict | None = None) -> RemotingCommand:
    return RemotingCommand.decode(RemotingCommand.request(code, ext, opaque=1).encode()[4:])


def test_a_list_built_while_a_topic_changed_is_answered_but_not_kept(tmp_path):
    """It is built from the names of the turn it was asked in; a registration meanwhile makes it
    stale: answered (as Java answers from its read lock's moment), not kept for the next asker."""
    ns = Namesrv(tmp_path)
    ns.register(topics=("T1", "T2"))
    held: list[tuple[object, object]] = []

    def build_apart(key, build):
        held.append((defer.Deferred(), build()))  # begun at once, as a free BuildsApart does
        return held[-1][0]
    ns.state.build_apart = build_apart
    pending = processor.get_all_topic_list(ns.state, request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER),
                                           Peer(1, "127.0.0.1:40000"))
    ns.register(topics=("T1", "T2", "T3"))  # a topic more, while the list is built
    building, build = held.pop()
    building.callback(build())
    assert sorted(fastjson.loads(pending.result.body)["topicList"]) == ["T1", "T2"]
    ns.state.build_apart = lambda key, begin: defer.succeed(begin()())
    assert sorted(body_json(ns.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))["topicList"]) == ["T1", "T2", "T3"]
    built: list[object] = []
    ns.state.build_apart = lambda key, begin: built.append(key) or defer.succeed(begin()())
    for code in (RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, RequestCode.GET_UNIT_TOPIC_LIST):
        ns.call(code)
        ns.call(code)
    ns.call(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "c1"})
    ns.call(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "c1"})
    for name in ("unknown-1", "unknown-2"):  # nothing built nor kept per name asked
        assert body_json(ns.call(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": name})) == {"topicList": []}
    assert len(built) == 2 and ns.state.answers.kept_topics(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)


@pytest_twisted.inlineCallbacks
def test_builds_run_in_a_thread_one_at_a_time_and_asks_for_one_not_begun_share_it():
    apart = BuildsApart(reactor)
    ran: list[str] = []
    gate = threading.Event()
    running = threading.Lock()

    begun: list[str] = []

    def make(name: str):
        def begin():  # in the reactor's thread, when the build's turn comes
            assert threading.current_thread() is threading.main_thread()
            begun.append(name)
            return build

        def build() -> bytes:
            assert running.acquire(blocking=False), "two builds at once"
            try:
                ran.append(name)
                assert threading.current_thread() is not threading.main_thread()
                gate.wait(10)
                return name.encode()
            finally:
                running.release()
        return begin
    first, again = apart.build("a", make("a")), apart.build("a", make("a again"))
    other, joined = apart.build("b", make("b")), apart.build("a", make("a joined"))
    yield deferLater(reactor, 0.05)
    assert not first.called and ran == begun == ["a"]  # the reactor's thread goes on meanwhile
    gate.set()
    assert (yield first) == b"a" and (yield other) == b"b"
    assert (yield again) == (yield joined) == b"a again"  # one build, begun by the first ask waiting
    assert ran == begun == ["a", "a again", "b"]


@pytest_twisted.inlineCallbacks
def test_a_whole_list_waits_for_the_build_under_way_not_for_every_clusters():
    """Many connections each asking a different cluster's list (any peer that may register makes
    clusters) queued that many builds, and the whole list asked after them waited for them all;
    a cluster's list waits ``Behind``: the whole list begins next, the clusters' after it, in the
    order asked, and an ask for one already waiting still shares it."""
    apart = BuildsApart(reactor)
    gate = threading.Event()
    begun: list[object] = []

    def make(name: object):
        def begin():
            begun.append(name)
            return lambda: (gate.wait(10), str(name).encode())[1]
        return begin
    under_way = apart.build("all", make("all"))
    clusters = [apart.build(Behind(("cluster", index)), make(index)) for index in range(3)]
    shared = apart.build(Behind(("cluster", 1)), make("1 again"))
    whole = apart.build("all", make("all again"))
    assert apart.waiting() == ["all", *(Behind(("cluster", index)) for index in range(3))]
    gate.set()
    assert (yield under_way) == b"all" and (yield whole) == b"all again"
    assert (yield defer.gatherResults(clusters)) == [b"0", b"1", b"2"] and (yield shared) == b"1"
    assert begun == ["all", "all again", 0, 1, 2]


def test_a_clusters_list_is_built_behind_the_others(tmp_path):
    """GET_TOPICS_BY_CLUSTER asks for its build ``Behind``; the whole list and the unit lists do not."""
    ns = Namesrv(tmp_path)
    ns.register(cluster="c1", topics=("T1",))
    keys: list[object] = []

    def build_apart(key, begin):
        keys.append(key)
        return defer.succeed(begin()())
    ns.state.build_apart = build_apart
    ns.call(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "c1"})
    ns.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    ns.call(RequestCode.GET_UNIT_TOPIC_LIST)
    assert keys == [Behind((RequestCode.GET_TOPICS_BY_CLUSTER, "c1")), RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
                    RequestCode.GET_UNIT_TOPIC_LIST]


def held_builds(monkeypatch, builds: list[list[str]] | None = None) -> tuple[threading.Event, threading.Event]:
    """The server's topic lists built once the test sets ``release`` (``started``: one is under
    way), the names of each appended to ``builds``."""
    started, release = threading.Event(), threading.Event()
    body = processor.topic_list_body

    def slow_build(topics, broker_addr, concurrent):
        if builds is not None:
            builds.append(list(topics))
        started.set()
        release.wait(30)
        return body(topics, broker_addr, concurrent)
    monkeypatch.setattr(processor, "topic_list_body", slow_build)
    return started, release


@defer.inlineCallbacks
def whole_list_under_way(ns: Namesrv, peer: Peer, started: threading.Event):
    """An operator's whole topic list asked for, fired once its build (held: ``held_builds``) is
    under way: a list of its one answer's Deferred, for the asks a test makes behind it."""
    answers = [processor.get_all_topic_list(ns.state, request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER), peer)]
    while not started.is_set():
        yield deferLater(reactor, 0.01)
    return answers


@pytest_twisted.inlineCallbacks
def test_a_lookup_is_answered_while_a_topic_list_is_built(tmp_path, monkeypatch):
    from tests.support import connect, server_config, start_server

    started, release = held_builds(monkeypatch)
    service, port = yield from start_server(server_config(tmp_path))
    try:
        lister = yield connect(port)
        looker = yield connect(port)
        listed = lister.call(RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, opaque=1))
        while not started.is_set():
            yield deferLater(reactor, 0.01)
        lookup = yield looker.call(RemotingCommand.request(RequestCode.GET_KV_CONFIG, {
            "namespace": "NS", "key": "k"}, opaque=2))
        assert lookup.code == ResponseCode.QUERY_NOT_FOUND and not listed.called
        release.set()
        answer = yield listed
        assert answer.code == ResponseCode.SUCCESS and fastjson.loads(answer.body) == {"topicList": []}
    finally:
        release.set()
        yield service.stopService()


def test_a_kv_list_is_built_apart_and_kept_while_its_namespace_is_unchanged(tmp_path):
    """GET_KVLIST_BY_NAMESPACE of a table any peer may fill to maxKvBytes (8 MiB: 120k keys took the
    reactor 0.5-0.9 s an answer, each again): encoded in a thread, kept until the namespace changes."""
    ns = Namesrv(tmp_path)
    built: list[object] = []
    ns.state.build_apart = lambda key, begin: built.append(key) or defer.succeed(begin()())
    ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "k", "value": "v"})
    for _ in range(3):
        assert body_json(ns.call(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "NS"})) == {"table": {"k": "v"}}
    ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "k", "value": "w"})
    assert body_json(ns.call(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "NS"})) == {"table": {"k": "w"}}
    assert len(built) == 2
    assert ns.call(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "NONE"}).code == ResponseCode.QUERY_NOT_FOUND


@pytest_twisted.inlineCallbacks
def test_asks_in_new_generations_while_a_list_is_built_wait_for_one_build_not_one_each(tmp_path, monkeypatch):
    """Each ask took the names of its turn and waited its own build when a topic had changed since
    the one under way (a peer's ORDER_TOPIC_CONFIG put changes the generation): a peer asking,
    changing, asking... queued a build of every topic each time (seconds of CPU and the list of
    names each, held even once the peer went).  The asks meanwhile now share the next build, made
    of the newest ask's names."""
    ns = Namesrv(tmp_path)
    ns.register(topics=("T1", "T2"))
    ns.state.build_apart = BuildsApart(reactor).build
    builds: list[list[str]] = []
    started, release = held_builds(monkeypatch, builds)
    peer = Peer(1, "127.0.0.1:40000")
    ask = RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER
    try:
        answers = yield whole_list_under_way(ns, peer, started)
        for number in range(20):  # a topic changes, then the list is asked for again
            ns.register(topics=("T1", "T2", f"N{number}"))
            answers.append(processor.get_all_topic_list(ns.state, request(ask), peer))
    finally:
        release.set()
    made = yield defer.gatherResults(answers)
    assert len(builds) == 2, len(builds)
    assert "N19" in fastjson.loads(made[-1].body)["topicList"]  # the newest ask's names
    assert all(answer.code == ResponseCode.SUCCESS for answer in made)


@pytest_twisted.inlineCallbacks
def test_a_waiting_build_takes_the_names_when_it_begins_not_when_asked(tmp_path, monkeypatch):
    """Each ask copied every topic's name (8 MB at a million) and held the copy while its build
    waited, however long, even once its peer went: a peer with many clusters registered (any peer
    may register brokers without ACL), asking for each, held a copy a cluster.  A build now takes
    the names in the reactor's turn it begins in: a waiting one holds none, and answers with the
    topics registered while it waited."""
    ns = Namesrv(tmp_path)
    for number in range(5):
        ns.register(cluster=f"c{number}", addr=f"10.0.0.{number}:10911", name=f"broker-{number}",
                    topics=(f"T{number}", f"U{number}"), channel=number + 10)
    ns.state.build_apart = BuildsApart(reactor).build
    started, release = held_builds(monkeypatch)
    copies: list[int] = []
    all_topics = ns.routes.all_topics
    monkeypatch.setattr(ns.routes, "all_topics", lambda: copies.append(1) or all_topics())
    peer = Peer(1, "127.0.0.1:40000")
    try:
        answers = yield whole_list_under_way(ns, peer, started)
        copies.clear()
        answers += [processor.get_topics_by_cluster(ns.state, request(RequestCode.GET_TOPICS_BY_CLUSTER, {
            "cluster": f"c{number}"}), peer) for number in range(5)]
        assert copies == []  # the waiting builds hold no names
        ns.register(cluster="c0", addr="10.0.0.0:10911", name="broker-0", topics=("T0", "U0", "LATE"), channel=10)
    finally:
        release.set()
    made = yield defer.gatherResults(answers)
    assert sorted(fastjson.loads(made[1].body)["topicList"]) == ["LATE", "T0", "U0"]
    assert [sorted(fastjson.loads(answer.body)["topicList"]) for answer in made[2:]] == [
        [f"T{number}", f"U{number}"] for number in range(1, 5)]


def test_the_kept_cluster_lists_are_bounded_in_bytes(tmp_path, monkeypatch):
    """A topic list is kept per cluster asked for, and a peer that may register makes clusters: 200
    broker groups, each a cluster of its own, serving the same 2,000 topics named in 500 characters,
    and one GET_TOPICS_BY_CLUSTER of each, kept 200 MB of lists (``tools/memory_peak.py --attacks
    lists``).  Now the cluster lists hold at most MAX_CLUSTER_LISTS_BYTES together, starting over past
    it; every answer is still the tables' own, and the other lists are kept as before."""
    from twisted_namesrv import answer_cache

    monkeypatch.setattr(answer_cache, "MAX_CLUSTER_LISTS_BYTES", 20_000, raising=False)
    ns = Namesrv(tmp_path)
    ns.state.build_apart = lambda key, begin: defer.succeed(begin()())
    topics = tuple(f"{n:03d}".ljust(100, "t") for n in range(30))  # a list of about 3 KB
    for cluster in range(20):
        ns.register(cluster=f"c{cluster}", name=f"g{cluster}", addr=f"127.0.0.1:{10000 + cluster}", topics=topics)
    tables = ns.state.answers.tables

    def kept_cluster_bytes() -> int:
        return sum(len(body) for key, body in tables["topic"].items() if isinstance(key, tuple))

    assert sorted(body_json(ns.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))["topicList"]) == sorted(topics)
    for _ in range(2):
        for cluster in range(20):
            answer = ns.call(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": f"c{cluster}"})
            assert sorted(body_json(answer)["topicList"]) == sorted(topics)
            assert 0 < kept_cluster_bytes() <= 20_000
    assert ns.state.answers.started_over["cluster_lists"] > 0  # namesrv_kept_started_over_total
    assert ns.state.answers.kept_topics(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    monkeypatch.setattr(answer_cache, "MAX_CLUSTER_LISTS_BYTES", 1_000, raising=False)
    ns.register(cluster="c0", name="g0", addr="127.0.0.1:10000", topics=(*topics, "more"), version=(1, 2))
    assert not kept_cluster_bytes()
    assert len(body_json(ns.call(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "c0"}))["topicList"]) == 31
    assert not kept_cluster_bytes()  # bigger than the bound alone: answered, never kept


@pytest_twisted.inlineCallbacks
def test_asks_waiting_for_a_build_hold_room_in_the_memory_budget_and_past_it_are_refused(tmp_path, monkeypatch):
    """Each ask waiting behind a build holds its request, Deferreds and callbacks (about 2 KB;
    ``WAITER_BYTES``), and only the peers' connections bounded how many waited: at
    maxConnections' 10,000, each asking a cluster's list behind a long build and reading nothing,
    20-23 MB counted nowhere.  Each ask now takes WAITER_BYTES of the memory budget until answered or let go, and
    one the budget has no room for is answered SYSTEM_ERROR, a refusal (a line and a count)."""
    from twisted_namesrv.apart import WAITER_BYTES
    from twisted_namesrv.budget import MemoryBudget

    ns = Namesrv(tmp_path)
    for index in range(12):
        ns.register(cluster=f"c{index}", name=f"b{index}", addr=f"10.0.0.{index}:10911", topics=("T1",), channel=index)
    budget = MemoryBudget(10 * WAITER_BYTES)
    ns.state.build_apart = BuildsApart(reactor, budget).build
    started, release = held_builds(monkeypatch)
    peer = Peer(1, "127.0.0.1:40000")
    try:
        answers = yield whole_list_under_way(ns, peer, started)
        answers += [processor.get_topics_by_cluster(ns.state, request(RequestCode.GET_TOPICS_BY_CLUSTER,
                                                                      {"cluster": f"c{index}"}), peer)
                    for index in range(10)]
        assert budget.held == 10 * WAITER_BYTES  # the one under way and nine wait, the eleventh had no room
        assert ns.state.refusals.counts["remoting", "memory_budget"] == 1
        refused = yield answers[-1]
        assert refused.code == ResponseCode.SYSTEM_ERROR and "receiveMemoryBudget" in refused.remark
        assert budget.refused_inflations == 0  # not an inflation's
    finally:
        release.set()
    made = yield defer.gatherResults(answers[:-1])
    assert all(answer.code == ResponseCode.SUCCESS for answer in made)
    assert budget.held == 0  # every ask answered gave its room back


@pytest_twisted.inlineCallbacks
def test_a_scrape_is_made_when_the_memory_budget_has_no_room_for_other_asks():
    """Prometheus' scrapes (``Scrape``) take nothing from the memory budget: the HTTP port's own
    connection limit bounds them, they all join one build, and a scrape refused when the budget is
    full read as the server down (NamesrvDown, up 0) just when an operator needs its figures."""
    from twisted_namesrv.apart import NoRoom, Scrape
    from twisted_namesrv.budget import MemoryBudget

    budget = MemoryBudget(0)
    builds = BuildsApart(reactor, budget)
    refused = builds.build("topics", lambda: lambda: b"topics")
    with pytest.raises(NoRoom):
        yield refused
    made = yield builds.build(Scrape("metrics"), lambda: lambda: b"# metrics")
    assert made == b"# metrics"
    assert budget.held == 0 and builds.asks == 0 and builds.refused == 1


def test_metrics_page_asks_as_a_scrape():
    """The /metrics page is the one HTTP document asked for as a ``Scrape``."""
    from twisted.web.test.requesthelper import DummyRequest

    from twisted_namesrv.apart import Scrape
    from twisted_namesrv.web.site import MetricsPage

    asked: list[object] = []
    page = MetricsPage.__new__(MetricsPage)
    page.build_apart = lambda key, begin: (asked.append(key), defer.succeed(b""))[1]
    page.refusals = None
    page.render_GET(DummyRequest([b"metrics"]))
    assert asked == [Scrape("metrics")]
