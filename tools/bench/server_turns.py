#!/usr/bin/env python3
"""What held the real server's reactor: every turn, delayed call and collector pass timed by CPU.

A benchmark, not a test.  Runs ``python -m twisted_namesrv`` with the epoll reactor, and times by
the reactor thread's CPU (``time.thread_time``: a loaded machine moves it far less than a wall
clock) each reactor turn's work after epoll returned (with how many sockets were ready: on the server's
reactor those of the clients' epoll set, where the brokers' set is one), each
delayed call (by the name of what it calls: a timer, the Cooperator's steps, the dispatcher's
waiting registrations) and each collector pass (by generation).  At the stop it writes those of
at least ``--over`` ms of CPU as JSON lines to ``--out`` (kind, monotonic start, CPU ms, what,
wall ms; a turn's also its wait in epoll, the thread's wait for a CPU over both -- a wait the
scheduler made -- the CPU the server's other threads took meanwhile, in ms, and the turn's page
faults that waited for a read, and what it did: the connections it accepted, the ready sockets it
served, the registrations it began); ``--report FILE``
prints the longest of each kind.  Run it as the server of a curve step, where the probe's longest
wait is a wall time that the machine's other work adds to:

    .venv/bin/python tools/bench/scale.py --curve --steps brokers-5000 --rounds 1 \\
        --server-cmd '.venv/bin/python tools/bench/server_turns.py --out /tmp/turns.jsonl -- \\
        --port {port} --bind 127.0.0.1 --data-dir {data_dir} --compat {compat}'
    .venv/bin/python tools/bench/server_turns.py --report /tmp/turns.jsonl [--records RECORDS]

(``--records``: the curve's records file, to report its last run's phases apart.)

``--gc-thresholds A,B,C`` sets the collector's thresholds once the server runs (to compare with
``service.tune_gc``'s); ``--twisted-reactor`` runs it on Twisted's own epoll reactor instead of the
server's (``twisted_namesrv/reactor.py``: the clients' sockets first in a turn), to compare.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import gc
import io
import json
import pstats
import resource
import sys
import time
from pathlib import Path
from typing import Any

from procfs import Schedstat  # beside this file: /proc read one way


def run(out: Path, over_ms: float, thresholds: str | None, server_argv: list[str],
        twisted_reactor: bool = False, profile_over_ms: float | None = None) -> None:
    if twisted_reactor:  # Twisted's own epoll reactor, to compare with the server's (twisted_namesrv/reactor.py)
        from twisted.internet import epollreactor

        epollreactor.install()
    else:
        from twisted_namesrv.reactor import install

        install()
    from twisted.internet import reactor

    records: list[tuple[str, float, float, Any, float]] = []  # (kind, monotonic start, CPU ms, what, wall ms)
    collecting = [0.0, 0.0]

    def collected(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collecting[:] = time.monotonic(), time.thread_time()
        else:
            records.append(("gc", collecting[0], (time.thread_time() - collecting[1]) * 1e3, info["generation"],
                            (time.monotonic() - collecting[0]) * 1e3))
    gc.callbacks.append(collected)

    call_later = reactor.callLater

    def timed_call_later(delay: float, f: Any, *args: Any, **kwargs: Any) -> Any:
        name = getattr(f, "__qualname__", type(f).__name__)
        called = getattr(f, "f", None)  # a LoopingCall: named by what it calls (the events' save, the topology's...)
        if called is not None and not hasattr(f, "__qualname__"):
            name = f"{name} {getattr(called, '__qualname__', type(called).__name__)}"

        def timed(*args: Any, **kwargs: Any) -> Any:
            began, cpu = time.monotonic(), time.thread_time()
            try:
                return f(*args, **kwargs)
            finally:
                records.append(("call", began, (time.thread_time() - cpu) * 1e3, name,
                                (time.monotonic() - began) * 1e3))
        return call_later(delay, timed, *args, **kwargs)
    reactor.callLater = timed_call_later  # type: ignore[method-assign]

    # the epoll object a turn polls: the server's reactor polls its clients' set itself
    sets = getattr(reactor, "_sets", None)
    poller, polled = (reactor._poller if sets is None else sets.clients), {}
    schedstat = Schedstat("/proc/thread-self/schedstat")  # this thread's: the reactor's

    def runqueue_ns() -> int:
        """How long the reactor thread has been runnable, waiting for a CPU (0 where unknown)."""
        return schedstat.read_ns()[1]

    def major_faults() -> int:
        """The reactor thread's page faults that had to wait for a read (a page the kernel dropped)."""
        return resource.getrusage(resource.RUSAGE_THREAD).ru_majflt

    class TimedPoller:
        def poll(self, *args: Any) -> Any:
            waiting, queued, own = time.monotonic(), runqueue_ns(), time.process_time() - time.thread_time()
            events = poller.poll(*args)
            polled.update(began=time.monotonic(), cpu=time.thread_time(), ready=len(events), waiting=waiting,
                          queued=queued, own=own, faults=major_faults())
            return events

        def __getattr__(self, name: str) -> Any:
            return getattr(poller, name)
    if sets is None:
        reactor._poller = TimedPoller()
    else:
        sets.clients = TimedPoller()
    iterate = reactor.doIteration

    # what a turn did, counted: connections accepted, ready sockets served (the server's reactor's),
    # registrations begun (REGISTER_BROKER's handler; a big one's steps go on in the Cooperator's calls)
    counts = {"accepted": 0, "served": 0, "registrations": 0}
    from twisted.internet import tcp

    from twisted_namesrv import lean_transport

    # the listening ports' own class: the server's LeanPort builds an IPv4 peer's address itself (a tree
    # before it: Twisted's Port)
    port_class: Any = getattr(lean_transport, "LeanPort", tcp.Port)
    build_addr = port_class._buildAddr

    def counted_build_addr(port: Any, address: Any) -> Any:  # called once per accepted connection
        counts["accepted"] += 1
        return build_addr(port, address)
    port_class._buildAddr = counted_build_addr
    serve = getattr(reactor, "_serve", None)
    if serve is not None:
        def counted_serve(*args: Any) -> Any:
            counts["served"] += 1
            return serve(*args)
        reactor._serve = counted_serve
    from twisted_namesrv import processor
    from twisted_namesrv.remoting import RequestCode

    register = processor.HANDLERS_IN_STEPS[RequestCode.REGISTER_BROKER]

    def counted_register(*args: Any) -> Any:
        counts["registrations"] += 1
        return (yield from register(*args))
    processor.HANDLERS_IN_STEPS[RequestCode.REGISTER_BROKER] = counted_register

    profiles: list[tuple[float, float, str]] = []  # (monotonic start, CPU ms, the profile's lines)

    def timed_iteration(timeout: float | None) -> None:
        polled.clear()
        counts.update(accepted=0, served=0, registrations=0)
        if profile_over_ms is None:
            iterate(timeout)
        else:
            profiler = cProfile.Profile()
            profiler.enable()
            iterate(timeout)
            profiler.disable()
            if polled and (time.thread_time() - polled["cpu"]) * 1e3 >= profile_over_ms:
                text = io.StringIO()
                pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
                profiles.append((polled["began"], (time.thread_time() - polled["cpu"]) * 1e3, text.getvalue()))
        if polled:
            records.append(("io", polled["began"], (time.thread_time() - polled["cpu"]) * 1e3, polled["ready"],
                            (time.monotonic() - polled["began"]) * 1e3, (polled["began"] - polled["waiting"]) * 1e3,
                            (runqueue_ns() - polled["queued"]) / 1e6,
                            (time.process_time() - time.thread_time() - polled["own"]) * 1e3,
                            major_faults() - polled["faults"], counts["accepted"], counts["served"],
                            counts["registrations"]))
    reactor.doIteration = timed_iteration  # type: ignore[method-assign]

    def write() -> None:
        with out.open("w") as f:
            for record in records:
                if record[2] >= over_ms:
                    f.write(json.dumps(record) + "\n")
        if profile_over_ms is not None:
            with out.with_suffix(".profiles.txt").open("w") as f:
                for began, ms, text in profiles:
                    f.write(f"== turn at {began:.6f}, {ms:.2f} ms of CPU (profiled)\n{text}\n")
    reactor.addSystemEventTrigger("after", "shutdown", write)
    if thresholds:
        values = tuple(int(x) for x in thresholds.split(","))
        reactor.callWhenRunning(lambda: call_later(0.1, gc.set_threshold, *values))
    from twisted_namesrv.__main__ import main
    main(server_argv)


def phase_windows(path: Path | None) -> dict[str, tuple[float, float]]:
    """The phases of the last run in a curve's ``--records`` file (monotonic start, end), none without one."""
    if path is None:
        return {}
    runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    windows = [r["phase_windows"] for r in runs if "phase_windows" in r]
    return {phase: (t0, t1) for phase, (t0, t1) in windows[-1].items()} if windows else {}


def longest_waits(path: Path | None) -> dict[str, tuple[float, float]]:
    """Each phase's longest probe wait in the last run of a curve's ``--records`` file: (monotonic
    start, ms), for the phases that have one."""
    if path is None:
        return {}
    runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    runs = [r for r in runs if "phase_windows" in r]
    if not runs:
        return {}
    at, figures = runs[-1].get("probe_max_at", {}), runs[-1].get("figures", {})
    return {phase: (start, figures[f"{phase}_probe_max_ms"]) for phase, start in at.items()
            if start is not None and f"{phase}_probe_max_ms" in figures}


def during(records: list[list[Any]], start: float, wait_ms: float) -> list[str]:
    """What the reactor thread did while a lookup sent at ``start`` waited ``wait_ms``: each turn's
    reads, delayed call and collector pass that overlapped it (from the lookup's start, ms: its CPU
    and wall time; a turn's reads also the epoll wait before them, the thread's wait for a core
    over that turn and, when any, the CPU the server's other threads took over both: the log's
    and the files' writers), then their CPU together. A wait the server's CPU does not fill is the
    scheduler's (a turn's ``runnable``, an epoll wait that ended long after the lookup came) or idle."""
    end, lines, cpu = start + wait_ms / 1e3, [], 0.0
    for kind, began, ms, what, wall, *more in records:
        if began + wall / 1e3 < start or began > end:
            continue
        cpu += ms
        label = {"io": f"reads ({what} ready)", "gc": f"collector, generation {what}"}.get(kind, f"call {what}")
        extra = f"; epoll wait before {more[0]:.2f}, runnable {more[1]:.2f}" if kind == "io" and len(more) >= 2 else ""
        if kind == "io" and len(more) >= 3 and more[2] >= 0.01:
            extra += f", the server's other threads' CPU {more[2]:.2f}"
        if kind == "io" and len(more) >= 7:
            extra += f"; {more[4]} accepted, {more[5]} sockets served, {more[6]} registrations begun"
        lines.append(f"  {(began - start) * 1e3:+8.2f} ms  {label}: {ms:.2f} ms of CPU in {wall:.2f}{extra}")
    lines.append(f"  the reactor's CPU in it {cpu:.2f} ms of {wait_ms:.2f}")
    return lines


def report(path: Path, top: int, records_path: Path | None = None) -> None:
    """The longest of each kind; with a curve's records, per phase of its last run (those started in
    the phase's window, the whole run's for the rest), and what the reactor did during the phase's
    longest probe wait."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    windows, waits = phase_windows(records_path), longest_waits(records_path)
    for phase, (t0, t1) in windows.items():
        print(f"-- {phase} ({t1 - t0:.3f} s)")
        report_kinds([r for r in records if t0 <= r[1] <= t1], top)
        if (line := served_per_turn([r for r in records if t0 <= r[1] <= t1])) is not None:
            print(line)
        if phase in waits:
            start, wait = waits[phase]
            print(f"the longest probe wait, {wait:.2f} ms:")
            print("\n".join(during(records, start, wait)))
    if windows:
        print("-- the whole run")
    report_kinds(records, top)


def served_per_turn(records: list[list[Any]]) -> str | None:
    """How many ready sockets the reactor's turns served (the clients', the newcomers' and at most
    ``reactor.BROKERS_PER_TURN`` of the brokers'): the most, and how many turns served each count;
    None where the records do not say (Twisted's reactor, an older record)."""
    served = collections.Counter(r[10] for r in records if r[0] == "io" and len(r) >= 12)
    if not served:
        return None
    counts = ", ".join(f"{n}: {turns}" for n, turns in sorted(served.items()))
    return f"sockets served a turn: at most {max(served)} ({sum(served.values())} turns; served: turns {counts})"


def report_kinds(records: list[list[Any]], top: int) -> None:
    kinds: dict[str, list[tuple[float, Any]]] = collections.defaultdict(list)
    for kind, _, ms, what, *more in records:
        label = {"io": "reactor turn's reads", "gc": f"collector, generation {what}"}.get(kind, f"call {what}")
        said = None
        if kind == "io":
            said = f"{what} ready" + (f", {more[5]} accepted, {more[7]} registrations" if len(more) >= 8 else "")
        kinds[label].append((ms, said))
    for label, values in sorted(kinds.items(), key=lambda kv: -max(v[0] for v in kv[1])):
        longest = sorted(values, key=lambda v: -v[0])[:top]
        shown = ", ".join(f"{ms:.1f}" + (f" ({said})" if said is not None else "") for ms, said in longest)
        print(f"{label}: {len(values)} of them; longest (ms of CPU) {shown}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, help="where the timed turns go at the stop (JSON lines)")
    p.add_argument("--over", type=float, default=1.0, metavar="MS", help="keep only those of at least MS (1)")
    p.add_argument("--gc-thresholds", metavar="A,B,C")
    p.add_argument("--twisted-reactor", action="store_true", help="Twisted's epoll reactor, not the server's")
    p.add_argument("--profile-over", type=float, metavar="MS",
                   help="profile every turn (cProfile: about twice its CPU) and write those of at least MS to "
                        "OUT's stem .profiles.txt, the functions by their own time")
    p.add_argument("--report", type=Path, metavar="FILE", help="print the longest of each kind in FILE, run nothing")
    p.add_argument("--top", type=int, default=5)
    p.add_argument("--records", type=Path, metavar="FILE",
                   help="with --report: the curve's --records, to report its last run's phases apart")
    p.add_argument("server", nargs=argparse.REMAINDER, help="-- and the server's options")
    a = p.parse_args()
    if a.report:
        report(a.report, a.top, a.records)
        return
    if a.out is None:
        p.error("--out FILE is needed to run the server")
    run(a.out, a.over, a.gc_thresholds, a.server[1:] if a.server[:1] == ["--"] else a.server, a.twisted_reactor,
        a.profile_over)


if __name__ == "__main__":
    sys.exit(main())
