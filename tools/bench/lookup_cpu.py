#!/usr/bin/env python3
"""A route lookup's CPU in the real server, with N idle client connections held: what the curve's
storm CPU is made of at its ten-broker steps (the probe's lookups), ours or another NameServer's.

A benchmark, not a test.  Starts the server as the curve does (core 0, ours from the compiled
package, or ``--server-cmd`` with the curve's placeholders, e.g. Java's ``java-step.sh``), registers
the probe's topic, opens ``--connections`` client connections each looking it up once (the curve's
``open_clients``: its ``clients-10k`` step holds 10,000), looks it up ``--warm`` times more, then
``--lookups`` times in the curve's probe's closed loop (0.5 ms asleep between lookups, so every
lookup wakes an idle server), from core 1.  Prints the server's user and system CPU a lookup over
those (its whole process tree, every thread: Java's compilers and collector too; in ticks of
10 ms, so thousands of lookups) and its main thread's wake-ups.  A loaded machine moves the CPU by
tens of percent: compare runs of one hour, interleaved.

    .venv/bin/python tools/bench/lookup_cpu.py [--connections 1000] [--warm 0] [--lookups 3000] \\
        [--server-cmd 'tools/bench/java-step.sh {compat} {topics} {port} {data_dir}']
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import curve  # noqa: E402  (tools/bench: the curve's server child, frames and clients)
from procfs import TICKS, pid_stat, thread_switches  # noqa: E402


def cpu_ticks(pids: list[int]) -> tuple[int, int]:
    """User and system ticks of these processes so far (each its every thread's)."""
    stats = [stat for stat in (pid_stat(pid) for pid in pids) if stat is not None]
    return sum(stat.utime for stat in stats), sum(stat.stime for stat in stats)


def look_up(s: socket.socket, count: int, first: int, pause: float) -> None:
    """``count`` lookups of the probe's topic on ``s``, each answered before the next, ``pause`` s between."""
    for opaque in range(first, first + count):
        s.sendall(curve.frame(105, {"topic": curve.PROBE_TOPIC}, opaque=opaque))
        curve.read_answer(s)
        if pause:
            time.sleep(pause)


def measure(command: str | None, connections: int, warm: int, lookups: int) -> str:
    scratch = Path(tempfile.mkdtemp(prefix="namesrv-lookup-cpu-"))
    step = curve.Step("lookups", 10_000, 10, connections)
    server = curve.Server(command or curve.ours_for(step, scratch), scratch, "lookups", step=step)
    clients: list[socket.socket] = []
    try:
        port = server.wait_ready()
        with socket.create_connection((curve.HOST, port)) as broker:  # the probe's topic, kept registered
            curve.register_probe(broker)
            clients = curve.open_clients(port, connections)
            with socket.create_connection((curve.HOST, port)) as s:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                look_up(s, warm, 1, 0.0)
                time.sleep(1.0)  # what the warm-up left (a compiler's queue) mostly done
                main, tree = server.main_pid(), server.tree()
                (user0, system0), woken0 = cpu_ticks(tree), thread_switches(main)[0]
                look_up(s, lookups, warm + 1, 0.0005)
                (user1, system1), woken1 = cpu_ticks(tree), thread_switches(main)[0]
        user, system = (ticks * 1e6 / TICKS / lookups for ticks in (user1 - user0, system1 - system0))
        return (f"{connections:,} connections held, {warm:,} lookups before, {lookups:,} counted: user "
                f"{user:.1f} µs, system {system:.1f} µs a lookup; the main thread woken {woken1 - woken0:,} "
                f"times (load {os.getloadavg()[0]:.1f})")
    finally:
        curve.ended(server, clients)
        curve.tidy(scratch)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--connections", type=int, default=1_000, help="idle client connections held (each one lookup)")
    p.add_argument("--warm", type=int, default=0, help="lookups more on the probe's connection before the count")
    p.add_argument("--lookups", type=int, default=3_000, help="the lookups counted")
    p.add_argument("--server-cmd", help="another NameServer (curve.Server's placeholders); ours by default")
    a = p.parse_args()
    curve.raise_fd_limit(a.connections + 100)
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {1})  # beside the server's core 0, as the curve's load and probe
    print(f"{a.server_cmd or 'ours'}: {measure(a.server_cmd, a.connections, a.warm, a.lookups)}", flush=True)


if __name__ == "__main__":
    main()
