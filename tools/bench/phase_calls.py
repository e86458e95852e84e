#!/usr/bin/env python3
"""What the real server does over a curve step's first registration phase, as the kernel counts it.

A benchmark, not a test.  Starts ``python -m twisted_namesrv`` (from ``--tree``) as the curve does
(on core 0, the brokers on core 1), connects a step's brokers and waits until every connection is
accepted, then sends each broker's table once, 8 in flight (``curve.send_all``: the phase the
curve times, whose accepts come before it), and reads the server's own counters around exactly
that phase, until the server is idle again: its CPU split into user and system time and its minor
page faults (``/proc/PID/stat``), its RSS before and after, its main thread's wake-ups and
preemptions (``/proc/PID/status``), and the collector's passes by generation with their time
(``gc.callbacks``, read through a signal).  ``--syscalls`` counts the server's system calls over
the same phase, every thread's, by the kernel's tracepoints (``perf stat -e syscalls:sys_enter_...``:
nothing stops the server, as ``strace`` would, whose ptrace stops made the threads' hand-overs of the
interpreter's lock, ``futex``, ten times as many), as calls per registration; ``--record FILE``
samples where the server's CPU goes over it instead, kernel and user space (``perf record -e cpu-clock
-g``; then ``perf report -i FILE --no-children --sort dso``).  No probe runs: its lookups are the
curve's, for any server alike.

    .venv/bin/python tools/bench/phase_calls.py [--step brokers-5000] [--brokers N] [--syscalls] [--tree DIR]
    .venv/bin/python tools/bench/phase_calls.py --record FILE

Counts (calls, faults, passes) hold on a loaded machine; times do not.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import curve  # noqa: E402  (tools/bench: the curve's tables, frames and server child)
from procfs import TICKS, pid_stat, status_kib  # noqa: E402  (beside this file: /proc read one way)

#: the server started with the collector's passes counted, written to OUT (a JSON file) on SIGUSR2
COUNTED_GC = """
import gc, json, signal, time
passes, seconds, began = [0, 0, 0], [0.0, 0.0, 0.0], [0.0]
def _heard(phase, info):
    if phase == "start":
        began[0] = time.thread_time()
    else:
        passes[info["generation"]] += 1
        seconds[info["generation"]] += time.thread_time() - began[0]
gc.callbacks.append(_heard)
def _dump(*_):
    with open(OUT, "w") as f:
        json.dump({"passes": passes, "seconds": seconds}, f)
signal.signal(signal.SIGUSR2, _dump)
from twisted_namesrv.__main__ import main
main()
"""


#: the system calls counted one by one (``--syscalls``; all of them together besides)
SYSCALLS = ("epoll_wait", "epoll_ctl", "recvfrom", "sendto", "write", "futex", "accept4", "setsockopt", "getsockopt",
            "getpeername", "getsockname", "fcntl", "ioctl", "mmap", "munmap", "brk", "openat", "fsync")


def counters(pid: int) -> dict[str, float]:
    """The process's user and system CPU seconds, minor faults and RSS (MiB), and its main thread's
    voluntary (woken from a sleep) and involuntary (preempted) switches (all 0 once it is gone)."""
    stat = pid_stat(pid)
    status = status_kib(pid, ("VmRSS", "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")) or {}
    return {"user": stat.utime / TICKS if stat else 0.0, "system": stat.stime / TICKS if stat else 0.0,
            "minor_faults": stat.minflt if stat else 0, "rss_mib": status.get("VmRSS", 0) / 1024,
            "woken": status.get("voluntary_ctxt_switches", 0),
            "preempted": status.get("nonvoluntary_ctxt_switches", 0)}


def collector(pid: int, out: Path) -> dict[str, Any]:
    """The server's collector passes so far (its COUNTED_GC handler writes them to ``out``)."""
    out.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR2)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            return json.loads(out.read_text())
        except (OSError, ValueError):  # not written yet, or half written
            time.sleep(0.05)
    raise RuntimeError(f"the server {pid} did not say its collector's passes")


def until_idle(pid: int, timeout: float = 60) -> None:
    """Back once the server's CPU grew under 0.02 s in three samples of 0.2 s in a row."""
    deadline, quiet = time.monotonic() + timeout, 0
    last = sum(counters(pid)[k] for k in ("user", "system"))
    while quiet < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
        now = sum(counters(pid)[k] for k in ("user", "system"))
        quiet, last = quiet + 1 if now - last < 0.02 else 0, now


def measure(tree: Path, step: curve.Step, brokers: int, python: str, syscalls: bool, record: Path | None) -> str:
    tables = curve.broker_tables(step)[:brokers]
    frames = [curve.register_frames(name, addr, topics, 1) for name, addr, topics in tables]
    scratch = Path(tempfile.mkdtemp(prefix="namesrv-phase-"))
    passes_out, calls_out = scratch / "gc.json", scratch / "syscalls.txt"
    props = scratch / "max.properties"
    props.write_text(f"maxConnections={brokers + 1000}\n")
    code = f"OUT = {str(passes_out)!r}\n{COUNTED_GC}".replace("{", "{{").replace("}", "}}")
    command = (f"{shlex.quote(python)} -c {shlex.quote(code)} --port {{port}} --bind 127.0.0.1 "
               f"--data-dir {{data_dir}} --compat {{compat}} -c {props}")
    curve.REPO = tree  # the server's working directory: its code
    server = curve.Server(command, scratch, "phase", step=step)
    conns: list[socket.socket] = []
    tracer: subprocess.Popen[bytes] | None = None
    try:
        port = server.wait_ready(120)
        pid = server.main_pid()
        conns = [socket.create_connection((curve.HOST, port)) for _ in tables]
        for conn in conns:
            conn.setblocking(False)  # as the curve's load sends them (curve.send_all)
        until_idle(pid)  # every connection accepted: the phase holds none of the accepts, as the curve's
        if syscalls:
            events = ",".join(["raw_syscalls:sys_enter", *(f"syscalls:sys_enter_{name}" for name in SYSCALLS)])
            tracer = subprocess.Popen(["perf", "stat", "-x", ",", "-e", events, "-o", str(calls_out), "-p", str(pid)],
                                      stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # attached (to every thread)
        elif record is not None:
            tracer = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-F", "4000", "-g", "-o", str(record),
                                       "-p", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)
        gc0, before, began = collector(pid, passes_out), counters(pid), time.monotonic()
        curve.send_all(conns, frames, None)
        took = time.monotonic() - began
        until_idle(pid)
        after, gc1 = counters(pid), collector(pid, passes_out)
        if tracer is not None:
            tracer.send_signal(signal.SIGINT)
            tracer.wait(60)
        d = {k: after[k] - before[k] for k in before}
        passes = [b - a for a, b in zip(gc0["passes"], gc1["passes"], strict=True)]
        ms = [round((b - a) * 1e3, 1) for a, b in zip(gc0["seconds"], gc1["seconds"], strict=True)]
        lines = [f"{tree}: {brokers:,} first registrations ({step.name}) in {took:.3f} s"
                 f", load {os.getloadavg()[0]:.1f}: user {d['user']:.2f} s, "
                 f"system {d['system']:.2f} s; {d['minor_faults']:,.0f} minor faults "
                 f"({d['minor_faults'] / brokers:.2f} a registration), RSS {before['rss_mib']:.1f} -> "
                 f"{after['rss_mib']:.1f} MiB; main thread woken {d['woken']:,.0f}, preempted {d['preempted']:,.0f}; "
                 f"collector passes by generation {passes}, {ms} ms of its thread's CPU"]
        if syscalls:
            lines.append(per_registration(calls_out.read_text(), brokers))
        return "\n".join(lines)
    finally:
        if tracer is not None and tracer.poll() is None:
            tracer.kill()
        curve.ended(server, conns)
        passes_out.unlink(missing_ok=True)
        calls_out.unlink(missing_ok=True)
        curve.tidy(scratch)


def per_registration(report: str, brokers: int) -> str:
    """``perf stat -x,``'s counts as calls per registration, most first, all of them first."""
    calls: list[tuple[int, str]] = []
    for line in report.splitlines():
        parts = line.split(",")
        if len(parts) >= 3 and parts[0].isdigit():
            event = parts[2]
            calls.append((int(parts[0]), "all" if event.startswith("raw_") else event.rpartition("sys_enter_")[2]))
    return "system calls a registration: " + ", ".join(
        f"{name} {count / brokers:.2f}" for count, name in sorted(calls, reverse=True) if count)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--step", default="brokers-5000", help="the curve step whose brokers register (curve.py)")
    p.add_argument("--brokers", type=int, metavar="N", help="the step's first N brokers (all of them)")
    syscalls = p.add_mutually_exclusive_group()
    syscalls.add_argument("--syscalls", action="store_true", help="count the system calls over the phase (perf stat)")
    syscalls.add_argument("--record", type=Path, metavar="FILE",
                          help="sample the server's CPU over the phase (perf record)")
    curve.add_server_options(p)
    a = p.parse_args()
    curve.beside_the_server()
    step = curve.step_named(a.step)
    print(measure(a.tree.resolve(), step, a.brokers or step.brokers, a.python, a.syscalls, a.record), flush=True)


if __name__ == "__main__":
    main()
