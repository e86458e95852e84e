"""Timers as Twisted services: ``TimerService`` calls at its start and then every step; a writer that
has nothing new at start (the page's events, the route snapshot) wants its first call one step later.

Every timer of the server is one of these two, on the clock it is given (the reactor, a test's
``task.Clock``): the expiry scan, the ACL reload, the event and snapshot writers, the peers view
and the controller's two scans."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.application.internet import TimerService
from twisted.internet import interfaces


class ClockedTimerService(TimerService):
    """Twisted's TimerService on a given clock (the reactor, or a test's ``task.Clock``), its
    ``step`` also readable as ``interval`` (the name the status page and tests use)."""

    def __init__(self, step: float, call: Callable[[], Any], clock: interfaces.IReactorTime) -> None:
        super().__init__(step, call)
        self.clock = clock

    @property
    def interval(self) -> float:
        return self.step


class StepTimerService(ClockedTimerService):
    """A TimerService whose first call comes one step after each start, not at it."""

    def __init__(self, step: float, work: Callable[[], Any], clock: interfaces.IReactorTime) -> None:
        super().__init__(step, self._tick, clock)
        self._work = work
        self._starting = False

    def startService(self) -> None:
        self._starting = True  # the call TimerService makes at once is skipped
        super().startService()

    def stopService(self) -> Any:
        if not hasattr(self, "_loop"):  # never started (a start that failed before it): nothing runs
            return None
        return super().stopService()

    def _tick(self) -> Any:
        if self._starting:
            self._starting = False
            return None
        return self._work()
