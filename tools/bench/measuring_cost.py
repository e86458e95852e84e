#!/usr/bin/env python3
"""What the curve's own measuring processes cost in a heartbeat storm: the brokers' load (the curve's
process, ``curve.send_all``) per frame and the probe (``curve.probe_loop``) per lookup, by their CPU
(the load's ``process_time``, the probe's schedstat) and, where ``perf`` can count the kernel's
``raw_syscalls:sys_enter`` tracepoint, their system calls.  Both share core 1 beside the server's
core 0; what they take of it is what a lookup's round trip may wait behind on their side.

A benchmark, not a test.  Runs our server (``python -m twisted_namesrv``, core 0; ``--server-cmd``
another, as the curve's ``--compare``: the probe must cost the same against either), registers a
curve step's first ``--brokers`` brokers twice (their heartbeats renewed from memory from then on),
starts the probe as the curve does, and sends the storm ``--storms`` times, each spread over
``--spread`` seconds as the curve's.  ``--bench DIR`` takes curve.py from another checkout's
tools/bench (a ``git worktree`` of another commit), to count its load and probe the same way;
``--probe-split`` runs the probe that reads the wait's split around each lookup (curve.py's
``--probe-split``), where this checkout has it.

``--instructions`` counts instead, which a loaded machine does not move: the same run under valgrind's
callgrind (valgrind on PATH), its counters zeroed and dumped around the storms and around twice as
many, then around ``--lookups`` of the probe's loop run in this process (at SCHED_IDLE: slow under
valgrind, it sleeps between lookups all the same) and twice as many; the difference of each pair
(its start-up and the ``callgrind_control`` calls' own are alike in both), over the frames and the
lookups that made it.

    .venv/bin/python tools/bench/measuring_cost.py [--step brokers-5000] [--brokers 5000] [--storms 3] \\
        [--spread 1] [--bench DIR] [--probe-split] [--server-cmd CMD] [--instructions [--lookups 640]]
"""

from __future__ import annotations

import argparse
import inspect
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def syscalls_of(pid: int) -> subprocess.Popen[str] | None:
    """``perf stat`` counting ``pid``'s system calls until it is sent SIGINT (None without perf)."""
    perf = shutil.which("perf")
    if perf is None:
        return None
    return subprocess.Popen([perf, "stat", "-x", ",", "-e", "raw_syscalls:sys_enter", "-p", str(pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def counted(perf: subprocess.Popen[str] | None) -> int | None:
    """The count a ``syscalls_of`` run ends with (None when there is none)."""
    if perf is None:
        return None
    perf.send_signal(signal.SIGINT)
    _, err = perf.communicate(timeout=30)
    for line in err.splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[2].startswith("raw_syscalls:sys_enter") and fields[0].isdigit():
            return int(fields[0])
    return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--step", default="brokers-5000", help="the curve step whose brokers register (curve.py)")
    p.add_argument("--brokers", type=int, default=5000, metavar="N", help="its first N brokers")
    p.add_argument("--storms", type=int, default=3)
    p.add_argument("--spread", type=float, default=1.0, metavar="S")
    p.add_argument("--bench", type=Path, default=HERE, help="the tools/bench whose curve.py sends and probes")
    p.add_argument("--probe-split", action="store_true", help="the probe that reads the wait's split")
    p.add_argument("--server-cmd", metavar="CMD", help="another NameServer, as the curve's --compare runs it "
                   "(e.g. Java's tools/bench/java-step.sh {compat} {topics} {port} {data_dir})")
    p.add_argument("--instructions", action="store_true",
                   help="count instructions under callgrind instead (the load's a frame, the probe's a lookup)")
    p.add_argument("--lookups", type=int, default=640, metavar="N", help="with --instructions: the probe's lookups")
    p.add_argument("--counted", type=Path, metavar="OUT", help=argparse.SUPPRESS)  # the run under callgrind
    a = p.parse_args()
    if a.instructions:
        instructions(a)
        return
    sys.path.insert(0, str(a.bench.resolve()))
    import curve  # the load and the probe measured: this checkout's or --bench's
    from procfs import Schedstat  # this checkout's or --bench's, alike

    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {1})  # the load on core 1, as the curve runs it
    step = curve.step_named(a.step)
    tables = curve.broker_tables(step)[:a.brokers]
    frames = [curve.register_frames(name, addr, topics, 1) for name, addr, topics in tables]
    scratch = Path(tempfile.mkdtemp(prefix="namesrv-measuring-cost-"))
    curve.REPO = HERE.parents[1]  # our server from this checkout, whichever curve.py measures
    server = curve.Server(a.server_cmd, scratch, "server", step=step)
    conns: list[socket.socket] = []
    try:
        port = server.wait_ready(120)
        with socket.create_connection((curve.HOST, port)) as s:  # the probe's topic, as the curve registers it
            curve.register_probe(s)
            conns = [socket.create_connection((curve.HOST, port)) for _ in tables]
            for conn in conns:
                conn.setblocking(False)
            # one load for the step as the curve keeps it (curve.Load), where the curve.py measured has it
            load = curve.Load(conns) if hasattr(curve, "Load") else None
            send = load.send if load else lambda frames, spread: curve.send_all(conns, frames, spread)
            for _ in range(2):  # registered, then renewed from memory from the next sending on
                send(frames, None)
            if a.counted:
                counted_spans(a, curve, lambda: send(frames, a.spread), port, server.main_pid())
                return
            stop, (receive, sink) = multiprocessing.Event(), multiprocessing.Pipe(duplex=False)
            kwargs: dict[str, Any] = {}
            if "split" in inspect.signature(curve.probe_loop).parameters:
                kwargs["split"] = a.probe_split
            probe = multiprocessing.Process(target=curve.probe_loop, args=(port, stop, sink, server.main_pid()),
                                            kwargs=kwargs, daemon=True)
            probe.start()
            time.sleep(1.0)
            probe_stat = Schedstat(f"/proc/{probe.pid}/task/{probe.pid}/schedstat")
            sent = sum(len(f) for f in frames) * a.storms
            served = "ours" if a.server_cmd is None else a.server_cmd.split()[0]
            print(f"{a.bench}, {served}: {a.step}, {len(tables):,} brokers, {a.storms} storms over {a.spread:g} s "
                  f"(load {os.getloadavg()[0]:.1f}){', probe split' if kwargs.get('split') else ''}", flush=True)
            counting = time.monotonic()
            load_perf, probe_perf = syscalls_of(os.getpid()), syscalls_of(probe.pid)
            time.sleep(0.5)  # perf attached
            began, load0, probe0 = time.monotonic(), time.process_time(), probe_stat.read()[0]
            for _ in range(a.storms):
                send(frames, a.spread)
            wall, load_s = time.monotonic() - began, time.process_time() - load0
            probe_ms = probe_stat.read()[0] - probe0
            load_calls, probe_calls = counted(load_perf), counted(probe_perf)
            counted_until = time.monotonic()
            stop.set()
            samples = receive.recv() if receive.poll(60) else []
            probe.join(10)
            probe_stat.close()
            lookups = sum(1 for sample in samples if began <= sample[0] <= began + wall)
            lookups_counted = sum(1 for sample in samples if counting <= sample[0] <= counted_until)
    finally:
        curve.ended(server, conns)
        curve.tidy(scratch)
    print(f"  load: {load_s * 1e3:.1f} ms of CPU for {sent:,} frames, {load_s * 1e6 / sent:.1f} µs a frame"
          + (f", {load_calls / sent:.2f} system calls a frame" if load_calls else "")
          + f" (wall {wall:.2f} s)")
    if lookups:
        print(f"  probe: {probe_ms:.1f} ms of CPU for {lookups:,} lookups, {probe_ms * 1e3 / lookups:.1f} µs a lookup"
              + (f", {probe_calls / lookups_counted:.2f} system calls a lookup" if probe_calls else "")
              + f"; the two {(load_s + probe_ms / 1e3) / wall:.3f} of core 1 (load {os.getloadavg()[0]:.1f})")


def callgrind(*command: str) -> None:
    """``callgrind_control COMMAND... PID`` for this process (run under callgrind)."""
    subprocess.run(["callgrind_control", *command, str(os.getpid())], check=True, capture_output=True)


def counted_spans(a: argparse.Namespace, curve: Any, storm: Any, port: int, server_pid: int) -> None:
    """Under callgrind: four dumps, the storms, twice as many, the probe's lookups, twice as many."""
    class Stop:  # the probe's, stopped after ``lookups`` (the minimal loop looks once a batch, the old one a lookup)
        def __init__(self, lookups: int) -> None:
            self.looked = 0
            self.looks = lookups // curve.PROBE_BATCH if hasattr(curve, "PROBE_BATCH") else lookups

        def is_set(self) -> bool:
            self.looked += 1
            return self.looked > self.looks

    class Out:
        def send(self, samples: list[Any]) -> None:
            callgrind("-d", "probe")
            print(f"probe: {len(samples)} lookups", flush=True)

    for times in (1, 2):
        callgrind("-z")
        for _ in range(times * a.storms):
            storm()
        callgrind("-d", "storms")
    kwargs: dict[str, Any] = {}
    if "split" in inspect.signature(curve.probe_loop).parameters:
        kwargs["split"] = a.probe_split
    for times in (1, 2):
        callgrind("-z")
        curve.probe_loop(port, Stop(times * a.lookups), Out(), server_pid, True, **kwargs)


def instructions(a: argparse.Namespace) -> None:
    """This tool again under callgrind (``--counted``), then the second span's instructions less the
    first's (the same work but as much again), over the frames and the lookups that made the difference."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("measuring_cost.py --instructions: valgrind is not installed")
    with tempfile.TemporaryDirectory(prefix="namesrv-measuring-cost-") as scratch:
        out = Path(scratch) / "callgrind.out"
        argv = [arg for arg in sys.argv[1:] if arg != "--instructions"]
        done = subprocess.run([valgrind, "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
                               __file__, *argv, "--counted", str(out)], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(done.stderr[-3000:])
        totals = [summary(Path(f"{out}.{n}")) for n in range(1, 5)]
    frames = a.brokers * a.storms
    looked = [int(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("probe: ")]
    lookups = looked[1] - looked[0] if len(looked) == 2 else a.lookups
    print(f"{a.bench}: {a.step}, {a.brokers:,} brokers, {a.storms} storms over {a.spread:g} s"
          f"{', probe split' if a.probe_split else ''}, instructions (callgrind)")
    print(f"  load: {(totals[1] - totals[0]) / frames / 1e3:.1f} k a frame ({frames:,} frames more)")
    print(f"  probe: {(totals[3] - totals[2]) / lookups / 1e3:.1f} k a lookup ({lookups:,} lookups more)")


def summary(dump: Path) -> int:
    """A callgrind dump's total of instructions (its ``summary:`` line)."""
    for line in dump.read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise ValueError(f"{dump}: no summary line")


if __name__ == "__main__":
    main()
