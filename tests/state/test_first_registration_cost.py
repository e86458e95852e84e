"""What a new broker's first registration costs the state half (issue 47), counted, never timed:
its plan and its applying, the change published and its route event heard by the listeners the
composition root wires (service.build), at 200 brokers held, in Python calls; and which objects
it makes on the way.  docs/benchmarks.md has the instructions each cut saved."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from twisted.internet import task

from tests.state.test_routes import V4, body, manager, register, topic
from tests.support import python_calls_run, server_config
from twisted_namesrv.bodies.register import RegistrationRefused
from twisted_namesrv.service import NamesrvService
from twisted_namesrv.state import routes as routes_module
from twisted_namesrv.state import settling
from twisted_namesrv.state.registration import RegisterRequest, plan_steps
from twisted_namesrv.state.routes import RouteInfoManager
from twisted_namesrv.steps import run_steps

#: the Python calls of a new broker's first registration of four topics in the state half, its
#: plan made and applied and its event heard (``test_a_new_brokers_plan_and_applying_make_few_calls``):
#: 87 at 73e2e09; 85 since a few entries with nothing before them are written without a layer, 80
#: since the values a registration makes in the state half are msgspec Structs, not dataclasses, 78 with
#: the topology's group and member too, 77 since the request's names are measured in C and named
#: only when one is over maxNameLength, 76 since a group's topology entry is a Struct encoded as it is,
#: 80 since the event's host is counted for the page's bound per host (events.EVENTS_PER_HOST: the
#: host kept by the address without its port, the registering host held for the broker's departure)
STATE_CALLS = 80


def wired(tmp_path: Path) -> RouteInfoManager:
    """The routes with their subscribers and listeners as the composition root wires them, 200
    brokers registered (four topics each, two brokers a topic, as the curve's)."""
    clock = task.Clock()
    clock.advance(1_000)
    service = NamesrvService.from_config(server_config(tmp_path), reactor=clock)
    routes = service.state.routes
    for index in range(200):
        routes.apply_registration(run_steps(plan_steps(newcomer(f"b{index:05d}", index), routes)))
    return routes


def newcomer(name: str, index: int) -> RegisterRequest:
    addr = f"127.0.0.1:{10000 + index}"
    topics = [f"Pair{index // 2:05d}_{j}" for j in range(4)]
    return RegisterRequest("DefaultCluster", addr, name, 0, addr, body(*topics), channel=index, version=409,
                           digest=bytes(20))


def planned_and_applied(routes: RouteInfoManager, req: RegisterRequest) -> None:
    routes.apply_registration(run_steps(plan_steps(req, routes)))


def test_a_new_brokers_plan_and_applying_make_few_calls(tmp_path):
    routes = wired(tmp_path)
    calls = python_calls_run(functools.partial(planned_and_applied, routes, newcomer("newcomer", 201)))
    assert routes.topicQueueTable["Pair00100_0"]["newcomer"].perm == 6
    assert calls <= STATE_CALLS, calls


@pytest.mark.parametrize("at_once", [0, 3, 4])
def test_a_few_entries_with_nothing_before_them_are_written_in_without_a_layer(at_once, monkeypatch):
    """A registration's staged entries no more than ``write_at_once`` and with no layer before
    them are written into topicQueueTable as the change commits, by the layers' own writing
    (settling.write_staged), without a Staged layer made, queued and taken off; more, or behind
    another layer, are a layer as before."""
    made: list[int] = []

    class Counted(settling.Staged):
        __slots__ = ()

        def __init__(self, *args, **kwargs) -> None:
            made.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(routes_module, "StagedEntries", Counted)
    routes, _ = manager(V4)
    routes.write_at_once = at_once
    register(routes, topics=(topic("T1"), "T2", "T3", "T4"))
    assert made == ([1] if at_once < 4 else [])
    assert {t: sorted(held) for t, held in routes.topicQueueTable.items()} == {
        t: ["broker-a"] for t in ("T1", "T2", "T3", "T4")}



def test_a_name_over_max_name_length_is_refused_and_named(tmp_path):
    """The request's names are measured at once, and the one over maxNameLength named as before."""
    routes, _ = manager(V4, maxNameLength=16)
    with pytest.raises(RegistrationRefused, match="its zoneName of 17 characters is over maxNameLength"):
        routes.register_broker(RegisterRequest("c1", "10.0.0.1", "b", 0, None, body("T1"), zoneName="z" * 17))
    with pytest.raises(RegistrationRefused, match="its brokerAddr of 17 characters"):
        routes.register_broker(RegisterRequest("c1", "10.0.0.1:10911000", "b", 0, None, body("T1")))
    assert routes.register_broker(RegisterRequest("c1", "10.0.0.1:1091100", "b", 0, "h" * 16, body("T1"))) is not None
    assert not routes.brokerAddrTable.keys() - {"b"}
