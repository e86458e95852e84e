"""turns.py's phases: ``--renewals R`` sends the tables as they were R times (the renewal phase
counted twice under cachegrind gives a renewal's instructions, docs/benchmarks.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_renewal_phase_runs_as_many_times_as_asked_and_each_renews_every_broker() -> None:
    out = subprocess.run([sys.executable, str(REPO / "tools" / "bench" / "turns.py"), "--step", "brokers-1000",
                          "--brokers", "2", "--renewals", "3"], capture_output=True, text=True, check=True,
                         cwd=REPO, timeout=120).stdout
    renewed = [line for line in out.splitlines() if line.startswith("the same again as it was")]
    assert len(renewed) == 3
    assert all(" in 2 reads and turns;" in line for line in renewed)  # one read a broker: renewed from memory
    assert sum(line.startswith("first registration") for line in out.splitlines()) == 1


def test_frames_are_made_for_as_many_brokers_as_asked_whatever_the_brokers_registering() -> None:
    """``--frames M`` makes the frames of M brokers and registers ``--brokers`` of them: two counts of
    instructions made with one M differ by the server's work alone, where each frame made (json.dumps
    of its body: about 0.2 M instructions) had come into a first registration's count."""
    out = subprocess.run([sys.executable, str(REPO / "tools" / "bench" / "turns.py"), "--step", "brokers-1000",
                          "--brokers", "2", "--frames", "5", "--first-only"], capture_output=True, text=True,
                         check=True, cwd=REPO, timeout=120).stdout
    assert out.splitlines()[0].startswith("2 broker(s), ") and out.splitlines()[0].endswith("; frames made for 5")
    assert " in 4 reads and turns;" in out.splitlines()[1]  # two brokers registered, each a read and a turn
