"""measuring_cost.py reads what perf and callgrind wrote: a system call count from ``perf stat -x,``'s
line for the tracepoint, a dump's instructions from its ``summary:`` line. The counts themselves are a
benchmark's, never asserted."""

from __future__ import annotations

from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "tools" / "bench"


@pytest.fixture
def measuring_cost(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import measuring_cost

    return measuring_cost


class Perf:
    """A ``perf stat -x,`` that was counting, as syscalls_of started it."""

    def __init__(self, err: str) -> None:
        self.err, self.signals = err, []

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)

    def communicate(self, timeout: float) -> tuple[None, str]:
        return None, self.err


def test_the_system_calls_are_read_from_perfs_line_for_the_tracepoint(measuring_cost):
    perf = Perf("# started on ...\n\n35794,,raw_syscalls:sys_enter,2001234567,100.00,,\n")
    assert measuring_cost.counted(perf) == 35794 and perf.signals  # stopped as a Ctrl-C stops it
    assert measuring_cost.counted(Perf("<not counted>,,raw_syscalls:sys_enter,0,0.00,,\n")) is None
    assert measuring_cost.counted(None) is None  # no perf here


def test_a_dumps_instructions_are_its_summary(measuring_cost, tmp_path):
    dump = tmp_path / "callgrind.out.2"
    dump.write_text("version: 1\ncreator: callgrind-3.19.0\ndesc: Trigger: dump storms\nevents: Ir\n"
                    "summary: 51660452\ntotals: 57412497\nfl=(1) x.c\n")
    assert measuring_cost.summary(dump) == 51660452
    dump.write_text("events: Ir\n")
    with pytest.raises(ValueError):
        measuring_cost.summary(dump)
