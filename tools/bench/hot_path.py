#!/usr/bin/env python3
"""The route lookup's hot path in process: CPU per lookup of our protocol against ceiling.py's.

A benchmark, not a test.  No sockets: a connection's ``dataReceived`` is fed reads of 32
(``--pipelined``) lookups (as ``nsload throughput -d 32`` sends them, but each with its own opaque, as
real clients do) and the thread's CPU time is read, so other work on a shared machine moves the
figures far less than wall-clock load runs (``run.py``) do.  What it leaves out is the kernel
and the reactor, the same for both servers.  ``--profile`` prints where our time goes instead.

    .venv/bin/python tools/bench/hot_path.py [--reads 10000] [--pipelined 32] [--profile] [--same-opaque]
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

from twisted.internet import task

from twisted_namesrv import server
from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body
from twisted_namesrv.bodies.route import DataVersion
from twisted_namesrv.dispatch import Dispatcher
from twisted_namesrv.remoting import RemotingCommand, RequestCode
from twisted_namesrv.schema import SERVER_SCHEMA
from twisted_namesrv.service import build
from twisted_namesrv.state.config import NamesrvConfig

DEFAULT_SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "bench"


class NullTransport:
    """What the protocol writes to: counted, not sent."""

    disconnecting = False

    def __init__(self) -> None:
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1

    def writeSequence(self, data: list[bytes]) -> None:  # how servers before one write per read wrote
        self.writes += 1

    def getPeer(self) -> None:
        return None

    def registerProducer(self, producer: object, streaming: bool) -> None:
        pass

    def loseConnection(self) -> None:
        raise SystemExit("the server closed the connection: a lookup was not answered")


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def our_connection() -> server.RemotingProtocol:
    """A protocol of a fresh 4.9.8 server whose broker registered TopicTest."""
    data_dir = tempfile.mkdtemp(prefix="hot-path-")
    config = NamesrvConfig({"compatVersion": "4.9.8", "kvConfigPath": f"{data_dir}/kv.json",
                            "configStorePath": f"{data_dir}/namesrv.properties"}, schema=SERVER_SCHEMA)
    clock = task.Clock()
    owners = build(config, clock)
    factory = server.RemotingFactory(Dispatcher(owners.state, owners.seen.metrics), clock, 1 << 24, 0,
                                     owners.state.refusals, owners.state.budget)
    protocol = factory.buildProtocol(None)
    assert protocol is not None
    protocol.makeConnection(NullTransport())
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), {
        t: TopicConfig(t, 4, 4, 6) for t in ("TopicTest", "Other")}), False, False)
    protocol.dataReceived(RemotingCommand.request(RequestCode.REGISTER_BROKER, {
        "brokerName": "broker-a", "brokerAddr": "127.0.0.1:10911", "clusterName": "DefaultCluster",
        "haServerAddr": "127.0.0.1:10912", "brokerId": "0"}, body, version=409).encode())
    return protocol


def reads(nsload: ModuleType, pipelined: int, same_opaque: bool) -> list[bytes]:
    """Reads of ``pipelined`` lookups as nsload writes them; 50 different reads unless ``same_opaque``."""
    if same_opaque:
        return [nsload.frame(105, {"topic": "TopicTest"}) * pipelined]
    return [b"".join(nsload.frame(105, {"topic": "TopicTest"}, opaque=1000 + i * pipelined + j)
                     for j in range(pipelined)) for i in range(50)]


def cpu_per_lookup(data_received, batches: list[bytes], count: int, pipelined: int, rounds: int = 3) -> float:
    """The best of ``rounds`` of ``count`` reads: microseconds of thread CPU per lookup."""
    best = float("inf")
    for _ in range(rounds):
        begun = time.thread_time()
        for i in range(count):
            data_received(batches[i % len(batches)])
        best = min(best, time.thread_time() - begun)
    return best / (count * pipelined) * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reads", type=int, default=10_000, help="reads of 32 lookups per round (default 10,000)")
    p.add_argument("--pipelined", type=int, default=32, help="lookups per read (default 32; 1: one in flight)")
    p.add_argument("--profile", action="store_true", help="print cProfile's top entries for our server instead")
    p.add_argument("--same-opaque", action="store_true", help="every lookup with opaque 1, as nsload sends them")
    p.add_argument("--shared-bench", type=Path, default=DEFAULT_SHARED, help="directory of nsload.py and ceiling.py")
    args = p.parse_args(argv)
    nsload, ceiling = load(args.shared_bench / "nsload.py"), load(args.shared_bench / "ceiling.py")
    batches = reads(nsload, args.pipelined, args.same_opaque)
    ours = our_connection()
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(cpu_per_lookup, ours.dataReceived, batches, args.reads, args.pipelined, 1)
        pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(20)
        return 0
    canned = ceiling.Canned()
    canned.transport = NullTransport()
    canned.connectionMade()
    figures = {"ours_us": cpu_per_lookup(ours.dataReceived, batches, args.reads, args.pipelined),
               "ceiling_us": cpu_per_lookup(canned.dataReceived, batches, args.reads, args.pipelined)}
    figures["ceiling_over_ours"] = figures["ceiling_us"] / figures["ours_us"]
    print(json.dumps({k: round(v, 3) for k, v in figures.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
