"""A server that did not run for a while (SIGSTOP, a paused VM) says so once it runs again (stalls.py):
after ``kill -STOP`` for 40 s and ``kill -CONT`` its log was silent on the gap."""

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


def test_the_server_runs_the_watch_on_its_reactor(tmp_path):
    from twisted.internet import task

    from tests.support import server_config
    from twisted_namesrv.service import NamesrvService

    service = NamesrvService.from_config(server_config(tmp_path), reactor=task.Clock())
    ticks = [getattr(child, "call", (None,))[0] for child in service]
    assert any(getattr(tick, "__self__", None).__class__ is StallWatch for tick in ticks), ticks
