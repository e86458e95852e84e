#!/usr/bin/env python3
"""Issue 4's performance table in one command.

Starts the NameServer pinned to one core (``taskset -c 0``) on 127.0.0.1 and a free port, drives
every figure of the table with the shared load tools pinned to the other core (``taskset -c 1``),
repeats each figure ``--runs`` times, and prints medians with their min-max spread next to the
issue's goals (and writes them as JSON with ``--json``).  It is a benchmark, not a test: nothing
here asserts, and figures on a shared machine move from run to run, hence the medians.

  tools/bench/run.py [--runs 3] [--quick] [--json out.json] [--compat 4.9.8|5.3.3]
  tools/bench/run.py --server-cmd 'CMD with {port} and {data_dir}'   # any other NameServer
  tools/bench/run.py --compare 'java=CMD with {port} and {data_dir}'  # ours and it, round by round

Every process it starts lives in its own process group and is stopped on exit, error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import queue
import shlex
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from procfs import cores_busy_s, descendants, status_kib, tree_cpu_s  # beside this file: /proc read one way

REPO = Path(__file__).resolve().parents[2]
BENCH_VENV = REPO / ".venv-bench"
DEFAULT_SHARED = Path(__file__).resolve().parents[3] / "shared" / "bench"
HOST = "127.0.0.1"
V4_9_8 = 409  # the version the shared tools speak; our answers do not depend on it
ROUTE, TOPIC_LIST = 105, 206
TOPICS_100K = 100_000  # fakebroker gives every broker the same names: 3 brokers x 100k = 100k topics
BUSY_WARNING = 0.25  # cores of other work during a scenario worth a warning under the table
LOOKUP_TOPICS = ["TopicTest"] + [f"BenchTopic{i:06d}" for i in range(99)]  # fakebroker's names


class BenchError(Exception):
    """One measurement failed; the run records it and goes on with the next figure."""


# ---- the figures ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    """One row of the table, with the issue's goal and Java 4.9.8 reference."""

    key: str
    label: str
    unit: str  # rps, us, ms, MB, s, x
    java: str = ""
    goal: float | None = None
    higher_is_better: bool = False

    def met(self, value: float) -> bool | None:
        if self.goal is None:
            return None
        return value >= self.goal if self.higher_is_better else value <= self.goal

    def goal_text(self) -> str:
        if self.goal is None:
            return ""
        return ("≥ " if self.higher_is_better else "≤ ") + fmt(self.goal, self.unit)


FIGURES = [
    Figure("route_rps", "route lookups/s (throughput -c 16 -d 32)", "rps", "80k–102k", 150_000, True),
    Figure("ceiling_rps", "  framework ceiling (ceiling.py), same load", "rps"),
    Figure("route_vs_ceiling", "  route lookups / ceiling", "x"),
    Figure("route_cpu_us", "  server CPU per route lookup (throughput run)", "us"),
    Figure("ceiling_cpu_us", "  ceiling CPU per request, same load", "us"),
    Figure("ceiling_vs_route_cpu", "  ceiling CPU / route lookup CPU", "x"),
    Figure("ceiling_lat1_p50", "  framework ceiling, latency -c 1, p50", "us"),
    Figure("floor_lat1_p50", "  blocking-socket floor (socket_floor.py), latency -c 1, p50", "us"),
    Figure("lat16_p50", "closed-loop latency -c 16, p50", "us", "236 µs"),
    Figure("lat16_p99", "closed-loop latency -c 16, p99", "us", "4.5 ms", 1000),
    Figure("lat1_p50", "closed-loop latency -c 1, p50", "us", "24 µs", 30),
    Figure("lat1_p99", "closed-loop latency -c 1, p99", "us", "35 µs"),
    Figure("rss_lookups", "RSS after ~2 M lookups (100 topics)", "MB", "337 MB", 40),
    Figure("rss_100k", "RSS with 100k topics registered (3 brokers)", "MB", "404 MB", 120),
    Figure("startup", "process start → first answered request", "s", "0.90–1.00 s", 0.3),
    Figure("reg20k_compressed", "REGISTER_BROKER 20k topics, compressed", "ms", "18–54 ms", 12),
    Figure("reg20k_compressed_first", "  first registration (new broker)", "ms"),
    Figure("reg20k_plain", "REGISTER_BROKER 20k topics, plain JSON", "ms", "27–36 ms", 18),
    Figure("reg20k_plain_first", "  first registration (new broker)", "ms"),
    Figure("reg100k_compressed", "REGISTER_BROKER 100k topics, compressed", "ms", "118–139 ms", 60),
    Figure("reg100k_compressed_first", "  first registration (new broker)", "ms"),
    Figure("topics206_p50", "GET_ALL_TOPIC_LIST (206) at 100k topics, p50", "ms", "58–92 ms", 10),
    Figure("topics206_p99", "  GET_ALL_TOPIC_LIST (206), p99", "ms"),
    # issue 20: the probe's longest wait while the server works; goals are a third of Java's lowest
    Figure("stall_first", "longest probe wait: first registration, 80k topics plain", "ms", "557–881 ms", 186),
    Figure("stall_same", "  same table again, new dataVersion", "ms", "48–53 ms", 16),
    Figure("stall_plus1", "  one topic added", "ms", "81–112 ms", 27),
    Figure("stall_minus1", "  that topic removed again", "ms", "61–117 ms", 20),
    Figure("stall_drop", "  500 groups lose their connections at once", "ms", "2.7–3.2 s", 900),
    Figure("stall_snapshot", "  route-snapshot write, 100k topics x 3 brokers", "ms", "(none)", 16),
]
FIGURE_BY_KEY = {f.key: f for f in FIGURES}


def fmt(value: float, unit: str) -> str:
    """Human form of a value in the figure's unit."""
    if unit == "rps":
        return f"{value / 1000:.1f}k/s"
    if unit == "us":
        return f"{value:.1f} µs" if value < 100 else f"{value:.0f} µs" if value < 1000 else f"{value / 1000:.2f} ms"
    if unit == "ms":
        return f"{value:.2f} ms" if value < 10 else f"{value:.1f} ms"
    if unit == "MB":
        return f"{value:.1f} MB"
    if unit == "s":
        return f"{value:.3f} s"
    return f"{value:.2f}x"


# ---- processes ------------------------------------------------------------------------------


class Proc:
    """A child in its own process group, so that stop() also takes what it started (a JVM
    behind a shell script).  Output goes to a log file (servers: never block on a full pipe)
    or is read line by line by a thread (load tools: results arrive as JSON lines)."""

    def __init__(self, name: str, argv: list[str], log: Path | None = None, cwd: Path | None = None) -> None:
        self.name, self.argv, self.log = name, argv, log
        self.output: list[str] = []
        self.lines: queue.Queue[str | None] = queue.Queue()
        out = open(log, "wb") if log else subprocess.PIPE  # closed below; the child keeps its copy
        try:
            self.popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                          cwd=cwd, start_new_session=True)
        finally:
            if log:
                out.close()
        self.reader: threading.Thread | None = None
        if log is None:
            self.reader = threading.Thread(target=self._drain, name=f"read-{name}", daemon=True)
            self.reader.start()

    def _drain(self) -> None:
        assert self.popen.stdout is not None
        for raw in self.popen.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            self.output.append(line)
            self.lines.put(line)
        self.lines.put(None)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def next_line(self, timeout: float) -> str:
        """The next output line; a silent or dead child is an error, never a hang."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise BenchError(f"{self.name}: no output within {timeout:.0f} s") from None
        if line is None:
            raise BenchError(f"{self.name} exited with {self.popen.wait()}: {self.tail()}")
        return line

    def finish(self, timeout: float) -> list[str]:
        """Wait for a tool that ends by itself; its whole output."""
        try:
            rc = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise BenchError(f"{self.name} still running after {timeout:.0f} s") from None
        if self.reader:
            self.reader.join(5)
        if rc != 0:
            raise BenchError(f"{self.name} exited with {rc}: {self.tail()}")
        return self.output

    def tail(self, lines: int = 8) -> str:
        text = self.output if self.log is None else self.log.read_text(errors="replace").splitlines()
        return " | ".join(text[-lines:]) or "(no output)"

    def stop(self) -> None:
        """SIGTERM to the group, SIGKILL to whatever is left of it after 5 s."""
        with contextlib.suppress(ProcessLookupError):
            if self.alive():
                os.killpg(self.pid, signal.SIGTERM)
                try:
                    self.popen.wait(5)
                except subprocess.TimeoutExpired:
                    pass
            os.killpg(self.pid, signal.SIGKILL)  # stragglers of the group, even if the leader exited
        self.popen.wait()
        if self.popen.stdout:
            self.popen.stdout.close()


def free_port() -> int:
    """A port nobody listens on right now (the kernel's pick for an ephemeral bind)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) in MB, summed over the process and its descendants (a wrapper script
    plus a JVM counts as one server)."""
    rss = hwm = 0
    for p in [pid, *descendants(pid)]:
        found = status_kib(p, ("VmRSS", "VmHWM"))
        if found is not None:
            rss += found["VmRSS"]
            hwm += found["VmHWM"]
    return rss / 1024, hwm / 1024


def cpu_per_request(pid: int, b: Bench, port: int) -> tuple[dict[str, Any], float]:
    """nsload's throughput run against the server ``pid``; its result and the server's CPU
    microseconds per request answered (warm-up included, at the measured rate): unlike the rate,
    what other processes take from the core moves this little."""
    before = tree_cpu_s(pid)
    thr = b.nsload(port, "throughput", "-c", "16", "-d", "32")
    used = tree_cpu_s(pid) - before
    answered = thr["rps"] * (b.args.seconds + b.args.warmup)
    return thr, used / answered * 1e6


def own_cpu_seconds() -> float:
    """CPU of this process and of its reaped children (every process the bench started)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class CpuMeter:
    """How much of the bench cores went to processes that are not ours while a scenario ran:
    on a shared machine, other work is the first suspect when a figure jumps.  Approximate
    (kernel network work in softirq context counts as other), in cores (1.0 = one busy core)."""

    def __init__(self, cores: set[int]) -> None:
        self.cores = cores
        self.start = (time.monotonic(), cores_busy_s(cores), own_cpu_seconds())

    def other_cores(self) -> float:
        wall, busy, own = (a - b for a, b in zip(
            (time.monotonic(), cores_busy_s(self.cores), own_cpu_seconds()), self.start, strict=True))
        return max(0.0, (busy - own) / wall) if wall > 0 else 0.0


# ---- a tiny remoting client -----------------------------------------------------------------


def request_frame(code: int, ext: dict[str, str]) -> bytes:
    """A JSON-header remoting request, the same bytes nsload.py sends."""
    header = json.dumps({"code": code, "extFields": ext, "flag": 0, "language": "JAVA", "opaque": 1,
                         "serializeTypeCurrentRPC": "JSON", "version": V4_9_8}, separators=(",", ":")).encode()
    return struct.pack(">II", 4 + len(header), len(header)) + header


def ask(port: int, frame: bytes, timeout: float) -> tuple[int, int]:
    """Send one request on a new connection; (response code, body length) of the answer."""
    with socket.create_connection((HOST, port), timeout=timeout) as s:
        s.sendall(frame)
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack_from(">I", buf)[0]:
            data = s.recv(1 << 20)
            if not data:
                raise ConnectionError("closed before answering")
            buf += data
    size, mark = struct.unpack_from(">II", buf)
    header = buf[8:8 + (mark & 0xFFFFFF)]
    code = json.loads(header)["code"] if mark >> 24 == 0 else struct.unpack_from(">h", header)[0]
    return code, size - 4 - (mark & 0xFFFFFF)


def wait_answer(port: int, proc: Proc, timeout: float = 60) -> None:
    """Poll with a route request until the server answers anything (that is 'up')."""
    frame, deadline = request_frame(ROUTE, {"topic": "TopicTest"}), time.monotonic() + timeout
    while True:
        try:
            ask(port, frame, timeout=2)
            return
        except OSError:
            if not proc.alive():
                raise BenchError(f"{proc.name} exited with {proc.popen.wait()}: {proc.tail()}") from None
            if time.monotonic() > deadline:
                raise BenchError(f"{proc.name} did not answer within {timeout:.0f} s: {proc.tail()}") from None
            time.sleep(0.002)


def expect_ok(port: int, frame: bytes, what: str, timeout: float = 30) -> int:
    """Load tools count any answer, even an error: check the real answer first (body length)."""
    code, body = ask(port, frame, timeout)
    if code != 0:
        raise BenchError(f"{what} answered code {code}, not SUCCESS: figures would measure an error path")
    return body


# ---- the bench context ----------------------------------------------------------------------


@dataclass
class Server:
    proc: Proc
    port: int
    startup_s: float


@dataclass
class Bench:
    """Options, paths and the processes started so far (all stopped by close())."""

    args: argparse.Namespace
    shared: Path
    tmp: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="nsbench-")))
    procs: list[Proc] = field(default_factory=list)
    #: the NameServer the scenarios start: --server-cmd's, or a --compare one's in its turn (None: ours)
    command: str | None = None

    @property
    def server_python(self) -> str:
        """The server runs from a default install (BENCH_VENV: the package without extras), as an
        operator without TLS has it: with pyOpenSSL present, Twisted's TCP imports it (~13 MB)."""
        python = BENCH_VENV / "bin" / "python"
        stamp = BENCH_VENV / ".installed"
        want = (REPO / "setup.cfg").read_text() + (REPO / "setup.py").read_text()
        if not python.exists() or not stamp.exists() or stamp.read_text() != want:
            print(f"[bench] installing the package without extras into {BENCH_VENV}", file=sys.stderr, flush=True)
            subprocess.run([sys.executable, "-m", "venv", str(BENCH_VENV)], check=True)
            # a plain editable install: the server runs as python -m twisted_namesrv, no twistd plugin lookup
            subprocess.run([str(python), "-m", "pip", "install", "-q", "-e", str(REPO)], check=True)
            stamp.write_text(want)
        return str(python)

    def load_opts(self) -> tuple[str, str]:
        return str(self.args.seconds), str(self.args.warmup)

    def spawn(self, name: str, argv: list[str], core: int, log: bool = False) -> Proc:
        logfile = self.tmp / f"{name}-{len(self.procs)}.log" if log else None
        proc = Proc(name, ["taskset", "-c", str(core), *argv], logfile, cwd=REPO)
        self.procs.append(proc)
        return proc

    @contextlib.contextmanager
    def running(self, name: str, argv: list[str], core: int, log: bool = False) -> Iterator[Proc]:
        proc = self.spawn(name, argv, core, log)
        try:
            yield proc
        finally:
            proc.stop()

    def server_argv(self, port: int, data_dir: Path) -> list[str]:
        if self.command:
            return shlex.split(self.command.format(port=port, data_dir=data_dir, host=HOST))
        argv = [self.server_python, "-m", "twisted_namesrv", "--port", str(port), "--bind", HOST,
                "--data-dir", str(data_dir)]
        return argv + (["--compat", self.args.compat] if self.args.compat else [])

    @contextlib.contextmanager
    def server(self) -> Iterator[Server]:
        """A fresh server (empty data dir, new port); startup_s is spawn → first answer."""
        port = free_port()
        data_dir = Path(tempfile.mkdtemp(prefix="data-", dir=self.tmp))
        t0 = time.perf_counter()
        with self.running("server", self.server_argv(port, data_dir), self.args.server_core, log=True) as proc:
            wait_answer(port, proc)
            yield Server(proc, port, time.perf_counter() - t0)

    @contextlib.contextmanager
    def brokers(self, port: int, brokers: int, topics: int, compressed: bool = False,
                period: float = 30) -> Iterator[tuple[Proc, list[dict[str, Any]]]]:
        """fakebroker registered and holding its connections (closing them drops the routes),
        re-registering every 30 s like a real broker so that no idle or expiry scan drops it."""
        argv = [sys.executable, str(self.shared / "fakebroker.py"), "--host", HOST, "--port", str(port),
                "--brokers", str(brokers), "--topics", str(topics), "--hold", "86400", "--period", str(period)]
        with self.running("fakebroker", argv + (["--compressed"] if compressed else []), self.args.load_core) as p:
            yield p, [registration(p) for _ in range(brokers)]

    def nsload(self, port: int, mode: str, *opts: str, seconds: float | None = None,
               warmup: float | None = None) -> dict[str, Any]:
        """One nsload.py run on the load core; its JSON result."""
        s = self.args.seconds if seconds is None else seconds
        w = self.args.warmup if warmup is None else warmup
        argv = [sys.executable, str(self.shared / "nsload.py"), mode, "--host", HOST, "--port", str(port),
                "-s", str(s), "-w", str(w), *opts]
        with self.running("nsload", argv, self.args.load_core) as proc:
            lines = proc.finish(timeout=s + w + 60)
        return last_json(lines, "nsload")

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def last_json(lines: list[str], tool: str) -> dict[str, Any]:
    for line in reversed(lines):
        if line.startswith("{"):
            return json.loads(line)
    raise BenchError(f"{tool} printed no result: {' | '.join(lines[-5:])}")


def registration(proc: Proc, timeout: float = 300) -> dict[str, Any]:
    """fakebroker's next registration line; a refused registration is an error."""
    line = proc.next_line(timeout)
    try:
        reg = json.loads(line)
    except ValueError:
        raise BenchError(f"fakebroker: {line} | {proc.tail()}") from None
    if reg.get("code") != 0:
        raise BenchError(f"registration refused: {line}")
    return reg


# ---- scenarios: each starts what it needs and returns figure values plus details --------------

Outcome = tuple[dict[str, float], dict[str, Any]]


def route_scenario(b: Bench) -> Outcome:
    """Throughput and closed-loop latency on one topic of one broker, as the issue's rows.
    Two topics, not one: 5.3.3 refuses a first registration carrying exactly one."""
    with b.server() as srv, b.brokers(srv.port, brokers=1, topics=2):
        body = expect_ok(srv.port, request_frame(ROUTE, {"topic": "TopicTest"}), "route lookup")
        thr, cpu_us = cpu_per_request(srv.proc.pid, b, srv.port)
        l16 = b.nsload(srv.port, "latency", "-c", "16")
        l1 = b.nsload(srv.port, "latency", "-c", "1")
    values = {"route_rps": thr["rps"], "route_cpu_us": cpu_us, "lat16_p50": l16["p50_us"],
              "lat16_p99": l16["p99_us"], "lat1_p50": l1["p50_us"], "lat1_p99": l1["p99_us"]}
    return values, {"route_body_bytes": body, "throughput": thr, "latency_c16": l16, "latency_c1": l1}


def ceiling_scenario(b: Bench) -> Outcome:
    """The canned-answer Twisted server on the server core: what Twisted alone allows, in
    throughput and (as the floor under the 1-connection latency goal) in round-trip time."""
    port = free_port()
    argv = [b.server_python, str(b.shared / "ceiling.py"), str(port)]
    with b.running("ceiling", argv, b.args.server_core, log=True) as proc:
        wait_answer(port, proc)
        thr, cpu_us = cpu_per_request(proc.pid, b, port)
        lat = b.nsload(port, "latency", "-c", "1")
    return ({"ceiling_rps": thr["rps"], "ceiling_cpu_us": cpu_us, "ceiling_lat1_p50": lat["p50_us"]},
            {"throughput": thr, "latency_c1": lat})


def floor_scenario(b: Bench) -> Outcome:
    """A blocking socket loop on the server core: what Python on this machine allows for one
    round trip at all, under the 1-connection latency goal and the ceiling."""
    port = free_port()
    argv = [b.server_python, str(Path(__file__).with_name("socket_floor.py")), str(port)]
    with b.running("socket-floor", argv, b.args.server_core, log=True) as proc:
        wait_answer(port, proc)
        lat = b.nsload(port, "latency", "-c", "1")
    return {"floor_lat1_p50": lat["p50_us"]}, {"latency_c1": lat}


def rss_lookups_scenario(b: Bench) -> Outcome:
    """RSS once the server has answered --lookups route requests, spread over the 100 topics
    in chunks (nsload counts with -w 0 every answer it reads)."""
    with b.server() as srv, b.brokers(srv.port, brokers=1, topics=100):
        expect_ok(srv.port, request_frame(ROUTE, {"topic": "TopicTest"}), "route lookup")
        done = chunks = 0
        while done < b.args.lookups:
            topic = LOOKUP_TOPICS[chunks % len(LOOKUP_TOPICS)]
            res = b.nsload(srv.port, "throughput", "-c", "16", "-d", "32", "--topic", topic,
                           seconds=b.args.chunk_seconds, warmup=0)
            if res["requests"] == 0:
                raise BenchError("nsload got no answers: server stalled?")
            done, chunks = done + res["requests"], chunks + 1
        rss, hwm = rss_mb(srv.proc.pid)
        expect_ok(srv.port, request_frame(ROUTE, {"topic": "TopicTest"}), "route lookup at the end")
    return {"rss_lookups": rss}, {"lookups": done, "chunks": chunks, "vmhwm_mb": hwm}


def topics_100k_scenario(b: Bench) -> Outcome:
    """3 brokers holding the same 100k topics (compressed registrations, a 16 MB plain one
    would hit the frame limit): RSS, then GET_ALL_TOPIC_LIST latency from one connection."""
    with b.server() as srv, b.brokers(srv.port, 3, TOPICS_100K, compressed=True) as (_, regs):
        time.sleep(1)  # let the registration's garbage go before reading RSS
        rss, hwm = rss_mb(srv.proc.pid)
        body = expect_ok(srv.port, request_frame(TOPIC_LIST, {}), "GET_ALL_TOPIC_LIST")
        lat = b.nsload(srv.port, "latency", "--request", "topics", "-c", "1")
    values = {"rss_100k": rss, "topics206_p50": lat["p50_us"] / 1000, "topics206_p99": lat["p99_us"] / 1000}
    details = {"vmhwm_mb": hwm, "register_ms": [r["register_ms"] for r in regs],
               "topic_list_body_bytes": body, "latency": lat}
    return values, details


def startup_scenario(b: Bench) -> Outcome:
    """Spawn → first answered request, polled every 2 ms from the load core."""
    with b.server() as srv:
        return {"startup": srv.startup_s}, {}


def register_scenario(key: str, topics: int, compressed: bool) -> Callable[[Bench], Outcome]:
    """One broker registering --registrations times on a fresh server: median of its round trips.
    The first adds every topic, the rest are heartbeats with a new dataVersion; the first is far
    slower, so it gets its own row rather than hiding under the median."""

    def scenario(b: Bench) -> Outcome:
        with b.server() as srv, b.brokers(srv.port, 1, topics, compressed, period=0.2) as (proc, regs):
            regs += [registration(proc) for _ in range(b.args.registrations - 1)]
        ms = [r["register_ms"] for r in regs]
        values = {key: statistics.median(ms), f"{key}_first": ms[0]}
        return values, {"register_ms": ms, "body_bytes": regs[0]["body_bytes"]}

    return scenario


STALLS = ("first", "same", "plus1", "minus1", "drop")  # stall.py's scenarios, in its order


def stall_scenario(b: Bench) -> Outcome:
    """Issue 20: stall.py's probe looks a route up in a closed loop while one broker registers
    --stall-topics topics (plain JSON) and re-registers, then 500 groups' connections reset."""
    with b.server() as srv:
        argv = [sys.executable, str(b.shared / "stall.py"), f"{HOST}:{srv.port}", "--topics", str(b.args.stall_topics)]
        with b.running("stall", argv, b.args.load_core) as proc:
            res = last_json(proc.finish(timeout=900), "stall")
    missing = [name for name in STALLS if (res.get(name) or {}).get("probe_max_ms") is None]
    if missing:
        raise BenchError(f"stall.py: no probe answer during {', '.join(missing)}: {res}")
    return {f"stall_{name}": res[name]["probe_max_ms"] for name in STALLS}, res


def snapshot_stall_scenario(b: Bench) -> Outcome:
    """Issue 20: the probe's longest wait while our server writes a route snapshot of 100k
    topics x 3 brokers (snapshot_stall.py; a write every 0.5 s when something changed)."""
    port = free_port()
    data_dir = Path(tempfile.mkdtemp(prefix="data-", dir=b.tmp))
    snapshot = data_dir / "routes.json"
    (data_dir / "bench.properties").write_text("routeSnapshotInterval=500\n")
    argv = b.server_argv(port, data_dir) + ["-c", str(data_dir / "bench.properties"), "--route-snapshot", str(snapshot)]
    with b.running("server", argv, b.args.server_core, log=True) as server:
        wait_answer(port, server)
        tool = [sys.executable, str(Path(__file__).with_name("snapshot_stall.py")), f"{HOST}:{port}", str(snapshot),
                "--shared-bench", str(b.shared)]
        with b.running("snapshot-stall", tool, b.args.load_core) as proc:
            res = last_json(proc.finish(timeout=900), "snapshot_stall")
    return {"stall_snapshot": res["probe_max_ms"]}, res


#: scenarios that need our server's own options, skipped with --server-cmd and for --compare servers
OURS_ONLY = {"stall-snapshot"}
#: scenarios that start no NameServer (the ceiling, the floor): run once a round, not per server
NO_SERVER = {"ceiling", "floor"}

SCENARIOS: dict[str, Callable[[Bench], Outcome]] = {
    "route": route_scenario,
    "ceiling": ceiling_scenario,
    "floor": floor_scenario,
    "rss-lookups": rss_lookups_scenario,
    "topics-100k": topics_100k_scenario,
    "startup": startup_scenario,
    "register-20k-compressed": register_scenario("reg20k_compressed", 20_000, True),
    "register-20k-plain": register_scenario("reg20k_plain", 20_000, False),
    "register-100k-compressed": register_scenario("reg100k_compressed", 100_000, True),
    "stall": stall_scenario,
    "stall-snapshot": snapshot_stall_scenario,
}


# ---- running and reporting ------------------------------------------------------------------


#: ours, in the records and the comparison (the servers of --compare go by their labels)
OURS = "ours"


@dataclass
class Results:
    values: dict[str, list[float]] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)
    #: each --compare server's values, by label
    compared: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def add(self, run: int, name: str, meter: CpuMeter, outcome: Outcome | None, error: str | None,
            server: str = OURS, load: float | None = None) -> None:
        values, details = outcome or ({}, {})
        into = self.values if server == OURS else self.compared.setdefault(server, {})
        for key, value in values.items():
            into.setdefault(key, []).append(value)
        self.records.append({"run": run, "scenario": name, "server": server,
                             "seconds": round(time.monotonic() - meter.start[0], 2),
                             "other_cpu_cores": round(meter.other_cores(), 2), "loadavg_1min": load,
                             "values": values, "details": details, "error": error})


def servers(args: argparse.Namespace) -> dict[str, str | None]:
    """Ours (or --server-cmd's) first, then each --compare server by its label."""
    found: dict[str, str | None] = {OURS: args.server_cmd}
    for item in args.compare:
        label, _, command = item.partition("=")
        found[label] = command
    return found


def run_all(b: Bench, names: list[str], results: Results) -> None:
    """Rounds of every scenario, so slow drift of the machine spreads over all figures alike and
    the ceiling is measured right next to the route throughput it is compared with; with
    --compare, each scenario against ours and then each other server, so their ratio is a
    round's."""
    for run in range(1, b.args.runs + 1):
        for name in names:
            for server, command in servers(b.args).items():
                if server != OURS and name in OURS_ONLY | NO_SERVER:
                    continue
                b.command = command
                meter = CpuMeter({b.args.server_core, b.args.load_core})
                load = round(os.getloadavg()[0], 2)
                outcome, error = None, None
                try:
                    outcome = SCENARIOS[name](b)
                except BenchError as e:
                    error = str(e)
                results.add(run, name, meter, outcome, error, server, load)
                progress(run, b.args.runs, results.records[-1])
        ratio(results, run)


def ratio(results: Results, run: int) -> None:
    """Route throughput over the ceiling of the same round."""
    rows = [r for r in results.records if r["run"] == run and r["server"] == OURS]
    route = [r["values"].get("route_rps") for r in rows if r["values"].get("route_rps")]
    ceiling = [r["values"].get("ceiling_rps") for r in rows if r["values"].get("ceiling_rps")]
    if route and ceiling:
        results.values.setdefault("route_vs_ceiling", []).append(route[0] / ceiling[0])
    route_cpu = [r["values"].get("route_cpu_us") for r in rows if r["values"].get("route_cpu_us")]
    ceiling_cpu = [r["values"].get("ceiling_cpu_us") for r in rows if r["values"].get("ceiling_cpu_us")]
    if route_cpu and ceiling_cpu:
        results.values.setdefault("ceiling_vs_route_cpu", []).append(ceiling_cpu[0] / route_cpu[0])


def progress(run: int, runs: int, record: dict[str, Any]) -> None:
    values = ", ".join(f"{k} {fmt(v, FIGURE_BY_KEY[k].unit)}" for k, v in record["values"].items())
    text = "ERROR " + record["error"] if record["error"] else values
    server = "" if record["server"] == OURS else f" [{record['server']}]"
    print(f"[run {run}/{runs}] {record['scenario']}{server} ({record['seconds']:.1f} s, other CPU "
          f"{record['other_cpu_cores']:.2f} cores, load {record['loadavg_1min']}): {text}", file=sys.stderr,
          flush=True)


def label(fig: Figure, args: argparse.Namespace) -> str:
    """The row's name; the RSS row says how many lookups it really took when that was changed."""
    if fig.key == "rss_lookups" and args.lookups != 2_000_000:
        return fig.label.replace("~2 M", f"~{args.lookups / 1e6:g} M")
    return fig.label


def summarize(results: Results, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for fig in FIGURES:
        values = results.values.get(fig.key)
        if not values:
            continue
        median = statistics.median(values)
        rows.append({"key": fig.key, "figure": label(fig, args).strip(), "unit": fig.unit, "median": median,
                     "min": min(values), "max": max(values), "values": values, "goal": fig.goal,
                     "goal_text": fig.goal_text(), "java_4_9_8": fig.java, "met": fig.met(median)})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    head = ["figure", "median", "spread (min–max)", "n", "goal", "Java 4.9.8", "met"]
    body = []
    for r in rows:
        spread = f"{fmt(r['min'], r['unit'])} – {fmt(r['max'], r['unit'])}"
        met = {True: "yes", False: "NO", None: ""}[r["met"]]
        indent = "  " if FIGURE_BY_KEY[r["key"]].label.startswith(" ") else ""  # rows that belong to the one above
        body.append([indent + r["figure"], fmt(r["median"], r["unit"]), spread, str(len(r["values"])),
                     r["goal_text"], r["java_4_9_8"], met])
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    line = lambda row: "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths]), *map(line, body)])


def comparison(results: Results, label: str) -> list[dict[str, Any]]:
    """Per figure measured on both: each server's values by round, and ours / the other's in each
    round (both taken minutes apart, on the same machine's load)."""
    rows = []
    for fig in FIGURES:
        by_run = {server: {r["run"]: r["values"][fig.key] for r in results.records
                           if r["server"] == server and fig.key in r["values"]} for server in (OURS, label)}
        runs = sorted(set(by_run[OURS]) & set(by_run[label]))
        if not runs:
            continue
        rows.append({"key": fig.key, "figure": fig.label.strip(), "unit": fig.unit, "runs": runs,
                     OURS: [by_run[OURS][r] for r in runs], label: [by_run[label][r] for r in runs],
                     "ratios": [by_run[OURS][r] / by_run[label][r] if by_run[label][r] else None for r in runs]})
    return rows


def comparison_table(rows: list[dict[str, Any]], label: str, loads: dict[str, list[float]]) -> str:
    """Median (min–max) of each server, and ours / the other's in each round with their median."""
    def spread(values: list[float], unit: str) -> str:
        return f"{fmt(statistics.median(values), unit)} ({fmt(min(values), unit)} – {fmt(max(values), unit)})"
    head = ["figure", f"{OURS}: median (min–max)", f"{label}: median (min–max)", f"{OURS} / {label}, each round",
            "median"]
    body = []
    for r in rows:
        ratios = [x for x in r["ratios"] if x is not None]
        body.append([r["figure"], spread(r[OURS], r["unit"]), spread(r[label], r["unit"]),
                     ", ".join(f"{x:.3f}" for x in ratios), f"{statistics.median(ratios):.3f}" if ratios else ""])
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    line = lambda row: "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()  # noqa: E731
    lines = [line(head), line(["-" * w for w in widths]), *map(line, body)]
    for server, values in loads.items():
        lines.append(f"load average (1 min) at the start of each {server} run: "
                     + ", ".join(f"{v:g}" for v in values))
    return "\n".join(lines)


def meta(b: Bench, seconds: float) -> dict[str, Any]:
    a = b.args
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "server": a.server_cmd or f"python -m twisted_namesrv --compat {a.compat or '(default)'}",
            "compare": {label: command for label, command in servers(a).items() if label != OURS},
            "git": git_state(), "runs": a.runs, "seconds": a.seconds, "warmup": a.warmup,
            "lookups": a.lookups, "registrations": a.registrations, "server_core": a.server_core,
            "load_core": a.load_core, "shared_bench": str(b.shared), "total_seconds": round(seconds, 1)}


def git_state() -> str:
    """Commit and whether the tree is dirty: others change the server while figures are taken."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def print_other_cpu(records: list[dict[str, Any]]) -> None:
    """One line on how busy other processes kept the bench cores, naming the worst runs."""
    if not records:
        return
    other = sorted(records, key=lambda r: r["other_cpu_cores"], reverse=True)
    busy = [r for r in other if r["other_cpu_cores"] >= BUSY_WARNING]
    line = (f"other processes on the bench cores: median {statistics.median(r['other_cpu_cores'] for r in other):.2f}"
            f" cores over {len(other)} scenario runs")
    if busy:
        worst = ", ".join(f"{r['scenario']} run {r['run']} ({r['other_cpu_cores']:.2f})" for r in busy[:5])
        line += f"; ≥ {BUSY_WARNING} in {len(busy)} (figures suspect), worst: {worst}"
    print(line)


def report(b: Bench, results: Results, seconds: float) -> None:
    rows = summarize(results, b.args)
    info = meta(b, seconds)
    print(f"\nNameServer: {info['server']}  (git {info['git']}), server core {b.args.server_core}, "
          f"load core {b.args.load_core}, {b.args.runs} runs, total {seconds:.0f} s")
    print(table(rows) if rows else "no figure completed")
    compared = {}
    for label in list(servers(b.args))[1:]:
        compared[label] = comparison(results, label)
        loads = {server: [r["loadavg_1min"] for r in results.records if r["server"] == server]
                 for server in (OURS, label)}
        print(f"\nOurs against {label}, round by round:")
        print(comparison_table(compared[label], label, loads) if compared[label] else "no figure of both completed")
    print_other_cpu(results.records)
    for r in results.records:
        if r["error"]:
            print(f"error in run {r['run']} {r['scenario']}: {r['error']}")
    if b.args.json:
        doc = {"meta": info, "figures": rows, "compared": compared, "runs": results.records}
        Path(b.args.json).write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
        print(f"JSON written to {b.args.json}")


# ---- command line ---------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3, help="repetitions of every figure (default 3)")
    p.add_argument("--quick", action="store_true",
                   help="shorter: nsload -s 2 -w 0.5, 500k lookups for the RSS figure, 3 registrations")
    p.add_argument("--seconds", type=float, help="nsload measured seconds (default 5, quick 2)")
    p.add_argument("--warmup", type=float, help="nsload warm-up seconds (default 1, quick 0.5)")
    p.add_argument("--lookups", type=int, help="route lookups before the RSS reading (default 2,000,000)")
    p.add_argument("--chunk-seconds", type=float, default=2.0, help="one nsload run per topic, this long")
    p.add_argument("--registrations", type=int, help="registrations per REGISTER_BROKER run (default 5)")
    p.add_argument("--json", metavar="PATH", help="also write every value and detail as JSON")
    p.add_argument("--compat", choices=["4.9.8", "5.3.3"], default="4.9.8",
                   help="passed to our server (default 4.9.8, the generation of the reference figures)")
    p.add_argument("--server-cmd", metavar="CMD",
                   help="benchmark another NameServer: a command line with {port} (and optionally "
                        "{data_dir}, {host}) placeholders; it is run under taskset like ours")
    p.add_argument("--compare", action="append", default=[], metavar="LABEL=CMD",
                   help="also another NameServer (a command line as --server-cmd's), each scenario right after "
                        "ours in every round; the report gives ours / it per round")
    p.add_argument("--shared-bench", type=Path, default=DEFAULT_SHARED, metavar="DIR",
                   help=f"directory of nsload.py, fakebroker.py, ceiling.py (default {DEFAULT_SHARED})")
    p.add_argument("--only", metavar="NAMES", help="comma-separated scenarios: " + ",".join(SCENARIOS))
    p.add_argument("--stall-topics", type=int, default=80_000,
                   help="topics of the big broker in the stall scenario (default 80,000: 12.8 MB of plain JSON)")
    p.add_argument("--server-core", type=int, default=0)
    p.add_argument("--load-core", type=int, default=1)
    a = p.parse_args(argv)
    quick = a.quick
    a.seconds = a.seconds if a.seconds is not None else (2.0 if quick else 5.0)
    a.warmup = a.warmup if a.warmup is not None else (0.5 if quick else 1.0)
    a.lookups = a.lookups if a.lookups is not None else (500_000 if quick else 2_000_000)
    a.registrations = a.registrations if a.registrations is not None else (3 if quick else 5)
    check_args(p, a)
    return a


def check_args(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    if a.server_cmd and "{port}" not in a.server_cmd:
        p.error("--server-cmd needs a {port} placeholder: the bench picks a free port per server")
    for item in a.compare:
        label, _, command = item.partition("=")
        if not label or label == OURS or "{port}" not in command:
            p.error("--compare LABEL=CMD: a label other than 'ours' and a command with a {port} placeholder")
    for tool in ("nsload.py", "fakebroker.py", "ceiling.py", "stall.py"):
        if not (a.shared_bench / tool).is_file():
            p.error(f"{tool} not found in {a.shared_bench} (see --shared-bench)")
    unknown = set((a.only or "").split(",")) - set(SCENARIOS) - {""}
    if unknown:
        p.error(f"unknown scenario(s) {', '.join(sorted(unknown))}; known: {', '.join(SCENARIOS)}")
    if a.runs < 1 or a.registrations < 1:
        p.error("--runs and --registrations must be at least 1")


def stop_on_signal(signum: int, _frame: object) -> None:
    """SIGTERM/SIGHUP unwind like Ctrl-C, so the finally block stops every child."""
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = [n for n in SCENARIOS if not args.only or n in args.only.split(",")]
    if args.server_cmd and OURS_ONLY & set(names):
        print(f"[bench] skipped with --server-cmd: {', '.join(sorted(OURS_ONLY & set(names)))}", file=sys.stderr)
        names = [n for n in names if n not in OURS_ONLY]
    signal.signal(signal.SIGTERM, stop_on_signal)
    signal.signal(signal.SIGHUP, stop_on_signal)
    os.sched_setaffinity(0, {args.load_core})  # our own polling and bookkeeping stay off the server core
    bench, results, status = Bench(args, args.shared_bench.resolve(), command=args.server_cmd), Results(), 0
    t0 = time.monotonic()
    try:
        run_all(bench, names, results)
    except KeyboardInterrupt:
        print("\ninterrupted: stopping every process started, partial results follow", file=sys.stderr)
        status = 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        bench.close()
    report(bench, results, time.monotonic() - t0)
    return status


if __name__ == "__main__":
    sys.exit(main())
