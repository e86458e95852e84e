#!/usr/bin/env python3
"""What a first registration costs the real server, counted in instructions: the same on a loaded machine.

A benchmark, not a test.  Runs ``python -m twisted_namesrv`` under valgrind's callgrind twice,
registering a curve step's first ``--fewer`` brokers and then its first ``--more`` (each broker's
table once, 8 in flight, as ``scale.py --curve`` sends them), and prints the difference over the
difference in brokers: the instructions of one first registration, the accepts, the reactor's
turns, reads and sends included, start-up and idle time left out, and the server's timers held off
(``UNTIMED``: their work is per second, and valgrind makes a second of the server's some fifty).
Each run is counted from the server's start to the last answer (``counted_so_far``: a dump
callgrind_control asks for), before the brokers' connections close: counted at the server's exit,
as before, each broker's departure (its route events, its line, its topics let go: about 0.17 M
instructions) came into the count as if it were its registration's.  A shared machine moves CPU
time by tens of percent; this moves by about one.
``--tree DIR`` counts another checkout's code (a ``git worktree`` of another commit), run from
that directory (``python -c`` puts the working directory first on the path).  ``--repeated``
counts a repeated registration instead (the curve's second phase: each table sent again on its
connection, a heartbeat renewed): ``--more`` brokers registered once, then sent again ``--renewals``
times (4), the difference over the renewals.  One renewal is a seventh of a first registration, and
two runs' first registrations and start-ups differ by tens of millions of instructions: sent once
more (1,000 brokers), four commits of one day counted 0.095-0.194 M, not in the order of the commits.
``--at-once`` sends every broker's table at once (as brokers reconnecting after a restart of the
NameServer), not 8 in flight.  ``--lookups N`` counts a route lookup instead: ``--fewer`` brokers
registered, then the probe's topic looked up N and 2N times in a closed loop on one connection (the
curve's probe's, without its sleep), every lookup a wake-up of the reactor, a read and a send.
``--idle N`` holds N client connections open throughout, each having looked the probe's topic up
once (the curve's ``clients-10k`` and ``clients-19.5k`` hold 10,000 and 19,500): whether a lookup or
a heartbeat costs more with more connections held (their opening is in both runs alike).

    .venv/bin/python tools/bench/instructions.py [--step brokers-5000] [--fewer 500] [--more 1500] [--tree D]
    .venv/bin/python tools/bench/instructions.py --at-once
    .venv/bin/python tools/bench/instructions.py --kept-lookup    (a lookup's answer kept, as the curve's probe's)
    .venv/bin/python tools/bench/instructions.py --repeated [--renewals 4] [--step brokers-5000] [--more 1500]
    .venv/bin/python tools/bench/instructions.py --lookups 3000 [--fewer 10] [--idle 19500]

Needs valgrind (``apt-get install valgrind``: callgrind and callgrind_control); each run takes a minute or two.
"""

from __future__ import annotations

import argparse
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import curve  # noqa: E402  (tools/bench: the curve's tables, frames and server child)

#: a callgrind dump's count of instructions, from the start to the dump
COUNTED = re.compile(r"^summary:\s+(\d+)", re.MULTILINE)
#: seconds between the connections that wake the server until callgrind has written its dump
WAKE_EVERY = 0.5
#: the seconds every timer of the server waits for its next call while counted: none comes
HELD_SECONDS = 1e6
#: every timer of the server made to wait HELD_SECONDS (``timers.ClockedTimerService`` makes them all:
#: the expiry scan, the event and topology writers, ...; the call each makes at its start stays, once in
#: either run).  A timer's work comes per second, not per registration, and valgrind makes each
#: registration some 50 times as long: the events file's save every 2 s (200 events as JSON, about
#: 6 M instructions a save) was counted into the registrations, as many saves as the run's time held
#: (callgrind of the real server, 600 brokers: 35 saves, 30% of the count; more on a loaded machine)
HOLD_TIMERS = ("import twisted_namesrv.timers as t; made = t.ClockedTimerService.__init__; "
               f"t.ClockedTimerService.__init__ = lambda self, step, *rest: made(self, {HELD_SECONDS!r}, *rest)")
#: ``python -m twisted_namesrv``, its timers held off
UNTIMED = HOLD_TIMERS + "; from twisted_namesrv.__main__ import main; main()"


def count(tree: Path, step: curve.Step, brokers: int, python: str, sends: int = 1, lookups: int = 0,
          spread: float | None = None, storm: float | None = None, kept_lookup: bool = False,
          layer: str | None = None, idle: int = 0) -> int:
    """The server's instructions from its start to its last answer, ``brokers`` of the step
    registered (each table sent ``sends`` times, the curve's way: all once, then all again), then
    ``lookups`` route lookups in a closed loop on one connection (the curve's probe's, without its
    sleep); the brokers' connections close after the count, so their departures are not in it.
    ``spread``: the brokers' tables sent that many seconds apart in all, not 8 in flight (curve.send_all);
    ``storm``: so the sends after the first (a storm's heartbeats, the curve's spread over its second);
    ``kept_lookup``: the probe's topic looked up twice first (its answer kept, as the curve's probe's
    is, its broker connected throughout: ``keep_lookup``); ``layer``: only what runs inside that
    function's calls (``layers.py``'s rule and names: each call routed through ``operator.call``,
    which callgrind alone counts), its callees included; ``idle``: that many client connections
    held open throughout, each having looked the probe's topic up once (``hold_idle``)."""
    tables = curve.broker_tables(step)[:brokers]
    frames = [curve.register_frames(name, addr, topics, 1) for name, addr, topics in tables]
    scratch = Path(tempfile.mkdtemp(prefix="namesrv-instructions-"))
    out = scratch / "callgrind.out"
    code, only = UNTIMED, ""
    if layer is not None:
        code = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); import layers; "
                f"layers.COUNTING[0] = True; layers.wrap({layer!r}); {UNTIMED}")
        only = "--collect-atstart=no --toggle-collect=_operator_call "
    command = (f"valgrind --tool=callgrind {only}--callgrind-out-file={shlex.quote(str(out))}.%p {shlex.quote(python)} "
               f"-c {shlex.quote(code)} --port {{port}} --bind 127.0.0.1 --data-dir {{data_dir}} "
               "--compat {compat}")
    if idle:  # room for them, and none closed as idle while valgrind slows everything some fifty times
        props = scratch / "idle.properties"
        props.write_text(f"maxConnections={idle + brokers + 100}\nserverChannelMaxIdleTimeSeconds=86400\n")
        command += f" -c {shlex.quote(str(props))}"
        curve.raise_fd_limit(idle + brokers + 100)
    curve.REPO = tree  # the server's working directory: its code
    server = curve.Server(command, scratch, "counted", step=step)
    conns: list[socket.socket] = []
    prober: socket.socket | None = None
    held: list[socket.socket] = []
    try:
        port = server.wait_ready(300)
        held = hold_idle(port, idle)

        conns = [socket.create_connection((curve.HOST, port)) for _ in tables]
        for conn in conns:
            conn.setblocking(False)  # as the curve's load sends them (curve.send_all)
        prober = keep_lookup(port) if kept_lookup else None
        for sent in range(sends):
            curve.send_all(conns, frames, spread if not sent or storm is None else storm)
        look_up(port, lookups)
        return counted_so_far(server.proc.pid, port, out)
    finally:
        for conn in conns + held:
            conn.close()
        if prober is not None:
            prober.close()
        server.stop()
        server.discard()
        for dump in scratch.glob(f"{out.name}.*"):  # (megabytes each, read already)
            dump.unlink()
        curve.tidy(scratch)


def hold_idle(port: int, count: int) -> list[socket.socket]:
    """``count`` client connections, each having looked the probe's topic up once (its route
    registered first on a broker of its own, gone again), held open as the curve's clients are."""
    if not count:
        return []
    with socket.create_connection((curve.HOST, port)) as broker:
        curve.register_probe(broker)
        return curve.open_clients(port, count)


def keep_lookup(port: int) -> socket.socket:
    """The probe's topic registered on a broker connection of its own and looked up twice (its
    answer decoded and kept, then served from memory), as the curve's probe's is while its load
    runs: that broker's connection, to close once they are done (its route stays until then)."""
    broker = socket.create_connection((curve.HOST, port))
    curve.register_probe(broker)
    with socket.create_connection((curve.HOST, port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for opaque in (1, 2):
            s.sendall(curve.frame(105, {"topic": curve.PROBE_TOPIC}, opaque=opaque))
            curve.read_answer(s)
    return broker


def callgrind_control(pid: int, port: int, *args: str, timeout: float = 300) -> None:
    """``callgrind_control ARGS PID``, answered once the server runs: an idle one sleeps in epoll, so
    a connection opened and closed every WAKE_EVERY s wakes it (the probe's lookups do meanwhile)."""
    control = subprocess.Popen(["callgrind_control", *args, str(pid)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while control.poll() is None:
        if time.monotonic() > deadline:
            control.kill()
            raise RuntimeError(f"callgrind_control {' '.join(args)} not answered by {pid} in {timeout:.0f} s")
        time.sleep(WAKE_EVERY)
        if control.poll() is None:
            socket.create_connection((curve.HOST, port)).close()
    if control.returncode != 0:
        raise RuntimeError(f"callgrind_control {' '.join(args)} exited {control.returncode}")


def counted_so_far(pid: int, port: int, out: Path, timeout: float = 300) -> int:
    """The instructions server ``pid`` ran from its start until now: a dump of callgrind's counters
    (``callgrind_control --dump``, written to ``out``.PID.1).  Valgrind reads the request only while
    the server runs, and an idle one sleeps in epoll (its timers held): a connection opened and
    closed every WAKE_EVERY seconds wakes it (an accept and a close, alike in every run, before the
    dump or after it)."""
    callgrind_control(pid, port, "--dump=answered", timeout=timeout)
    dump = Path(f"{out}.{pid}.1")
    found = COUNTED.search(dump.read_text()) if dump.exists() else None
    if found is None:
        raise RuntimeError(f"no dump of {pid}'s count")
    return int(found.group(1))


def look_up(port: int, lookups: int) -> None:
    """``lookups`` of the probe's topic, registered first on a broker of its own that stays
    connected meanwhile (curve.run_step's: its connection closed, the broker and the route go)."""
    if not lookups:
        return
    with socket.create_connection((curve.HOST, port)) as broker:
        curve.register_probe(broker)
        with socket.create_connection((curve.HOST, port)) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for opaque in range(1, lookups + 1):
                s.sendall(curve.frame(105, {"topic": curve.PROBE_TOPIC}, opaque=opaque))
                curve.read_answer(s)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--step", default="brokers-5000", help="the curve step whose brokers register (curve.py)")
    p.add_argument("--fewer", type=int, default=500, metavar="N")
    p.add_argument("--more", type=int, default=1500, metavar="N")
    p.add_argument("--repeated", action="store_true", help="count a repeated registration (--more brokers)")
    p.add_argument("--renewals", type=int, default=4, metavar="R", help="with --repeated: the tables sent R times more")
    p.add_argument("--storm", type=float, metavar="S",
                   help="with --repeated: each sending again spread over S seconds (a storm's), not 8 in flight: "
                        "under valgrind, S long enough puts each heartbeat in a reactor turn of its own, as a "
                        "storm on a quiet machine does")
    p.add_argument("--kept-lookup", action="store_true",
                   help="a route lookup's answer kept first, as the curve's probe's is throughout its phases")
    p.add_argument("--at-once", action="store_true",
                   help="every broker's table sent at once (as after a restart), not 8 in flight")
    p.add_argument("--lookups", type=int, default=0, metavar="N",
                   help="count a route lookup instead: N, then 2N in a closed loop on one connection (--fewer brokers)")
    p.add_argument("--layer", metavar="L",
                   help="count only inside this function's calls, its callees included (layers.py's names: "
                        "module:Class:name or module::name), e.g. twisted_namesrv.server:RemotingProtocol:dataReceived")
    p.add_argument("--idle", type=int, default=0, metavar="N",
                   help="N client connections held open throughout, each having looked a topic up once")
    curve.add_server_options(p, "the checkout whose server is counted (this one)")
    a = p.parse_args()
    if a.more <= a.fewer:
        p.error("--more must be more than --fewer")
    curve.beside_the_server()
    step = curve.step_named(a.step)
    if a.lookups:
        once, twice = (count(a.tree.resolve(), step, a.fewer, a.python, lookups=n, idle=a.idle)
                       for n in (a.lookups, 2 * a.lookups))
        print(f"{a.tree}: {(twice - once) / a.lookups / 1e3:.1f} k instructions a route lookup ({a.step}, "
              f"{a.fewer:,} brokers registered, {a.idle:,} idle connections, then {a.lookups:,} and "
              f"{2 * a.lookups:,} lookups: {once:,} and {twice:,})", flush=True)
        return
    if a.repeated:
        once, again = (count(a.tree.resolve(), step, a.more, a.python, sends, storm=a.storm, kept_lookup=a.kept_lookup,
                             idle=a.idle) for sends in (1, 1 + a.renewals))
        how = ("" if a.storm is None else f", each time spread over {a.storm:g} s") + (
            ", a lookup's answer kept" if a.kept_lookup else "") + (f", {a.idle:,} idle connections" if a.idle else "")
        print(f"{a.tree}: {(again - once) / a.more / a.renewals / 1e6:.3f} M instructions a repeated registration "
              f"({a.step}, {a.more:,} brokers registered, then sent again 0 and {a.renewals} times{how}: {once:,} "
              f"and {again:,})", flush=True)
        return
    spread = 1e-6 if a.at_once else None
    fewer, more = (count(a.tree.resolve(), step, n, a.python, spread=spread, layer=a.layer, kept_lookup=a.kept_lookup)
                   for n in (a.fewer, a.more))
    within = "" if a.layer is None else f" within {a.layer}"
    how = (", at once" if a.at_once else "") + (", a lookup's answer kept" if a.kept_lookup else "")
    print(f"{a.tree}: {(more - fewer) / (a.more - a.fewer) / 1e6:.3f} M instructions a first registration{within} "
          f"({a.step}, {a.fewer:,} and {a.more:,} brokers{how}: {fewer:,} and {more:,})", flush=True)


if __name__ == "__main__":
    main()
