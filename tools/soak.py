#!/usr/bin/env python3
"""Soak (not a test): many brokers heartbeating and many clients looking routes up, for minutes,
against a NameServer child process on 127.0.0.1.  Reports false expiries, lookup errors and
latency, and the server's memory over time; optionally restarts the server half-way and
measures how long until every broker is back in the cluster info.

    python tools/soak.py [--brokers 500] [--clients 5000] [--minutes 10] [--period 30]
                         [--restart-at SECONDS [--warm]] [--json OUT]

Brokers: each its own connection, registering every ``--period`` s (4.9.8-style REGISTER_BROKER,
half with compressed bodies) with ``--topics`` topics shared by groups of 5 brokers, and
reconnecting at once when the connection drops.  Clients: each its own connection, one route
lookup of a random topic every ``--lookup-every`` s.  A probe asks GET_BROKER_CLUSTER_INFO every
10 s: a broker that heartbeated within the last period but is missing there is a false expiry,
as is any "broker expired" line in the server's log.  Everything goes through the project's
own codec; one asyncio process drives it all.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import re
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tools" / "fuzz")]

from namesrv_proc import NamesrvProcess  # noqa: E402

from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body  # noqa: E402
from twisted_namesrv.bodies.route import DataVersion  # noqa: E402
from twisted_namesrv.remoting import RemotingCommand, RequestCode, ResponseCode, fastjson  # noqa: E402
from twisted_namesrv.remoting.codes import V4_9_8  # noqa: E402
from twisted_namesrv.remoting.crc import crc32_masked  # noqa: E402

HOST = "127.0.0.1"
GROUP = 5  # brokers sharing one set of topics
_opaques = itertools.count(1)


@dataclass
class Stats:
    registrations: int = 0
    registration_errors: int = 0
    broker_disconnects: int = 0
    lookups: int = 0
    lookup_errors: int = 0
    lookup_timeouts: int = 0
    lookup_errors_during_restart: int = 0
    lookup_us: list[float] = field(default_factory=list)
    register_ms: list[float] = field(default_factory=list)
    last_heartbeat: dict[str, float] = field(default_factory=dict)  # broker addr -> monotonic time of its last OK
    false_expiries: int = 0
    probe_missing: list[int] = field(default_factory=list)
    rss_mib: list[tuple[float, float]] = field(default_factory=list)
    restart_recovery_s: float | None = None
    restarting: bool = False
    server_died: str | None = None


def broker_addr(i: int) -> str:
    return f"10.{i // 250}.{i % 250}.1:10911"


def topics_of(i: int, count: int, group: int = GROUP) -> list[str]:
    return [f"Soak{i // group:03d}_{j:04d}" for j in range(count)]


def register_frame(i: int, topics: int, group: int = GROUP, compressed: bool | None = None,
                   counter: int = 1) -> bytes:
    """Broker ``i``'s REGISTER_BROKER (opaque 0), compressed for odd ``i`` unless told."""
    compressed = i % 2 == 1 if compressed is None else compressed
    body = encode_register_body(RegisterBrokerBody(DataVersion(1_700_000_000_000, counter),
                                                   {t: TopicConfig(t, 8, 8) for t in topics_of(i, topics, group)}),
                                compressed, False)
    ext = {"brokerName": f"soak-broker-{i}", "brokerAddr": broker_addr(i), "clusterName": "SoakCluster",
           "haServerAddr": broker_addr(i).replace(":10911", ":10912"), "brokerId": "0",
           "compressed": str(compressed).lower(), "bodyCrc32": str(crc32_masked(body))}
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, version=V4_9_8).encode()


async def read_command(reader: asyncio.StreamReader) -> RemotingCommand:
    length = int.from_bytes(await reader.readexactly(4), "big")
    return RemotingCommand.decode(await reader.readexactly(length))


async def call(reader, writer, frame: bytes, timeout: float) -> RemotingCommand:
    writer.write(frame)
    return await asyncio.wait_for(read_command(reader), timeout)


async def run_broker(i: int, args, port: list[int], stats: Stats, stop: asyncio.Event) -> None:
    """Registers on a fixed schedule, every period from a random phase, as a broker's
    registerBrokerAll task does; a lost connection is made again at the next registration."""
    template = register_frame(i, args.topics)  # opaque 0 each time: one call at a time
    addr = broker_addr(i)
    next_at = time.monotonic() + random.uniform(0, min(args.period, 10))
    connection = None
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), max(0.0, next_at - time.monotonic()))
            break
        except TimeoutError:
            pass
        next_at += args.period
        if connection is not None and connection[0].at_eof():  # the server closed it: Netty would know
            connection[1].close()
            connection = None
            stats.broker_disconnects += 1
        try:
            if connection is None:
                connection = await asyncio.open_connection(HOST, port[0])
            started = time.monotonic()
            answer = await call(*connection, template, timeout=30)
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            stats.broker_disconnects += 1
            if connection is not None:
                connection[1].close()
            connection = None
            continue
        if answer.code == ResponseCode.SUCCESS:
            stats.registrations += 1
            stats.register_ms.append((time.monotonic() - started) * 1000)
            stats.last_heartbeat[addr] = time.monotonic()
        else:
            stats.registration_errors += 1
    if connection is not None:
        connection[1].close()


async def run_client(args, port: list[int], stats: Stats, stop: asyncio.Event, measuring: asyncio.Event) -> None:
    groups = (args.brokers + GROUP - 1) // GROUP
    await asyncio.sleep(random.uniform(0, args.lookup_every))
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection(HOST, port[0])
        except OSError:
            await asyncio.sleep(0.5)
            continue
        try:
            while not stop.is_set():
                topic = f"Soak{random.randrange(groups):03d}_{random.randrange(args.topics):04d}"
                request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic},
                                                  opaque=next(_opaques), version=V4_9_8).encode()
                started = time.monotonic()
                try:
                    answer = await call(reader, writer, request, timeout=10)
                except TimeoutError:
                    stats.lookup_timeouts += measuring.is_set()
                    break
                if stats.restarting:  # routes missing until brokers re-register: the recovery, not errors
                    stats.lookup_errors_during_restart += answer.code != ResponseCode.SUCCESS
                elif measuring.is_set():
                    stats.lookups += 1
                    stats.lookup_us.append((time.monotonic() - started) * 1e6)
                    stats.lookup_errors += answer.code != ResponseCode.SUCCESS
                try:
                    await asyncio.wait_for(stop.wait(), args.lookup_every)
                except TimeoutError:
                    pass
        except (OSError, asyncio.IncompleteReadError):
            await asyncio.sleep(0.2)
        finally:
            writer.close()


async def brokers_in_cluster(port: int) -> set[str]:
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        request = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, opaque=1, version=V4_9_8).encode()
        answer = await call(reader, writer, request, timeout=10)
        table = fastjson.loads(answer.body)["brokerAddrTable"] if answer.body else {}
        return {a for b in table.values() for a in b["brokerAddrs"].values()}
    finally:
        writer.close()


async def probe(args, server: list[NamesrvProcess], port: list[int], stats: Stats, measuring: asyncio.Event,
                stop: asyncio.Event) -> None:
    """Every 10 s: brokers that heartbeated within a period but are not in the cluster info
    (not while a restart is under way: that is measured as the recovery time)."""
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), 10)
        except TimeoutError:
            pass
        if stop.is_set():
            break
        if not measuring.is_set() or stats.restarting:
            continue
        try:
            present = await brokers_in_cluster(port[0])
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            continue
        now = time.monotonic()
        fresh = {a for a, t in stats.last_heartbeat.items() if now - t < args.period}
        missing = fresh - present
        stats.probe_missing.append(len(missing))
        stats.false_expiries += len(missing)
        rss = server[0].rss_kib()
        if rss is not None:
            stats.rss_mib.append((round(now, 1), round(rss / 1024, 1)))


async def restart(args, server: list[NamesrvProcess], port: list[int], stats: Stats, scratch: Path,
                  server_args: list[str]) -> None:
    await asyncio.sleep(args.restart_at)
    print(f"[soak] restarting the server ({'warm' if args.warm else 'cold'})", file=sys.stderr, flush=True)
    stats.restarting = True
    server[0].stop()
    started = time.monotonic()
    server[0] = NamesrvProcess([*server_args, "--port", str(port[0])], scratch / "server2.log", scratch, core=0)
    await asyncio.to_thread(server[0].wait_ready)
    while True:
        try:
            if len(await brokers_in_cluster(port[0])) >= args.brokers:
                break
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            pass
        await asyncio.sleep(0.1)
    stats.restart_recovery_s = round(time.monotonic() - started, 2)
    stats.restarting = False
    print(f"[soak] every broker back after {stats.restart_recovery_s} s", file=sys.stderr, flush=True)


async def soak(args) -> dict:
    scratch = Path(tempfile.mkdtemp(prefix="namesrv-soak-"))
    server_args = ["--data-dir", str(scratch)]
    if args.warm:
        server_args += ["--route-snapshot", str(scratch / "routes.json")]
    server = [NamesrvProcess(server_args, scratch / "server.log", scratch, core=0)]
    port = [server[0].wait_ready()]
    stats, stop, measuring = Stats(), asyncio.Event(), asyncio.Event()
    tasks = [asyncio.create_task(run_broker(i, args, port, stats, stop)) for i in range(args.brokers)]
    tasks += [asyncio.create_task(run_client(args, port, stats, stop, measuring)) for _ in range(args.clients)]
    tasks.append(asyncio.create_task(probe(args, server, port, stats, measuring, stop)))
    if args.restart_at:
        tasks.append(asyncio.create_task(restart(args, server, port, stats, scratch, server_args)))
    started = time.monotonic()
    await asyncio.sleep(min(args.period, 10) + 5)  # every broker registered once
    measuring.set()
    deadline = started + args.minutes * 60
    while time.monotonic() < deadline:  # a server that dies ends the soak at once, said in the report
        await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        if not server[0].alive and not stats.restarting:
            stats.server_died = f"server exited with {server[0].proc.returncode} after " \
                                f"{time.monotonic() - started:.0f} s (log in {scratch})"
            print(f"[soak] {stats.server_died}", file=sys.stderr, flush=True)
            break
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    expired_lines = sum(len(re.findall(rb"broker expired", p.read_bytes())) for p in scratch.glob("server*.log"))
    server[0].stop()
    return report(args, stats, expired_lines, time.monotonic() - started, scratch)


def report(args, stats: Stats, expired_lines: int, seconds: float, scratch: Path) -> dict:
    lat = sorted(stats.lookup_us)
    rss = [r for _, r in stats.rss_mib]
    pct = (lambda q: round(lat[min(len(lat) - 1, int(q * len(lat)))], 1)) if lat else (lambda q: None)
    slope = None
    if len(stats.rss_mib) >= 3:
        slope = round(statistics.linear_regression([t for t, _ in stats.rss_mib], rss).slope * 60, 3)
    return {
        "brokers": args.brokers, "clients": args.clients, "topics_per_broker": args.topics, "period_s": args.period,
        "lookup_every_s": args.lookup_every, "seconds": round(seconds, 1),
        "false_expiries": stats.false_expiries, "expired_log_lines": expired_lines,
        "registrations": stats.registrations, "registration_errors": stats.registration_errors,
        "broker_disconnects": stats.broker_disconnects,
        "register_ms_p50": round(statistics.median(stats.register_ms), 2) if stats.register_ms else None,
        "lookups": stats.lookups, "lookup_errors": stats.lookup_errors, "lookup_timeouts": stats.lookup_timeouts,
        "lookup_errors_during_restart": stats.lookup_errors_during_restart,
        "lookup_us_p50": pct(0.5), "lookup_us_p99": pct(0.99),
        "rss_mib_first": rss[0] if rss else None, "rss_mib_last": rss[-1] if rss else None,
        "rss_mib_max": max(rss) if rss else None, "rss_mib_per_min_slope": slope,
        "restart_recovery_s": stats.restart_recovery_s, "server_died": stats.server_died, "scratch": str(scratch),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", type=int, default=500)
    parser.add_argument("--clients", type=int, default=5000)
    parser.add_argument("--topics", type=int, default=50, help="topics per broker (shared by groups of 5)")
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--period", type=float, default=30, help="seconds between a broker's registrations")
    parser.add_argument("--lookup-every", type=float, default=3, help="seconds between a client's lookups")
    parser.add_argument("--restart-at", type=float, default=0, help="restart the server after this many seconds")
    parser.add_argument("--warm", action="store_true", help="the server keeps a route snapshot (--route-snapshot)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the server child inherits it
    if args.brokers + args.clients + 100 > hard:
        parser.error(f"{args.brokers + args.clients} connections need more than the {hard} open files allowed")
    figures = asyncio.run(soak(args))
    print(json.dumps(figures, indent=1))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    ok = figures["false_expiries"] == figures["expired_log_lines"] == figures["lookup_errors"] == 0
    ok = ok and figures["server_died"] is None
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
