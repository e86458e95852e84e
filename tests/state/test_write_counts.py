"""The write bit's counts the routes keep per broker group (RouteInfoManager.writableOfGroup,
sealedOfGroup: what outages.py and a /metrics scrape read) equal a walk of topicQueueTable after any
sequence of changes: registrations (alike tables and mixed ones, in steps or in one go, plans gone
stale, 5.x prime slaves writing read-only, deleteTopicWithBrokerRegistration), unregistrations,
closed connections, expiry, wipe and add of write permission, topic deletions and REGISTER_TOPIC; and
between the steps of what is still to be written (a wipe's walk of a big table takes many turns, and a
scrape reads them at any of those), equal to what lookups read then."""

from __future__ import annotations

import random
import sys
from collections.abc import Iterable, Mapping
from itertools import islice

import pytest

from tests.state.test_routes import V4, V5, body, manager, topic
from twisted_namesrv.bodies.register import RegistrationRefused
from twisted_namesrv.bodies.route import PERM_WRITE, QueueData
from twisted_namesrv.state import registration
from twisted_namesrv.state.registration import SYNC_BROKER_MEMBER_GROUP_PREFIX, write_off_by_design
from twisted_namesrv.state.routes import RegisterRequest, RouteInfoManager
from twisted_namesrv.steps import run_steps

GROUPS = ["g0", "g1", "g2"]
CLUSTERS = ["c1", "c2"]
#: application topics, the groups' and clusters' named topics, and member-sync topics
TOPICS = [f"T{i}" for i in range(10)] + GROUPS + CLUSTERS + [SYNC_BROKER_MEMBER_GROUP_PREFIX + g for g in GROUPS]
PERMS = [6, 6, 6, 4, 2, 1, 7]


def walked(routes: RouteInfoManager) -> tuple[dict[str, int], dict[str, int]]:
    """The counts as the scrape walked them (outages.HealthWatch.queue_perms before they were kept)."""
    return counted(routes, routes.topicQueueTable.items())


def counted(routes: RouteInfoManager, table: Iterable[tuple[str, Mapping[str, QueueData]]]
            ) -> tuple[dict[str, int], dict[str, int]]:
    """Each group's topics with the write bit, and those without it by design, in ``table``'s entries."""
    writable: dict[str, int] = {}
    sealed: dict[str, int] = {}
    brokers = routes.brokerAddrTable
    for name_topic, queues in table:
        for name, queue in queues.items():
            if queue.perm & PERM_WRITE:
                writable[name] = writable.get(name, 0) + 1
            else:
                broker = brokers.get(name)
                if write_off_by_design(name_topic, None if broker is None else broker.cluster, name):
                    sealed[name] = sealed.get(name, 0) + 1
    return writable, sealed


def request(rng: random.Random, counter: int, own_sync_only: bool = False) -> RegisterRequest:
    """A registration of random topics; ``own_sync_only``: of the member-sync topics, only the group's own
    (as Java's brokers write them: another group's is no broker's)."""
    name = rng.choice(GROUPS)
    broker_id = rng.choice([0, 0, 1, 2])
    addr = f"10.0.{GROUPS.index(name)}.{broker_id}:10911"
    alike = rng.random() < 0.3
    perm = rng.choice(PERMS)
    chosen = rng.sample(TOPICS, rng.randrange(2, len(TOPICS)))
    if own_sync_only:
        chosen = list(dict.fromkeys(own_sync(t, name) for t in chosen))
        chosen += [t for t in ("T0", "T1") if t not in chosen][:max(0, 2 - len(chosen))]
    configs = [topic(t, perm if alike else rng.choice(PERMS)) for t in chosen]
    return RegisterRequest(rng.choice(CLUSTERS) if rng.random() < 0.2 else "c1", addr, name, broker_id, None,
                           body(*configs, version=(1, counter if rng.random() < 0.7 else 1)), channel=addr,
                           enableActingMaster=rng.choice([None, True, False]))


def own_sync(topic_name: str, group: str) -> str:
    """``topic_name``, or ``group``'s member-sync topic in place of another group's."""
    prefix = SYNC_BROKER_MEMBER_GROUP_PREFIX
    return prefix + group if topic_name.startswith(prefix) else topic_name


def planned(routes: RouteInfoManager, req: RegisterRequest) -> registration.RegistrationPlan:
    return run_steps(registration.plan_steps(req, routes))


@pytest.mark.parametrize("seed", range(8))
def test_the_kept_write_counts_equal_a_walk_after_any_sequence_of_changes(seed, monkeypatch):
    counts_equal_a_walk(seed, monkeypatch)


@pytest.mark.parametrize("seed", range(4))
def test_which_topics_lack_the_write_bit_by_design_is_said_in_one_place(seed, monkeypatch):
    """Whatever registration.written_off_by_design says, every count follows it: staging one by one,
    alike slices in C, removals, and the routes' own changes (the loop had the rule inline twice)."""
    def another_rule(topics: list[str], cluster: str | None, broker_name: str | None) -> int:
        return sum(topic in ("T1", "T2", cluster) for topic in topics)
    monkeypatch.setattr(registration, "written_off_by_design", another_rule, raising=False)
    monkeypatch.setattr(sys.modules[__name__], "write_off_by_design",  # the walk reads it without the code
                        lambda topic, cluster=None, broker_name=None: another_rule([topic], cluster, broker_name) > 0)
    counts_equal_a_walk(seed, monkeypatch)


@pytest.mark.parametrize("seed", range(8))
def test_the_kept_write_counts_equal_what_lookups_read_between_the_steps_of_walks(seed, monkeypatch):
    """The same sequences with the layers left pending (a few steps written after each change, walks
    overlapping): what outages.py reads at any scrape is what lookups read then, not once settled."""
    counts_equal_a_walk(seed, monkeypatch, between=True)


def counts_equal_a_walk(seed: int, monkeypatch, between: bool = False) -> None:
    rng = random.Random(seed)
    monkeypatch.setattr(registration, "TOPICS_PER_STEP", 4)  # plans made in steps
    monkeypatch.setattr(registration, "ALIKE_AT_LEAST", 3)  # alike slices staged in C
    routes, clock = manager([V4, V5][seed % 2], deleteTopicWithBrokerRegistration=seed // 2 % 2 == 1,
                            supportActingMaster=seed // 4 % 2 == 1)
    routes.write_at_once = rng.choice([0, 3, 1000])  # staged entries left as layers, or written at once
    stale: registration.RegistrationPlan | None = None
    for counter in range(1, 400):
        action = rng.randrange(12)
        name, addr = rng.choice(GROUPS), f"10.0.{rng.randrange(3)}.{rng.choice([0, 1, 2])}:10911"
        if action <= 3:
            req = request(rng, counter, between)
            if rng.random() < 0.5:
                routes.apply_registration(planned(routes, req))
            else:
                routes.register_broker(req)
        elif action == 4:  # a plan made now, applied after the next change (stale, worked out again)
            if stale is not None:
                routes.apply_registration(stale)
            stale = planned(routes, request(rng, counter, between))
        elif action == 5:
            routes.unregister_broker("c1", addr, name, rng.choice([0, 1, 2]))
        elif action == 6:
            routes.on_channels_destroy({addr: "connection closed", f"10.0.{rng.randrange(3)}.0:10911": "closed"})
        elif action == 7:
            clock.advance(rng.choice([1, 60, 130]))
            routes.scan_not_active_broker()
        elif action == 8:
            (routes.wipe_write_perm_of_broker if rng.random() < 0.5 else routes.add_write_perm_of_broker)(name)
        elif action == 9:
            routes.delete_topic(rng.choice(TOPICS), rng.choice([None, "c1", "c2"]))
        elif action == 10:
            registered = rng.choice(TOPICS)
            queues = [QueueData(rng.choice([*GROUPS, "unknown"]), 4, 4, rng.choice(PERMS), 0)
                      for _ in range(rng.randrange(1, 3))]
            if between and registered.startswith(SYNC_BROKER_MEMBER_GROUP_PREFIX):
                queues = [q for q in queues if own_sync(registered, q.brokerName) == registered] or queues[:0]
            try:
                routes.register_topic(registered, queues)
            except RegistrationRefused:
                pass
        else:
            routes.restore((dict(routes.topicQueueTable.items()), routes.brokerAddrTable, routes.clusterAddrTable,
                            routes.brokerLiveTable, routes.filterServerTable, routes.topicQueueMappingInfoTable))
        if between:  # a few steps of what is pending, no more: the scrape reads between them
            for _ in islice(routes.settle_steps(), rng.randrange(3)):
                pass
            assert (dict(routes.writableOfGroup), dict(routes.sealedOfGroup)) == viewed(routes), (seed, counter, action)
            continue
        writable = dict(routes.writableOfGroup)  # exact from the commit on
        walk = walked(routes)  # writes the pending layers
        assert (writable, dict(routes.sealedOfGroup)) == walk, (seed, counter, action)


# --- read between the steps of a wipe's walk (settling.PermChanged): what outages.py reads then -------------

def viewed(routes: RouteInfoManager) -> tuple[dict[str, int], dict[str, int]]:
    """The counts a walk of the table as lookups read it (through the layers still to write) gives."""
    topics = dict.fromkeys([*routes._table, *(t for layer in routes._layers for t in getattr(layer, "staged", ()))])
    return counted(routes, ((name_topic, routes.queues_of(name_topic) or {}) for name_topic in topics))


def walk_steps(routes: RouteInfoManager) -> int:
    """The pending layers written a step at a time, the counts compared with what lookups read at each."""
    steps = 0
    for _ in routes.settle_steps():
        steps += 1
        assert (dict(routes.writableOfGroup), dict(routes.sealedOfGroup)) == viewed(routes), steps
    assert (dict(routes.writableOfGroup), dict(routes.sealedOfGroup)) == walked(routes)
    return steps


def big_group(routes: RouteInfoManager, name: str, addr: str, perm: int = 6, topics: int = 3 * 4096) -> None:
    """A 5.x group of many topics, its member-sync topic and its own-named topic written with the write bit."""
    configs = [topic(f"{name}-T{i}") for i in range(topics)]
    configs += [topic(SYNC_BROKER_MEMBER_GROUP_PREFIX + name, perm), topic(name, perm), topic("c1", perm)]
    routes.register_broker(RegisterRequest("c1", addr, name, 0, None, body(*configs), channel=addr))
    routes.settle_now()


@pytest.mark.parametrize("then", ["nothing", "add", "wipe again", "register"])
def test_the_counts_equal_what_lookups_read_at_every_step_of_a_wipes_walk(then):
    """A wipe of a group of 12k topics is walked in steps (WALK_PER_STEP): the sealed-by-design count
    lagged until the walk met the group's own-named and member-sync topics (its topics over-counted
    meanwhile), and an add made during the walk left it over-counted for good (the walk counted the
    entries the add then gave the write bit back)."""
    routes, _ = manager(V5)
    routes.write_at_once = 0  # every change a layer, walked in steps
    big_group(routes, "g0", "10.0.0.0:10911")
    big_group(routes, "g1", "10.0.1.0:10911")
    routes.wipe_write_perm_of_broker("g0")
    assert routes.settling
    assert (dict(routes.writableOfGroup), dict(routes.sealedOfGroup)) == viewed(routes)  # at the commit
    next(iter(routes.settle_steps()))  # a step in
    if then == "add":
        routes.add_write_perm_of_broker("g0")
    elif then == "wipe again":
        routes.wipe_write_perm_of_broker("g0")
    elif then == "register":  # the broker's next registration gives its topics their write bit back
        configs = [topic(f"g0-T{i}") for i in range(3 * 4096)]
        configs += [topic(SYNC_BROKER_MEMBER_GROUP_PREFIX + "g0"), topic("g0"), topic("c1")]
        routes.register_broker(RegisterRequest("c1", "10.0.0.0:10911", "g0", 0, None, body(*configs, version=(2, 2)),
                                               channel="10.0.0.0:10911"))
    assert (dict(routes.writableOfGroup), dict(routes.sealedOfGroup)) == viewed(routes)
    assert walk_steps(routes) > 2
