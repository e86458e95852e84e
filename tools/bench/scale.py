#!/usr/bin/env python3
"""Scale figures (a benchmark, not a test): 1,000 brokers × 1,000 topics, a heartbeat storm
while clients look routes up, and one registration larger than 16 MiB; or, with ``--curve``, how
each cost grows with topics, brokers and client connections, against another NameServer (Java's)
in the same run.

    python tools/bench/scale.py [--brokers 1000] [--topics 1000] [--big-topics 120000] [--json OUT]
    python tools/bench/scale.py --curve [--steps reduced|all|NAME,...] [--rounds 3] \
        [--compare 'java=CMD'] [--server-cmd CMD] [--json OUT] [--records RUNS.jsonl] \
        [--markdown OUT.md] [--svg OUT.svg] [--report-only]

``--server-cmd`` runs the scenario against another NameServer: a command line with ``{port}``
and ``{data_dir}`` (e.g. ``tools/bench/java-namesrv.sh {port} {data_dir}`` with RMQ_LIB and
ROCKETMQ_HOME set); ``--compare LABEL=CMD`` (repeatable) runs every curve step against that
server too, right after ours in each round, and prints the ratio at each step.

The server runs as a child on core 0, the load from this process on core 1, all on 127.0.0.1.

Default run: broker ``i`` registers ``--topics`` topics shared by groups of 10 brokers (100k
topics, each on 10 brokers, with the defaults), in plain JSON as Java brokers do by default
(``compressedRegister=false``).

1. register every broker once, one after another: round-trip p50/p99/max, server RSS after;
2. storm: every broker re-registers (same data version: a heartbeat) within one second while 16
   client connections look routes up in a closed loop: registration round trips, and lookup
   latency during the storm against the 3 s before it; then every broker's connection drops at
   once: seconds until the cluster info is empty;
3. a broker with ``--big-topics`` topics (about 17 MiB of JSON): round trip, RSS after; and the
   same frame to a server on the default 16 MiB limit, which must close the connection.

Curve (curve.py's steps: topics 10k/100k/1M, brokers 10/1,000/5,000, client connections
1k/10k/50k, one varied at a time from 10k topics, 10 brokers, 1k connections): see curve.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tools"), str(REPO / "tools" / "fuzz")]

from curve import Server, curve_main, tidy  # noqa: E402
from soak import HOST, brokers_in_cluster, call, register_frame  # noqa: E402

from twisted_namesrv.remoting import RemotingCommand, RequestCode, ResponseCode  # noqa: E402
from twisted_namesrv.remoting.codes import V4_9_8  # noqa: E402

GROUP = 10
BIG_FRAME_LIMIT = 64 << 20


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    pick = lambda q: round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)  # noqa: E731
    return {"p50": pick(0.5), "p99": pick(0.99), "max": round(ordered[-1], 2), "n": len(ordered)}


async def register_all(port: int, frames: list[bytes]) -> tuple[list, list[float]]:
    connections, rtt = [], []
    for frame in frames:
        connection = await asyncio.open_connection(HOST, port, limit=1 << 20)
        started = time.monotonic()
        answer = await call(*connection, frame, timeout=120)
        rtt.append((time.monotonic() - started) * 1000)
        if answer.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"registration refused: {answer.code} {answer.remark}")
        connections.append(connection)
    return connections, rtt


async def lookups(port: int, topics: list[str], until: float, samples: list[float]) -> None:
    reader, writer = await asyncio.open_connection(HOST, port, limit=1 << 20)
    opaque = 0
    while time.monotonic() < until:
        opaque += 1
        request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topics[opaque % len(topics)]},
                                          opaque=opaque, version=V4_9_8).encode()
        started = time.monotonic()
        answer = await call(reader, writer, request, timeout=30)
        samples.append((time.monotonic() - started) * 1e6)
        assert answer.code == ResponseCode.SUCCESS
    writer.close()


async def storm(port: int, connections: list, frames: list[bytes], topics: list[str]) -> dict:
    """Every broker re-registers within 1 s while 16 clients look routes up."""
    before: list[float] = []
    await asyncio.gather(*(lookups(port, topics, time.monotonic() + 3, before) for _ in range(16)))
    during: list[float] = []
    rtt: list[float] = []
    spacing = 1.0 / len(connections)

    async def heartbeat(index: int) -> None:
        await asyncio.sleep(index * spacing)
        started = time.monotonic()
        answer = await call(*connections[index], frames[index], timeout=120)
        rtt.append((time.monotonic() - started) * 1000)
        assert answer.code == ResponseCode.SUCCESS

    started = time.monotonic()
    clients = [asyncio.create_task(lookups(port, topics, started + 3, during)) for _ in range(16)]
    await asyncio.gather(*(heartbeat(i) for i in range(len(connections))))
    storm_s = time.monotonic() - started
    await asyncio.gather(*clients)
    return {"storm_seconds": round(storm_s, 2), "register_ms": percentiles(rtt),
            "lookup_us_before": percentiles(before), "lookup_us_during": percentiles(during)}


async def mass_disconnect(port: int, connections: list) -> float:
    """Every broker's connection drops at once: seconds until the cluster info is empty."""
    started = time.monotonic()
    for _, writer in connections:
        writer.close()
    while await brokers_in_cluster(port):
        await asyncio.sleep(0.01)
    return round(time.monotonic() - started, 3)


async def big_registration(port: int, frame: bytes) -> tuple[float, bool]:
    """Round trip in ms, or whether the server closed the connection (refused)."""
    reader, writer = await asyncio.open_connection(HOST, port)
    started = time.monotonic()
    try:
        answer = await call(reader, writer, frame, timeout=300)
    except (asyncio.IncompleteReadError, ConnectionError):
        return (time.monotonic() - started) * 1000, True
    finally:
        writer.close()
    if answer.code != ResponseCode.SUCCESS:
        raise RuntimeError(f"big registration refused: {answer.code} {answer.remark}")
    return (time.monotonic() - started) * 1000, False


def server(scratch: Path, name: str, frame_max: int | None, command: str | None) -> Server:
    """Ours (with ``frame_max``, a properties file raising frameMaxLength) or ``command``."""
    if command is None and frame_max:
        props = scratch / f"{name}.properties"
        props.write_text(f"frameMaxLength={frame_max}\n")
        command = Server.OURS + f" -c {props}"
    proc = Server(command, scratch, name, core=0)
    proc.wait_ready(120)
    return proc


async def measure(args) -> dict:
    scratch = Path(tempfile.mkdtemp(prefix="namesrv-scale-"))
    figures: dict = {"brokers": args.brokers, "topics_per_broker": args.topics, "loadavg_before": os.getloadavg()}
    frames = [register_frame(i, args.topics, GROUP, compressed=False) for i in range(args.brokers)]
    figures["register_body_bytes"] = len(frames[0])
    proc = server(scratch, "scale", BIG_FRAME_LIMIT, args.server_cmd)
    try:
        connections, rtt = await register_all(proc.port, frames)
        figures["first_registration_ms"] = percentiles(rtt)
        figures["rss_mib_after_registration"] = proc.rss_mib()
        topics = [f"Soak{g:03d}_{j:04d}" for g in range(0, args.brokers // GROUP, 7) for j in range(0, args.topics, 97)]
        figures.update(await storm(proc.port, connections, frames, topics))
        figures["rss_mib_after_storm"] = proc.rss_mib()
        figures["mass_disconnect_s"] = await mass_disconnect(proc.port, connections)
        big = register_frame(args.brokers + 1, args.big_topics, 1, compressed=False)
        figures["big_frame_mib"] = round(len(big) / (1 << 20), 2)
        ms, refused = await big_registration(proc.port, big)
        figures["big_registration_ms"], figures["big_refused_at_64mib"] = round(ms, 1), refused
        figures["rss_mib_after_big"] = proc.rss_mib()
    finally:
        proc.stop()
    proc.discard()  # a failed run's log stays, to read why
    default = server(scratch, "default-limit", None, args.server_cmd)
    try:
        _, figures["big_refused_at_default_16mib"] = await big_registration(default.port, big)
        figures["default_limit_server_alive"] = default.alive
    finally:
        default.stop()
    default.discard()
    tidy(scratch)
    figures["loadavg_after"] = os.getloadavg()
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", type=int, default=1000)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--big-topics", type=int, default=120_000)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--server-cmd", metavar="CMD",
                        help="another NameServer: a command line with {port} and {data_dir} placeholders")
    parser.add_argument("--curve", action="store_true", help="the scale curve instead (see curve.py)")
    args, rest = parser.parse_known_args(argv)
    if args.curve:
        return curve_main(rest, args.server_cmd, args.json)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {1})  # the load on core 1, the server on core 0
    figures = asyncio.run(measure(args))
    print(json.dumps(figures, indent=1))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
