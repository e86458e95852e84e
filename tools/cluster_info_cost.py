#!/usr/bin/env python3
"""What one cycle of a peer that may register costs the reactor's thread: unregister a broker
group, register it again, ask GET_BROKER_CLUSTER_INFO (the answer is built after every change of
a group), at GROUPS broker groups in CLUSTERS clusters, each group serving a topic of its own.

usage: tools/cluster_info_cost.py [--groups 20000] [--clusters 1] [--rounds 3] [--src DIR]

Registers them into a dispatcher on a fake clock (in process, no port, 5.3.3's shapes), asks once,
then counts a cycle's Python calls (cProfile, the figure that does not move with the machine's
load; the mean of ``--rounds`` cycles) and times the ask after the change (``time.process_time``,
each round).  ``--src`` runs another checkout's code (an older commit: the before)."""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=20000)
    parser.add_argument("--clusters", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--src", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args()
    sys.path.insert(0, str(args.src))
    from twisted.internet import task

    from tests import built
    from tests.test_answer_cache import connect
    from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body
    from twisted_namesrv.bodies.route import DataVersion
    from twisted_namesrv.remoting import RemotingCommand, RequestCode
    from twisted_namesrv.schema import SERVER_SCHEMA
    from twisted_namesrv.state.config import NamesrvConfig

    scratch = Path(tempfile.mkdtemp())
    config = NamesrvConfig({"compatVersion": "5.3.3", "kvConfigPath": str(scratch / "kv.json"),
                            "configStorePath": str(scratch / "namesrv.properties")}, schema=SERVER_SCHEMA)
    clock = task.Clock()
    protocol, transport = connect(built.factory(built.dispatcher(config, clock), clock, 1 << 26, 0))

    def ext(index: int) -> dict[str, str]:
        return {"brokerName": f"broker-{index}", "brokerAddr": f"127.0.{index // 250}.{index % 250}:10911",
                "clusterName": f"cluster-{index % args.clusters}", "haServerAddr": "h", "brokerId": "0"}

    def register(index: int, counter: int = 1) -> None:
        topic = f"T{index}"
        body = encode_register_body(RegisterBrokerBody(DataVersion(1, counter), {topic: TopicConfig(topic, 4, 4, 6)}),
                                    False, True)
        protocol.dataReceived(RemotingCommand.request(RequestCode.REGISTER_BROKER, ext(index), body,
                                                      version=479).encode())

    def ask() -> int:
        transport.clear()
        protocol.dataReceived(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, version=479).encode())
        return len(transport.value())

    def change(counter: int) -> None:
        protocol.dataReceived(RemotingCommand.request(RequestCode.UNREGISTER_BROKER, ext(5), version=479).encode())
        register(5, counter)

    for index in range(args.groups):
        register(index)
    size = ask()
    change(2)
    ask()
    profile = cProfile.Profile()
    profile.enable()
    for counter in range(3, 3 + args.rounds):
        change(counter)
        ask()
    profile.disable()
    calls = pstats.Stats(profile).total_calls // args.rounds
    laps = []
    for counter in range(100, 100 + args.rounds):
        change(counter)
        start = time.process_time()
        ask()
        laps.append(round((time.process_time() - start) * 1000, 1))
    print(f"{args.groups} groups in {args.clusters} clusters, answer {size} bytes: {calls} Python calls a cycle; "
          f"the ask after the change {laps} ms of CPU; load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
