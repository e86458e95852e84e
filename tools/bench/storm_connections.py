#!/usr/bin/env python3
"""What a heartbeat storm costs with many client connections held, in process: whether any of its
work grows with them.

A benchmark, not a test (``tests/test_storm_cost.py`` holds the same at 10 and 400 connections).
No sockets and no reactor: the server is built on a ``task.Clock`` (``turns.Timed``, its idle watch
on as configured), a curve step's brokers (``--step``, the ten-broker ``base`` by default) register
and send their tables again, then ``N`` client connections each look the probe's topic up once and
stay, then the storm: each broker's tables sent again as they were (renewed from memory), the
probe's lookups between them (``--lookups`` in all, about the curve's probe's in its storm's
second).  For each ``N`` of ``--connections``: the storm's Python calls (every function's, the
server's, Twisted's and the standard library's) and its CPU (the thread's, one run; a shared
machine moves it, the calls not).

    .venv/bin/python tools/bench/storm_connections.py [--connections 1000,10000,19500] [--step base] [--lookups 1000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tools" / "bench")]  # this checkout's server, not an installed one
import curve  # noqa: E402  (tools/bench: the curve's tables and frames)
import turns  # noqa: E402

from tests.support import python_calls_run  # noqa: E402


def storm(step: curve.Step, connections: int, lookups: int) -> tuple[int, float]:
    """(Python calls, CPU ms) of one storm on a fresh server holding ``connections`` idle clients."""
    bench = turns.Timed(step.compat)
    bench.service.factory.idle_timeout = bench.service.config["serverChannelMaxIdleTimeSeconds"]
    bench.service.factory.max_connections = 0  # (the curve raises maxConnections past its step's too)
    probe_broker = bench.connect()
    for frame in curve.register_frames("curve-probe", "127.0.0.1:19999", curve.PROBE_TOPICS, 1):
        bench.feed(probe_broker, frame)
    tables = curve.broker_tables(step)
    frames = [curve.register_frames(name, address, topics, 1) for name, address, topics in tables]
    brokers = [bench.connect() for _ in tables]
    for _ in range(2):  # registered, then the same again (the curve's repeated phase: answers kept)
        for broker, pieces in zip(brokers, frames, strict=True):
            for piece in pieces:
                bench.feed(broker, piece)
    for _ in range(connections):
        bench.feed(bench.connect(), curve.frame(105, {"topic": curve.PROBE_TOPIC}, opaque=1))
    probe = bench.connect()
    between = max(1, lookups // len(brokers))
    asked = [[curve.frame(105, {"topic": curve.PROBE_TOPIC}, opaque=1_000 + i * between + k) for k in range(between)]
             for i in range(len(brokers))]

    def run() -> None:
        for broker, pieces, requests in zip(brokers, frames, asked, strict=True):
            for request in requests:
                bench.feed(probe, request)
            for piece in pieces:
                bench.feed(broker, piece)
        probe.transport.clear()
        for broker in brokers:
            broker.transport.clear()
    began = time.thread_time()
    run()
    cpu_ms = (time.thread_time() - began) * 1e3
    return python_calls_run(run), cpu_ms


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--connections", default="1000,10000,19500", help="idle client connections held, comma-separated")
    p.add_argument("--step", default="base", help="the curve step whose brokers storm (curve.py)")
    p.add_argument("--lookups", type=int, default=1_000, help="the probe's lookups in the storm, spread between "
                   "the heartbeats")
    a = p.parse_args()
    step = curve.step_named(a.step)
    for connections in (int(n) for n in a.connections.split(",")):
        calls, cpu_ms = storm(step, connections, a.lookups)
        print(f"{connections:,} client connections held: the storm ({step.brokers:,} brokers' tables again, "
              f"{a.lookups:,} lookups) {calls:,} Python calls, {cpu_ms:.1f} ms of CPU", flush=True)


if __name__ == "__main__":
    main()
