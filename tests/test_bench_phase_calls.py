"""phase_calls.py reads the kernel's counts of the server over the curve's first registration phase:
perf's tracepoint counts as system calls per registration, and the process's own counters."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools" / "bench"))
import phase_calls  # noqa: E402  (tools/bench)

#: ``perf stat -x, -e raw_syscalls:sys_enter,syscalls:sys_enter_...`` as it writes its -o file
PERF_CSV = """# started on Tue Dec  1 05:30:00 2026

22000,,raw_syscalls:sys_enter,5000000,100.00,,
5000,,syscalls:sys_enter_epoll_ctl,5000000,100.00,,
5000,,syscalls:sys_enter_sendto,5000000,100.00,,
1700,,syscalls:sys_enter_epoll_wait,5000000,100.00,,
0,,syscalls:sys_enter_accept4,5000000,100.00,,
<not counted>,,syscalls:sys_enter_fcntl,0,0.00,,
"""


def test_perfs_counts_are_told_per_registration_all_first_and_none_left_out() -> None:
    assert phase_calls.per_registration(PERF_CSV, 5000) == (
        "system calls a registration: all 4.40, sendto 1.00, epoll_ctl 1.00, epoll_wait 0.34")


def test_a_processs_counters_are_read_from_proc() -> None:
    before = phase_calls.counters(os.getpid())
    sum(range(3_000_000))
    after = phase_calls.counters(os.getpid())
    assert after["user"] + after["system"] >= before["user"] + before["system"] and after["rss_mib"] > 1
    assert set(before) == {"user", "system", "minor_faults", "rss_mib", "woken", "preempted"}
