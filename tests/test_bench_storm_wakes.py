"""storm_wakes.py charges a sending with the reactor thread's CPU, times on a CPU and wake-ups over it and the
second after it: the schedstat's differences, not its totals."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools" / "bench"))
import storm_wakes  # noqa: E402  (tools/bench)


class FakeSchedstat:
    """A reactor thread's schedstat that ran 40 ms more and was put on a CPU 7 times more in between."""

    def __init__(self) -> None:
        self.reads = [(100.0, 1.0, 10), (140.0, 2.0, 17)]

    def read_slices(self) -> tuple[float, float, int]:
        return self.reads.pop(0)


def test_a_sending_is_charged_the_differences(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[Any] = []

    def send(frames: Any, spread: Any) -> list[float]:
        sent.append(spread)
        return []
    monkeypatch.setattr(storm_wakes, "SETTLE_SECONDS", 0.0)
    switches = [(3, 9), (8, 20)]  # the main thread woken 5 times more (a preemption puts it on a CPU unwoken)
    monkeypatch.setattr(storm_wakes, "thread_switches", lambda pid: switches.pop(0) if switches else (0, 0))
    got = storm_wakes.sending(send, [], 0.0, FakeSchedstat(), 1234)  # type: ignore[arg-type]
    assert sent == [None]  # 0: 8 in flight, as the curve's repeated registration
    assert (got["cpu_ms"], got["slices"], got["wakeups"], got["spread_s"]) == (40.0, 7, 5, 0.0)
    storm_wakes.sending(send, [], 1.5, type("S", (), {"read_slices": lambda self: (0.0, 0.0, 0)})(), 1234)  # type: ignore[arg-type]
    assert sent[-1] == 1.5
