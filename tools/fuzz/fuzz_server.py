#!/usr/bin/env python3
"""Long fuzz run against a live NameServer (issue 5, item 3).

Starts ``python -m twisted_namesrv`` as a child process on 127.0.0.1 (ephemeral port, data in a
temp dir), registers a broker double for a topic of its own over a connection it keeps open
(re-registering every 20 s as brokers do), and while a well-behaved client keeps asking for that
topic's route (and for a KV entry of its own) and checks every answer byte for byte, sends
generated and mutated frames built from the golden captures over several parallel connections:

  bit flips, interesting bytes, truncation (with and without a fixed length), splicing two
  frames, length-field lies (frame and header length), type-byte changes, random extFields keys
  and values, oneway/response/random flags, other codes, header/body swaps, JSON-token
  replacements (odd numbers, escapes, deep nesting), body mutations (plain and compressed
  registrations, with the CRC fixed or not, properties text), random garbage, and stacks of these.

Each generated frame is classified with the project's own codec before it is sent: OK (the
server will decode it), CLOSER (the server must close the connection) or PARTIAL (a lying length
leaves the server waiting).  A connection carries OK frames, ends with one CLOSER or PARTIAL (then
waits for the close) or with a sentinel request whose answer proves every frame before it was
processed.  So every generated frame reaches the server's decoder, and a close the codec did not
predict (an exception escaping the server) is counted.  Names the good client depends on are
random, so no fuzz frame can legitimately change its answers; KV entries fuzz frames create are
deleted again by a janitor connection so the store stays small.

Printed at the end (and with --json written as JSON): frames generated and sent, frames/s,
connections, server crashes (the process died), stalled connections (neither answered nor closed
in time), every traceback in the server log grouped by where it came from, answers our own codec
cannot decode, the good client's checks and errors, the broker double's registrations, and RSS.
Exit status 0 only when all of those are clean.

  .venv/bin/python tools/fuzz/fuzz_server.py                       # 1,000,000 frames (bounded: 2 h)
  .venv/bin/python tools/fuzz/fuzz_server.py --frames 20000 --max-seconds 60
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from namesrv_proc import HOST, NamesrvProcess, scan_log  # noqa: E402

from spark_analysis.capture.conversation import read_conversations  # noqa: E402
from twisted_namesrv.bodies.register import (  # noqa: E402
    RegisterBrokerBody,
    TopicConfig,
    encode_register_body,
)
from twisted_namesrv.bodies.route import DataVersion  # noqa: E402
from twisted_namesrv.remoting import (  # noqa: E402
    DEFAULT_MAX_FRAME_LENGTH,
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    FrameDecoder,
    RemotingCommand,
    RemotingDecodeError,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from twisted_namesrv.remoting.codes import V5_3_3  # noqa: E402
from twisted_namesrv.remoting.crc import crc32_masked  # noqa: E402
from twisted_namesrv.remoting.frame import encode_frame  # noqa: E402

CAPTURES = Path(__file__).resolve().parents[2] / "tests" / "data" / "golden"
OK, CLOSER, PARTIAL = "ok", "closer", "partial"
ALL_CODES = sorted({int(c) for c in RequestCode} | {0, 1, 2, 3, 9999, 32767, -1, 65535, 2 ** 31 - 1})
#: config keys whose change would legitimately change the good client's answers
ROUTE_SHAPING_KEYS = (b"needWaitForService", b"waitSecondsForService")

EXT_VALUES = [
    "", "0", "-1", "1", "2", "true", "false", "TRUE", "null", "NaN", "1e3", "0x10", "1_0", " 0", "0 ",
    "2147483647", "2147483648", "-2147483649", "9223372036854775807", "9223372036854775808",
    "99999999999999999999", "A" * 300, "B" * 5000, "ü", "日本", "😀", "\x00", "a\nb", "a=b\nlistenPort=1",
    "../../etc/passwd", "%s%n%x", "{}", "[]", '{"a":1}', "broker-a", "broker-b", "DefaultCluster",
    "TopicTest", "OrderTopic", "127.0.0.1:10911", "ORDER_TOPIC_CONFIG", "NS", "k1", "PROBE", "zone-b",
]
EXT_KEYS = [
    "", "topic", "brokerName", "clusterName", "brokerAddr", "brokerId", "bodyCrc32", "compressed",
    "namespace", "key", "value", "haServerAddr", "__ZONE_NAME", "__ZONE_MODE", "acceptStandardJsonOnly",
    "heartbeatTimeoutMillis", "enableActingMaster", "cluster", "K" * 1000, "opaque", "code",
]
JSON_LITERALS = [
    b"Infinity", b"-Infinity", b"NaN", b"1e999", b"-1e999", b"1.5", b"-0", b"99999999999999999999",
    b"2147483648", b"-2147483649", b"null", b"true", b"[]", b"{}", b'"x"', b'""', b'"\\ud800"',
    b'"\\udfff\\ud800"', b'"\\u0000"', b'"' + b"\\u00e9" * 50 + b'"', b"[1,[2,[3]]]", b'{"a":{"b":1.5}}',
    b"[" * 2000 + b"]" * 2000, b"0" * 5000,
]
PROPERTIES = [
    b"orderMessageEnable=true\n", b"orderMessageEnable=false\n", b"enableTopicList=false\n",
    b"enableAllTopicList=true\n", b"productEnvName=fuzz\n", b"listenPort=1\n", b"kvConfigPath=/tmp/x\n",
    b"configStorePath=/tmp/y\n", b"rocketmqHome=/tmp\n", b"serverWorkerThreads=1\n", b"frameMaxLength=1\n",
    b"compatVersion=4.9.8\n", b"\\u12=x\n", b"a=\\uZZZZ\n", b"key\\\n  continued=1\n", b"=\n", b"\xff\xfe=1\n",
    b"clusterTest=true\nproductEnvName=a\\nb\n", b"#comment only\n", b"x" * 3000 + b"=1\n",
]
INTERESTING_BYTES = [0, 1, 0x7F, 0x80, 0xFF, ord("{"), ord("}"), ord("["), ord('"'), ord("\\"), ord(":"),
                     ord(","), ord("0"), ord("9"), ord("-"), 0xC0, 0xED]
LENGTH_LIES = [0, 1, 2, 3, 4, 5, -1, -(2 ** 31), 2 ** 31 - 1, DEFAULT_MAX_FRAME_LENGTH - 4,
               DEFAULT_MAX_FRAME_LENGTH - 3, 0x00FFFFFF, 0x01000000]


# -- seeds -------------------------------------------------------------------------------------------

@dataclass
class Seed:
    frame: bytes
    command: RemotingCommand | None


def load_seeds(captures: Path) -> tuple[dict[int, list[Seed]], list[bytes]]:
    """Captured frames (both directions) by code, and the captured undecodable client bytes."""
    by_code: dict[int, list[Seed]] = {}
    raw: list[bytes] = []
    for path in sorted(captures.glob("*.pcap")):
        for conversation in read_conversations(path):
            for c in conversation.commands:
                by_code.setdefault(c.command.code, []).append(Seed(c.frame, c.command))
            if conversation.undecodable:
                raw.append(conversation.undecodable)
    if not by_code:
        sys.exit(f"no captures under {captures}")
    return by_code, raw


# -- classification with the project's own codec ---------------------------------------------------

@dataclass
class Verdict:
    kind: str
    commands: list[RemotingCommand] = field(default_factory=list)
    escape: str | None = None  # an exception other than RemotingDecodeError: a server bug


def classify(data: bytes) -> Verdict:
    decoder = FrameDecoder(DEFAULT_MAX_FRAME_LENGTH)
    try:
        frames = decoder.feed(data)
    except RemotingDecodeError:
        return Verdict(CLOSER)
    except Exception as exc:  # noqa: BLE001 - exactly what we are looking for
        return Verdict(CLOSER, escape=f"FrameDecoder.feed: {type(exc).__name__}: {exc}"[:200])
    commands = []
    for frame in frames:
        try:
            commands.append(RemotingCommand.decode(frame))
        except RemotingDecodeError:
            return Verdict(CLOSER, commands)
        except Exception as exc:  # noqa: BLE001
            return Verdict(CLOSER, commands, f"RemotingCommand.decode: {type(exc).__name__}: {exc}"[:200])
    if decoder.pending:
        return Verdict(PARTIAL, commands)
    return Verdict(OK, commands)


# -- mutations ---------------------------------------------------------------------------------------

def prefix(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


class Mutator:
    OPS = {  # name -> weight
        "raw": 3, "bitflip": 15, "bytes": 8, "truncate": 4, "truncate_fixed": 4, "splice": 6, "length_lie": 7,
        "header_length_lie": 5, "type_byte": 4, "ext": 12, "flags": 7, "code": 5, "swap": 3, "json_token": 8,
        "body": 9, "garbage": 3, "stack": 3,
    }

    def __init__(self, seeds: dict[int, list[Seed]], raw: list[bytes], rng: random.Random,
                 json_tokens: bool = True) -> None:
        self.seeds = seeds
        self.codes = sorted(seeds)
        self.raw = raw
        self.rng = rng
        ops = dict(self.OPS)
        if not json_tokens:
            ops.pop("json_token")
        self.names = list(ops)
        self.weights = list(ops.values())

    def seed(self) -> Seed:
        """A code chosen uniformly, then one of its frames: big bulk registrations stay rare."""
        return self.rng.choice(self.seeds[self.rng.choice(self.codes)])

    def generate(self) -> tuple[str, bytes]:
        op = self.rng.choices(self.names, self.weights)[0]
        seed = self.seed()
        if op == "stack":
            data = seed.frame
            for _ in range(self.rng.randint(2, 4)):
                data = self.apply(self.rng.choice(["bitflip", "bytes", "truncate", "length_lie", "type_byte",
                                                   "header_length_lie", "splice"]), Seed(data, None))
            return op, data
        return op, self.apply(op, seed)

    def apply(self, op: str, seed: Seed) -> bytes:
        rng = self.rng
        data = bytearray(seed.frame)
        n = len(data)
        if n < 8 and op not in ("splice", "garbage"):  # what earlier mutations left is too short
            return bytes(data) + rng.randbytes(rng.randint(0, 8))
        if op == "raw":
            return bytes(data)
        if op == "bitflip":
            for _ in range(rng.choice((1, 1, 1, 2, 3, 8))):
                data[rng.randrange(n)] ^= 1 << rng.randrange(8)
            return bytes(data)
        if op == "bytes":
            for _ in range(rng.randint(1, 3)):
                data[rng.randrange(n)] = rng.choice(INTERESTING_BYTES)
            return bytes(data)
        if op == "truncate":
            return bytes(data[:rng.randrange(n)])
        if op == "truncate_fixed":
            cut = data[4:rng.randint(4, n)]
            return prefix(bytes(cut))
        if op == "splice":
            other = self.seed().frame
            return bytes(data[:rng.randint(0, n)]) + other[rng.randint(0, len(other)):]
        if op == "length_lie":
            value = rng.choice(LENGTH_LIES + [n - 4 + rng.randint(-8, 8)])
            struct.pack_into(">i", data, 0, value)
            return bytes(data)
        if op == "header_length_lie" and n >= 8:
            word = struct.unpack_from(">I", data, 4)[0]
            length = rng.choice([0, 1, 0x00FFFFFF, n - 8, n - 7, (word & 0xFFFFFF) + rng.randint(-4, 4)])
            struct.pack_into(">I", data, 4, (word & 0xFF000000) | (length & 0xFFFFFF))
            return bytes(data)
        if op == "type_byte" and n >= 5:
            data[4] = rng.choice([0, 1, 2, 0x7F, 0x80, 0xFF, rng.randrange(256)])
            return bytes(data)
        if op == "swap" and n >= 8:
            header_length = struct.unpack_from(">I", data, 4)[0] & 0xFFFFFF
            header, body = bytes(data[8:8 + header_length]), bytes(data[8 + header_length:])
            if rng.random() < 0.5:
                return bytes(data[:8]) + body + header
            return prefix(struct.pack(">I", (data[4] << 24) | len(body)) + body + header)
        if op == "garbage":
            if self.raw and rng.random() < 0.3:
                return rng.choice(self.raw)
            junk = rng.randbytes(rng.randint(0, 200))
            return prefix(junk) if rng.random() < 0.7 else junk
        if op == "json_token":
            return self.json_token(bytes(data))
        command = seed.command
        if command is None:
            return self.apply("bitflip", seed)
        if op == "ext":
            return self.reencode(command, ext=self.mutate_ext(dict(command.ext)))
        if op == "flags":
            flag = rng.choice([ONEWAY_FLAG, RESPONSE_FLAG, ONEWAY_FLAG | RESPONSE_FLAG, 0, -1, 4, 2 ** 31 - 1,
                               rng.randint(-(2 ** 31), 2 ** 31 - 1)])
            return self.reencode(command, flag=flag)
        if op == "code":
            return self.reencode(command, code=rng.choice(ALL_CODES + [rng.randint(-(2 ** 15), 2 ** 15 - 1)]))
        if op == "body":
            return self.mutate_body(command)
        return self.apply("bitflip", seed)

    def mutate_ext(self, ext: dict) -> dict:
        rng = self.rng
        for _ in range(rng.randint(1, 3)):
            what = rng.random()
            if ext and what < 0.45:
                ext[rng.choice(list(ext))] = rng.choice(EXT_VALUES)
            elif ext and what < 0.65:
                del ext[rng.choice(list(ext))]
            else:
                ext[rng.choice(EXT_KEYS)] = rng.choice(EXT_VALUES)
        return ext

    def reencode(self, command: RemotingCommand, **changes) -> bytes:
        header = command.header
        copy = RemotingCommand(type(header)(header.code, header.language, header.version, header.opaque,
                                            header.flag, header.remark,
                                            None if header.ext_fields is None else dict(header.ext_fields),
                                            header.json_layout), command.body, command.serialize_type)
        for name, value in changes.items():
            if name == "ext":
                copy.header.ext_fields = value
            elif name == "body":
                copy.body = value
            else:
                setattr(copy.header, name, value)
        try:
            return copy.encode()
        except (ValueError, OverflowError, UnicodeError, struct.error):  # a binary header cannot hold it
            copy.serialize_type = SerializeType.JSON
            return copy.encode()

    def mutate_body(self, command: RemotingCommand) -> bytes:
        rng = self.rng
        ext = dict(command.ext)
        body = command.body or b""
        if command.code == RequestCode.REGISTER_BROKER and body:
            compressed = ext.get("compressed") == "true"
            inner = zlib.decompress(body) if compressed else body
            inner = bytearray(inner)
            for _ in range(rng.randint(1, 4)):
                what = rng.random()
                if what < 0.5 and inner:
                    inner[rng.randrange(len(inner))] ^= 1 << rng.randrange(8)
                elif what < 0.7 and inner:
                    pos = rng.randrange(len(inner))
                    inner[pos:pos] = rng.choice(JSON_LITERALS[:16])
                elif what < 0.85 and len(inner) >= 4:
                    struct.pack_into(">i", inner, rng.randrange(len(inner) - 3), rng.choice(LENGTH_LIES))
                else:
                    del inner[rng.randrange(len(inner) + 1):]
            body = zlib.compress(bytes(inner)) if compressed and rng.random() < 0.9 else bytes(inner)
            if rng.random() < 0.7:  # fix the CRC so the body reaches the decoder
                ext["bodyCrc32"] = str(crc32_masked(body))
            return self.reencode(command, ext=ext, body=body)
        if command.code == RequestCode.UPDATE_NAMESRV_CONFIG:
            return self.reencode(command, body=b"".join(rng.choices(PROPERTIES, k=rng.randint(1, 3))))
        choice = rng.random()
        if choice < 0.4:
            new = rng.randbytes(rng.randint(1, 300))
        elif choice < 0.8:
            new = rng.choice(JSON_LITERALS)
        else:
            new = b'{"queueDatas":[{"brokerName":"broker-a","perm":' + rng.choice(JSON_LITERALS) + b"}]}"
        return self.reencode(command, body=new)

    _TOKEN = re.compile(rb'-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|"(?:[^"\\]|\\.)*"|true|false|null')

    def json_token(self, frame: bytes) -> bytes:
        """Replace one JSON token of a JSON header (numbers, strings, literals) with an odd one."""
        if len(frame) < 8 or frame[4] != SerializeType.JSON:
            return self.apply("bitflip", Seed(frame, None))
        header_length = struct.unpack_from(">I", frame, 4)[0] & 0xFFFFFF
        header, body = frame[8:8 + header_length], frame[8 + header_length:]
        tokens = list(self._TOKEN.finditer(header))
        if not tokens:
            return self.apply("bitflip", Seed(frame, None))
        token = self.rng.choice(tokens)
        header = header[:token.start()] + self.rng.choice(JSON_LITERALS) + header[token.end():]
        return prefix(struct.pack(">I", len(header)) + header + body)


# -- the run -----------------------------------------------------------------------------------------

@dataclass
class Stats:
    frames: int = 0  # generated frames sent (each reached the server's decoder)
    frames_skipped: int = 0  # generated but not sent (would legitimately change the good client's view)
    requests_decoded: int = 0  # commands the codec decoded from the sent frames
    connections: int = 0
    kinds: Counter = field(default_factory=Counter)
    ops: Counter = field(default_factory=Counter)
    answer_codes: Counter = field(default_factory=Counter)
    predicted_escapes: Counter = field(default_factory=Counter)
    unexpected_closes: int = 0  # the server closed a connection the codec said it would keep
    stalls: int = 0  # a connection got neither its answers nor a close within the timeout
    bad_answers: int = 0  # answers that are not valid remoting frames
    good_checks: int = 0  # the good client's route and KV lookups checked
    good_errors: int = 0  # ... that went wrong (wrong answer, no answer, connection lost)
    broker_registrations: int = 0  # the broker double's (re-)registrations
    broker_errors: int = 0  # ... not answered SUCCESS
    good_error_samples: list = field(default_factory=list)
    good_max_latency_ms: float = 0.0
    janitor_deletes: int = 0
    janitor_failures: int = 0
    rss_kib: list = field(default_factory=list)


class Findings:
    """Examples of inputs worth a look, as hex, a few per signature."""

    def __init__(self, directory: Path, per_signature: int = 5) -> None:
        self.directory = directory
        self.per_signature = per_signature
        self.counts: Counter = Counter()
        directory.mkdir(parents=True, exist_ok=True)

    def add(self, signature: str, data: bytes) -> None:
        self.counts[signature] += 1
        if self.counts[signature] <= self.per_signature:
            name = re.sub(r"[^A-Za-z0-9]+", "_", signature)[:60]
            with open(self.directory / f"{name}.hex", "a") as out:
                out.write(data.hex() + "\n")


class Fuzzer:
    def __init__(self, args, port: int, server: NamesrvProcess, findings: Findings) -> None:
        self.args = args
        self.port = port
        self.server = server
        self.findings = findings
        self.stats = Stats()
        self.rng = random.Random(args.seed)
        seeds, raw = load_seeds(Path(args.captures))
        self.mutator = Mutator(seeds, raw, self.rng, json_tokens=not args.no_json_tokens)
        tag = f"{self.rng.getrandbits(48):012x}"
        self.cluster = f"FuzzGoodCluster{tag}"
        self.broker_name = f"fuzz-good-{tag}"
        self.broker_addr = f"127.0.0.9:{20000 + self.rng.randrange(20000)}"
        self.topics = [f"FuzzGood{tag}A", f"FuzzGood{tag}B"]
        self.kv = (f"FuzzGoodNS{tag}", "key", f"value-{tag}")
        self.expected_route: tuple[int, bytes | None] | None = None
        self.done = False
        self.deadline = time.monotonic() + args.max_seconds
        self.opaque = 1
        self.kv_written: set[tuple[str, str]] = set()

    def next_opaque(self) -> int:
        self.opaque = self.opaque % 2_000_000_000 + 1
        return self.opaque

    # -- the well-behaved side -------------------------------------------------------------------
    def register_request(self) -> RemotingCommand:
        body = encode_register_body(RegisterBrokerBody(DataVersion(int(time.time() * 1000), 1),
                                                       {t: TopicConfig(t, 4, 4) for t in self.topics}), False, True)
        ext = {"clusterName": self.cluster, "brokerAddr": self.broker_addr, "brokerName": self.broker_name,
               "brokerId": "0", "haServerAddr": self.broker_addr, "compressed": "false",
               "bodyCrc32": str(crc32_masked(body)), "enableActingMaster": "false", "heartbeatTimeoutMillis": "60000"}
        return RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, opaque=self.next_opaque(),
                                       version=V5_3_3)

    async def call(self, reader, writer, command: RemotingCommand, timeout: float = 10.0) -> RemotingCommand:
        return await self.call_raw(reader, writer, command.encode(), command.opaque, timeout)

    @staticmethod
    async def call_raw(reader, writer, frame: bytes, opaque: int, timeout: float = 10.0) -> RemotingCommand:
        writer.write(frame)
        decoder = FrameDecoder(1 << 31)
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while True:
            data = await asyncio.wait_for(reader.read(65536), max(end - loop.time(), 0.001))
            if not data:
                raise ConnectionError("closed by the server")
            for frame_ in decoder.feed(data):
                answer = RemotingCommand.decode(frame_)
                if answer.opaque == opaque:
                    return answer

    async def good_broker(self, ready: asyncio.Event) -> None:
        reader, writer = await asyncio.open_connection(HOST, self.port)
        try:
            while not self.done:
                try:
                    answer = await self.call(reader, writer, self.register_request())
                    self.stats.broker_registrations += 1
                    if answer.code != ResponseCode.SUCCESS:
                        self.good_error(f"registration answered {answer.code} {answer.remark!r}", broker=True)
                except (OSError, asyncio.TimeoutError, ConnectionError) as exc:
                    self.good_error(f"broker connection: {exc!r}", broker=True)
                    return
                ready.set()
                for _ in range(200):  # re-register every 20 s, as brokers do every 30 s
                    if self.done:
                        break
                    await asyncio.sleep(0.1)
        finally:
            writer.close()

    def good_error(self, message: str, broker: bool = False) -> None:
        if broker:
            self.stats.broker_errors += 1
        else:
            self.stats.good_errors += 1
        if len(self.stats.good_error_samples) < 20:
            self.stats.good_error_samples.append(message)
        if self.stats.good_errors + self.stats.broker_errors <= 5:
            print(f"good-side error: {message}", flush=True)

    async def good_client(self) -> None:
        reader, writer = await asyncio.open_connection(HOST, self.port)
        namespace, key, value = self.kv
        put = RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {"namespace": namespace, "key": key, "value": value},
                                      opaque=self.next_opaque(), version=V5_3_3)
        assert (await self.call(reader, writer, put)).code == ResponseCode.SUCCESS
        first = await self.call(reader, writer, self.route_request(self.topics[0]))
        assert first.code == ResponseCode.SUCCESS, first.remark
        self.expected_route = (first.code, first.body)
        loop = asyncio.get_running_loop()
        i = 0
        while not self.done:
            i += 1
            try:
                started = loop.time()
                if i % 10:
                    answer = await self.call(reader, writer, self.route_request(self.topics[0]))
                    ok = (answer.code, answer.body) == self.expected_route
                else:
                    get = RemotingCommand.request(RequestCode.GET_KV_CONFIG, {"namespace": namespace, "key": key},
                                                  opaque=self.next_opaque(), version=V5_3_3)
                    answer = await self.call(reader, writer, get)
                    ok = answer.code == ResponseCode.SUCCESS and answer.ext.get("value") == value
                latency = (loop.time() - started) * 1000
                self.stats.good_max_latency_ms = max(self.stats.good_max_latency_ms, latency)
                self.stats.good_checks += 1
                if not ok:
                    self.good_error(f"wrong answer: code {answer.code} remark {answer.remark!r} "
                                    f"body {(answer.body or b'')[:200]!r}")
            except Exception as exc:  # noqa: BLE001 - whatever goes wrong is an error of the good side
                self.good_error(f"good client: {exc!r}")
                writer.close()
                reader, writer = await asyncio.open_connection(HOST, self.port)
            await asyncio.sleep(self.args.good_interval)
        writer.close()

    def route_request(self, topic: str) -> RemotingCommand:
        return RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic},
                                       opaque=self.next_opaque(), version=V5_3_3)

    async def janitor(self) -> None:
        """Deletes the KV entries fuzz frames created, so persisting the store stays cheap.  The
        header is written as ASCII JSON, so keys holding lone surrogates (JSON \\uD800 escapes
        decode to them) can be named too."""
        reader, writer = await asyncio.open_connection(HOST, self.port)
        try:
            while not self.done:
                await asyncio.sleep(1.0)
                written, self.kv_written = self.kv_written, set()
                for namespace, key in written:
                    if namespace == self.kv[0]:
                        continue
                    opaque = self.next_opaque()
                    header = json.dumps({"code": int(RequestCode.DELETE_KV_CONFIG),
                                         "extFields": {"namespace": namespace, "key": key}, "flag": 0,
                                         "language": "JAVA", "opaque": opaque, "version": V5_3_3}).encode()
                    try:
                        await self.call_raw(reader, writer, encode_frame(SerializeType.JSON, header, None), opaque)
                        self.stats.janitor_deletes += 1
                    except (OSError, asyncio.TimeoutError, ConnectionError, RemotingDecodeError) as exc:
                        self.stats.janitor_failures += 1
                        if self.stats.janitor_failures <= 3:
                            print(f"janitor: {exc!r}", flush=True)
                        writer.close()
                        reader, writer = await asyncio.open_connection(HOST, self.port)
        finally:
            writer.close()

    # -- the hostile side ----------------------------------------------------------------------------
    def next_batch(self) -> tuple[list[bytes], str, list[str]]:
        """Frames for one connection: OK frames, then a CLOSER/PARTIAL one or nothing."""
        frames: list[bytes] = []
        ops: list[str] = []
        while True:
            op, data = self.mutator.generate()
            verdict = classify(data)
            if any(c.code == RequestCode.UPDATE_NAMESRV_CONFIG and c.body and not c.is_response
                   and any(k in c.body for k in ROUTE_SHAPING_KEYS) for c in verdict.commands):
                self.stats.frames_skipped += 1
                continue
            for c in verdict.commands:
                if c.code == RequestCode.PUT_KV_CONFIG and not c.is_response:
                    namespace, key = c.ext.get("namespace"), c.ext.get("key")
                    if namespace is not None and key is not None:
                        self.kv_written.add((namespace, key))
            if verdict.escape:
                self.stats.predicted_escapes[verdict.escape.split(":")[0] + ": " +
                                             verdict.escape.split(":")[1].strip()] += 1
                self.findings.add("escape " + verdict.escape[:80], data)
            frames.append(data)
            ops.append(op)
            self.stats.kinds[verdict.kind] += 1
            self.stats.requests_decoded += len(verdict.commands)
            if verdict.kind != OK:
                return frames, verdict.kind, ops
            if len(frames) >= self.args.batch:
                return frames, OK, ops

    async def fuzz_worker(self) -> None:
        while not self.done:
            frames, ending, ops = self.next_batch()
            self.stats.frames += len(frames)
            self.stats.ops.update(ops)
            self.stats.connections += 1
            await self.fuzz_connection(frames, ending)
            if self.stats.frames >= self.args.frames or time.monotonic() > self.deadline:
                self.done = True

    async def fuzz_connection(self, frames: list[bytes], ending: str) -> None:
        sentinel = None
        payload = b"".join(frames)
        if ending == OK:
            sentinel = RemotingCommand.request(RequestCode.GET_KV_CONFIG, {"namespace": self.kv[0], "key": self.kv[1]},
                                               opaque=2_100_000_000 + self.stats.connections % 1000, version=V5_3_3)
            payload += sentinel.encode()
        try:
            reader, writer = await asyncio.open_connection(HOST, self.port)
        except OSError as exc:
            self.good_error(f"cannot connect: {exc!r}")
            await asyncio.sleep(0.1)
            return
        decoder = FrameDecoder(1 << 31)
        got_sentinel = False
        closed = False
        try:
            writer.write(payload)
            if ending == PARTIAL:
                writer.write_eof()
            loop = asyncio.get_running_loop()
            end = loop.time() + self.args.connection_timeout
            while True:
                remaining = end - loop.time()
                if remaining <= 0:
                    raise asyncio.TimeoutError
                data = await asyncio.wait_for(reader.read(1 << 16), remaining)
                if not data:
                    closed = True
                    break
                try:
                    answers = [RemotingCommand.decode(f) for f in decoder.feed(data)]
                except RemotingDecodeError:
                    self.stats.bad_answers += 1
                    self.findings.add("bad answer", payload)
                    break
                for answer in answers:
                    self.stats.answer_codes[answer.code] += 1
                    if sentinel is not None and answer.opaque == sentinel.opaque and answer.is_response:
                        got_sentinel = True
                if got_sentinel:
                    break
        except asyncio.TimeoutError:
            self.stats.stalls += 1
            self.findings.add(f"stall {ending}", payload)
        except ConnectionError:
            closed = True
        finally:
            writer.close()
            with contextlib.suppress(OSError, ConnectionError):
                await writer.wait_closed()
        if ending == OK and not got_sentinel and closed:
            self.stats.unexpected_closes += 1
            self.findings.add("unexpected close", payload)

    # -- progress ------------------------------------------------------------------------------------
    async def reporter(self, started: float) -> None:
        while not self.done:
            await asyncio.sleep(self.args.report_every)
            rss = self.server.rss_kib()
            if rss:
                self.stats.rss_kib.append(rss)
            elapsed = time.monotonic() - started
            s = self.stats
            print(f"[{elapsed:7.1f} s] frames {s.frames:,} ({s.frames / elapsed:,.0f}/s) connections "
                  f"{s.connections:,} good checks {s.good_checks:,} errors {s.good_errors} (broker {s.broker_errors}) "
                  f"unexpected closes {s.unexpected_closes} stalls {s.stalls} server "
                  f"{'alive' if self.server.alive else 'DEAD'} rss {rss or 0:,} KiB", flush=True)
            if not self.server.alive:
                self.done = True

    async def run(self) -> float:
        ready = asyncio.Event()
        broker = asyncio.create_task(self.good_broker(ready))
        await asyncio.wait_for(ready.wait(), 20)
        good = asyncio.create_task(self.good_client())
        while self.expected_route is None:
            if good.done():
                good.result()
            await asyncio.sleep(0.01)
        started = time.monotonic()
        tasks = [asyncio.create_task(self.fuzz_worker()) for _ in range(self.args.connections)]
        tasks += [asyncio.create_task(self.reporter(started)), asyncio.create_task(self.janitor())]
        await asyncio.gather(*tasks[:self.args.connections])
        elapsed = time.monotonic() - started
        self.done = True
        results = await asyncio.gather(good, broker, *tasks[self.args.connections:], return_exceptions=True)
        for name, result in zip(("good client", "broker double", "reporter", "janitor"), results, strict=True):
            if isinstance(result, BaseException):
                self.good_error(f"{name} task failed: {result!r}", broker=name == "broker double")
        return elapsed


def source_revision() -> str:
    """The commit the server runs, and whether its source has uncommitted changes."""
    try:
        repo = Path(__file__).resolve().parents[2]
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "twisted_namesrv"], cwd=repo, capture_output=True,
                               text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + (" + uncommitted changes in twisted_namesrv/" if dirty else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=1_000_000, help="generated frames to send (default 1,000,000)")
    parser.add_argument("--max-seconds", type=float, default=7200, help="stop after this long whatever the count")
    parser.add_argument("--connections", type=int, default=4, help="parallel fuzz connections")
    parser.add_argument("--batch", type=int, default=32, help="most OK frames one connection carries")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--compat", default="5.3.3", choices=["5.3.3", "4.9.8"])
    parser.add_argument("--captures", default=str(CAPTURES))
    parser.add_argument("--no-json-tokens", action="store_true",
                        help="leave out JSON-token replacements (they hit the known header-decoding bugs)")
    parser.add_argument("--good-interval", type=float, default=0.002, help="pause between the good client's asks")
    parser.add_argument("--connection-timeout", type=float, default=30.0)
    parser.add_argument("--report-every", type=float, default=10.0)
    parser.add_argument("--server-core", type=int, default=0, help="taskset core for the server (-1: none)")
    parser.add_argument("--fuzz-core", type=int, default=1, help="taskset core for this process (-1: none)")
    parser.add_argument("--workdir", help="keep the server's data, log and the findings here")
    parser.add_argument("--json", help="write the summary here as JSON")
    args = parser.parse_args()

    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="namesrv-fuzz-"))
    workdir.mkdir(parents=True, exist_ok=True)
    shm = Path("/dev/shm")
    data_dir = Path(tempfile.mkdtemp(prefix="namesrv-fuzz-data-", dir=shm if shm.is_dir() else None))
    log_path = workdir / "server.log"
    log_path.unlink(missing_ok=True)
    if args.fuzz_core >= 0 and hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, {args.fuzz_core})
    server = NamesrvProcess(["--data-dir", str(data_dir), "--compat", args.compat], log_path, workdir,
                            core=None if args.server_core < 0 else args.server_core)
    revision = "unknown"
    try:
        port = server.wait_ready()
        findings = Findings(workdir / "findings")
        fuzzer = Fuzzer(args, port, server, findings)
        revision = source_revision()
        print(f"server pid {server.proc.pid} on {HOST}:{port}, compat {args.compat}, source {revision}, "
              f"log {log_path}", flush=True)
        elapsed = asyncio.run(fuzzer.run())
        alive = server.alive
        rss = server.rss_kib()
    finally:
        status = server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    log = scan_log(log_path)
    s = fuzzer.stats
    summary = {
        "frames_sent": s.frames, "frames_per_second": round(s.frames / elapsed), "seconds": round(elapsed, 1),
        "connections": s.connections, "requests_decoded": s.requests_decoded, "frames_skipped": s.frames_skipped,
        "kinds": dict(s.kinds), "ops": dict(s.ops), "answer_codes": {str(k): v for k, v in s.answer_codes.items()},
        "server_alive_at_end": alive, "server_exit_status": status,
        "server_crashes": int(not alive), "connections_not_closed_or_answered": s.stalls,
        "log_tracebacks": [f"{n} x {line}" for n, line in log.grouped()], "log_traceback_count": log.traceback_count,
        "log_unhandled_errors": log.unhandled, "log_handler_failures": log.handler_failures,
        "log_decode_closes": log.decode_closes,
        "predicted_escapes": dict(s.predicted_escapes), "unexpected_closes": s.unexpected_closes,
        "stalls": s.stalls, "bad_answers": s.bad_answers,
        "good_checks": s.good_checks, "good_errors": s.good_errors, "broker_registrations": s.broker_registrations,
        "broker_errors": s.broker_errors, "good_error_samples": s.good_error_samples,
        "good_max_latency_ms": round(s.good_max_latency_ms, 1), "janitor_deletes": s.janitor_deletes,
        "janitor_failures": s.janitor_failures,
        "rss_kib_first_last_max": [s.rss_kib[0], rss, max(s.rss_kib)] if s.rss_kib else [rss, rss, rss],
        "seed": args.seed, "compat": args.compat, "source": revision, "workdir": str(workdir),
        "findings": dict(findings.counts),
    }
    print("\n== fuzz summary ==")
    print(f"frames sent          {s.frames:,} in {elapsed:,.1f} s = {s.frames / elapsed:,.0f} frames/s over "
          f"{s.connections:,} connections ({args.connections} in parallel); {s.requests_decoded:,} requests decoded")
    print(f"frame kinds          {dict(s.kinds)}")
    print(f"server crashes       {summary['server_crashes']} (process alive at end: {alive}, exit status {status} "
          f"after SIGTERM)")
    print(f"stalled connections  {s.stalls} (neither the answer they waited for nor a close within "
          f"{args.connection_timeout:.0f} s; examples in findings/stall_*.hex)")
    print(f"log                  {log.traceback_count} tracebacks: {log.unhandled} Unhandled Error (escaped the "
          f"protocol), {log.handler_failures} handler failures (caught, answered 1); {log.decode_closes:,} decode "
          f"closes")
    for count, line in log.grouped():
        print(f"    {count:8,}  {line}")
    print(f"codec escapes        {dict(s.predicted_escapes)}")
    print(f"unexpected closes    {s.unexpected_closes}; answers our codec cannot decode {s.bad_answers} (requests in "
          f"findings/bad_answer.hex)")
    print(f"good client          {s.good_checks:,} route/KV lookups checked, {s.good_errors} errors, max latency "
          f"{s.good_max_latency_ms:,.1f} ms")
    print(f"broker double        {s.broker_registrations} registrations, {s.broker_errors} not answered SUCCESS")
    for sample in s.good_error_samples[:5]:
        print(f"    {sample}")
    print(f"server RSS (KiB)     first/last/max {summary['rss_kib_first_last_max']}")
    print(f"workdir              {workdir}")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2, default=str))
    clean = (alive and s.good_errors == 0 and s.broker_errors == 0 and s.stalls == 0 and s.bad_answers == 0
             and s.unexpected_closes == 0 and log.traceback_count == 0)
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
