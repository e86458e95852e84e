#!/usr/bin/env python3
"""Why a lookup waited: the stall scenario's first registration, each probe round trip split.

A benchmark, not a test.  A probe looks a route up in a closed loop (as ``stall.py``'s) while one
broker registers ``--topics`` topics as plain JSON for the first time; for every round trip it
reads, from ``/proc/PID/task/TID/schedstat`` before and after, how long the server's reactor
thread ran on a CPU and how long it was runnable but waiting for one (the scheduler's share: other
processes on its core), and how long the probe's own thread waited for a CPU.  On a shared machine
the longest wait is mostly the second: this says how much.  Run the server pinned to one core and
this on another (as run.py does):

    taskset -c 0 python -m twisted_namesrv --port 27647 --bind 127.0.0.1 --data-dir D --compat 4.9.8 &
    taskset -c 1 .venv/bin/python tools/bench/stall_why.py $! 127.0.0.1:27647 [--topics 80000]

Prints one JSON object: the registration's round trip, the probe's waits (longest, p99, p50,
how many over 20 and 50 ms) and the five longest, each split into server CPU, server runqueue
wait and probe runqueue wait (ms).  Linux only.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
import zlib
from pathlib import Path

from procfs import schedstat_ns  # beside this file: /proc read one way

DEFAULT_SHARED = Path(__file__).resolve().parents[3] / "shared" / "bench"


class Probe(threading.Thread):
    """Looks TopicTest up in a closed loop; each sample: start, round trip (s), server CPU, server
    runqueue wait and the probe's own runqueue wait during it (ms)."""

    def __init__(self, host: str, port: int, server: str, frame, read_frame) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server, self.frame, self.read_frame = server, frame, read_frame
        self.samples: list[tuple[float, float, float, float, float]] = []
        self.stop = False

    def run(self) -> None:
        me = f"/proc/self/task/{threading.get_native_id()}/schedstat"
        opaque = 1
        while not self.stop:
            opaque += 1
            server0, me0 = schedstat_ns(self.server), schedstat_ns(me)
            began = time.perf_counter()
            self.sock.sendall(self.frame(105, {"topic": "TopicTest"}, opaque=opaque))
            self.read_frame(self.sock)
            rtt = time.perf_counter() - began
            server1, me1 = schedstat_ns(self.server), schedstat_ns(me)
            self.samples.append((began, rtt, (server1[0] - server0[0]) / 1e6, (server1[1] - server0[1]) / 1e6,
                                 (me1[1] - me0[1]) / 1e6))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("pid", type=int, help="the server's process id (its reactor is its main thread)")
    p.add_argument("addr", help="HOST:PORT of the server")
    p.add_argument("--topics", type=int, default=80_000)
    p.add_argument("--shared-bench", type=Path, default=DEFAULT_SHARED, metavar="DIR",
                   help=f"directory of fakebroker.py (default {DEFAULT_SHARED})")
    a = p.parse_args()
    sys.path.insert(0, str(a.shared_bench))
    from fakebroker import frame, read_frame, register_body, topic_names

    host, port = a.addr.rsplit(":", 1)

    def register(sock: socket.socket, body: bytes) -> None:
        ext = {"brokerName": "stall-big", "brokerAddr": "127.0.0.1:50911", "clusterName": "StallCluster",
               "haServerAddr": "127.0.0.1:50911", "brokerId": "0", "compressed": "false",
               "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF)}
        sock.sendall(frame(103, ext, body, opaque=1))
        assert read_frame(sock).get("code") == 0

    broker = socket.create_connection((host, int(port)))
    topics = topic_names(a.topics, "big")
    register(broker, register_body(topics[:3], 1, False))  # TopicTest routable before the probe
    probe = Probe(host, int(port), f"/proc/{a.pid}/task/{a.pid}/schedstat", frame, read_frame)
    probe.start()
    time.sleep(1)
    body = register_body(topics, 2, False)
    began = time.perf_counter()
    register(broker, body)
    ended = time.perf_counter()
    time.sleep(0.3)
    probe.stop = True
    window = sorted((s for s in probe.samples if began <= s[0] + s[1] and s[0] <= ended + 0.05), key=lambda s: -s[1])
    waits = sorted(s[1] * 1e3 for s in window)
    print(json.dumps({
        "registration_ms": round((ended - began) * 1e3, 1), "probes": len(waits), "longest_ms": round(waits[-1], 1),
        "p99_ms": round(waits[int(len(waits) * 0.99)], 1), "p50_ms": round(waits[len(waits) // 2], 2),
        "over_20ms": sum(w > 20 for w in waits), "over_50ms": sum(w > 50 for w in waits),
        "longest": [{"wait": round(s[1] * 1e3, 1), "server_cpu": round(s[2], 1), "server_runqueue": round(s[3], 1),
                     "probe_runqueue": round(s[4], 1)} for s in window[:5]]}))


if __name__ == "__main__":
    main()
