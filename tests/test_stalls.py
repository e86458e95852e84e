"""A server that did not run for a while (SIGSTOP, a paused VM) says so once it runs again (stalls.py):
after ``kill -STOP`` for 40 s and ``kill -CONT`` its log was silent on the gap.  A line is no series:
the stalls are counted for /metrics (NamesrvReactorStalled alerts on them) and are page events; before,
only the line said so."""

from __future__ import annotations

from twisted.logger import capturedLogs, formatEvent

from twisted_namesrv.stalls import StallWatch


def test_a_gap_past_the_threshold_is_one_line_naming_it():
    now = [100.0]
    watch = StallWatch(lambda: now[0])
    with capturedLogs() as events:
        for _ in range(10):  # a busy reactor: each tick a little late
            watch.tick()
            now[0] += 1.4
        now[0] += 40
        watch.tick()
        now[0] += 1
        watch.tick()
    lines = [formatEvent(event) for event in events]
    assert len(lines) == 1 and lines[0].startswith("the server did not run for 41.4 s (stopped: SIGSTOP"), lines


def test_each_stall_is_counted_the_longest_kept_and_told():
    now, told = [100.0], []
    watch = StallWatch(lambda: now[0], lambda gap, text: told.append((round(gap, 1), text)))
    assert (watch.stalls, watch.longest) == (0, 0.0)
    for gap in (1.0, 1.5, 6.0, 30.0, 1.0, 12.0, 1.0):  # 6 s is within the 5 s past a tick: no stall
        now[0] += gap
        with capturedLogs():
            watch.tick()
    assert (watch.stalls, watch.longest) == (2, 30.0)
    assert [gap for gap, _ in told] == [30.0, 12.0]
    assert told[0][1].startswith("the server did not run for 30.0 s (stopped: SIGSTOP"), told


def test_the_server_ticks_the_watch_that_metrics_and_the_page_read(tmp_path):
    """The composition root's one watch: its timer on the reactor, its stalls on /metrics (at 0 from the
    start, so that increase() has a series) and each one a "stalled" event on the status page."""
    from tests.web.test_metrics_and_api import Served, value

    served = Served(tmp_path)
    watch = served.service.seen.stalls
    timers = [child for child in served.service if getattr(child, "call", (None,))[0] == watch.tick]
    assert len(timers) == 1, list(served.service)
    samples = served.scrape()
    assert value(samples, "namesrv_reactor_stalls_total") == 0
    assert ("namesrv_reactor_stalls_total", ()) in samples
    assert ("namesrv_reactor_stall_longest_seconds", ()) in samples
    now = [50.0]
    watch.monotonic = lambda: now[0]  # the process's monotonic clock, as a test's own
    with capturedLogs():
        timers[0].startService()  # a tick at once
        for step in (1.0, 40.0, 1.0):  # stopped 40 s between two ticks
            now[0] += step
            served.clock.advance(1.0)
    samples = served.scrape()
    assert value(samples, "namesrv_reactor_stalls_total") == 1
    assert value(samples, "namesrv_reactor_stall_longest_seconds") == 40.0
    events = served.api.events()["events"]
    stalled = [event for event in events if event["kind"] == "stalled"]
    assert len(stalled) == 1 and stalled[0]["seconds"] == 40.0, events
    assert stalled[0]["reason"].startswith("the server did not run for 40.0 s"), stalled
