"""StepTimerService: Twisted's TimerService with its first call one step after each start."""

from __future__ import annotations

from twisted.application.internet import TimerService
from twisted.application.service import MultiService
from twisted.internet import task

from twisted_namesrv.event_log import EventLogService
from twisted_namesrv.timers import StepTimerService
from twisted_namesrv.warm_restart import RouteSnapshotService


def test_the_first_call_comes_one_step_after_each_start() -> None:
    clock, calls = task.Clock(), []
    timer = StepTimerService(2, lambda: calls.append(clock.seconds()), clock)
    parent = MultiService()
    timer.setServiceParent(parent)
    parent.startService()
    assert calls == []  # TimerService would have called at once
    clock.pump([1, 1, 1, 1])
    assert calls == [2, 4]
    parent.stopService()
    clock.pump([2, 2])
    assert calls == [2, 4] and not timer.running
    parent.startService()  # again at 8: again one step later
    clock.advance(1)
    assert calls == [2, 4]
    clock.advance(1)
    assert calls == [2, 4, 10]
    parent.stopService()


def test_a_timer_never_started_stops_quietly() -> None:
    StepTimerService(1, lambda: None, task.Clock()).stopService()


def test_the_writers_are_timer_services() -> None:
    """The page's events and the route snapshot: no LoopingCall started by hand."""
    assert issubclass(EventLogService, TimerService) and issubclass(RouteSnapshotService, TimerService)
