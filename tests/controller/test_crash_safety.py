"""Crash safety of the controller store (issue 32, point 3): tools/fuzz/crash_controller.py for
10 SIGKILLs of a real server process while a client applies broker ids and elects masters.  After
every kill and restart on the same store, every acknowledged broker id and election is still
there (a taken id is refused, epoch 1 is kept) and nothing that was never sent exists."""

from __future__ import annotations

import pytest

from tests.hostile.test_crash_safety import load_tool, needs_root_for


def test_kill_9_never_loses_an_acknowledged_controller_change(tmp_path):
    crash = load_tool("crash_controller")
    summary = crash.run(iterations=10, max_seconds=90, workdir=tmp_path, seed=32, kill_after=(0.0, 0.05))
    assert summary.violations == []
    assert summary.iterations == 10 and summary.start_failures == 0
    assert summary.applies_acked >= 10 and summary.elects_acked >= 10  # the kills came while writing
    assert max(summary.lag) <= 1  # at most the pair in flight


@pytest.mark.parametrize("fault", ["ENOSPC", "EMFILE", "EIO"])
def test_kill_9_while_the_store_fills_up_never_leaves_a_log_that_refuses_to_start(tmp_path, fault):
    """Issue 38, item 2: the store on a small tmpfs that keeps filling up (before, a failed append's half
    record was followed by the next good one, and the restart said "controller.log is corrupt at byte
    N"), or an fd table kept full: every restart starts, every acknowledged change is there, no group
    whose apply was answered with an error exists."""
    needs_root_for(fault)
    crash = load_tool("crash_controller")
    summary = crash.run(iterations=8, max_seconds=60, workdir=tmp_path, seed=38, kill_after=(0.05, 0.25), fault=fault)
    assert summary.violations == [] and summary.start_failures == 0 and summary.iterations == 8
    assert summary.applies_acked > 0
    if fault != "EMFILE":
        assert summary.refused > 0  # appends met the fault (EMFILE cannot touch them: the log's fd is open)
