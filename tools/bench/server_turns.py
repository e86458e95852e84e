#!/usr/bin/env python3
"""What held the real server's reactor: every turn, delayed call and collector pass timed by CPU.

A benchmark, not a test.  Runs ``python -m twisted_namesrv`` with the epoll reactor, and times by
the reactor thread's CPU (``time.thread_time``: a loaded machine moves it far less than a wall
clock) each reactor turn's work after epoll returned (with how many sockets were ready), each
delayed call (by the name of what it calls: a timer, the Cooperator's steps, the dispatcher's
waiting registrations) and each collector pass (by generation).  At the stop it writes those of
at least ``--over`` ms as JSON lines to ``--out``; ``--report FILE`` prints the longest of each
kind.  Run it as the server of a curve step, where the probe's longest wait is a wall time that
the machine's other work adds to:

    .venv/bin/python tools/bench/scale.py --curve --steps brokers-5000 --rounds 1 \\
        --server-cmd '.venv/bin/python tools/bench/server_turns.py --out /tmp/turns.jsonl -- \\
        --port {port} --bind 127.0.0.1 --data-dir {data_dir} --compat {compat}'
    .venv/bin/python tools/bench/server_turns.py --report /tmp/turns.jsonl

``--gc-thresholds A,B,C`` sets the collector's thresholds once the server runs (to compare with
``service.tune_gc``'s).
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any


def run(out: Path, over_ms: float, thresholds: str | None, server_argv: list[str]) -> None:
    from twisted.internet import epollreactor

    epollreactor.install()
    from twisted.internet import reactor

    records: list[tuple[str, float, float, Any]] = []  # (kind, monotonic start, CPU ms, what)
    collecting = [0.0, 0.0]

    def collected(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collecting[:] = time.monotonic(), time.thread_time()
        else:
            records.append(("gc", collecting[0], (time.thread_time() - collecting[1]) * 1e3, info["generation"]))
    gc.callbacks.append(collected)

    call_later = reactor.callLater

    def timed_call_later(delay: float, f: Any, *args: Any, **kwargs: Any) -> Any:
        name = getattr(f, "__qualname__", type(f).__name__)

        def timed(*args: Any, **kwargs: Any) -> Any:
            began, cpu = time.monotonic(), time.thread_time()
            try:
                return f(*args, **kwargs)
            finally:
                records.append(("call", began, (time.thread_time() - cpu) * 1e3, name))
        return call_later(delay, timed, *args, **kwargs)
    reactor.callLater = timed_call_later  # type: ignore[method-assign]

    poller, polled = reactor._poller, {}

    class TimedPoller:
        def poll(self, *args: Any) -> Any:
            events = poller.poll(*args)
            polled.update(began=time.monotonic(), cpu=time.thread_time(), ready=len(events))
            return events

        def __getattr__(self, name: str) -> Any:
            return getattr(poller, name)
    reactor._poller = TimedPoller()
    iterate = reactor.doIteration

    def timed_iteration(timeout: float | None) -> None:
        polled.clear()
        iterate(timeout)
        if polled:
            records.append(("io", polled["began"], (time.thread_time() - polled["cpu"]) * 1e3, polled["ready"]))
    reactor.doIteration = timed_iteration  # type: ignore[method-assign]

    def write() -> None:
        with out.open("w") as f:
            for record in records:
                if record[2] >= over_ms:
                    f.write(json.dumps(record) + "\n")
    reactor.addSystemEventTrigger("after", "shutdown", write)
    if thresholds:
        values = tuple(int(x) for x in thresholds.split(","))
        reactor.callWhenRunning(lambda: call_later(0.1, gc.set_threshold, *values))
    from twisted_namesrv.__main__ import main
    main(server_argv)


def report(path: Path, top: int) -> None:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    kinds: dict[str, list[tuple[float, Any]]] = collections.defaultdict(list)
    for kind, _, ms, what in records:
        label = {"io": "reactor turn's reads", "gc": f"collector, generation {what}"}.get(kind, f"call {what}")
        kinds[label].append((ms, what if kind == "io" else None))
    for label, values in sorted(kinds.items(), key=lambda kv: -max(v[0] for v in kv[1])):
        longest = sorted(values, key=lambda v: -v[0])[:top]
        shown = ", ".join(f"{ms:.1f}" + (f" ({ready} ready)" if ready is not None else "") for ms, ready in longest)
        print(f"{label}: {len(values)} of them; longest (ms of CPU) {shown}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, help="where the timed turns go at the stop (JSON lines)")
    p.add_argument("--over", type=float, default=1.0, metavar="MS", help="keep only those of at least MS (1)")
    p.add_argument("--gc-thresholds", metavar="A,B,C")
    p.add_argument("--report", type=Path, metavar="FILE", help="print the longest of each kind in FILE, run nothing")
    p.add_argument("--top", type=int, default=5)
    p.add_argument("server", nargs=argparse.REMAINDER, help="-- and the server's options")
    a = p.parse_args()
    if a.report:
        report(a.report, a.top)
        return
    if a.out is None:
        p.error("--out FILE is needed to run the server")
    run(a.out, a.over, a.gc_thresholds, a.server[1:] if a.server[:1] == ["--"] else a.server)


if __name__ == "__main__":
    sys.exit(main())
