"""The scale curve (``scale.py --curve``): how each cost grows with topics, brokers and client
connections, for us and for another NameServer (Java's) at the same step, in the same run.

Steps vary one dimension at a time from 10k topics, 10 brokers, 1k client connections:
topics 10k / 100k / 1M, brokers 10 / 1,000 / 5,000, connections 1k / 10k / 50k (``--steps all``);
``--steps reduced`` (the default) runs the smaller ones a shared 2-core machine can take.  Brokers
are masters in pairs, each topic on both of a pair; a broker's table is sent in registrations of
at most SPLIT_TOPICS topics, as 5.x brokers split theirs (``enableSplitRegistration``), so no
frame passes the 16 MiB default limit.

Per step, on a fresh server (core 0; the load and a probe process on core 1):

- first registration of every broker (8 in flight), then the same tables again (repeated): time;
- heartbeat storm: every broker re-sends its tables within one second: time;
- mass disconnect: every broker's connection reset at once: time until their routes are gone;
- during each: the probe's longest wait and its lookup p50/p99 (one connection, a closed loop);
- RSS after registration (with the client connections open) and at the end.

Every step runs against ours and each ``--compare`` server in turn, ``--rounds`` times
interleaved; the table gives each figure's median with its min–max and the ratio to each
compared server (median of the per-round ratios).  The machine's load average is recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import resource
import shlex
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
SPLIT_TOPICS = 50_000  # topics per registration frame at most (about 8 MiB of plain JSON)
IN_FLIGHT = 8  # registrations in flight during the first and repeated registration
CLIENTS_PER_SOURCE = 20_000  # client connections per source address (127.0.0.N): the ephemeral ports
PROBE_TOPICS = ["CurveProbeTopic", "CurveProbeTopic-retry"]  # two: 5.3.3 refuses a first registration of one
PROBE_TOPIC = PROBE_TOPICS[0]


@dataclass(frozen=True)
class Step:
    name: str
    topics: int
    brokers: int
    clients: int


STEPS = {s.name: s for s in (
    Step("tiny", 1_000, 4, 50),  # a smoke run of the tool, not a curve step
    Step("base", 10_000, 10, 1_000),
    Step("topics-100k", 100_000, 10, 1_000),
    Step("topics-1m", 1_000_000, 10, 1_000),
    Step("brokers-1000", 10_000, 1_000, 1_000),
    Step("brokers-5000", 10_000, 5_000, 1_000),
    Step("clients-10k", 10_000, 10, 10_000),
    Step("clients-50k", 10_000, 10, 50_000),
)}
REDUCED = ["base", "topics-100k", "brokers-1000", "clients-10k"]


# ---- a NameServer as a child process --------------------------------------------------------


class Server:
    """A NameServer child from a command line with ``{port}`` and ``{data_dir}`` (ours by
    default), on ``core``, in its own process group; ready once it answers a request."""

    #: run.py's install without extras when there is one (with pyOpenSSL, Twisted's TCP imports it: ~13 MB)
    PYTHON = REPO / ".venv-bench" / "bin" / "python"
    OURS = (f"{PYTHON if PYTHON.exists() else sys.executable} -m twisted_namesrv --port {{port}} --bind {HOST}"
            " --data-dir {data_dir} --compat 4.9.8")

    def __init__(self, command: str | None, scratch: Path, name: str, core: int | None = 0) -> None:
        self.port = free_port()
        data_dir = scratch / f"{name}-{self.port}"
        data_dir.mkdir(parents=True)
        argv = shlex.split((command or self.OURS).format(port=self.port, data_dir=data_dir, host=HOST))
        if core is not None and (os.cpu_count() or 1) > 1:
            argv = ["taskset", "-c", str(core), *argv]
        self.log_path = scratch / f"{name}-{self.port}.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(argv, cwd=REPO, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def wait_ready(self, timeout: float = 120) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                with socket.create_connection((HOST, self.port), timeout=2) as s:
                    s.sendall(frame(106, {}, opaque=1))  # GET_BROKER_CLUSTER_INFO
                    read_frame(s)
                    return self.port
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server not answering within {timeout} s: {self.log_path.read_text()[-2000:]}")

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss_mib(self) -> float | None:
        try:
            status = Path(f"/proc/{self.proc.pid}/status").read_text()
        except OSError:
            return None
        kib = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), None)
        return None if kib is None else round(kib / 1024, 1)

    def stop(self, timeout: float = 20) -> None:
        if self.alive:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


# ---- the wire, as the shared load tools speak it (JSON headers, version 4.9.8) ---------------


def frame(code: int, ext: dict[str, str], body: bytes = b"", opaque: int = 0) -> bytes:
    header = json.dumps({"code": code, "extFields": ext, "flag": 0, "language": "JAVA", "opaque": opaque,
                         "serializeTypeCurrentRPC": "JSON", "version": 409}, separators=(",", ":")).encode()
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


def read_frame(s: socket.socket) -> dict[str, Any]:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = s.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data
    length, header_length = struct.unpack(">ii", exactly(8))
    header = json.loads(exactly(header_length & 0xFFFFFF))
    exactly(length - 4 - (header_length & 0xFFFFFF))
    return header


def register_frames(name: str, addr: str, topics: list[str], counter: int) -> list[bytes]:
    """A broker's REGISTER_BROKER frames: its table in pieces of at most SPLIT_TOPICS topics."""
    frames = []
    for start in range(0, max(1, len(topics)), SPLIT_TOPICS):
        table = {t: {"order": False, "perm": 6, "readQueueNums": 8, "topicFilterType": "SINGLE_TAG", "topicName": t,
                     "topicSysFlag": 0, "writeQueueNums": 8} for t in topics[start:start + SPLIT_TOPICS]}
        body = json.dumps({"filterServerList": [], "topicConfigSerializeWrapper": {
            "dataVersion": {"counter": counter, "timestamp": 1763800000000}, "topicConfigTable": table}},
            separators=(",", ":")).encode()
        ext = {"brokerName": name, "brokerAddr": addr, "clusterName": "CurveCluster", "haServerAddr": addr,
               "brokerId": "0", "compressed": "false", "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF)}
        frames.append(frame(103, ext, body))
    return frames


def broker_tables(step: Step) -> list[tuple[str, str, list[str]]]:
    """(name, address, topics) per broker: masters in pairs, each pair's topics on both."""
    pairs = max(1, step.brokers // 2)
    per_pair = max(1, step.topics // pairs)
    return [(f"curve-{i:05d}", f"127.0.0.1:{20000 + i}",
             [f"Curve{(i // 2) % pairs:05d}_{j:06d}" for j in range(per_pair)]) for i in range(step.brokers)]


# ---- the probe: its own process, a closed loop of lookups on one connection -------------------


def probe_loop(port: int, stop: Any, out: Any) -> None:
    os.sched_setaffinity(0, {1}) if (os.cpu_count() or 1) > 1 else None
    s = socket.create_connection((HOST, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    samples: list[tuple[float, float]] = []
    opaque = 0
    while not stop.is_set():
        opaque += 1
        started = time.monotonic()
        s.sendall(frame(105, {"topic": PROBE_TOPIC}, opaque=opaque))
        read_frame(s)
        samples.append((started, time.monotonic() - started))
        time.sleep(0.0005)
    out.send(samples)


def window(samples: list[tuple[float, float]], t0: float, t1: float) -> dict[str, float | None]:
    """The probe's lookups that started or were waiting in [t0, t1]: longest wait, p50, p99 (ms)."""
    rtts = sorted(r * 1e3 for start, r in samples if start + r >= t0 and start <= t1)
    if not rtts:
        return {"probe_max_ms": None, "lookup_p50_ms": None, "lookup_p99_ms": None}
    pick = lambda q: round(rtts[min(len(rtts) - 1, int(q * len(rtts)))], 3)  # noqa: E731
    return {"probe_max_ms": round(rtts[-1], 2), "lookup_p50_ms": pick(0.5), "lookup_p99_ms": pick(0.99)}


# ---- one step against one server ---------------------------------------------------------------


async def send_all(port: int, conns: list, frames: list[list[bytes]], spread: float | None) -> None:
    """Every broker's frames on its connection: ``spread`` seconds apart in all (a storm), or
    IN_FLIGHT at a time."""
    limit = asyncio.Semaphore(IN_FLIGHT if spread is None else len(conns))

    async def one(index: int) -> None:
        if spread:
            await asyncio.sleep(index * spread / len(conns))
        async with limit:
            reader, writer = conns[index]
            for f in frames[index]:
                writer.write(f)
                length = int.from_bytes(await reader.readexactly(4), "big")
                head = await reader.readexactly(length)
                code = json.loads(head[4:4 + int.from_bytes(head[:4], "big") & 0xFFFFFF])["code"]
                if code != 0:
                    raise RuntimeError(f"registration refused: code {code}")
    await asyncio.gather(*(one(i) for i in range(len(conns))))


def open_clients(port: int, count: int) -> list[socket.socket]:
    """``count`` client connections, each having looked the probe's topic up once, held open."""
    clients = []
    for i in range(count):
        s = socket.socket()
        s.bind((f"127.0.0.{2 + i // CLIENTS_PER_SOURCE}", 0))
        s.connect((HOST, port))
        s.sendall(frame(105, {"topic": PROBE_TOPIC}, opaque=1))
        read_frame(s)
        clients.append(s)
    return clients


def routes_gone(port: int, topics: list[str]) -> bool:
    with socket.create_connection((HOST, port)) as s:
        for i, topic in enumerate(topics):
            s.sendall(frame(105, {"topic": topic}, opaque=i + 1))
            if read_frame(s).get("code") == 0:
                return False
    return True


async def run_step(step: Step, server: Server, port: int) -> dict[str, Any]:
    out: dict[str, Any] = {"rss_mib_idle": server.rss_mib()}
    tables = broker_tables(step)
    first = [register_frames(n, a, t, 1) for n, a, t in tables]
    with socket.create_connection((HOST, port)) as s:  # the probe's topic, on a broker of its own
        for f in register_frames("curve-probe", "127.0.0.1:19999", PROBE_TOPICS, 1):
            s.sendall(f)
            read_frame(s)
        stop, (receive, send) = multiprocessing.Event(), multiprocessing.Pipe(duplex=False)
        probe = multiprocessing.Process(target=probe_loop, args=(port, stop, send), daemon=True)
        probe.start()
        await asyncio.sleep(1)
        phases: dict[str, tuple[float, float]] = {}
        conns = [await asyncio.open_connection(HOST, port, limit=1 << 20) for _ in tables]
        for phase, spread in (("first_registration", None), ("repeated_registration", None),
                              ("heartbeat_storm", 1.0)):
            t0 = time.monotonic()
            await send_all(port, conns, first, spread)
            phases[phase] = (t0, time.monotonic())
            if phase == "first_registration":
                clients = open_clients(port, step.clients)
                out["rss_mib_registered"] = server.rss_mib()
            await asyncio.sleep(0.3)
        last_topics = sorted({tables[0][2][0], tables[-1][2][-1]})
        t0 = time.monotonic()
        for _, writer in conns:
            writer.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                                                  struct.pack("ii", 1, 0))
            writer.close()
        while not routes_gone(port, last_topics):
            await asyncio.sleep(0.005)
        phases["mass_disconnect"] = (t0, time.monotonic())
        await asyncio.sleep(0.3)
        stop.set()
        samples = receive.recv()
        probe.join(10)
    out["rss_mib_end"] = server.rss_mib()
    for client in clients:
        client.close()
    for phase, (t0, t1) in phases.items():
        out[f"{phase}_s"] = round(t1 - t0, 3)
        for key, value in window(samples, t0, t1).items():
            out[f"{phase}_{key}"] = value
    return out


# ---- the curve: steps x servers x rounds ---------------------------------------------------------


def raise_fd_limit(clients: int) -> None:
    want = clients + 20_000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))
        except (ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def ours_for(step: Step, scratch: Path) -> str:
    """Our server with maxConnections (default 10,000) above the step's connections: Java has no such limit."""
    props = scratch / f"ours-{step.name}.properties"
    props.write_text(f"maxConnections={step.clients + step.brokers + 1000}\n")
    return f"{Server.OURS} -c {props}"


def measure(steps: list[Step], servers: dict[str, str | None], rounds: int, scratch: Path) -> list[dict[str, Any]]:
    records = []
    for round_ in range(1, rounds + 1):
        for step in steps:
            for label, command in servers.items():
                load = os.getloadavg()
                server = Server(command or ours_for(step, scratch), scratch, f"{label}-{step.name}")
                record: dict[str, Any] = {"round": round_, "step": step.name, "server": label,
                                          "loadavg": [round(x, 2) for x in load]}
                try:
                    port = server.wait_ready()
                    record["figures"] = asyncio.run(run_step(step, server, port))
                except Exception as exc:  # noqa: BLE001 - one failed step is recorded, the curve goes on
                    record["error"] = f"{type(exc).__name__}: {exc}"
                finally:
                    server.stop()
                records.append(record)
                print(f"[curve] round {round_} {step.name} {label}: {record.get('figures') or record['error']}",
                      file=sys.stderr, flush=True)
    return records


def summarize(records: list[dict[str, Any]], servers: list[str]) -> list[dict[str, Any]]:
    """Per step and figure: each server's median and min–max; the median per-round ratio of ours
    to each other server."""
    ours, others = servers[0], servers[1:]
    rows = []
    steps = list(dict.fromkeys(r["step"] for r in records))
    for step in steps:
        got = [r for r in records if r["step"] == step and "figures" in r]
        keys = list(dict.fromkeys(k for r in got for k in r["figures"]))
        for key in keys:
            row: dict[str, Any] = {"step": step, "figure": key}
            for label in servers:
                values = [r["figures"][key] for r in got if r["server"] == label and r["figures"].get(key) is not None]
                if values:
                    row[label] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
            for label in others:
                ratios = [a["figures"][key] / b["figures"][key] for a in got for b in got
                          if a["server"] == ours and b["server"] == label and a["round"] == b["round"]
                          and a["figures"].get(key) and b["figures"].get(key)]
                if ratios:
                    row[f"ratio_to_{label}"] = {"median": round(statistics.median(ratios), 3),
                                                "min": round(min(ratios), 3), "max": round(max(ratios), 3)}
            rows.append(row)
    return rows


def table(rows: list[dict[str, Any]], servers: list[str]) -> str:
    def cell(v: dict[str, float] | None) -> str:
        if not v:
            return "-"
        return f"{v['median']:.4g} ({v['min']:.3g}–{v['max']:.3g})"
    head = ["step", "figure", *servers, *(f"ours/{s}" for s in servers[1:])]
    body = [[r["step"], r["figure"], *(cell(r.get(s)) for s in servers),
             *(cell(r.get(f"ratio_to_{s}")) for s in servers[1:])] for r in rows]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(x, widths, strict=True)).rstrip() for x in [head, *body])


def curve_main(argv: list[str], server_cmd: str | None, json_out: Path | None) -> int:
    p = argparse.ArgumentParser(prog="scale.py --curve", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", default="reduced", help=f"reduced ({','.join(REDUCED)}), all, or names: "
                   + ",".join(STEPS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--compare", action="append", default=[], metavar="LABEL=CMD",
                   help="another NameServer run at every step, interleaved with ours (e.g. java=CMD)")
    a = p.parse_args(argv)
    names = REDUCED if a.steps == "reduced" else list(STEPS) if a.steps == "all" else a.steps.split(",")
    unknown = set(names) - set(STEPS)
    if unknown:
        p.error(f"unknown step(s) {', '.join(sorted(unknown))}; known: {', '.join(STEPS)}")
    servers: dict[str, str | None] = {"ours": server_cmd}
    for item in a.compare:
        label, _, command = item.partition("=")
        if "{port}" not in command:
            p.error("--compare LABEL=CMD needs a {port} placeholder in CMD")
        servers[label] = command
    steps = [STEPS[n] for n in names]
    raise_fd_limit(max(s.clients for s in steps))
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {1})
    scratch = Path(tempfile.mkdtemp(prefix="namesrv-curve-"))
    started = time.monotonic()
    records = measure(steps, servers, a.rounds, scratch)
    rows = summarize(records, list(servers))
    print(table(rows, list(servers)))
    doc = {"steps": [vars(s) for s in steps], "servers": {k: v or "ours" for k, v in servers.items()},
           "rounds": a.rounds, "seconds": round(time.monotonic() - started, 1), "rows": rows, "records": records}
    if json_out:
        json_out.write_text(json.dumps(doc, indent=1))
    return 0
