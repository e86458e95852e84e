"""A lossy, reordering, duplicating link between two network namespaces, in user space (the kernel here
has no netem): a TUN device in each namespace, this process copying IP packets between them.

    ip netns exec NS_A python3 lossylink.py TUN_A NS_B TUN_B [--loss 0.03 --reorder 0.10 --dup 0.01 --delay 0.005]

Per packet, each way: lost with probability LOSS; else sent after DELAY, except REORDER of them sent at once
(overtaking the delayed ones before them, as netem's "reorder" does); DUP of them sent twice."""
from __future__ import annotations

import argparse
import ctypes
import fcntl
import heapq
import os
import random
import select
import struct
import time

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000
CLONE_NEWNET = 0x40000000


def open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def enter_netns(name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/var/run/netns/{name}", os.O_RDONLY)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns")
    os.close(fd)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("tun_a")
    ap.add_argument("ns_b")
    ap.add_argument("tun_b")
    ap.add_argument("--loss", type=float, default=0.03)
    ap.add_argument("--reorder", type=float, default=0.10)
    ap.add_argument("--dup", type=float, default=0.01)
    ap.add_argument("--delay", type=float, default=0.005)
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    fa = open_tun(a.tun_a)
    enter_netns(a.ns_b)
    fb = open_tun(a.tun_b)
    other = {fa: fb, fb: fa}
    queue: list[tuple[float, int, int, bytes]] = []
    n = 0
    counts = {"in": 0, "lost": 0, "reordered": 0, "dup": 0}
    while True:
        now = time.monotonic()
        while queue and queue[0][0] <= now:
            _t, _n, fd, pkt = heapq.heappop(queue)
            try:
                os.write(fd, pkt)
            except OSError:
                pass
        timeout = max(0.0, queue[0][0] - now) if queue else 1.0
        ready, _, _ = select.select([fa, fb], [], [], timeout)
        for fd in ready:
            while True:
                try:
                    pkt = os.read(fd, 65536)
                except BlockingIOError:
                    break
                counts["in"] += 1
                if rng.random() < a.loss:
                    counts["lost"] += 1
                    continue
                copies = 2 if rng.random() < a.dup else 1
                counts["dup"] += copies - 1
                for _ in range(copies):
                    if rng.random() < a.reorder:
                        counts["reordered"] += 1
                        at = time.monotonic()
                    else:
                        at = time.monotonic() + a.delay
                    n += 1
                    heapq.heappush(queue, (at, n, other[fd], pkt))
        if n and n % 500 == 0:
            print(counts, flush=True)


if __name__ == "__main__":
    main()
