#!/usr/bin/env python3
"""Where a registration phase's time goes in our server: working, waiting for a core, or idle.

A benchmark, not a test.  Run as the server (``python -m twisted_namesrv``'s options after ``--``),
it records in process every REGISTER_BROKER from its first step to its answer (the time, the
reactor thread's CPU and its time runnable but waiting for a core, from
``/proc/self/task/TID/schedstat``) and every wait of the reactor in epoll longer than 0.2 ms
(idle: nothing to read, nothing due), and writes them to ``--out`` as JSON when it stops.  With
``--report`` it reads that file: per phase (registrations apart by 0.2 s or more: the curve's
first, repeated, storm), its span, the server's CPU in it, its waits for a core and its time idle.
A span much longer than the CPU with little idle is the machine's load; much idle is a server that
waits for its load generator (the pause between a piece's answer and the broker's next piece).

    scale.py --curve --steps topics-1m --rounds 1 --server-cmd \\
        '.venv/bin/python tools/bench/registration_spans.py --out spans.json -- --port {port} \\
         --bind 127.0.0.1 --data-dir {data_dir} --compat {compat}'
    .venv/bin/python tools/bench/registration_spans.py --report spans.json

Linux (epoll, schedstat) only.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from procfs import schedstat_ns  # beside this file: /proc read one way

IDLE_FROM = 2e-4  # an epoll wait at least this long counts as idle (s)
PHASE_GAP = 0.2  # registrations further apart than this (s) are phases of their own


def schedstat() -> tuple[float, float]:
    """(s on a CPU, s runnable waiting for one) of the calling thread."""
    ran, waited = schedstat_ns(f"/proc/self/task/{threading.get_native_id()}/schedstat")
    return ran / 1e9, waited / 1e9


def serve(out: Path, argv: list[str]) -> None:
    from twisted_namesrv.reactor import install

    install()  # the server's reactor, as python -m twisted_namesrv installs it
    from twisted.internet import reactor

    from twisted_namesrv import __main__, processor
    from twisted_namesrv.remoting import RequestCode

    jobs: list[dict[str, Any]] = []
    idle: list[tuple[float, float]] = []
    register = processor.HANDLERS_IN_STEPS[RequestCode.REGISTER_BROKER]

    def timed(state: Any, request: Any, peer: Any) -> Iterator[None]:
        began, (ran, waited) = time.monotonic(), schedstat()
        steps = register(state, request, peer)
        try:
            while True:
                next(steps)
                yield
        except StopIteration as stop:
            ran_end, waited_end = schedstat()
            jobs.append({"broker": request.ext.get("brokerName"), "start": began, "end": time.monotonic(),
                         "cpu": ran_end - ran, "runqueue": waited_end - waited})
            return stop.value

    processor.HANDLERS_IN_STEPS[RequestCode.REGISTER_BROKER] = timed
    poller = reactor._poller  # type: ignore[attr-defined]

    class Timed:
        """The reactor's epoll object, its waits timed."""

        def __getattr__(self, name: str) -> Any:
            return getattr(poller, name)

        def poll(self, *args: Any) -> Any:
            began = time.monotonic()
            events = poller.poll(*args)
            ended = time.monotonic()
            if ended - began >= IDLE_FROM:
                idle.append((began, ended))
            return events

    reactor._poller = Timed()  # type: ignore[attr-defined]
    reactor.addSystemEventTrigger("after", "shutdown",
                                  lambda: out.write_text(json.dumps({"jobs": jobs, "idle": idle})))
    __main__.main(argv)


def phases(jobs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    found: list[list[dict[str, Any]]] = []
    for job in sorted(jobs, key=lambda j: j["start"]):
        if not found or job["start"] - found[-1][-1]["end"] > PHASE_GAP:
            found.append([])
        found[-1].append(job)
    return found


def report(path: Path) -> None:
    data = json.loads(path.read_text())
    for index, jobs in enumerate(phases(data["jobs"]), 1):
        start, end = jobs[0]["start"], max(j["end"] for j in jobs)
        idle = sum(min(b, end) - max(a, start) for a, b in data["idle"] if b > start and a < end)
        gaps = [max(0.0, later["start"] - earlier["end"]) for earlier, later in zip(jobs, jobs[1:], strict=False)]
        print(f"phase {index}: {len(jobs)} registrations in {end - start:.3f} s: the reactor's CPU "
              f"{sum(j['cpu'] for j in jobs):.3f} s, waiting for a core {sum(j['runqueue'] for j in jobs):.3f} s, "
              f"idle in epoll {idle:.3f} s; between one's answer and the next's first step {sum(gaps):.3f} s "
              f"(longest {max(gaps, default=0) * 1e3:.1f} ms)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, help="serve (the server's options after --), writing the spans here")
    p.add_argument("--report", type=Path, help="summarize a file --out wrote")
    p.add_argument("server", nargs=argparse.REMAINDER, help="with --out: -- then python -m twisted_namesrv's options")
    a = p.parse_args()
    if a.report:
        report(a.report)
    elif a.out:
        serve(a.out, [arg for arg in a.server if arg != "--"])
    else:
        p.error("--out FILE -- SERVER OPTIONS, or --report FILE")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    main()
