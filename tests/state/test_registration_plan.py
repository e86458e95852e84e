"""A registration as a plan (state/registration.py): compared with topicQueueTable and its new
entries staged in steps, then applied by RouteInfoManager.apply_registration in one place; a plan
made stale by a change in between applies as a registration in one go after that change would."""

from __future__ import annotations

import functools

import pytest

from tests.support import server_lines_run
from twisted_namesrv.bodies.register import TopicConfig
from twisted_namesrv.bodies.route import QueueData
from twisted_namesrv.state import registration
from twisted_namesrv.state.queue_table import TopicQueueTable
from twisted_namesrv.state.registration import RegisterRequest, plan_steps
from twisted_namesrv.state.routes import RouteInfoManager
from twisted_namesrv.steps import run_steps

from .test_routes import MASTER_A, V4, V5, body, manager, register, topic


def request(*topics, version=(1, 2)) -> RegisterRequest:
    return RegisterRequest("c1", MASTER_A, "broker-a", 0, None, body(*topics, version=version))


def plan_for(routes: RouteInfoManager, req: RegisterRequest):
    return plan_steps(req, routes)


def test_the_plan_lists_what_changes_and_the_tables_change_only_when_it_applies(monkeypatch):
    monkeypatch.setattr(registration, "TOPICS_PER_STEP", 2)
    routes, _ = manager(V5, deleteTopicWithBrokerRegistration=True)
    register(routes, topics=("T1", "T2", "T3", "T4"))
    before = {t: dict(q) for t, q in routes.topicQueueTable.items()}
    steps = plan_for(routes, request("T1", topic("T2", perm=4), "T4", "T5", "T6"))
    turns = 0
    try:
        while True:
            next(steps)
            turns += 1
            assert routes.topicQueueTable == before  # nothing applied while in steps
    except StopIteration as done:
        plan = done.value
    assert turns >= 4  # five topics, two per step, then the removals' walk
    assert {t: q and q.brokerName for t, q in plan.staging.staged.items()} == {
        "T2": "broker-a", "T5": "broker-a", "T6": "broker-a", "T3": None}  # the group leaves T3
    assert plan.staging.staged["T2"].perm == 4 and routes.topicQueueTable["T2"]["broker-a"].perm != 4
    assert plan.topicCount == 5
    assert routes.apply_registration(plan) is not None
    assert sorted(routes.topicQueueTable) == ["T1", "T2", "T4", "T5", "T6"]
    assert routes.topicQueueTable["T2"]["broker-a"].perm == 4


@pytest.mark.parametrize("profile", [V4, V5], ids=["4.9.8", "5.3.3"])
def test_a_plan_made_stale_is_compared_again_when_it_applies(profile):
    """A hand change between the plan and its application: the outcome is that of registering
    in one go after the change (the plan's comparison is not trusted)."""
    switches = {"deleteTopicWithBrokerRegistration": True} if profile is V5 else {}
    stepped, reference = manager(profile, **switches)[0], manager(profile, **switches)[0]
    for routes in (stepped, reference):
        register(routes, topics=("T1", "T2", "T3"))
    req = request("T1", "T2", "T4")
    plan = run_steps(plan_for(stepped, req))
    assert list(plan.staging.staged) == (["T4", "T3"] if profile is V5 else ["T4"])  # 5.3.3 deletes T3
    for routes in (stepped, reference):
        routes.wipe_write_perm_of_broker("broker-a")
        routes.register_topic("T9", [QueueData("broker-a", 1, 1, 6, 0)])
    stepped.apply_registration(plan)
    reference.register_broker(request("T1", "T2", "T4"))
    assert stepped.topicQueueTable == reference.topicQueueTable
    assert stepped.topicQueueTable["T1"]["broker-a"].perm == 6  # re-applied, not left wiped


def test_an_unchanged_table_is_not_compared():
    routes, _ = manager(V4)
    register(routes, topics=("T1",))
    req = request()
    req.body.tableUnchanged = True
    plan = run_steps(plan_for(routes, req))
    assert plan.staging is None and plan.rules is None


def _staged_by(joins: bool, rules: registration.TopicRules, slices) -> registration.Staging:
    staging = registration.Staging("broker-a", rules, joins)
    for configs in slices:
        staging.add(TopicQueueTable(), configs)
    return staging


ALIKE = [TopicConfig(f"T{i:04d}", 8, 8, 6) for i in range(2 * registration.ALIKE_AT_LEAST)]


@pytest.mark.parametrize("rules", [registration.TopicRules(True, every_topic=True),
                                   registration.TopicRules(True, every_topic=True, read_only=True),
                                   registration.TopicRules(True),  # 5.x, dataVersion unchanged: what it lacks
                                   registration.TopicRules(True, all_or_none=True)],  # 4.9.8 unchanged: none
                         ids=["every", "read-only", "lacking", "none"])
@pytest.mark.parametrize("slices", [
    [ALIKE],
    [ALIKE[:70], ALIKE[70:]],
    [ALIKE[:100] + [TopicConfig("T0003", 4, 4, 6)] + ALIKE[100:]],  # a topicName twice, other numbers
    [ALIKE[:80], ALIKE[70:]],  # topics staged by the slice before
    [ALIKE[:64] + [TopicConfig("Other", 2, 2, 6)] + ALIKE[64:]],  # numbers not all alike
    [ALIKE[:10]],  # too few to be worth the checks
], ids=["alike", "two-slices", "twice-in-one", "twice-across", "unalike", "few"])
def test_a_joining_group_is_staged_as_if_each_topic_were_looked_up(rules, slices):
    """A group no topic of the table holds (``joins``) is staged without looking its topics up,
    its alike slices in C: what it stages, counts and measures is what staging each topic after
    a look-up in an empty table gives (where every topic is one the group lacks), a topicName
    sent twice compared with the first as before."""
    looked, joined = _staged_by(False, rules, slices), _staged_by(True, rules, slices)
    assert list(joined.staged.items()) == list(looked.staged.items())
    assert (joined.added, joined.removed, joined.complete, joined.overwrites, joined.longest) == (
        looked.added, looked.removed, looked.complete, looked.overwrites, looked.longest)
    assert (joined.writable, joined.sealed) == (looked.writable, looked.sealed)
    assert joined.entries is None  # nothing looked up: the writing looks each topic up


def test_a_joining_groups_alike_slice_runs_no_line_per_topic():
    """A joining group's slice of alike topics (a first registration's, most tables') is staged in
    C: the lines of the server's code it runs do not grow with the slice."""
    rules = registration.TopicRules(True, every_topic=True)
    lines = [server_lines_run(functools.partial(_staged_by, True, rules, [ALIKE[:size]]))
             for size in (registration.ALIKE_AT_LEAST, 2 * registration.ALIKE_AT_LEAST)]
    assert lines[0] == lines[1], lines


def test_a_group_holding_topics_is_not_staged_as_joining():
    """Once the table holds any of the group's topics (its first registration applied, or a piece
    of its table sent in pieces), its next staging looks each topic up again: the group may hold
    some of them."""
    routes, _ = manager(V5)
    req = request("T1", "T2")
    plan = run_steps(plan_steps(req, routes))
    assert plan.staging.entries is None  # joined: nothing looked up
    routes.apply_registration(plan)
    again = run_steps(plan_steps(request("T1", topic("T2", perm=4), "T3", version=(2, 3)), routes))
    assert again.staging.entries is not None and again.staging.added == 1 and again.staging.overwrites
