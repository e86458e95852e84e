#!/usr/bin/env python3
"""What a curve step's heartbeat storm costs the real server over the storm's window alone, counted,
with each of ``--connections`` idle client connections held: what of it grows with them.

A benchmark, not a test (``tests/test_storm_cost.py`` and ``tests/test_reactor.py`` hold what it
found).  Runs ``python -m twisted_namesrv`` (``--tree``: another checkout's) on core 0 as the curve
runs it (``curve.ours_for``: maxConnections above the step's), then the curve's phases up to the
storm: the step's brokers register (8 in flight), N client connections each look the probe's topic
up once and stay (``curve.open_clients``; the brokers' tables sent again every 30 s meanwhile,
which under valgrind takes minutes), the brokers send their tables again, the curve's probe looks it up
in its closed loop throughout (``curve.probe_loop``, on core 1 ahead of the load; ``--no-probe``:
none).  Then the storm: every broker's tables again, spread over ``--spread`` s (``curve.Load``).
The window is the storm until its last answer and ``--settle`` s after it (0.6: the least the
curve's ``cpu_until_idle`` counts after a phase), the probe's lookups in it counted.  Over it:

- the server's CPU, user and system (``/proc/PID/stat``, every thread), its reactor thread's
  (``schedstat``, exact) and wake-ups (``voluntary_ctxt_switches``);
- with ``--syscalls``: its system calls by name, every thread's (``perf stat`` on the
  ``syscalls:sys_enter_*`` tracepoints, attached with its events off and turned on and off at the
  window's ends through its control fifo: the kernel counts, the server runs as it does);
- with ``--instructions``: its instructions instead (the server under valgrind's callgrind, its
  counters zeroed at the window's start and dumped at its end with ``callgrind_control``; valgrind
  makes it some fifty times as slow, so the probe answers as many fewer lookups and the timers'
  ticks, per second, weigh fifty times as much: read them per lookup and with ``--no-probe``, whose
  window is the ten heartbeats and the ticks).  ``--keep DIR`` keeps the dumps
  (``callgrind_annotate DIR/storm-N.out``: by C function, the interpreter's, the kernel's calls and
  the C library's apart).

``--poll-rooms`` counts what the reactor's poll of the clients' set costs by the room it asks for
(Python's ``epoll.poll`` allocates room for that many events and frees it at every poll): one such
poll in a loop of its own, one socket ready, under callgrind and strace.

Each ``--rounds`` runs every connection count in turn.  Counts hold on a loaded machine; the CPU
does not (the machine's load average is printed with each run).

    .venv/bin/python tools/bench/storm_counts.py [--step base] [--connections 1000,10000] [--syscalls]
    .venv/bin/python tools/bench/storm_counts.py --instructions [--no-probe] [--keep DIR]
    .venv/bin/python tools/bench/storm_counts.py --poll-rooms 1024,10002,19502
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import curve  # noqa: E402  (tools/bench: the curve's tables, frames, load, probe and server child)
from instructions import callgrind_control  # noqa: E402
from procfs import Schedstat, pid_stat, thread_switches  # noqa: E402

#: a callgrind dump's count of instructions, from its last zeroing to the dump
COUNTED = re.compile(r"^summary:\s+(\d+)", re.MULTILINE)


class Syscalls:
    """``perf stat`` on every ``syscalls:sys_enter_*`` tracepoint of process ``pid`` (its threads),
    its events off until ``start`` and off again at ``stop``: the system calls over the window."""

    def __init__(self, pid: int, scratch: Path) -> None:
        self.ctl_path, self.ack_path, self.out = scratch / "perf.ctl", scratch / "perf.ack", scratch / "perf.csv"
        for fifo in (self.ctl_path, self.ack_path):
            fifo.unlink(missing_ok=True)
            os.mkfifo(fifo)
        self.proc = subprocess.Popen(["perf", "stat", "-D", "-1", "--control", f"fifo:{self.ctl_path},{self.ack_path}",
                                      "-x,", "-e", "syscalls:sys_enter_*", "-p", str(pid), "-o", str(self.out)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.ctl = open(self.ctl_path, "w")  # (opens once perf has opened its end)
        self.ack = open(self.ack_path)

    def _say(self, command: str) -> None:
        self.ctl.write(command + "\n")
        self.ctl.flush()
        if "ack" not in self.ack.readline():
            raise RuntimeError(f"perf stat did not acknowledge {command!r}")

    def start(self) -> None:
        self._say("enable")

    def stop(self) -> Counter[str]:
        """The window's system calls by name (those that ran at least once)."""
        self._say("disable")
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(30)
        self.ctl.close()
        self.ack.close()
        counts: Counter[str] = Counter()
        for line in self.out.read_text().splitlines():
            fields = line.split(",")
            if len(fields) > 2 and fields[0].isdigit() and fields[2].startswith("syscalls:sys_enter_"):
                if int(fields[0]):
                    counts[fields[2].removeprefix("syscalls:sys_enter_")] = int(fields[0])
        return counts


#: the client connections opened between two looks at the brokers' last sending
CLIENTS_PER_BATCH = 100
#: the brokers' tables sent again while the clients connect, this often (s): under valgrind their
#: opening takes minutes, and a broker silent for 120 s expires (its connection closed)
KEEP_BROKERS_EVERY = 30.0


def open_clients(port: int, count: int, heartbeat: Any) -> list[socket.socket]:
    """``curve.open_clients``'s ``count`` connections, in batches, ``heartbeat()`` called between
    them every KEEP_BROKERS_EVERY s: the brokers' tables sent again, so none expires meanwhile."""
    clients: list[socket.socket] = []
    last = time.monotonic()
    while len(clients) < count:
        clients += curve.open_clients(port, min(CLIENTS_PER_BATCH, count - len(clients)))
        if time.monotonic() - last > KEEP_BROKERS_EVERY:
            heartbeat()
            last = time.monotonic()
    return clients


def command_for(step: curve.Step, scratch: Path, python: str, dumps: Path | None) -> str:
    """Our server as the curve runs it at ``step`` (``curve.ours_for``), under callgrind when
    ``dumps`` is given.  Its idle timeout is raised (the watch runs as ever, on one timer): on a
    loaded machine, or under valgrind, 19,500 clients took more than its 120 s to connect, and the
    first of them were closed as idle in the storm's window (664 closes in one), which the curve's
    quiet rounds, connecting them in seconds, never have."""
    props = scratch / f"ours-{step.clients}.properties"
    lines = [f"maxConnections={step.clients + step.brokers + 1000}", "serverChannelMaxIdleTimeSeconds=86400"]
    prefix = ""
    if dumps is not None:
        prefix = (f"valgrind --tool=callgrind --callgrind-out-file={shlex.quote(str(dumps))}.%p "
                  "--dump-instr=no --combine-dumps=no ")
    props.write_text("\n".join(lines) + "\n")
    return (f"{prefix}{shlex.quote(python)} -m twisted_namesrv --port {{port}} --bind {curve.HOST} "
            f"--data-dir {{data_dir}} --compat {{compat}} -c {shlex.quote(str(props))}")


def run(step: curve.Step, clients: int, python: str, spread: float, settle: float, probe: bool, syscalls: bool,
        instructions: bool, keep: Path | None) -> dict[str, Any]:
    """One fresh server holding ``clients`` idle client connections through the step's storm: the
    window's counts (module docstring)."""
    step = dataclasses.replace(step, clients=clients)
    scratch = Path(tempfile.mkdtemp(prefix="namesrv-storm-counts-"))
    dumps = scratch / "callgrind.out" if instructions else None
    server = curve.Server(command_for(step, scratch, python, dumps), scratch, f"ours-{clients}", step=step)
    tables = curve.broker_tables(step)
    frames = [curve.register_frames(name, addr, topics, 1) for name, addr, topics in tables]
    conns: list[socket.socket] = []
    held: list[socket.socket] = []
    load: curve.Load | None = None
    prober: multiprocessing.Process | None = None
    stop, (receive, send) = multiprocessing.Event(), multiprocessing.Pipe(duplex=False)
    try:
        port = server.wait_ready(600 if instructions else 120)
        pid = server.main_pid()
        held.append(socket.create_connection((curve.HOST, port)))
        curve.register_probe(held[0])  # the probe's topic, on a broker of its own (kept to the end)
        conns = [socket.create_connection((curve.HOST, port)) for _ in tables]
        for conn in conns:
            conn.setblocking(False)
        load = curve.Load(conns)
        load.send(frames, None)  # first registration
        opened = time.monotonic()
        held += open_clients(port, clients, lambda: load.send(frames, None))
        opened = time.monotonic() - opened
        load.send(frames, None)  # repeated: each heartbeat renewed from memory from now on
        if probe:
            prober = multiprocessing.Process(target=curve.probe_loop, daemon=True,
                                             args=(port, stop, send, pid, False, False))
            prober.start()
        time.sleep(1.0)
        counter = Syscalls(pid, scratch) if syscalls else None
        reactor = Schedstat(f"/proc/{pid}/task/{pid}/schedstat")
        if instructions:
            callgrind_control(pid, port, "--zero")
        if counter is not None:
            counter.start()
        t0, stat0, ran0, woken0 = time.monotonic(), pid_stat(pid), reactor.read()[0], thread_switches(pid)[0]
        load.send(frames, spread)
        time.sleep(settle)
        t1, stat1, ran1, woken1 = time.monotonic(), pid_stat(pid), reactor.read()[0], thread_switches(pid)[0]
        calls = counter.stop() if counter is not None else Counter()
        count = None
        if instructions:
            callgrind_control(pid, port, "--dump=storm")
            dump = Path(f"{dumps}.{pid}.1")
            found = COUNTED.search(dump.read_text())
            if found is None:
                raise RuntimeError(f"no count in {dump}")
            count = int(found.group(1))
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                dump.replace(keep / f"storm-{clients}{'' if probe else '-noprobe'}.out")
        reactor.close()
        samples: list[Any] = []
        if prober is not None:
            stop.set()
            samples = receive.recv() if receive.poll(60) else []
            prober.join(10)
        assert stat0 is not None and stat1 is not None
        return {"clients": clients, "opened_s": opened, "window_s": t1 - t0, "load": os.getloadavg()[0],
                "lookups": sum(1 for sample in samples if t0 <= sample[0] <= t1),
                "user_s": (stat1.utime - stat0.utime) / os.sysconf("SC_CLK_TCK"),
                "system_s": (stat1.stime - stat0.stime) / os.sysconf("SC_CLK_TCK"),
                "reactor_ms": ran1 - ran0, "wakeups": woken1 - woken0, "syscalls": calls, "instructions": count}
    finally:
        stop.set()
        if prober is not None and prober.is_alive():
            prober.join(10)
        if load is not None:
            load.close()
        curve.ended(server, conns, held)
        for dump in scratch.glob("callgrind.out.*"):  # (megabytes each, read already)
            dump.unlink()
        for name in ("perf.ctl", "perf.ack", "perf.csv"):
            (scratch / name).unlink(missing_ok=True)
        curve.tidy(scratch)


#: one poll of an epoll set with one socket ready, asking room for ``sys.argv[1]`` events, ``sys.argv[2]``
#: times over, glibc's mmap threshold held as the server holds it (``heap.fix_mmap_threshold``)
POLLS = """import ctypes, select, socket, sys
room, polls = int(sys.argv[1]), int(sys.argv[2])
ctypes.CDLL(None).mallopt(-3, 1 << 20)
a, b = socket.socketpair()
b.send(b"x")
ep = select.epoll()
ep.register(a.fileno(), select.EPOLLIN)
for _ in range(polls):
    ep.poll(0, room)
"""


def poll_instructions(python: str, room: int, polls: int = 1_000) -> tuple[float, float]:
    """Instructions and ``brk`` calls of one ``epoll.poll`` asking room for ``room`` events, in a loop
    of its own (callgrind and strace, ``polls`` and twice as many: the difference over ``polls``)."""
    counts, brks = [], []
    with tempfile.TemporaryDirectory(prefix="namesrv-polls-") as scratch:
        for n in (polls, 2 * polls):
            out = Path(scratch) / f"cg.{n}"
            subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", python, "-c", POLLS,
                            str(room), str(n)], check=True, capture_output=True)
            found = COUNTED.search(out.read_text())
            assert found is not None
            counts.append(int(found.group(1)))
            traced = subprocess.run(["strace", "-f", "-c", "-e", "trace=brk", python, "-c", POLLS, str(room),
                                     str(n)], check=True, capture_output=True, text=True).stderr
            brks.append(sum(int(line.split()[3]) for line in traced.splitlines() if line.endswith(" brk")))
    return (counts[1] - counts[0]) / polls, (brks[1] - brks[0]) / polls


def said(got: dict[str, Any]) -> str:
    """One run's line: what the window held and cost, and per lookup."""
    lookups = got["lookups"]
    per = (lambda n: f" ({n / lookups:,.1f} a lookup)") if lookups else (lambda n: "")
    line = (f"{got['clients']:>6,} connections (opened in {got['opened_s']:.0f} s): {got['window_s']:.2f} s window, "
            f"{lookups:,} lookups, "
            f"CPU user {got['user_s']:.2f} s system {got['system_s']:.2f} s, reactor {got['reactor_ms']:.1f} ms, "
            f"{got['wakeups']:,} wake-ups (load {got['load']:.1f})")
    if got["instructions"] is not None:
        line += f"\n        {got['instructions']:,} instructions{per(got['instructions'])}"
    if got["syscalls"]:
        total = sum(got["syscalls"].values())
        line += f"\n        {total:,} system calls{per(total)}: " + ", ".join(
            f"{name} {n:,}" for name, n in got["syscalls"].most_common())
    return line


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--step", default="base", help="the curve step whose brokers storm (curve.py; its clients "
                   "are each --connections)")
    p.add_argument("--connections", default="1000,10000", metavar="N,...", help="idle client connections held")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--spread", type=float, default=1.0, metavar="S", help="the storm's spread (the curve's 1 s)")
    p.add_argument("--settle", type=float, default=0.6, metavar="S", help="the window's tail after the last answer")
    p.add_argument("--no-probe", action="store_true", help="no probe's lookups: the heartbeats and the timers alone")
    p.add_argument("--syscalls", action="store_true", help="the system calls by name (perf stat)")
    p.add_argument("--instructions", action="store_true", help="the instructions (callgrind: the server some fifty "
                   "times as slow)")
    p.add_argument("--keep", type=Path, metavar="DIR", help="with --instructions: the window's dumps kept here")
    p.add_argument("--poll-rooms", metavar="N,...", help="count instead one epoll.poll asking room for N events "
                   "(as the reactor asks the clients' set: the descriptors watched and two, at most READY_PER_POLL), "
                   "in a loop of its own: instructions and brk calls a poll")
    curve.add_server_options(p)
    a = p.parse_args()
    if a.poll_rooms:
        for room in (int(n) for n in a.poll_rooms.split(",")):
            instructions, brks = poll_instructions(a.python, room)
            print(f"room for {room:,} events: {instructions:,.0f} instructions and {brks:.2f} brk calls a poll",
                  flush=True)
        return
    if a.syscalls and a.instructions:
        p.error("--syscalls counts valgrind's own calls under --instructions: one or the other")
    counts = [int(n) for n in a.connections.split(",")]
    curve.raise_fd_limit(max(counts) + 1_000)
    curve.beside_the_server()
    curve.REPO = a.tree.resolve()  # the server's working directory: its code
    step = curve.step_named(a.step)
    print(f"{a.tree}: {a.step}'s storm ({step.brokers:,} brokers over {a.spread:g} s, {a.settle:g} s after), "
          f"{'no probe' if a.no_probe else 'the probe looking up'}", flush=True)
    for _ in range(a.rounds):
        for clients in counts:
            print(said(run(step, clients, a.python, a.spread, a.settle, not a.no_probe, a.syscalls,
                           a.instructions, a.keep)), flush=True)


if __name__ == "__main__":
    main()
