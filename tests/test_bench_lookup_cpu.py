"""lookup_cpu.py reads a server's CPU from its whole process tree, user and system apart: a process
gone meanwhile (a launcher that exec'd or exited) adds nothing rather than failing the count."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools" / "bench"))
import lookup_cpu  # noqa: E402  (tools/bench)


def test_a_gone_process_adds_no_ticks() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert lookup_cpu.cpu_ticks([gone.pid]) == (0, 0)
    user, system = lookup_cpu.cpu_ticks([os.getpid(), gone.pid])
    assert user >= 0 and system >= 0 and user + system > 0  # this test process has run
