"""Crash safety of the controller store (issue 32, point 3): tools/fuzz/crash_controller.py for
10 SIGKILLs of a real server process while a client applies broker ids and elects masters.  After
every kill and restart on the same store, every acknowledged broker id and election is still
there (a taken id is refused, epoch 1 is kept) and nothing that was never sent exists."""

from __future__ import annotations

from tests.hostile.test_crash_safety import load_tool


def test_kill_9_never_loses_an_acknowledged_controller_change(tmp_path):
    crash = load_tool("crash_controller")
    summary = crash.run(iterations=10, max_seconds=90, workdir=tmp_path, seed=32, kill_after=(0.0, 0.05))
    assert summary.violations == []
    assert summary.iterations == 10 and summary.start_failures == 0
    assert summary.applies_acked >= 10 and summary.elects_acked >= 10  # the kills came while writing
    assert max(summary.lag) <= 1  # at most the pair in flight
