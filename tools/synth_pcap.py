#!/usr/bin/env python3
"""Synthetic NameServer traffic as a classic pcap, with the exact truth beside it.

    python tools/synth_pcap.py OUT.pcap [--brokers N] [--hours H] [--clients M] [--topics T] [--seed S]
                               [--start EPOCH_S] [--cluster NAME] [--names PREFIX] [--ports OFFSET]
                               [--server_restart FRACTION]

writes OUT.pcap and OUT.truth.json. N brokers heartbeat every 30 s for H hours (JSON and
ROCKETMQ headers, plain and compressed bodies, 4.9.8 and 5.x layouts, topics added over time),
some with an injected silence longer than the 120 s expiry, some with one near it (over 60 s),
some with registrations refused (a wrong CRC, or a 5.x refusal), some unregistering at the
end, some killed (the connection closes without UNREGISTER_BROKER), one of them restarting on a
new connection with its data version starting over, and 5.x brokers announcing each new topic
with a registration carrying only that topic; M clients look routes up every 30 s and get
answers (TOPIC_NOT_EXIST for a missing topic). Captures of other sessions at the same addresses:
another --start (right after this one, or days later), --cluster, --names and --ports. With
--server_restart, the NameServer restarts that far into the capture: it closes every connection
at once, is down SERVER_DOWN_S, and brokers and clients come back on new connections (a broker
keeps its data version: it did not restart); the truth then has two sessions.
On the wire: retransmissions, out-of-order segments, segments the capture missed, a broker and a
client whose connections were opened before the capture began (it starts mid-frame), a client
port reused by a new connection, and a last packet cut short. Frames are built with the project's
codec; no real time passes.

The truth counts what an exact analyser must find: a frame exists iff every one of its segments
was captured; its time is that of the packet that completed it.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import random
import socket
import statistics
import struct
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import BinaryIO

from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body
from twisted_namesrv.bodies.route import BrokerData, DataVersion, QueueData, topic_route_bean
from twisted_namesrv.remoting import RemotingCommand, RequestCode, ResponseCode, SerializeType, fastjson
from twisted_namesrv.remoting.codes import V4_9_8, V5_3_3, code_name
from twisted_namesrv.remoting.crc import crc32_masked

START = 1_800_000_000.0  # capture start, seconds since the epoch
SERVER = ("10.0.0.1", 9876)
CLUSTER = "SynthCluster"
HEARTBEAT_S = 30.0
LOOKUP_S = 30.0
EXPIRY_S = 120.0
SILENCE_S = 185.0  # an injected heartbeat gap: the NameServer would expire the broker
NEAR_SILENCE_S = 90.0  # an injected heartbeat gap over half the expiry: close to expiring
NEAR_EXPIRY_S = EXPIRY_S / 2
KILL_RESTART_S = 40.0  # a killed broker that restarts does so this long after
SERVER_DOWN_S = 3.0  # a restarted NameServer takes new connections this long after it went away
SEGMENT_SPACING_S = 10e-6  # between the segments of one frame
RETRANSMIT_AFTER_S = 0.2
SYN, ACK, FIN, PSH = 0x02, 0x10, 0x01, 0x08

_RECORD = struct.Struct("<IIII")
_PACKET = struct.Struct("!6s6sH BBHHHBBH4s4s HHIIBBHHH")  # Ethernet, IPv4, TCP headers
_MACS = (b"\x02\x00\x00\x00\x00\x01", b"\x02\x00\x00\x00\x00\x02")


@dataclass
class Frame:
    """Truth about one remoting command."""

    conn: int
    request: bool
    code: int
    ts: float = 0.0
    lost: bool = False
    wholly_lost: bool = False  # no packet of it captured (lost whole by the capture, not at its ends)
    oneway: bool = False
    broker_addr: str | None = None
    crc_bad: bool = False
    topic_count: int | None = None
    answer: Frame | None = None
    client: str = ""  # ip:port of the connection's client
    topic: str | None = None
    closed: bool = False  # a pseudo-frame: the connection the broker registered over closed here


@dataclass
class Options:
    brokers: int = 4
    hours: float = 0.25
    clients: int = 3
    topics: int = 40
    seed: int = 1
    mss: int = 1460
    retransmit: float = 0.01
    reorder: float = 0.01
    loss: float = 0.001
    start: float = START  # when the capture starts, seconds since the epoch
    cluster: str = CLUSTER
    names: str = "broker"  # brokers are NAMES-000, NAMES-001, ...
    ports: int = 0  # added to the clients' and brokers' own ports (another capture: other processes)
    server_restart: float = 0.0  # how far into the capture the NameServer restarts (0: it does not)


@dataclass
class Connection:
    """One TCP connection's endpoints and next sequence numbers; ``number`` counts connections."""

    number: int
    client: tuple[str, int]
    client_seq: int
    server_seq: int
    packed: tuple[bytes, bytes] = field(init=False)

    def __post_init__(self) -> None:
        self.packed = (socket.inet_aton(self.client[0]), socket.inet_aton(SERVER[0]))


class Packet:
    """A packet to write: ordered by time, then by creation, so merging keeps each actor's order."""

    __slots__ = ("ts", "order", "conn", "from_client", "seq", "ack", "flags", "payload", "frame")
    _orders = itertools.count()

    def __init__(self, ts: float, conn: Connection, from_client: bool, seq: int, ack: int, flags: int,
                 payload: bytes = b"", frame: Frame | None = None) -> None:
        self.ts, self.order, self.conn, self.from_client = ts, next(Packet._orders), conn, from_client
        self.seq, self.ack, self.flags, self.payload, self.frame = seq, ack, flags, payload, frame

    def __lt__(self, other: Packet) -> bool:
        return (self.ts, self.order) < (other.ts, other.order)


class Generator:
    def __init__(self, options: Options) -> None:
        self.o = options
        self.rng = random.Random(options.seed)
        self.end = self.o.start + options.hours * 3600
        self.frames: list[Frame] = []
        self.connections = 0
        self.injected: Counter = Counter()
        self.bodies: dict[tuple, bytes] = {}
        self.routes: dict[str, bytes] = {}
        self.last_record = self.o.start  # the time of the last whole record written: the capture's end
        #: per connection number, the last whole record written carrying bytes, and whether a FIN was written:
        #: a request after that connection's last bytes, on one not closed, is one the capture ended with
        self.last_bytes: dict[int, float] = {}
        self.closed: set[int] = set()
        #: when the NameServer goes away, and when the sessions change in the truth (while it is down)
        self.restart_at = options.start + options.hours * 3600 * options.server_restart if options.server_restart \
            else None
        self.session_change = None if self.restart_at is None else self.restart_at + SERVER_DOWN_S / 2
        self.session_bounds: list[list[float | None]] = [[None, None]]  # each session's first and last record

    # -- actors ------------------------------------------------------------------------------------

    def actors(self) -> list[Iterator[Packet]]:
        brokers = [self.broker(i) for i in range(self.o.brokers)]
        return brokers + [self.client(j) for j in range(self.o.clients)]

    def broker(self, i: int) -> Iterator[Packet]:
        """Broker i: ROCKETMQ (binary) headers if i % 4 == 1, JSON otherwise (JSON is RocketMQ's default);
        compressed bodies if i % 3 == 1; 5.x if i % 5 == 4;
        silent for SILENCE_S mid-capture if i % 4 == 2, for NEAR_SILENCE_S a third into it if i % 4 == 0
        and i > 0; its 4th registration has a wrong CRC if i % 4 == 0 and a 5.x broker's 6th is
        refused ("register broker failed"); unregisters at the end if i % 4 == 3; killed two thirds
        into the capture if i % 4 == 1 (its connection closes, no UNREGISTER_BROKER), and if i % 8 == 5
        restarted KILL_RESTART_S later on a new connection, its data version counting from 1 again.
        A 5.x broker announces each new topic with a registration carrying that topic alone, then
        goes on registering its whole table.
        Broker 0's connection predates the capture, whose first packets cut its first registration."""
        host = f"10.1.{i // 250}.{i % 250 + 1}"
        addr = f"{host}:10911"
        name = f"{self.o.names}-{i:03d}"
        version = V5_3_3 if i % 5 == 4 else V4_9_8
        serialize = SerializeType.ROCKETMQ if i % 4 == 1 else SerializeType.JSON
        compressed = i % 3 == 1
        topics = self.o.topics + i % 7
        topic_every = self.o.hours * 3600 / 4  # a topic is added four times over the capture
        mid_stream = i == 0
        conn = self.connect((host, self.o.ports + 40000 + i % 10000))
        t = self.o.start - 1.5 * SEGMENT_SPACING_S if mid_stream else self.o.start + self.rng.uniform(0.05, HEARTBEAT_S)
        if not mid_stream:
            yield from self.handshake(conn, t - 0.01)
        half = self.o.start + self.o.hours * 1800
        silence = (half, half + SILENCE_S) if i % 4 == 2 else None
        if i % 4 == 0 and i > 0:
            silence = (self.o.start + self.o.hours * 1200, self.o.start + self.o.hours * 1200 + NEAR_SILENCE_S)
        opaque = self.rng.randrange(1 << 20)
        beats = 0
        kill_at = self.o.start + self.o.hours * 2400 if i % 4 == 1 else None
        started = self.o.start  # the data version counter counts topic additions since the broker started
        announced = 1
        restart_at = self.restart_at
        while t < self.end - 5:
            if restart_at is not None and t >= restart_at:  # the server went away; the broker comes back
                conn, t = yield from self.server_restart(conn, (host, self.o.ports + 42000 + i % 10000), HEARTBEAT_S)
                restart_at = None
            if kill_at is not None and t >= kill_at:
                kill_at = None
                self.frames.append(Frame(conn.number, True, -1, ts=t, broker_addr=addr, closed=True))
                yield from self.close(conn, t)
                self.injected["kills"] += 1
                if i % 8 != 5:
                    return
                t += KILL_RESTART_S
                conn = self.connect((host, self.o.ports + 41000 + i % 10000))
                yield from self.handshake(conn, t - 0.01)
                started, announced = t, 1
                self.injected["restarts"] += 1
            if silence and silence[0] <= t < silence[1]:
                t = silence[1]
                self.injected["heartbeat_silences" if silence[1] - silence[0] > EXPIRY_S else "near_silences"] += 1
                silence = None
                continue
            added = int((t - self.o.start) // topic_every)
            counter = 1 + added - int((started - self.o.start) // topic_every)  # a new data version per topic added
            topic_count = topics + added
            if version == V5_3_3 and counter > announced:  # registerSingleTopicAll: the new topic alone
                announced = counter
                single = self.register_body(name, topic_count, counter, compressed, version, only_last=True)
                request = RemotingCommand.request(
                    RequestCode.REGISTER_BROKER, {"brokerAddr": addr, "brokerId": "0", "brokerName": name,
                                                  "bodyCrc32": str(crc32_masked(single)), "clusterName": self.o.cluster,
                                                  "compressed": "true" if compressed else "false",
                                                  "haServerAddr": f"{host}:10912", "enableActingMaster": "false",
                                                  "heartbeatTimeoutMillis": "120000"},
                    single, opaque=opaque, version=version, serialize_type=serialize)
                frame = Frame(conn.number, True, RequestCode.REGISTER_BROKER, broker_addr=addr,
                              topic_count=topic_count)
                answer = RemotingCommand.response_to(request, ResponseCode.SUCCESS, None, ext={}, version=version,
                                                     serialize_type=SerializeType.JSON)
                yield from self.exchange(conn, t, request, frame, answer, latency=self.rng.uniform(0.0003, 0.003))
                self.injected["single_topic_registrations"] += 1
                opaque += 1
                t += 0.5
            body = self.register_body(name, topic_count, counter, compressed, version)
            crc = crc32_masked(body)
            crc_bad = i % 4 == 0 and beats == 3  # a registration with a wrong CRC, refused
            refused = version == V5_3_3 and beats == 5
            ext = {"brokerAddr": addr, "brokerId": "0", "brokerName": name,
                   "bodyCrc32": str(crc + 1 if crc_bad else crc), "clusterName": self.o.cluster,
                   "compressed": "true" if compressed else "false", "haServerAddr": f"{host}:10912"}
            if version == V5_3_3:
                ext["enableActingMaster"] = "false"
                ext["heartbeatTimeoutMillis"] = "120000"
            request = RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, opaque=opaque, version=version,
                                              serialize_type=serialize)
            frame = Frame(conn.number, True, RequestCode.REGISTER_BROKER, broker_addr=addr, crc_bad=crc_bad,
                          topic_count=topic_count)
            remark = "crc32 not match" if crc_bad else "register broker failed" if refused else None
            answer = RemotingCommand.response_to(
                request, ResponseCode.SYSTEM_ERROR if remark else ResponseCode.SUCCESS, remark, ext={}, version=version,
                serialize_type=serialize if version == V4_9_8 else SerializeType.JSON)
            yield from self.exchange(conn, t, request, frame, answer, latency=self.rng.uniform(0.0003, 0.003))
            opaque += 1
            beats += 1
            t += HEARTBEAT_S + self.rng.uniform(-0.5, 0.5)
        if i % 4 == 3:
            request = RemotingCommand.request(
                RequestCode.UNREGISTER_BROKER, {"brokerAddr": addr, "brokerId": "0", "brokerName": name,
                                                "clusterName": self.o.cluster}, opaque=opaque, version=version,
                serialize_type=serialize)
            frame = Frame(conn.number, True, RequestCode.UNREGISTER_BROKER, broker_addr=addr)
            answer = RemotingCommand.response_to(request, version=version, serialize_type=SerializeType.JSON)
            yield from self.exchange(conn, t, request, frame, answer, latency=0.001)
            yield from self.close(conn, t + 0.01)

    def client(self, j: int) -> Iterator[Packet]:
        """Client j looks a route up every 30 s (every 20th request asks for cluster info); client 0's
        connection predates the capture and sends one oneway request; client 1 reconnects from the
        same port halfway through."""
        host = f"10.2.{j // 250}.{j % 250 + 1}"
        language, version = ("CPP", 63) if j % 3 == 1 else ("JAVA", V4_9_8)
        conn = self.connect((host, self.o.ports + 50000 + j % 10000))
        mid_stream = j == 0
        t = self.o.start - 0.0005 if mid_stream else self.o.start + self.rng.uniform(0.05, LOOKUP_S)
        if not mid_stream:
            yield from self.handshake(conn, t - 0.01)
        reconnect_at = self.o.start + self.o.hours * 1800 if j == 1 else None
        oneway_at = self.o.start + self.o.hours * 1200 if j == 0 else None
        opaque = 0
        restart_at = self.restart_at
        while t < self.end - 5:
            if restart_at is not None and t >= restart_at:  # the server went away; the client comes back
                conn, t = yield from self.server_restart(conn, (host, self.o.ports + 52000 + j % 10000), LOOKUP_S)
                restart_at = None
            if reconnect_at is not None and t >= reconnect_at:
                yield from self.close(conn, t)
                conn = self.connect(conn.client)
                yield from self.handshake(conn, t + 1)
                t += 1.1
                reconnect_at = None
            oneway = oneway_at is not None and t >= oneway_at
            oneway_at = None if oneway else oneway_at
            yield from self.lookup(conn, t, opaque, j, language, version, oneway)
            opaque += 1
            t += LOOKUP_S + self.rng.uniform(-1, 1)
        if j == 0:  # the capture stops while this request is being written
            request = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, opaque=opaque, version=version)
            yield from self.exchange(conn, self.end + 60, request, Frame(conn.number, True, request.code), None, 0)

    def lookup(self, conn: Connection, t: float, opaque: int, j: int, language: str, version: int,
               oneway: bool) -> Iterator[Packet]:
        if opaque % 20 == 19:
            code, ext, body, answer_code = RequestCode.GET_BROKER_CLUSTER_INFO, None, self.cluster_info(), 0
        else:
            topic = f"Topic-{self.rng.randrange(max(self.o.brokers, 1)):03d}-{self.rng.randrange(self.o.topics)}"
            if self.rng.random() < 0.05:
                topic = "NoSuchTopic"
            code, ext = RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}
            body = None if topic == "NoSuchTopic" else self.route(topic)
            answer_code = ResponseCode.TOPIC_NOT_EXIST if body is None else ResponseCode.SUCCESS
        request = RemotingCommand.request(code, ext, opaque=opaque, version=version, language=language, oneway=oneway)
        frame = Frame(conn.number, True, code, oneway=oneway, topic=(ext or {}).get("topic"))
        answer = None
        if not oneway:
            remark = None if answer_code == 0 else f"No topic route info in name server for the topic: {ext['topic']}"
            answer = RemotingCommand.response_to(request, answer_code, remark, body=body, version=V4_9_8)
        yield from self.exchange(conn, t, request, frame, answer, latency=self.rng.uniform(0.0002, 0.002))

    # -- bodies ------------------------------------------------------------------------------------

    def register_body(self, name: str, topics: int, counter: int, compressed: bool, version: int,
                      only_last: bool = False) -> bytes:
        key = (name, topics, counter, compressed, version, only_last)
        body = self.bodies.get(key)
        if body is None:
            broker = int(name.rpartition("-")[2])
            table = {f"Topic-{broker:03d}-{k}": TopicConfig(f"Topic-{broker:03d}-{k}", 8, 8, 6)
                     for k in range(topics - 1 if only_last else 0, topics)}
            wrapper = RegisterBrokerBody(DataVersion(int(self.o.start * 1000) + counter, counter), table)
            body = self.bodies[key] = encode_register_body(wrapper, compressed, v5=version == V5_3_3)
        return body

    def route(self, topic: str) -> bytes:
        body = self.routes.get(topic)
        if body is None:
            broker = int(topic.split("-")[1])
            name, addr = f"{self.o.names}-{broker:03d}", f"10.1.{broker // 250}.{broker % 250 + 1}:10911"
            bean = topic_route_bean([QueueData(name, 8, 8, 6)], [BrokerData(self.o.cluster, name, {0: addr})], {}, None,
                                    None, False)
            body = self.routes[topic] = fastjson.dumps_bytes(bean, standard=True)
        return body

    def cluster_info(self) -> bytes:
        body = self.routes.get("")
        if body is None:
            names = [f"{self.o.names}-{i:03d}" for i in range(self.o.brokers)]
            addrs = {n: {0: f"10.1.{i // 250}.{i % 250 + 1}:10911"} for i, n in enumerate(names)}
            bean = {"brokerAddrTable": {n: {"brokerAddrs": a, "brokerName": n, "cluster": self.o.cluster}
                                        for n, a in addrs.items()}, "clusterAddrTable": {self.o.cluster: names}}
            body = self.routes[""] = fastjson.dumps_bytes(bean)
        return body

    # -- TCP ---------------------------------------------------------------------------------------

    def connect(self, client: tuple[str, int]) -> Connection:
        self.connections += 1
        return Connection(self.connections, client, self.rng.randrange(1 << 32), self.rng.randrange(1 << 32))

    def handshake(self, conn: Connection, t: float) -> Iterator[Packet]:
        yield Packet(t, conn, True, conn.client_seq, 0, SYN)
        yield Packet(t + 0.0001, conn, False, conn.server_seq, conn.client_seq + 1, SYN | ACK)
        conn.client_seq, conn.server_seq = conn.client_seq + 1, conn.server_seq + 1
        yield Packet(t + 0.0002, conn, True, conn.client_seq, conn.server_seq, ACK)

    def close(self, conn: Connection, t: float, by_server: bool = False) -> Iterator[Packet]:
        first, second = (conn.server_seq, conn.client_seq) if by_server else (conn.client_seq, conn.server_seq)
        yield Packet(t, conn, not by_server, first, second, FIN | ACK)
        yield Packet(t + 0.0001, conn, by_server, second, first + 1, FIN | ACK)
        yield Packet(t + 0.0002, conn, not by_server, first + 1, second + 1, ACK)

    def server_restart(self, conn: Connection, client: tuple[str, int], every: float
                       ) -> Iterator[Packet]:
        """The server closes ``conn`` as it goes away; the actor connects again from ``client`` at
        its next request after the server is back (within ``every``). Returns (connection, time)."""
        assert self.restart_at is not None
        yield from self.close(conn, self.restart_at + self.rng.uniform(0, 0.01), by_server=True)
        conn = self.connect(client)
        t = self.restart_at + SERVER_DOWN_S + self.rng.uniform(0.5, every)
        yield from self.handshake(conn, t - 0.01)
        return conn, t

    def exchange(self, conn: Connection, t: float, request: RemotingCommand, frame: Frame,
                 answer: RemotingCommand | None, latency: float) -> Iterator[Packet]:
        """A request and its answer as segments, with the wire's impairments, in time order."""
        data = request.encode()
        frame.client = f"{conn.client[0]}:{conn.client[1]}"
        packets = self.segments(conn, True, t, data, frame)
        self.frames.append(frame)
        if answer is not None:
            response = Frame(conn.number, False, answer.code)
            frame.answer = response
            self.frames.append(response)
            sent = t + -(-len(data) // self.o.mss) * SEGMENT_SPACING_S
            packets += self.segments(conn, False, max(t + latency, sent), answer.encode(), response)
        packets.sort()
        return iter(packets)

    def segments(self, conn: Connection, from_client: bool, t: float, data: bytes, frame: Frame) -> list[Packet]:
        mss = self.o.mss
        seq = conn.client_seq if from_client else conn.server_seq
        ack = conn.server_seq if from_client else conn.client_seq
        count = -(-len(data) // mss)
        packets = [Packet(t + k * SEGMENT_SPACING_S, conn, from_client, seq + k * mss, ack, PSH | ACK,
                          data[k * mss:(k + 1) * mss], frame) for k in range(count)]
        if from_client:
            conn.client_seq = (seq + len(data)) % (1 << 32)
        else:
            conn.server_seq = (seq + len(data)) % (1 << 32)
        frame.ts = packets[-1].ts
        if t < self.o.start + 1:  # impairments would blur what the capture's start cuts off
            return packets
        if self.rng.random() < self.o.loss:
            missed = packets.pop(count // 2)
            missed.frame.lost = True
            missed.frame.wholly_lost = count == 1
            self.injected["capture_losses"] += 1
            return packets
        if count > 1 and self.rng.random() < self.o.reorder:
            k = self.rng.randrange(count - 1)
            first, second = packets[k], packets[k + 1]
            first.ts, second.ts = second.ts, first.ts  # the later bytes are captured first
            packets[k], packets[k + 1] = second, first
            self.injected["reorderings"] += 1
        if self.rng.random() < self.o.retransmit:
            original = self.rng.choice(packets)
            packets.append(Packet(original.ts + RETRANSMIT_AFTER_S, conn, from_client, original.seq, original.ack,
                                  original.flags, original.payload))
            self.injected["retransmissions"] += 1
        return packets

    # -- writing -----------------------------------------------------------------------------------

    def write(self, out: BinaryIO) -> dict:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        written = 0
        last: Packet | None = None
        for packet in heapq.merge(*self.actors()):
            if packet.ts < self.o.start:
                if packet.frame is not None:
                    packet.frame.lost = True
                continue
            if last is not None:
                self._record(out, last)
                if last.payload:
                    self.last_bytes[last.conn.number] = last.ts
                if last.flags & FIN:
                    self.closed.add(last.conn.number)
                written += 1
                self.last_record = last.ts
                self._note_session(last.ts)
            last = packet
        self._record(out, last, truncated=True)  # the capture was stopped while writing it
        if last.frame is not None:
            last.frame.lost = True
        return self.truth(written)

    def _capture_ended_with(self, request: Frame) -> bool:
        """Whether the capture holds no byte of the request's connection after it and never its close:
        no answer could be seen (the report's calls/ row says ``cut``, not unanswered)."""
        return request.conn not in self.closed and self.last_bytes.get(request.conn, request.ts) <= request.ts

    def _note_session(self, ts: float) -> None:
        """A whole record at ``ts``: the first or last of its session so far."""
        if self.session_change is not None and ts >= self.session_change and len(self.session_bounds) == 1:
            self.session_bounds.append([None, None])
        bounds = self.session_bounds[-1]
        bounds[0] = ts if bounds[0] is None else bounds[0]
        bounds[1] = ts

    @staticmethod
    def _record(out: BinaryIO, packet: Packet, truncated: bool = False) -> None:
        conn = packet.conn
        client, server = conn.packed
        src, dst = (client, server) if packet.from_client else (server, client)
        ports = (conn.client[1], SERVER[1]) if packet.from_client else (SERVER[1], conn.client[1])
        length = 40 + len(packet.payload)
        usec = round(packet.ts * 1e6)
        headers = _PACKET.pack(_MACS[packet.from_client], _MACS[not packet.from_client], 0x0800,
                               0x45, 0, length, 0, 0x4000, 64, 6, 0, src, dst,
                               ports[0], ports[1], packet.seq % (1 << 32), packet.ack % (1 << 32), 0x50,
                               packet.flags, 65535, 0, 0)
        captured = len(headers) + len(packet.payload)
        out.write(_RECORD.pack(usec // 1_000_000, usec % 1_000_000, captured, captured))
        if truncated:
            out.write((headers + packet.payload)[:captured // 2])
            return
        out.write(headers)
        out.write(packet.payload)

    # -- truth ---------------------------------------------------------------------------------------

    def truth(self, packets: int) -> dict:
        captured = [f for f in self.frames if not f.lost and not f.closed]
        requests = [f for f in captured if f.request]
        sessions: list[dict[str, dict]] = [{} for _ in self.session_bounds]
        answered = [f for f in requests if f.answer is not None and not f.answer.lost]
        closes = [f for f in self.frames if f.closed]
        for frame in sorted(requests + closes, key=lambda f: f.ts):
            if frame.broker_addr is None:
                continue
            session = int(self.session_change is not None and frame.ts >= self.session_change)
            broker = sessions[session].setdefault(frame.broker_addr, {
                "events": [], "alive": [[]], "registrations": 0, "topics": [], "crc_failures": 0, "refused": 0,
                "closes": [], "end": self.session_bounds[session][1]})
            if frame.closed:
                broker["closes"].append(_micros(frame.ts))
                broker["events"].append((_micros(frame.ts), -1))
                broker["alive"].append([])
                continue
            answered_ok = frame.answer is None or frame.answer.lost or frame.answer.code == 0
            broker["events"].append((_micros(frame.ts), frame.code))
            if frame.code == RequestCode.REGISTER_BROKER:
                broker["registrations"] += 1
                broker["crc_failures"] += frame.crc_bad
                broker["refused"] += not answered_ok and not frame.crc_bad
                broker["topics"].append((frame.ts, frame.topic_count))
                if answered_ok:
                    broker["alive"][-1].append(_micros(frame.ts))
        for frame in self.frames:  # a broker's requests the capture lost: its silence around them is the capture's
            session = int(self.session_change is not None and frame.ts >= self.session_change)
            if frame.lost and frame.request and frame.broker_addr in sessions[session]:
                sessions[session][frame.broker_addr].setdefault("lost", []).append(
                    (_micros(frame.ts), frame.wholly_lost))
        return {
            "capture": {"start": self.o.start, "end": self.end, "packets_written": packets,
                        "truncated_last_packet": True, "last_record": _micros(self.last_record)},
            "connections": self.connections,
            "frames": len(captured),
            "requests": len(requests),
            "responses": len(captured) - len(requests),
            "unanswered": sum(f.answer is None or f.answer.lost for f in requests),
            "registrations": sum(f.code == RequestCode.REGISTER_BROKER for f in requests),
            "unregisters": sum(f.code == RequestCode.UNREGISTER_BROKER for f in requests),
            "crc_failures": sum(f.crc_bad for f in requests),
            "requests_by_code": dict(Counter(code_name(f.code) for f in requests)),
            # what the findings must say: answers with a non-zero code by "request code name response
            # code", route lookups answered TOPIC_NOT_EXIST by "topic client", requests that expected
            # an answer and got none by code name (not those the capture ended with: _capture_ended_with)
            "response_codes": dict(Counter(f"{code_name(f.code)} {f.answer.code}" for f in answered
                                           if f.answer.code)),
            "topic_not_exist": dict(Counter(f"{f.topic} {f.client}" for f in answered
                                            if f.answer.code == ResponseCode.TOPIC_NOT_EXIST)),
            "unanswered_expected": dict(Counter(code_name(f.code) for f in requests
                                                if not f.oneway and (f.answer is None or f.answer.lost)
                                                and not self._capture_ended_with(f))),
            # one session unless the server restarted: each named as the report names it, with
            # its brokers; ``brokers``: those of the first
            "sessions": [{"session": _session_name(bounds[0]), "start": _micros(bounds[0]), "end": _micros(bounds[1]),
                          "brokers": {addr: _broker_truth(b) for addr, b in sorted(brokers.items())}}
                         for bounds, brokers in zip(self.session_bounds, sessions, strict=True)],
            "brokers": {addr: _broker_truth(b) for addr, b in sorted(sessions[0].items())},
            "injected": dict(self.injected),
        }


def _session_name(start: float) -> str:
    """``server@start``, the start in ISO 8601 UTC to the second."""
    when = datetime.fromtimestamp(_micros(start), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{SERVER[0]}:{SERVER[1]}@{when}"


def _micros(ts: float) -> float:
    """A time as the capture stores it (microseconds)."""
    return round(ts * 1e6) / 1e6


def _broker_truth(broker: dict) -> dict:
    """What the report must say of a broker. Its signs of life run in stretches, one per
    connection it registered over: a connection that closes without UNREGISTER_BROKER ends one
    (the NameServer forgets the broker at once), so no interval spans it."""
    stretches = [alive for alive in broker["alive"] if alive]
    intervals = [b - a for alive in stretches for a, b in itertools.pairwise(alive)]
    gaps = [[a, b] for alive in stretches for a, b in itertools.pairwise(alive) if b - a > NEAR_EXPIRY_S]
    events = sorted(broker["events"])
    last_code = events[-1][1]
    trailing = None
    if last_code == RequestCode.UNREGISTER_BROKER:
        ended = "unregistered"
    elif last_code == -1:
        ended = "connection_closed"
    else:
        last_alive = stretches[-1][-1]
        end = _micros(broker["end"])
        trailing = end - last_alive
        if trailing > NEAR_EXPIRY_S:
            gaps.append([last_alive, end])
        ended = "expired" if trailing > EXPIRY_S else "near_expiry" if trailing > NEAR_EXPIRY_S else "alive"
    silences = intervals + ([trailing] if trailing is not None else [])
    requests = [e for e in events if e[1] != -1]  # a close is no request naming the broker
    captures = [gap for gap in gaps if _lost_within(gap, broker.get("lost", []))]
    held = [gap for gap in gaps if gap not in captures and _held(gap, broker.get("lost", []))]
    return {
        "registrations": broker["registrations"],
        "crc_failures": broker["crc_failures"],
        "refused_other": broker["refused"],
        # heartbeat gaps over half the expiry: [from, to] (silent between those signs of life, or
        # from the last one to the capture's end)
        "gaps": [gap for gap in gaps if gap not in captures],
        # such gaps in which requests of the broker were lost, none of their stretches between
        # those requests over half the expiry, within the expiry: the capture's silences, not the broker's
        "capture_gaps": captures,
        # other gaps over the expiry in whose first EXPIRY_S requests were lost: whether the NameServer heard a
        # heartbeat in them is unknown to the capture, so no expiry is told there (a silence over half of it)
        "held_gaps": held,
        "median_interval_s": statistics.median(intervals) if intervals else None,
        "max_gap_s": max(silences) if silences else None,
        "would_expire": any(b - a > EXPIRY_S for a, b in gaps if [a, b] not in captures + held),
        "unregistered": last_code == RequestCode.UNREGISTER_BROKER,
        "ended": ended,
        "closes": broker["closes"],
        "restarted": len(stretches) > 1 and bool(broker["closes"]),
        "first_seen": requests[0][0],
        "last_seen": requests[-1][0],
        "last_topic_count": max(broker["topics"])[1] if broker["topics"] else None,
    }


def _lost_within(gap: list[float], lost: list[tuple[float, bool]]) -> bool:
    """Whether requests the capture lost (at ``lost``: when, and whether no packet of it was captured) make
    the silence ``gap`` the capture's: one lost whole within it (nothing captured places its bytes between
    the gap's two ends), or some lost in part and no stretch of it between them over NEAR_EXPIRY_S."""
    a, b = gap
    inside = sorted(t for t, _ in lost if a < t < b)
    if any(whole for t, whole in lost if a < t < b):
        return True
    points = [a, *inside, b]
    return bool(inside) and all(y - x <= NEAR_EXPIRY_S for x, y in itertools.pairwise(points))


def _held(gap: list[float], lost: list[tuple[float, bool]]) -> bool:
    """A silence over the expiry with requests the capture lost in its first EXPIRY_S: no expiry told."""
    a, b = gap
    return b - a > EXPIRY_S and any(a < t <= a + EXPIRY_S for t, _ in lost)


def synthesize(path: str | Path, options: Options) -> dict:
    """Write the capture and its truth (``<stem>.truth.json``); return the truth."""
    path = Path(path)
    with open(path, "wb", buffering=1 << 22) as out:
        truth = Generator(options).write(out)
    truth["options"] = vars(options)
    truth_path(path).write_text(json.dumps(truth, indent=1, sort_keys=True))
    return truth


def truth_path(path: Path) -> Path:
    return path.with_name(path.stem + ".truth.json")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="the pcap to write; the truth goes to <stem>.truth.json")
    defaults = Options()
    for name, value in vars(defaults).items():
        parser.add_argument(f"--{name}", type=type(value), default=value)
    args = vars(parser.parse_args(argv))
    out = args.pop("out")
    truth = synthesize(out, Options(**args))
    print(f"{out}: {Path(out).stat().st_size:,} bytes, {truth['capture']['packets_written']:,} packets, "
          f"{truth['frames']:,} frames, {truth['registrations']:,} registrations", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
