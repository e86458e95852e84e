"""A server that did not run for a while says so once it runs again.

Stopped by SIGSTOP, in a VM paused or a machine suspended, or held by one turn of the reactor that
never seemed to end, the server answers nothing and logs nothing: brokers' heartbeats and clients'
lookups time out, and after ``kill -CONT`` it serves on as if nothing happened, its log silent on the
gap (tried: a SIGSTOP of 40 s left no line).  A timer that should fire every second notes how long
it really waited on the monotonic clock; a wait past ``STALL_SECONDS`` is one warning line naming
the gap.  (A hang past systemd's WatchdogSec is ended by systemd: sdnotify.py.)

A log line is no series: the watch also counts the stalls and keeps the longest (``stalls``,
``longest``: namesrv_reactor_stalls_total and namesrv_reactor_stall_longest_seconds, read by
/metrics, NamesrvReactorStalled alerting on them), and ``told`` hears each one (the composition
root, service.py, makes it the status page's "stalled" event).  Constructed and wired in one place
(service.build); nothing here registers itself."""

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

    def __init__(self, monotonic: Callable[[], float], told: Callable[[float, str], None] | None = None) -> None:
        self.monotonic = monotonic
        #: told(gap seconds, the line's text) at each stall, after its log line
        self.told = told
        self.last: float | None = None
        #: stalls since start
        self.stalls = 0
        #: the longest stall's gap since start, in seconds (0: none)
        self.longest = 0.0

    def tick(self) -> None:
        now = self.monotonic()
        if self.last is not None:
            gap = now - self.last
            if gap - TICK_SECONDS > STALL_SECONDS:
                self._stalled(gap)
        self.last = now

    def _stalled(self, gap: float) -> None:
        self.stalls += 1
        self.longest = max(self.longest, gap)
        text = (f"the server did not run for {gap:.1f} s (stopped: SIGSTOP, a paused VM, a suspended machine; or "
                "one turn held it): nothing was answered meanwhile, and brokers and clients timed out against it")
        log.warn("{text}", text=text, gap=gap)
        if self.told is not None:
            self.told(gap, text)
