"""request_slice.py runs a command with an EEVDF request slice (tools/bench: the curve's A/B of the
storm's waits): the slice set on the thread that execs the command, its nice value kept."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "bench" / "request_slice.py"


def slice_and_nice(*argv: str) -> tuple[int, str]:
    """What a child run under the tool reads of itself: its slice (/proc's se.slice, ns) and nice."""
    script = ("import os, re; print(re.search(r'se.slice\\s*:\\s*(\\d+)', open('/proc/self/sched').read())[1],"
              " os.nice(0))")
    out = subprocess.run([*argv, sys.executable, str(TOOL), "250", "--", sys.executable, "-c", script],
                         capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]), out[1]


def custom_slices() -> bool:
    """Whether this kernel shows a thread's slice (Linux 6.6 on) and takes a request slice (6.12 on)."""
    try:
        sched = Path("/proc/self/sched").read_text()
    except OSError:
        return False
    version = tuple(int(part) for part in platform.release().split(".")[:2] if part.isdigit())
    return "se.slice" in sched and version >= (6, 12)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64") or not custom_slices(),
                    reason="needs Linux 6.12 or later on x86_64 or aarch64")
def test_the_command_runs_with_the_slice_and_its_nice_value_kept() -> None:
    assert slice_and_nice() == (250_000, "0")
    assert slice_and_nice("nice", "-n", "5") == (250_000, "5")
