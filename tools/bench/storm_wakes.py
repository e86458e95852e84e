#!/usr/bin/env python3
"""What a heartbeat storm costs the real server by its wake-ups: the same heartbeats sent spread out
(each one wakes the reactor and is served alone in a turn, as a storm on a quiet machine has them)
and all at once (many a turn).

A benchmark, not a test.  Runs ``python -m twisted_namesrv`` (``--tree``: another checkout's, a
``git worktree`` of another commit) on core 0, registers a curve step's first ``--brokers`` brokers
(8 in flight, as ``scale.py --curve`` does), sends their tables twice more as they were (each
renewed from then on), then once per ``--spreads`` value: over that many seconds (``curve.Load``'s
storm), 0 meaning 8 in flight (the curve's repeated registration).  Per sending it prints the
reactor thread's CPU from its ``schedstat`` (exact, where ``/proc/PID/stat``'s ticks are sampled)
and the times it was put on a CPU (its wake-ups, about), over the sending and a second after it, and
each heartbeat's share.  No probe and no other client: nothing else wakes the reactor.

A renewal's instructions do not say this cost: ``instructions.py --repeated --storm 10`` counts one
served alone in its turn at 0.145 M against 0.131 M batched (the code's and the interpreter's, not
the kernel's wake-up and the caches the core's other work left cold), while this counts its CPU
several times over (docs/benchmarks.md, the storm's CPU).

    .venv/bin/python tools/bench/storm_wakes.py [--step brokers-5000] [--brokers 2000] [--spreads 5,0,5,0] [--tree D]
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import curve  # noqa: E402  (tools/bench: the curve's tables, frames, sending and server child)
from procfs import Schedstat, thread_switches  # noqa: E402

#: how long after a sending the server's CPU is still counted for it (its last answers, its turns)
SETTLE_SECONDS = 1.0


def sending(send: Callable[[list[list[bytes]], float | None], object], frames: list[list[bytes]], spread: float,
            reactor: Schedstat, pid: int) -> dict[str, float]:
    """Every broker's frames once, ``spread`` seconds apart in all (0: 8 in flight): the reactor
    thread's CPU (ms), times put on a CPU and wake-ups (its sleeps: the curve's ``server_wakeups``;
    a preemption puts it on a CPU again without one) over it and SETTLE_SECONDS after, and its wall
    time (s)."""
    ran0, _, slices0 = reactor.read_slices()
    woken0 = thread_switches(pid)[0]
    began = time.monotonic()
    send(frames, spread or None)
    wall = time.monotonic() - began
    time.sleep(SETTLE_SECONDS)
    ran1, _, slices1 = reactor.read_slices()
    return {"spread_s": spread, "wall_s": wall, "cpu_ms": ran1 - ran0, "slices": slices1 - slices0,
            "wakeups": thread_switches(pid)[0] - woken0}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--step", default="brokers-5000", help="the curve step whose brokers register (curve.py)")
    p.add_argument("--brokers", type=int, default=2000, metavar="N", help="its first N brokers")
    p.add_argument("--spreads", default="5,0,5,0", metavar="S,...",
                   help="each sending's spread in seconds, in order (0: 8 in flight)")
    p.add_argument("--tree", type=Path, default=curve.REPO, help="the checkout whose server runs (this one)")
    a = p.parse_args()
    spreads = [float(s) for s in a.spreads.split(",")]
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {1})  # the brokers beside the server's core 0, as the curve runs them
    step = curve.step_named(a.step)
    tables = curve.broker_tables(step)[:a.brokers]
    frames = [curve.register_frames(name, addr, topics, 1) for name, addr, topics in tables]
    scratch = Path(tempfile.mkdtemp(prefix="namesrv-storm-wakes-"))
    curve.REPO = a.tree.resolve()  # the server's working directory: its code
    server = curve.Server(None, scratch, "ours", step=step)
    conns: list[socket.socket] = []
    load: curve.Load | None = None
    try:
        port = server.wait_ready(120)
        pid = server.proc.pid
        reactor = Schedstat(f"/proc/{pid}/task/{pid}/schedstat")
        conns = [socket.create_connection((curve.HOST, port)) for _ in tables]
        for conn in conns:
            conn.setblocking(False)  # as the curve's load sends them (curve.Load)
        load = curve.Load(conns)  # one for every sending, as the curve keeps one for a step
        for _ in range(3):  # registered, then renewed from memory from the next sending on
            load.send(frames, None)
        time.sleep(SETTLE_SECONDS)
        print(f"{a.tree}: {a.step}, {len(tables):,} brokers' heartbeats (load {os.getloadavg()[0]:.1f})", flush=True)
        for spread in spreads:
            got = sending(load.send, frames, spread, reactor, pid)
            how = f"over {spread:g} s" if spread else "8 in flight"
            print(f"  {how:>12}: {got['cpu_ms']:7.1f} ms of the reactor's CPU, {got['slices']:5} times on a CPU "
                  f"({got['wakeups']:5} woken), "
                  f"{got['cpu_ms'] * 1e3 / len(tables):6.1f} µs a heartbeat (wall {got['wall_s']:.2f} s, "
                  f"load {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        if load is not None:
            load.close()
        curve.ended(server, conns)
        curve.tidy(scratch)


if __name__ == "__main__":
    main()
