#!/usr/bin/env python3
"""The reactor's part of one /metrics scrape at a table peers can make: GROUPS broker groups of
BROKERS brokers each, every group a cluster of its own, names of NAME characters (the defaults:
the limits' defaults, maxBrokerGroups 20,000 and maxBrokers 100,000, and maxNameLength 512).

usage: tools/metrics_scrape_cost.py [--groups 20000] [--brokers 5] [--name 512] [--topics 2] [--rounds 3] [--src DIR]

``--topics N``: every group serves the same N topics (2, its own, without): the largest topicQueueTable
the limits allow is maxTopicQueueEntries, 8,000,000 entries, 1 M topics on 8 groups
(``--groups 8 --brokers 2 --topics 1000000``).

Registers them into a service on a fake clock (in process, no port), then scrapes: the reactor's
turn (``MetricsPage._begin``: what the families say, read) and the thread's (the series and the
text made of it), each timed with ``time.process_time``, after a change of the routes (REGISTER_TOPIC
flipping the write bit of the first group's first topic) and without one; then the turn's Python
calls (cProfile), the figure that does not move with the machine's load.  ``--src`` runs another
checkout's code (an older commit: the before; the change is made the same way there)."""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=20000)
    parser.add_argument("--brokers", type=int, default=5)
    parser.add_argument("--name", type=int, default=512)
    parser.add_argument("--topics", type=int, default=0, help="the same N topics on every group (0: two of its own)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--src", default=str(Path(__file__).resolve().parents[1]))
    args = parser.parse_args()
    sys.path.insert(0, args.src)
    from twisted.internet import task

    from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig
    from twisted_namesrv.bodies.route import DataVersion, QueueData
    from twisted_namesrv.schema import SERVER_SCHEMA
    from twisted_namesrv.service import NamesrvService
    from twisted_namesrv.state.config import NamesrvConfig
    from twisted_namesrv.state.routes import RegisterRequest
    from twisted_namesrv.web.site import MetricsPage

    data = Path(tempfile.mkdtemp(prefix="metrics-scrape-cost-"))
    config = NamesrvConfig({"listenPort": 0, "kvConfigPath": str(data / "kvConfig.json"),
                            "configStorePath": str(data / "namesrv.properties")}, schema=SERVER_SCHEMA)
    clock = task.Clock()
    clock.advance(1_000_000)
    service = NamesrvService.from_config(config, reactor=clock)
    routes = service.state.routes
    pad = "x" * max(0, args.name - 12)
    shared = {f"S{t}": TopicConfig(f"S{t}") for t in range(args.topics)}
    for g in range(args.groups):
        topics = shared or {f"T{g}": TopicConfig(f"T{g}"), f"U{g}": TopicConfig(f"U{g}")}  # 5.x refuses a first of one
        body = RegisterBrokerBody(DataVersion(1, 1), topics, [], {})
        for b in range(args.brokers):
            addr = f"10.{g // 250 % 256}.{g % 250}.{b}:{10911 + g // 64000}"
            routes.register_broker(RegisterRequest(f"c{g}{pad}", addr, f"b{g}{pad}", b, None, body, channel=addr))
    page = MetricsPage(service.state, service.remoting.factory, service.seen, service.seen.health)
    entries = sum(len(queues) for queues in routes.topicQueueTable.values())
    print(f"{len(routes.brokerAddrTable)} groups, {len(routes.brokerLiveTable)} live brokers, "
          f"{entries:,} topicQueueTable entries")
    page._begin()()
    first = next(iter(shared)) if shared else "T0"
    perms = iter([4, 6] * (args.rounds + 1))

    def change() -> None:
        """A change of the routes: the first group's first topic read-only, then writable again."""
        routes.register_topic(first, [QueueData(f"b0{pad}", 8, 8, next(perms), 0)])

    for changed in (True, False):
        for _ in range(args.rounds):
            if changed:
                change()
            began = time.process_time()
            make = page._begin()
            turn = time.process_time() - began
            text = make()
            made = time.process_time() - began - turn
            print(f"{'after a change' if changed else 'unchanged'}: the reactor's turn {turn * 1000:.0f} ms, "
                  f"the thread's {made * 1000:.0f} ms, {text.count(bytes([10])):,} lines")
        if changed:
            change()
        profile = cProfile.Profile()
        profile.enable()
        page._begin()
        profile.disable()
        calls = pstats.Stats(profile).total_calls
        print(f"{'after a change' if changed else 'unchanged'}: the reactor's turn {calls:,} Python calls")


if __name__ == "__main__":
    main()
