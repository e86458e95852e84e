"""A server that did not run for a while says so once it runs again.

Stopped by SIGSTOP, in a VM paused or a machine suspended, or held by one turn of the reactor that
never seemed to end, the server answers nothing and logs nothing: brokers' heartbeats and clients'
lookups time out, and after ``kill -CONT`` it serves on as if nothing happened, its log silent on the
gap (tried: a SIGSTOP of 40 s left no line).  A timer that should fire every second notes how long
it really waited on the monotonic clock; a wait past ``STALL_SECONDS`` is one warning line naming
the gap.  (A hang past systemd's WatchdogSec is ended by systemd: sdnotify.py.)"""

from __future__ import annotations

from collections.abc import Callable

from twisted.logger import Logger

log = Logger()

#: how often the timer fires
TICK_SECONDS = 1.0
#: a wait longer than its tick by this much is a stall worth a line (a busy turn takes well under)
STALL_SECONDS = 5.0


class StallWatch:
    """Called every ``TICK_SECONDS`` by a timer on the reactor; ``monotonic`` is the process's
    monotonic clock (a test's own), not the reactor's, which a fake clock would move by jumps."""

    def __init__(self, monotonic: Callable[[], float]) -> None:
        self.monotonic = monotonic
        self.last: float | None = None

    def tick(self) -> None:
        now = self.monotonic()
        if self.last is not None:
            gap = now - self.last
            if gap - TICK_SECONDS > STALL_SECONDS:
                log.warn("the server did not run for {gap:.1f} s (stopped: SIGSTOP, a paused VM, a suspended "
                         "machine; or one turn held it): nothing was answered meanwhile, and brokers and "
                         "clients timed out against it", gap=gap)
        self.last = now
