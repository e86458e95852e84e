#!/usr/bin/env python3
"""The state half of a first registration alone, to count in instructions: no wire, no dispatch.

A benchmark, not a test.  ``--brokers`` new brokers of the curve's 5,000-broker shape (four topics
each, two brokers a topic) are built as RegisterRequests, then (unless ``--build-only``) each one's
plan is made and applied (``plan_steps``, ``apply_registration``) on the routes as the composition
root wires them (service.build: the answer cache, the log line written to /dev/null as the real
server writes it, the page's events, the metrics, the departures, the topology).  Run under
cachegrind at two counts, the difference over the difference in brokers is a registration's state
half (its request's making included: ``--build-only`` counts that alone), the same on a loaded
machine; ``tools/bench/instructions.py`` counts the real server's whole registration.

    for n in 100 600; do PYTHONHASHSEED=0 valgrind --tool=cachegrind --cache-sim=no \\
        --cachegrind-out-file=/dev/null .venv/bin/python tools/bench/state_half.py --brokers $n; done
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from twisted.internet import task
from twisted.logger import LogLevel, globalLogBeginner

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))  # this checkout's server
from twisted_namesrv import logs  # noqa: E402
from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig  # noqa: E402
from twisted_namesrv.bodies.route import DataVersion  # noqa: E402
from twisted_namesrv.schema import SERVER_SCHEMA  # noqa: E402
from twisted_namesrv.service import NamesrvService  # noqa: E402
from twisted_namesrv.state.config import NamesrvConfig  # noqa: E402
from twisted_namesrv.state.registration import RegisterRequest, plan_steps  # noqa: E402
from twisted_namesrv.steps import run_steps  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--brokers", type=int, default=600, metavar="N")
    p.add_argument("--build-only", action="store_true", help="make the requests, register none")
    a = p.parse_args()
    out = open(os.devnull, "w")  # noqa: SIM115 - open while the process logs
    globalLogBeginner.beginLoggingTo([logs.LevelFiltered(logs.observer("text", out), LogLevel.info)],
                                     discardBuffer=True, redirectStandardIO=False)
    clock = task.Clock()
    clock.advance(1_000)
    data = Path(tempfile.mkdtemp())
    config = NamesrvConfig({"listenPort": 0, "bindAddress": "127.0.0.1", "kvConfigPath": str(data / "kv.json"),
                            "configStorePath": str(data / "namesrv.properties")}, schema=SERVER_SCHEMA)
    routes = NamesrvService.from_config(config, reactor=clock).state.routes
    requests = []
    for index in range(a.brokers):
        topics = [f"Pair{index // 2:05d}_{j}" for j in range(4)]
        addr = f"127.0.0.1:{10000 + index}"
        table = RegisterBrokerBody(DataVersion(1, 1), {t: TopicConfig(t, 8, 8, 6) for t in topics})
        requests.append(RegisterRequest("DefaultCluster", addr, f"b{index:05d}", 0, addr, table, channel=index,
                                        version=409, digest=bytes(20)))
    for request in requests if not a.build_only else ():
        routes.apply_registration(run_steps(plan_steps(request, routes)))
    print(f"{len(routes.brokerLiveTable)} brokers registered")


if __name__ == "__main__":
    main()
