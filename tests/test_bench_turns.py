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


def test_every_group_registered_is_remembered_and_a_shortfall_fails_loudly(monkeypatch) -> None:
    """The in-process server's broker connections come from this machine, as the curve's brokers
    do: from StringTransport's own peer (192.168.1.1, a remote host) only GROUPS_PER_HOST groups
    were remembered and the rest registered as refused there, cheaper than any real first
    registration, counted without a word. ``remembered`` says so now, and stops the run."""
    import pytest

    monkeypatch.syspath_prepend(str(REPO / "tools" / "bench"))
    import curve
    import turns

    from twisted_namesrv.state.topology import GROUPS_PER_HOST

    tables = [(f"g{n:03d}", f"127.0.0.1:{20000 + n}", [f"T{n}"]) for n in range(GROUPS_PER_HOST + 6)]

    def registered() -> turns.Timed:
        bench = turns.Timed("4.9.8")
        for protocol, (name, addr, topics) in zip([bench.connect() for _ in tables], tables, strict=True):
            for piece in curve.register_frames(name, addr, topics, 1):
                bench.feed(protocol, piece)
        return bench

    bench = registered()
    bench.remembered(tables)
    assert len(bench.service.state.topology.groups) == len(tables)
    monkeypatch.setattr(turns, "PEER_HOST", "192.168.1.1")
    with pytest.raises(SystemExit, match=f"{GROUPS_PER_HOST} broker groups remembered of {len(tables)} registered"):
        registered().remembered(tables)
