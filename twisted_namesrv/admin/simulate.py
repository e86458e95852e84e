"""``namesrv-admin simulate-broker``: brokers without Java, to try a NameServer (ours or Java's).

Each simulated broker registers with every NameServer given, over a connection of its own kept
open (a NameServer drops a broker whose connection closes), as a Java broker does: REGISTER_BROKER
with its topic table, then again every ``--interval`` seconds as its heartbeat, with the same data
version; at the end (``--count`` heartbeats, Ctrl-C or SIGTERM) it unregisters (its connections
closing would drop it anyway).  It does not serve messages: clients find its route, and a send to
it fails.

A 5.x NameServer refuses a broker's first registration when it carries a single topic (as Java
5.x does), so the default table has two: TopicTest and SimTopic.
"""

from __future__ import annotations

import argparse
import signal
import ssl
import threading
import time
from dataclasses import dataclass
from types import FrameType
from typing import TextIO

from ..bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body
from ..bodies.route import DataVersion
from ..remoting import RequestCode, ResponseCode
from ..remoting.codes import V4_9_8, V5_3_3, code_name
from ..remoting.crc import crc32_masked
from ..state.hosts import host_port
from .client import AdminError, NamesrvClient, parse_address
from .terminal import printable

DEFAULT_TOPICS = "TopicTest,SimTopic"
DEFAULT_INTERVAL = 30.0  # seconds: a Java broker's registerNameServerPeriod
SINGLE_TOPIC_HINT = " (a 5.x NameServer refuses a broker's first registration with a single topic: name two)"


@dataclass
class SimulatedBroker:
    cluster: str
    name: str
    addr: str
    broker_id: int
    topics: dict[str, TopicConfig]
    version: int
    data_version: DataVersion

    def register_request(self) -> tuple[dict[str, str], bytes]:
        """REGISTER_BROKER's header and body, as BrokerOuterAPI.registerBroker writes them."""
        v5 = self.version >= V5_3_3
        body = encode_register_body(RegisterBrokerBody(self.data_version, dict(self.topics)), compressed=False, v5=v5)
        host, port = parse_address(self.addr)
        ext = {"brokerName": self.name, "brokerAddr": self.addr, "clusterName": self.cluster,
               "haServerAddr": f"{host}:{port + 1}", "brokerId": str(self.broker_id), "compressed": "false",
               "bodyCrc32": str(crc32_masked(body))}
        if v5:
            ext.update({"heartbeatTimeoutMillis": "120000", "enableActingMaster": "false"})
        return ext, body

    def unregister_fields(self) -> dict[str, str]:
        return {"brokerName": self.name, "brokerAddr": self.addr, "clusterName": self.cluster,
                "brokerId": str(self.broker_id)}


def brokers_from(args: argparse.Namespace, now_ms: int) -> list[SimulatedBroker]:
    """``--brokers N`` groups named NAME, NAME-1, ... (one master each) on consecutive ports from ADDR."""
    names = [t.strip() for t in args.topics.split(",") if t.strip()]
    if not names:
        raise AdminError("--topics: no topic named")
    host, port = parse_address(args.broker_addr)
    version = V4_9_8 if args.broker_version == "4.9.8" else V5_3_3
    brokers = []
    for i in range(args.brokers):
        table = {t: TopicConfig(t, args.queues, args.queues) for t in names}
        addr = host_port(host, port + 2 * i)
        brokers.append(SimulatedBroker(args.cluster, args.broker_name if i == 0 else f"{args.broker_name}-{i}", addr,
                                       0, table, version, DataVersion(now_ms, 1)))
    return brokers


class Simulation:
    def __init__(self, namesrvs: list[str], brokers: list[SimulatedBroker], timeout: float,
                 credentials: tuple[str, str] | None, out: TextIO, err: TextIO,
                 tls: ssl.SSLContext | None = None) -> None:
        self.out, self.err = out, err
        #: (broker, NameServer address, its connection), per broker and NameServer
        self.links = [(b, addr, NamesrvClient(addr, timeout, credentials, tls)) for b in brokers for addr in namesrvs]
        self.stop = threading.Event()

    def heartbeat(self, round_: int) -> int:
        """Every broker registers with every NameServer once; the number that failed."""
        failed = 0
        for broker, addr, link in self.links:
            name = broker.name
            ext, body = broker.register_request()
            try:
                answer = link.call(RequestCode.REGISTER_BROKER, ext, body, version=broker.version)
            except AdminError as exc:
                failed += 1
                self.err.write(f"simulate-broker: {name}: {printable(exc)}\n")
                continue
            if answer.code != ResponseCode.SUCCESS:
                failed += 1
                hint = SINGLE_TOPIC_HINT if len(broker.topics) == 1 else ""
                self.err.write(f"simulate-broker: {name} refused by {addr}: {code_name(answer.code, True)} "
                               f"({answer.code}): {printable(answer.remark)}{hint}\n")
            elif round_ == 1:
                self.out.write(f"registered {broker.cluster}/{name} {broker.addr} with {len(broker.topics)} topics "
                               f"({', '.join(list(broker.topics)[:5])}{', ...' if len(broker.topics) > 5 else ''})"
                               f" at {addr}\n")
        if round_ > 1:
            self.out.write(f"heartbeat {round_}: {len(self.links) - failed} of {len(self.links)} registrations "
                           "answered SUCCESS\n")
        self.out.flush()
        return failed

    def unregister(self) -> None:
        for broker, addr, link in self.links:
            try:
                link.call(RequestCode.UNREGISTER_BROKER, broker.unregister_fields(), version=broker.version)
                self.out.write(f"unregistered {broker.name} from {addr}\n")
            except AdminError as exc:
                self.err.write(f"simulate-broker: {broker.name}: {printable(exc)}\n")

    def close(self) -> None:
        for _, _, link in self.links:
            link.close()


def run_simulation(namesrvs: list[str], args: argparse.Namespace, credentials: tuple[str, str] | None,
                   out: TextIO, err: TextIO, tls: ssl.SSLContext | None = None) -> int:
    """Exit status: 0 when every registration was answered SUCCESS, 1 otherwise; ``tls``: the
    connections speak TLS (``--tls``), as every other subcommand's."""
    if args.brokers < 1 or args.queues < 1 or args.interval <= 0 or args.count < 0:
        err.write("error: --brokers and --queues must be at least 1, --interval positive, --count at least 0\n")
        return 2
    try:
        brokers = brokers_from(args, int(time.time() * 1000))
    except AdminError as exc:
        err.write(f"error: {exc}\n")
        return 2
    simulation = Simulation(namesrvs, brokers, args.timeout, credentials, out, err, tls)

    def stop(signum: int, frame: FrameType | None) -> None:
        simulation.stop.set()

    in_main = threading.current_thread() is threading.main_thread()  # only there may signals be caught
    previous = signal.signal(signal.SIGTERM, stop) if in_main else None
    failures, round_ = 0, 0
    try:
        while not simulation.stop.is_set():
            round_ += 1
            failures += simulation.heartbeat(round_)
            if args.count and round_ >= args.count:
                break
            simulation.stop.wait(args.interval)
    except KeyboardInterrupt:
        pass
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
        simulation.unregister()
        simulation.close()
    return 1 if failures else 0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    sub = subparsers.add_parser(
        "simulate-broker", help="register simulated brokers and keep them alive (no Java needed)",
        description="Registers brokers with every NameServer of -n and heartbeats every --interval seconds "
                    "until --count heartbeats, Ctrl-C or SIGTERM; then unregisters them. "
                    "Exit 0 when every registration was answered SUCCESS.")
    sub.add_argument("--cluster", default="DefaultCluster", help="cluster name (default DefaultCluster)")
    sub.add_argument("--broker-name", default="broker-a", help="broker name; more brokers get -1, -2, ...")
    sub.add_argument("--broker-addr", default="127.0.0.1:10911",
                     help="the first broker's address (default 127.0.0.1:10911; the next ones every other port)")
    sub.add_argument("--brokers", type=int, default=1, help="how many broker groups (default 1)")
    sub.add_argument("--topics", default=DEFAULT_TOPICS, help=f"comma-separated topics (default {DEFAULT_TOPICS}; "
                     "a 5.x NameServer refuses a first registration with a single topic)")
    sub.add_argument("--queues", type=int, default=4, help="read and write queues per topic (default 4)")
    sub.add_argument("--interval", type=float, default=DEFAULT_INTERVAL,
                     help=f"seconds between heartbeats (default {DEFAULT_INTERVAL:g}, as Java's brokers)")
    sub.add_argument("--count", type=int, default=0, help="stop after this many heartbeats (default 0: run until "
                     "Ctrl-C or SIGTERM)")
    sub.add_argument("--broker-version", choices=("5.3.3", "4.9.8"), default="5.3.3",
                     help="the RocketMQ version the brokers say they are (default 5.3.3)")
    return sub
