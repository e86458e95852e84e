"""A registration as a plan (state/registration.py): compared with topicQueueTable and its new
entries staged in steps, then applied by RouteInfoManager.apply_registration in one place; a plan
made stale by a change in between applies as a registration in one go after that change would."""

from __future__ import annotations

import pytest

from twisted_namesrv.bodies.route import QueueData
from twisted_namesrv.state import registration
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
    assert {t: q and q.brokerName for t, q in plan.staged.items()} == {
        "T2": "broker-a", "T5": "broker-a", "T6": "broker-a", "T3": None}  # the group leaves T3
    assert plan.staged["T2"].perm == 4 and routes.topicQueueTable["T2"]["broker-a"].perm != 4
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
    assert list(plan.staged) == (["T4", "T3"] if profile is V5 else ["T4"])  # 5.3.3 deletes T3
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
    assert plan.staged is None and plan.rules is None
