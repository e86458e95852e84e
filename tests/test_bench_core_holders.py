"""The scheduler trace's reader (tools/bench/core_holders.py): who had the server's core while the
probe's longest lookup waited, and how long the server's main thread was runnable then, read from
``perf script`` lines of the kind ``perf sched record`` writes. What a trace shows is a benchmark's;
here only that it is read right."""

from __future__ import annotations

from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "tools" / "bench"

SERVER, PROBE, CURVE, OTHER = 100, 300, 200, 400


def switch(t: float, cpu: int, prev: tuple[str, int, int], state: str, nxt: tuple[str, int]) -> str:
    """A sched_switch line; ``prev`` (comm, pid, tid) runs on ``cpu`` until ``t``."""
    comm, pid, tid = prev
    return (f"{pid:>5}/{tid:<5} [{cpu:03d}] {t:.6f}:       sched:sched_switch: prev_comm={comm} prev_pid={tid} "
            f"prev_prio=120 prev_state={state} ==> next_comm={nxt[0]} next_pid={nxt[1]} next_prio=120")


def waking(t: float, cpu: int, by: tuple[int, int], comm: str, tid: int, target: int) -> str:
    return (f"{by[0]:>5}/{by[1]:<5} [{cpu:03d}] {t:.6f}:       sched:sched_waking: comm={comm} pid={tid} "
            f"prio=120 target_cpu={target:03d}")


#: core 0 from 10.000 s: the server runs 1 ms and sleeps (idle 1 ms); the probe, on core 1, wakes it at
#: 10.002 while a process of someone else's ("pip") has just taken the core; pip keeps it 3 ms, a kworker
#: 1 ms, then the server runs 2 ms and is preempted by pip (runnable again for 1 ms); a thread of the
#: server's own (its thread pool) and a line of another event that the reader skips
LINES = [
    switch(10.000, 0, ("swapper/0", 0, 0), "R", ("python", SERVER)),
    switch(10.001, 0, ("python", SERVER, SERVER), "S", ("swapper/0", 0)),
    f"{OTHER:>5}/{OTHER:<5} [000] 10.0015: sched:sched_stat_runtime: comm=pip pid=400 runtime=1 [ns]",
    switch(10.002, 0, ("swapper/0", 0, 0), "R", ("pip", OTHER)),
    waking(10.002, 1, (PROBE, PROBE), "python", SERVER, 0),
    switch(10.005, 0, ("pip", OTHER, OTHER), "S", ("kworker/0:1", 9)),
    switch(10.006, 0, ("kworker/0:1", 0, 9), "I", ("python", SERVER)),
    switch(10.008, 0, ("python", SERVER, SERVER), "R", ("pip", OTHER)),
    switch(10.009, 0, ("pip", OTHER, OTHER), "S", ("python", SERVER + 1)),
    switch(10.0095, 0, ("python", SERVER, SERVER + 1), "S", ("python", SERVER)),
    switch(10.010, 1, ("python", PROBE, PROBE), "S", ("python", CURVE)),  # core 1: not the core read
    switch(10.011, 0, ("python", SERVER, SERVER), "S", ("swapper/0", 0)),
]


@pytest.fixture
def holders(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import core_holders
    return core_holders


def test_the_core_is_split_by_who_had_it(holders):
    trace = holders.read_trace(LINES, core=0)
    got = holders.held(trace, 10.000, 10.011, server={SERVER}, curve={CURVE, PROBE})
    assert got == pytest.approx(
        {"server": 4.5, "other:pip": 4.0, "idle": 1.0, "kernel:kworker": 1.0, "server:threads": 0.5}
    )
    # a window cuts the spans it overlaps
    assert holders.held(trace, 10.004, 10.0065, {SERVER}, {CURVE}) == pytest.approx(
        {"other:pip": 1.0, "kernel:kworker": 1.0, "server": 0.5})


def test_the_main_thread_is_runnable_from_its_waking_or_preemption_until_it_runs(holders):
    trace = holders.read_trace(LINES, core=0)
    assert trace.runnable[SERVER] == [(10.002, 10.006), (10.008, 10.0095)]
    assert holders.runnable_ms(trace, SERVER, 10.000, 10.011) == pytest.approx(5.5)
    assert holders.runnable_ms(trace, SERVER, 10.005, 10.0085) == pytest.approx(1.5)


def test_processes_beyond_the_largest_named_are_summed(holders):
    """p0..p5 hold the core 1..6 ms each: the two largest by name, the rest together."""
    ends = [1.0 + sum(range(1, i + 2)) / 1e3 for i in range(6)]
    lines = [switch(1.0, 0, ("swapper/0", 0, 0), "S", ("p0", 500))] + [
        switch(end, 0, (f"p{i}", 500 + i, 500 + i), "S", (f"p{i + 1}", 501 + i)) for i, end in enumerate(ends)]
    got = holders.held(holders.read_trace(lines, 0), 1.0, ends[-1], set(), set(), named=2)
    assert got == pytest.approx({"other:p5": 6.0, "other:p4": 5.0, "other:(rest)": 10.0})


def test_a_curve_record_gives_each_phase_and_its_longest_wait(holders):
    trace = holders.read_trace(LINES, core=0)
    record = {"round": 1, "step": "tiny", "server": "ours", "server_pid": SERVER,
              "phase_windows": {"heartbeat_storm": [10.000, 10.011]},
              "probe_max_at": {"heartbeat_storm": 10.0019}, "figures": {"heartbeat_storm_probe_max_ms": 4.2}}
    (row,) = holders.run_report(trace, record, curve={CURVE, PROBE})
    assert row["phase"] == "heartbeat_storm" and row["probe_max_ms"] == 4.2
    assert row["core_in_longest_wait_ms"] == pytest.approx({"other:pip": 3.0, "kernel:kworker": 1.0, "idle": 0.1,
                                                            "server": 0.1})
    assert row["main_runnable_in_longest_wait_ms"] == pytest.approx(4.0)
    assert row["main_longest_runnable_ms"] == pytest.approx(4.0)
    assert list(holders.run_report(trace, {"round": 1, "step": "tiny", "server": "old"}, set())) == []


def runtime(t: float, cpu: int, comm: str, tid: int, ns: int) -> str:
    return f"{tid:>5}/{tid:<5} [{cpu:03d}] {t:.6f}: sched:sched_stat_runtime: comm={comm} pid={tid} runtime={ns} [ns]"


def test_the_time_the_virtual_cpu_did_not_run_is_the_hosts(holders):
    """pip holds the core 30 ms by the wall but ran 10 ms of it (its runtime leaves out the steal
    clock's time): the other 20 ms are the host's, placed in the span's longest silence (12-32 ms)
    while the server waited."""
    lines = [
        switch(1.000, 0, ("swapper/0", 0, 0), "S", ("pip", OTHER)),
        waking(1.001, 1, (PROBE, PROBE), "python", SERVER, 0),
        runtime(1.004, 0, "pip", OTHER, 4_000_000),  # ticks
        runtime(1.008, 0, "pip", OTHER, 4_000_000),
        runtime(1.012, 0, "pip", OTHER, 1_000_000),
        runtime(1.032, 0, "pip", OTHER, 1_000_000),  # after 20 ms of nothing: 1 ms since
        switch(1.030 + 0.002, 0, ("pip", OTHER, OTHER), "R", ("python", SERVER)),
    ]
    trace = holders.read_trace(lines, 0)
    got = holders.held(trace, 1.000, 1.032, {SERVER}, set())
    assert got == pytest.approx({"host": 20.0, "other:pip": 12.0})
    assert holders.held(trace, 1.000, 1.012, {SERVER}, set()) == pytest.approx({"other:pip": 12.0})
    assert holders.runnable_ms(trace, SERVER, 1.0, 1.1) == pytest.approx(31.0)


def test_a_thread_id_used_again_later_is_judged_by_its_process_then(holders):
    """In a trace of many runs the kernel hands a thread id out again: thread 700 of someone's
    process 650 early on, our server's main thread (process 700) later."""
    lines = [
        switch(1.0, 0, ("swapper/0", 0, 0), "S", ("javac", 700)),
        switch(1.002, 0, ("javac", 650, 700), "S", ("swapper/0", 0)),
        switch(2.0, 0, ("swapper/0", 0, 0), "S", ("python", 700)),
        switch(2.003, 0, ("python", 700, 700), "S", ("swapper/0", 0)),
    ]
    trace = holders.read_trace(lines, 0)
    assert holders.held(trace, 0.0, 3.0, {700}, set()) == pytest.approx(
        {"server": 3.0, "other:javac": 2.0, "idle": 998.0}
    )


def test_an_uninterruptible_sleep_is_told_apart(holders):
    """The server faults on a page kcompactd is moving: switched out in state D at 1.010, woken by
    the daemon at 1.040 (and runnable from then until it runs at 1.041)."""
    lines = [
        switch(1.000, 0, ("swapper/0", 0, 0), "S", ("python", SERVER)),
        switch(1.010, 0, ("python", SERVER, SERVER), "D", ("kcompactd0", 36)),
        waking(1.040, 0, (36, 36), "python", SERVER, 0),
        switch(1.041, 0, ("kcompactd0", 36, 36), "S", ("python", SERVER)),
    ]
    trace = holders.read_trace(lines, 0)
    assert holders.blocked_ms(trace, SERVER, 1.0, 1.1) == pytest.approx(30.0)
    assert holders.runnable_ms(trace, SERVER, 1.0, 1.1) == pytest.approx(1.0)
    got = holders.held(trace, 1.0, 1.041, {SERVER}, set())
    assert got == pytest.approx({"kernel:kcompactd0": 31.0, "server": 10.0})


def test_the_main_threads_waits_are_counted_by_who_had_the_core_as_each_began(holders):
    """In LINES the server is woken at 10.002 while pip has the core (4 ms until it runs) and
    preempted by pip at 10.008 (1.5 ms); here also woken once onto the idle core (0.05 ms)."""
    lines = [*LINES, waking(10.012, 1, (PROBE, PROBE), "python", SERVER, 0),
             switch(10.01205, 0, ("swapper/0", 0, 0), "R", ("python", SERVER))]
    trace = holders.read_trace(lines, core=0)
    got = holders.waits_by_holder(trace, SERVER, 10.000, 10.020, {SERVER}, {CURVE, PROBE})
    assert got == {"other:pip": {"n": 2, "over_1_ms": 2, "max_ms": 4.0},
                   "idle": {"n": 1, "over_1_ms": 0, "max_ms": 0.05}}
    # only the waits that began in the window
    assert holders.waits_by_holder(trace, SERVER, 10.007, 10.020, {SERVER}, set()) == {
        "other:pip": {"n": 1, "over_1_ms": 1, "max_ms": 1.5}, "idle": {"n": 1, "over_1_ms": 0, "max_ms": 0.05}}
    record = {"round": 1, "step": "tiny", "server": "ours", "server_pid": SERVER,
              "phase_windows": {"heartbeat_storm": [10.000, 10.020]}}
    (row,) = holders.run_report(trace, record, curve={CURVE, PROBE})
    assert row["main_waits_by_holder"] == got
