"""state_half.py registers its brokers through the routes as the composition root wires them: a
run of a few ends cleanly (the benchmark counts instructions of exactly this run under cachegrind)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_state_half_registers_its_brokers_and_ends():
    for extra, registered in (([], 6), (["--build-only"], 0)):
        done = subprocess.run([sys.executable, str(REPO / "tools" / "bench" / "state_half.py"), "--brokers", "6",
                               *extra], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"{registered} brokers registered\n"
