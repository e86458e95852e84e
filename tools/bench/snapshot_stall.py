#!/usr/bin/env python3
"""How long does a route-snapshot write keep the server from answering others?

usage: snapshot_stall.py HOST:PORT SNAPSHOT_FILE [--brokers 3] [--topics 100000] --shared-bench DIR

For a server started with ``--route-snapshot SNAPSHOT_FILE`` and a short routeSnapshotInterval.
BROKERS brokers register TOPICS topics each (compressed, the same names, as fakebroker gives them)
and hold their connections; once the snapshot written after them has settled, stall.py's probe
looks a route up in a closed loop, one small broker registers a new topic (a change, so the next
check writes), and the window ends when the snapshot file has been replaced. Prints one JSON
object: the probe's worst and 99.9th-percentile round trip in that window, and the file's size.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import zlib
from pathlib import Path


def register(s: socket.socket, name: str, addr: str, body: bytes, compressed: bool, frame, read_frame) -> None:
    ext = {"brokerName": name, "brokerAddr": addr, "clusterName": "SnapshotCluster", "haServerAddr": addr,
           "brokerId": "0", "compressed": str(compressed).lower(), "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF)}
    s.sendall(frame(103, ext, body))
    header = read_frame(s)
    if header.get("code") != 0:
        raise SystemExit(f"registration of {name} refused: {header}")


def mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return 0


def settled(path: Path, quiet: float, timeout: float = 300) -> int:
    """The file's mtime once it has not changed for ``quiet`` seconds."""
    deadline = time.monotonic() + timeout
    last, since = mtime(path), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = mtime(path)
        if now != last:
            last, since = now, time.monotonic()
        elif now and time.monotonic() - since >= quiet:
            return now
    raise SystemExit(f"snapshot {path} did not settle within {timeout} s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("addr")
    p.add_argument("snapshot", type=Path)
    p.add_argument("--brokers", type=int, default=3)
    p.add_argument("--topics", type=int, default=100_000)
    p.add_argument("--quiet", type=float, default=2.0, help="seconds without a write before the window opens")
    p.add_argument("--shared-bench", type=Path, required=True, help="directory of stall.py and fakebroker.py")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the write a registration causes")
    a = p.parse_args()
    sys.path.insert(0, str(a.shared_bench))
    from fakebroker import frame, read_frame, register_body, topic_names
    from stall import Probe

    host, port = a.addr.rsplit(":", 1)
    body = register_body(topic_names(a.topics, "big"), 1, True)
    conns = []
    for i in range(a.brokers):
        s = socket.create_connection((host, int(port)))
        register(s, f"snapshot-b{i}", f"127.0.0.1:{30000 + i}", body, True, frame, read_frame)
        conns.append(s)
    before = settled(a.snapshot, a.quiet)
    probe = Probe(host, int(port))
    probe.start()
    time.sleep(1)
    small = socket.create_connection((host, int(port)))
    t0 = time.perf_counter()
    register(small, "snapshot-small", "127.0.0.1:30999", register_body(["SnapshotNewTopic", "TopicTest"], 1, False),
             False, frame, read_frame)
    give_up = time.monotonic() + a.timeout
    while mtime(a.snapshot) == before:
        if time.monotonic() > give_up:
            raise SystemExit(f"snapshot {a.snapshot} was not rewritten within {a.timeout} s of a registration")
        time.sleep(0.001)
    t1 = time.perf_counter()
    time.sleep(0.3)
    probe.stop = True
    out = {"wait_for_write_ms": round((t1 - t0) * 1e3, 2), "snapshot_mb": round(os.path.getsize(a.snapshot) / 1e6, 2),
           **probe.window(t0, t1 + 0.05)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
