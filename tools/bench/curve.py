"""The scale curve (``scale.py --curve``): how each cost grows with topics, brokers and client
connections, for us and for another NameServer (Java's) at the same step, in the same run.

Steps vary one dimension at a time from 10k topics, 10 brokers, 1k client connections:
topics 10k / 100k / 1M, brokers 10 / 1,000 / 5,000, connections 1k / 10k / 50k (``--steps all``);
``--steps reduced`` (the default) runs the smaller ones a shared 2-core machine can take.  Brokers
are masters in pairs, each topic on both of a pair; a broker's table is sent in registrations of
at most SPLIT_TOPICS topics, as 5.x brokers split theirs (``enableSplitRegistration``), so no
frame passes the 16 MiB default limit.  Both servers run in 4.9.8 mode except at 1M topics (200k
a broker, four pieces), which only 5.x's registration can take in pieces: that step runs in 5.3.3
mode, and ``NAME@5.3.3`` runs any other step so (``topics-100k@5.3.3``: the topics axis in one
generation).  A compared server's command may use the step's ``{compat}``, ``{topics}``,
``{brokers}``, ``{clients}`` (Java's generation and heap).

Per step, on a fresh server (core 0; the load and a probe process on core 1):

- first registration of every broker (8 in flight), then the same tables again (repeated): time;
- heartbeat storm: every broker re-sends its tables within one second: time;
- mass disconnect: every broker's connection reset at once: time until their routes are gone;
- during each: the probe's longest wait and its lookup p50/p99 (one connection, a minimal closed
  loop of prebuilt lookups, at SCHED_FIFO on the load's core: ``probe_priority``, ``lookups``); with
  ``--probe-split``, what the longest wait was made of (``split_lookups``, ``window``), read around
  every lookup at a cost of its own: for traces, not for the goal's rounds;
- in each registration phase: the brokers' own round trips (p50, longest: a storm takes at least
  the second it is spread over, so its time hardly tells servers apart that keep up; these do) and
  this load process's CPU (``load_cpu_s``, and ``load_cpu_us_per_frame``: a load generator at its
  limit would say so; ``Load`` sends prebuilt frames from one loop);
- each phase's server CPU (user and system, the process tree, every thread), until the server is
  idle again after it: steadier than the time on a shared machine, and it counts work a server
  leaves for after its answers;
- each phase's ``probe_cpu_s`` (the probe's, ahead of the load on its core; ``probe_cpu_us_per_lookup``
  over the lookups in the phase's window) and ``others_cpu_s``:
  the CPU the machine's cores spent in the phase on anything but the server, the load and the
  probe (``/proc/stat`` less the three): a phase whose time or waits others shared a core with
  says so; and ``server_core_steal_s``, the time the host did not run the server's (virtual)
  core at all (its steal, ``/proc/stat``, in 10 ms steps): a thread runnable then waited for it;
- RSS after registration (with the client connections open) and at the end.

``--load-idle`` runs the load (the brokers, the idle client connections) at SCHED_IDLE while a step
runs, ``--probe-idle`` the probe too (``load_priority``; off by default): production's brokers and
clients run on other hosts, not beside the server.

Every step runs against ours and each ``--compare`` server in turn, ``--rounds`` times
interleaved; before each run the previous server's whole process group is gone and the machine
idle (under QUIET_CORES busy over a second, at most ``--quiet-timeout`` s: each record's
``quiet_before`` says how long it waited and how busy the last second was); the table gives
each figure's median with its min–max and the ratio to each compared server (median of the
per-round ratios).  The machine's load average is recorded.

Each run is appended to ``--records`` (JSON lines) as it ends, with its round, step, server,
commit, start time and load: a run stopped anywhere keeps what it finished, the same command
goes on from there (measuring only what is missing or failed), and ``--report-only`` makes the
tables (``--markdown``: per step and phase, and how each cost grows) and the plot (``--svg``,
curve_report.py) from what is there.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import compileall
import gc
import json
import multiprocessing
import os
import resource
import select
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
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from procfs import (  # beside this file: /proc read one way
    OtherThreads,
    Schedstat,
    core_steal_s,
    cores_busy_s,
    descendants,
    kernel_thread,
    launched,
    pid_cpu_s,
    pid_major_faults,
    status_kib,
    thread_switches,
)

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
    #: the protocol generation both servers run: 4.9.8 (Java's reference generation) unless a
    #: broker's table passes the frame limit, where only 5.x's split registration can carry it
    #: (4.9.8 applies a broker's topics only when its dataVersion changed: the pieces after the
    #: first would be dropped)
    compat: str = "4.9.8"

    @property
    def axis_values(self) -> dict[str, int]:
        return {"topics": self.topics, "brokers": self.brokers, "clients": self.clients}


STEPS = {s.name: s for s in (
    Step("tiny", 1_000, 4, 50),  # a smoke run of the tool, not a curve step
    Step("base", 10_000, 10, 1_000),
    Step("topics-100k", 100_000, 10, 1_000),
    Step("topics-1m", 1_000_000, 10, 1_000, "5.3.3"),
    Step("brokers-1000", 10_000, 1_000, 1_000),
    Step("brokers-5000", 10_000, 5_000, 1_000),
    Step("clients-10k", 10_000, 10, 10_000),
    Step("clients-50k", 10_000, 10, 50_000),
    # the most one process can hold under a hard RLIMIT_NOFILE of 20,000 (a container without
    # CAP_SYS_RESOURCE cannot raise it), with room for the server's own files (Java's jars)
    Step("clients-19.5k", 10_000, 10, 19_500),
)}
REDUCED = ["base", "topics-100k", "brokers-1000", "clients-10k"]
COMPATS = ("4.9.8", "5.3.3")


def step_named(name: str) -> Step:
    """A step by name, or ``NAME@COMPAT`` for it in the other protocol generation (e.g.
    ``topics-100k@5.3.3``, to read the topics axis in one generation up to 1M)."""
    base, _, compat = name.partition("@")
    if base not in STEPS or (compat and compat not in COMPATS):
        raise KeyError(name)
    step = STEPS[base]
    if not compat or compat == step.compat:
        return step
    return Step(f"{base}@{compat}", step.topics, step.brokers, step.clients, compat)


# ---- a NameServer as a child process --------------------------------------------------------


#: the servers' core (``Server``'s default); the load and the probe run on core 1
SERVER_CORE = 0


class Server:
    """A NameServer child from a command line with ``{port}`` and ``{data_dir}`` (ours by
    default; also ``{compat}``, ``{topics}``, ``{brokers}``, ``{clients}`` of the step, e.g. to
    pick Java's generation or heap), on ``core``, in its own process group; ready once it answers
    a request."""

    #: run.py's install without extras when there is one (with pyOpenSSL, Twisted's TCP imports it: ~13 MB)
    PYTHON = REPO / ".venv-bench" / "bin" / "python"
    OURS = (f"{PYTHON if PYTHON.exists() else sys.executable} -m twisted_namesrv --port {{port}} --bind {HOST}"
            " --data-dir {data_dir} --compat {compat}")

    def __init__(self, command: str | None, scratch: Path, name: str, core: int | None = SERVER_CORE,
                 step: Step | None = None) -> None:
        compiled(REPO)
        self.port = free_port()
        self.data_dir = data_dir = scratch / f"{name}-{self.port}"
        data_dir.mkdir(parents=True)
        fields = {"port": self.port, "data_dir": data_dir, "host": HOST, "compat": "4.9.8"}
        if step is not None:
            fields.update(step.axis_values, compat=step.compat)
        argv = shlex.split((command or self.OURS).format(**fields))
        if core is not None and (os.cpu_count() or 1) > 1:
            argv = ["taskset", "-c", str(core), *argv]
        self.log_path = scratch / f"{name}-{self.port}.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(argv, cwd=REPO, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def discard(self) -> None:
        """Remove the stopped server's data and log: a 1M step's Java log alone is near 900 MB, and a
        curve of many runs filled the disk with them."""
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.log_path.unlink(missing_ok=True)

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

    def tree(self) -> list[int]:
        """The process and its descendants (a command may start the server as a child)."""
        return [self.proc.pid, *descendants(self.proc.pid)]

    def main_pid(self) -> int:
        """The server's own process under the command's launchers (procfs.launched): whose main
        thread the probe watches."""
        return launched(self.proc.pid)

    def cpu_s(self) -> float:
        """User and system CPU seconds of the process tree so far (every thread: Java's JIT and
        collector included): on a shared machine steadier than wall time, which waits for others."""
        return sum(pid_cpu_s(pid) for pid in self.tree())

    def rss_mib(self) -> float | None:
        """VmRSS of the process and its descendants (a command may start the server as a child)."""
        found = [status_kib(pid, ("VmRSS",)) for pid in self.tree()]
        kib = [f["VmRSS"] for f in found if f is not None]
        return round(sum(kib) / 1024, 1) if kib else None

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM to its process group, SIGKILL after ``timeout``; back once every process of the
        group is gone, not only the one started (a launcher's children stop too: none of a server
        may run on into the next server's phases)."""
        if self.alive:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        deadline = time.monotonic() + timeout
        while group_alive(self.proc.pid):
            if time.monotonic() > deadline:
                os.killpg(self.proc.pid, signal.SIGKILL)
            time.sleep(0.05)


def compiled(tree: Path) -> None:
    """The package's bytecode in ``tree`` made, as an install makes it (pip, and the image's
    compileall): a server that compiles its modules from source at start (a checkout, under
    PYTHONDONTWRITEBYTECODE) keeps the compiler's leftovers in its heap, 1.2-1.3 MiB of RSS more
    at rest and about 1 MiB after the 5,000 first registrations than the server as installed runs."""
    compileall.compile_dir(tree / "twisted_namesrv", quiet=1)


def group_alive(pgid: int) -> bool:
    """Whether any process of process group ``pgid`` is still there (a zombie counts until reaped)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # there, but not ours to signal
        pass
    return True


class PhaseCpu:
    """The CPU a phase took from its start, taken apart: this process's (the brokers' load), the
    probe's, and what the machine's cores spent on anything but the server, the load and the probe
    (``/proc/stat`` less the three); ``server0`` the server's at the start; and the server's wake-ups
    over the phase (``wakeups``: its main thread's, every thread's), which a storm's CPU follows
    (docs/benchmarks.md, the storm's CPU)."""

    def __init__(self, server: Server, probe_pid: int) -> None:
        self.server = server
        self.main_pid = server.main_pid()
        self.switches0 = thread_switches(self.main_pid)
        self.faults0 = pid_major_faults(self.main_pid)
        # the probe's one thread by its schedstat: in ns, where /proc/PID/stat counts 10 ms ticks (a
        # storm's second of the minimal probe is a few of them)
        self.probe = Schedstat(f"/proc/{probe_pid}/task/{probe_pid}/schedstat")
        self.server0, self.load0, self.machine0, self.probe0 = (server.cpu_s(), time.process_time(), cores_busy_s(),
                                                                self.probe.read()[0] / 1e3)
        self.steal0 = core_steal_s(SERVER_CORE)

    def ended(self) -> tuple[float, float, float]:
        """(load, probe, others) CPU seconds since the start."""
        load = time.process_time() - self.load0
        probe = self.probe.read()[0] / 1e3 - self.probe0
        self.probe.close()
        self.steal_s = core_steal_s(SERVER_CORE) - self.steal0
        switches = thread_switches(self.main_pid)
        self.wakeups = (switches[0] - self.switches0[0], switches[1] - self.switches0[1])
        self.major_faults = pid_major_faults(self.main_pid) - self.faults0
        return load, probe, cores_busy_s() - self.machine0 - (self.server.cpu_s() - self.server0) - load - probe


#: the machine counts as quiet under this many cores busy (between runs nothing of the curve's runs)
QUIET_CORES = 0.2


def wait_for_quiet(timeout: float, under: float = QUIET_CORES) -> dict[str, float | None]:
    """Before a run: wait until the machine's cores are idle (under ``under`` cores busy over a
    second: the previous server's exit, its files' writeback, whatever else ran), at most
    ``timeout`` s; how long it waited and how busy the last second was (a run that starts
    above it was measured on a busy machine, and its record says so)."""
    started, last = time.monotonic(), cores_busy_s()
    if timeout <= 0:
        return {"waited_s": 0.0, "cores_busy": None}
    while True:
        time.sleep(1.0)
        now = cores_busy_s()
        used, last = now - last, now
        if used < under or time.monotonic() - started >= timeout:
            return {"waited_s": round(time.monotonic() - started, 1), "cores_busy": round(used, 2)}


def ended(server: Any, *sockets: Iterable[Any]) -> None:
    """A tool's run over: every socket of ``sockets`` closed, then ``server`` stopped and its data
    directory removed (what each tool's ``finally`` does before tidying its own files)."""
    for group in sockets:
        for sock in group:
            sock.close()
    server.stop()
    server.discard()


def tidy(scratch: Path) -> None:
    """Remove the scratch folder unless it holds what someone needs: the records, or a failed run's
    log and data (then say where)."""
    kept = [p for p in scratch.iterdir() if p.suffix != ".properties"]
    if kept:
        print(f"[curve] kept {scratch}: {', '.join(sorted(p.name for p in kept))}", file=sys.stderr, flush=True)
    else:
        shutil.rmtree(scratch, ignore_errors=True)


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


def probe_priority(idle: bool = False) -> str:
    """Put the probe ahead of the load generator on their shared core (1): SCHED_FIFO, else nice
    -20, else as it is; what it got.  At normal priority a lookup's reply waited while this
    process's brokers held the core,
    and that wait, the same for any server, was counted as the server's.  It sleeps between lookups
    and blocks on its socket, so it takes the core only to send and read.  ``idle``
    (``--probe-idle``): SCHED_IDLE, as the load's with ``--load-idle``."""
    if idle:
        return "idle" if load_priority(True) else "normal"
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        return "fifo"
    except (AttributeError, OSError):
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -20)
        return "nice -20"
    except OSError:
        return "normal"


def load_priority(idle: bool) -> bool:
    """This process at SCHED_IDLE (``idle``), or back at the normal policy: whether it was set.
    ``--load-idle`` puts the curve's load (its brokers, the idle client connections it holds) there
    while a step runs, and back before the next server starts (a child inherits the policy): in
    production the brokers and clients run on other hosts, and the kernel places a woken task on a
    core that runs only SCHED_IDLE tasks as on an idle one, so the load's core is where the
    machine's other work goes, not the server's.  ``--probe-idle`` puts the probe there too (on a
    busy machine its own wait for core 1 is then most of its longest wait: ``probe_max_own_runqueue_ms``)."""
    if not hasattr(os, "SCHED_IDLE"):
        return False
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE if idle else os.SCHED_OTHER, os.sched_param(0))
    except OSError:
        return False
    return True


#: where answers are read into (``read_answer``, ``Load``): a ``recv`` of a fresh buffer allocates it
#: each time, and one of 1 MiB, past malloc's mmap threshold, cost an mmap, an mremap and a munmap
#: a read (the load's 7 system calls a storm frame, 3 of them these)
ANSWER_ROOM = 1 << 16


def read_answer(s: socket.socket, room: memoryview = memoryview(bytearray(ANSWER_ROOM))) -> None:
    """Read one whole frame off ``s`` and drop it (the probe times answers, it does not read them):
    one ``recv_into`` for a small answer, into ``room``, not read_frame's three and a JSON decode."""
    got = s.recv_into(room)
    while got < 4:
        more = s.recv_into(room[got:])
        if not more:
            raise ConnectionError("closed")
        got += more
    missing = 4 + int.from_bytes(room[:4], "big") - got
    while missing > 0:
        more = s.recv_into(room, min(missing, len(room)))
        if not more:
            raise ConnectionError("closed")
        missing -= more


#: a split probe's sample (``--probe-split``; the minimal probe's are its first two): its start
#: (monotonic s), its round trip (s), how long of it the probe waited for
#: its own CPU, how long of it the server's main thread ran and waited for a CPU (ms), how long the
#: probe itself ran (ms: its send and read, and the loopback's delivery they do for the core's other
#: packets), how many times the server's main thread was put on a CPU, how long core 1's
#: ksoftirqd ran and waited for it (ms: packets the system calls left it to deliver), and the same
#: of core 0's (the server's core: what its sends leave undelivered waits for it there)
Sample = tuple[float, float, float, float, float, float, int, float, float, float, float, float]


#: the probe's pause between two lookups (s): it looks up about 1,000-1,800 times a second, as it did
#: before it was made minimal, so a storm's CPU (at the ten-broker steps mostly its lookups') compares
PROBE_PAUSE_S = 0.0005

#: the probe's lookups, prebuilt (their opaques of one length): as many as it sends between two
#: looks at its stop
PROBE_BATCH = 64
PROBE_OPAQUE = 1_000_000


def probe_loop(port: int, stop: Any, out: Any, server_pid: int | None = None, idle: bool = False,
               split: bool = False) -> None:
    """Lookups in a closed loop on one connection, on core 1 ahead of the load (``probe_priority``;
    ``idle``: at SCHED_IDLE), sent to ``out`` at ``stop``: a minimal loop (``lookups``: prebuilt
    frames, a send and a read a lookup, two clock reads, nothing allocated but the samples' floats)
    or, ``split``, one that reads what the longest wait was made of around each lookup
    (``split_lookups``).  Either is the same for every server.  The collector is off: its samples are
    no garbage, and a collection inside a round trip was the probe's own CPU in it (54 young ones in
    40 s of lookups at the 5,000-broker step, up to 2.85 ms each at load 11; a full one would walk the
    heap it was forked with, the curve's)."""
    os.sched_setaffinity(0, {1}) if (os.cpu_count() or 1) > 1 else None
    probe_priority(idle)
    gc.disable()
    s = socket.create_connection((HOST, port), timeout=120)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    # blocking, its 2 minutes the kernel's (SO_RCVTIMEO): a socket with Python's own timeout polls
    # before every send and read, 2 system calls more a lookup
    s.settimeout(None)
    for option in (socket.SO_RCVTIMEO, socket.SO_SNDTIMEO):
        s.setsockopt(socket.SOL_SOCKET, option, struct.pack("ll", 120, 0))
    requests = [frame(105, {"topic": PROBE_TOPIC}, opaque=PROBE_OPAQUE + k) for k in range(PROBE_BATCH)]
    try:
        samples = split_lookups(s, stop, requests, server_pid) if split else lookups(s, stop, requests)
    finally:
        s.close()
    out.send(samples)


def lookups(s: socket.socket, stop: Any, requests: list[bytes]) -> list[tuple[float, float]]:
    """The minimal probe: (start, round trip) of each lookup, in s; a server that stopped answering
    (for the socket's timeout) is the last sample."""
    starts, trips = array.array("d"), array.array("d")
    monotonic, sendall, sleep = time.monotonic, s.sendall, time.sleep
    started = 0.0
    try:
        while not stop.is_set():
            for request in requests:
                started = monotonic()
                sendall(request)
                read_answer(s)
                trips.append(monotonic() - started)
                starts.append(started)
                sleep(PROBE_PAUSE_S)
    except OSError:
        trips.append(monotonic() - started)
        starts.append(started)
    return list(zip(starts, trips, strict=True))


def split_lookups(s: socket.socket, stop: Any, requests: list[bytes], server_pid: int | None) -> list[Sample]:
    """The probe with the wait's split (``--probe-split``): each sample (``Sample``) its start, its
    round trip (s), how long of it the probe itself waited for its CPU (ms: ``probe_runqueue_max_ms``,
    the part no server caused), and how long the server's main thread (``server_pid``'s: our reactor)
    ran and waited for its core meanwhile (``window``: what the longest wait was made of), read from
    their schedstat around each lookup: some 10 preads, and two per thread of the server's, which
    costs the probe's core several times a minimal lookup's system calls."""
    server = Schedstat(f"/proc/{server_pid}/task/{server_pid}/schedstat" if server_pid else "/nonexistent")
    others = OtherThreads(server_pid)  # the server's other threads (a pool's writers, a log's)
    own = Schedstat(f"/proc/self/task/{threading.get_native_id()}/schedstat")
    softirqd_pid, server_softirqd_pid = kernel_thread("ksoftirqd/1"), kernel_thread("ksoftirqd/0")
    softirqd = Schedstat(f"/proc/{softirqd_pid}/schedstat" if softirqd_pid else "/nonexistent")
    server_softirqd = Schedstat(f"/proc/{server_softirqd_pid}/schedstat" if server_softirqd_pid else "/nonexistent")
    samples: list[Sample] = []
    started = 0.0
    try:
        while not stop.is_set():
            for request in requests:
                others.list_if_due(time.monotonic())
                (own_ran, waited, _), (ran0, queued0, slices0) = own.read_slices(), server.read_slices()
                others_ran0 = others.ran_ms()
                (soft_ran0, soft_queued0), (soft0_ran0, soft0_queued0) = softirqd.read(), server_softirqd.read()
                started = time.monotonic()
                s.sendall(request)
                read_answer(s)
                rtt = time.monotonic() - started
                ran1, queued1, slices1 = server.read_slices()
                others_ran1 = others.ran_ms()
                own_ran1, waited1, _ = own.read_slices()
                (soft_ran1, soft_queued1), (soft0_ran1, soft0_queued1) = softirqd.read(), server_softirqd.read()
                samples.append((started, rtt, waited1 - waited, ran1 - ran0, queued1 - queued0, own_ran1 - own_ran,
                                slices1 - slices0, soft_ran1 - soft_ran0, soft_queued1 - soft_queued0,
                                soft0_ran1 - soft0_ran0, soft0_queued1 - soft0_queued0,
                                max(0.0, others_ran1 - others_ran0)))
                time.sleep(PROBE_PAUSE_S)
    except OSError:  # a server that stopped answering for 2 min: that wait is the last sample
        samples.append((started, time.monotonic() - started, 0.0, 0.0, 0.0, 0.0, 0, 0.0, 0.0, 0.0, 0.0, 0.0))
    finally:
        server.close()
        others.close()
        own.close()
        softirqd.close()
        server_softirqd.close()
    return samples


def longest_started(samples: list[Sample], t0: float, t1: float) -> float | None:
    """When the longest of the lookups ``window`` counts in [t0, t1] started (monotonic s): where a
    scheduler trace of the same run says what held the server's core then (core_holders.py)."""
    inside = [sample for sample in samples if sample[0] + sample[1] >= t0 and sample[0] <= t1]
    return round(max(inside, key=lambda sample: sample[1])[0], 6) if inside else None


def window(samples: list[Sample], t0: float, t1: float) -> dict[str, Any]:
    """The probe's lookups that started or were waiting in [t0, t1]: longest wait, p50, p99 (ms);
    from the split probe's samples (``--probe-split``) also
    the longest the probe itself waited for its CPU during one lookup, and what the longest wait
    was made of: the server's main thread on its CPU (``probe_max_server_ran_ms``), waiting for it
    (``..._runqueue_ms``: the scheduler gave its core to others), the probe's own side (waiting for
    its core, ``probe_max_own_runqueue_ms``, and on it, ``probe_max_own_ran_ms``: under the kernel's
    PREEMPT_NONE a load's send in the kernel holds core 1 even from the SCHED_FIFO probe), none of
    these (``probe_max_neither_ms``: blocked in a system call or on a lock, the packet not yet
    delivered, or the host); how many times the server's thread was put on a CPU meanwhile
    (``probe_max_server_slices``); and core 1's ksoftirqd's time on it and waiting for it
    (``probe_max_softirqd_ran_ms``, ``..._runqueue_ms``: a packet of the lookup's may wait there),
    and core 0's (``probe_max_server_softirqd_ran_ms``, ``..._runqueue_ms``: where the answer's may);
    and the server's other threads' run time in it (``probe_max_server_others_ran_ms``: on the
    server's one core, a thread of its pool or its log that holds the interpreter keeps the main
    thread off it, neither running nor runnable: that part of the neither, or of the wait for the core).
    The server's run time is the kernel's as of its last tick (``procfs.parse_schedstat_slices``):
    within a tick (4 ms here) either way, so a wait of a few ms may show the reactor's turn as
    neither, or a tick more ran than the wait; server_turns.py times the turns themselves."""
    inside = [sample[1:] for sample in samples if sample[0] + sample[1] >= t0 and sample[0] <= t1]
    rtts = sorted(r * 1e3 for r, *_ in inside)
    if not rtts:
        return {"probe_max_ms": None, "lookup_p50_ms": None, "lookup_p99_ms": None, "probe_runqueue_max_ms": None}
    pick = lambda q: round(rtts[min(len(rtts) - 1, int(q * len(rtts)))], 3)  # noqa: E731
    waits = {"probe_max_ms": round(rtts[-1], 2), "lookup_p50_ms": pick(0.5), "lookup_p99_ms": pick(0.99)}
    if len(inside[0]) == 1:  # the minimal probe's: round trips alone
        return waits
    longest, own_queued, ran, queued, own_ran, slices, soft_ran, soft_queued, *server_soft, others_ran = max(inside)
    return {**waits,
            "probe_runqueue_max_ms": round(max(own for _, own, *_ in inside), 2),
            "probe_max_server_ran_ms": round(ran, 2), "probe_max_server_runqueue_ms": round(queued, 2),
            "probe_max_own_runqueue_ms": round(own_queued, 2), "probe_max_own_ran_ms": round(own_ran, 2),
            "probe_max_server_slices": slices, "probe_max_softirqd_ran_ms": round(soft_ran, 2),
            "probe_max_softirqd_runqueue_ms": round(soft_queued, 2),
            **({"probe_max_server_softirqd_ran_ms": round(server_soft[0], 2),
                "probe_max_server_softirqd_runqueue_ms": round(server_soft[1], 2)} if server_soft else {}),
            "probe_max_server_others_ran_ms": round(others_ran, 2),
            "probe_max_neither_ms": round(longest * 1e3 - ran - queued - own_queued - own_ran, 2)}


# ---- one step against one server ---------------------------------------------------------------


#: how a success's answer header begins, as both servers write it (fastjson's order of the fields,
#: which ours keeps on the wire): an answer whose header begins so is not decoded (another is, to
#: say its code)
SUCCESS_HEAD = b'{"code":0,'


class Load:
    """The brokers' side of a step: their connections (non-blocking), each watched in one epoll set
    from its first sending to ``close``, and their frames sent from one tight loop, prebuilt.  A
    registration costs this process its ``send`` and its answer's ``recv``, and a share of a poll
    (no ``epoll_ctl`` but for a frame the socket did not take at once, no object and no decoding
    of a successful answer): at 5,000 brokers the storm is 5,000 frames in a second on core 1,
    which the probe shares (docs/benchmarks.md, what the curve's load and probe take)."""

    def __init__(self, conns: list[socket.socket]) -> None:
        self.conns = conns
        self.fds = [conn.fileno() for conn in conns]
        self.index = {fd: i for i, fd in enumerate(self.fds)}
        self.poller = select.epoll()
        self.watched = bytearray(len(conns))  # whether each connection is in the set yet
        self.room = memoryview(bytearray(ANSWER_ROOM))  # where answers are read (``ANSWER_ROOM``)

    def close(self) -> None:
        self.poller.close()

    def send(self, frames: list[list[bytes]], spread: float | None) -> list[float]:
        """Every broker's frames on its connection: ``spread`` seconds apart in all (a storm: the
        next broker's at its due time, as the poll's millisecond timeouts allow), or IN_FLIGHT at a
        time; each broker's round trip (s: its first frame sent to its last answered).  The collector
        is off meanwhile: a collection of this process's heap (every broker's frames and tables, 2M
        topic names at 1M topics) would hold the core the probe shares, and put the sending behind
        its schedule."""
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._send(frames, spread)
        finally:
            if collecting:
                gc.enable()

    def _send(self, frames: list[list[bytes]], spread: float | None) -> list[float]:
        """``send``, the collector off."""
        conns, fds, index, watched = self.conns, self.fds, self.index, self.watched
        register, modify, poll = self.poller.register, self.poller.modify, self.poller.poll
        monotonic, count, room = time.monotonic, len(frames), self.room
        limit = IN_FLIGHT if spread is None else count
        gap = spread / count if spread else 0.0
        at = [0] * count  # which of its frames each broker is at
        sent_at = [0.0] * count
        left: dict[int, memoryview] = {}  # what a socket did not take of a frame yet
        got: dict[int, bytes] = {}  # an answer read in part
        trips: list[float] = []
        started = flying = 0
        begun = monotonic()
        while len(trips) < count:
            now = monotonic()
            while started < count and flying < limit and (not gap or begun + started * gap <= now):
                i = started
                started, flying = started + 1, flying + 1
                sent_at[i] = now
                if not watched[i]:
                    register(fds[i], select.EPOLLIN)
                    watched[i] = 1
                self._start(i, frames[i][0], left)
            timeout = -1.0  # until an answer, unless a storm's next broker is due first
            if gap and started < count and flying < limit:
                timeout = max(0.0, begun + started * gap - now)
            for fd, events in poll(timeout):
                i = index[fd]
                if events & select.EPOLLOUT and self._push(fd, left):
                    modify(fd, select.EPOLLIN)
                if not events & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
                    continue
                try:
                    n = conns[i].recv_into(room)
                except BlockingIOError:
                    continue
                if not n:
                    raise ConnectionError(f"broker {i}: the server closed its connection")
                data: bytes | memoryview = room[:n]
                if fd in got:
                    data = got.pop(fd) + data
                if len(data) < 8 or len(data) < 4 + int.from_bytes(data[:4], "big"):
                    got[fd] = bytes(data)
                    continue
                answered(i, data)
                at[i] += 1
                if at[i] < len(frames[i]):  # the next piece of a split table
                    self._start(i, frames[i][at[i]], left)
                    continue
                trips.append(monotonic() - sent_at[i])
                flying -= 1
        return trips

    def _start(self, i: int, frame: bytes, left: dict[int, memoryview]) -> None:
        """Send ``frame`` on broker ``i``'s connection; what the socket does not take now waits for it
        to be writable."""
        try:
            sent = self.conns[i].send(frame)
        except BlockingIOError:
            sent = 0
        if sent < len(frame):
            fd = self.fds[i]
            left[fd] = memoryview(frame)[sent:]
            self.poller.modify(fd, select.EPOLLIN | select.EPOLLOUT)

    def _push(self, fd: int, left: dict[int, memoryview]) -> bool:
        """Send what the socket takes now of what was left; whether all of it went."""
        rest = left.get(fd)
        if rest is None:
            return True
        try:
            rest = rest[self.conns[self.index[fd]].send(rest):]
        except BlockingIOError:
            pass
        if rest:
            left[fd] = rest
            return False
        del left[fd]
        return True


def answered(i: int, data: bytes | memoryview) -> None:
    """Check broker ``i``'s answer, one whole frame: a refusal raises."""
    if len(data) != 4 + int.from_bytes(data[:4], "big"):
        raise RuntimeError(f"broker {i}: {len(data)} bytes read, not one answer")
    if data[8:8 + len(SUCCESS_HEAD)] == SUCCESS_HEAD:
        return
    code = json.loads(bytes(data[8:8 + (int.from_bytes(data[4:8], "big") & 0xFFFFFF)]))["code"]
    if code != 0:
        raise RuntimeError(f"registration refused: code {code}")


def send_all(conns: list[socket.socket], frames: list[list[bytes]], spread: float | None) -> list[float]:
    """``Load.send`` on ``conns`` for one sending (the curve keeps one ``Load`` for a step's sendings)."""
    load = Load(conns)
    try:
        return load.send(frames, spread)
    finally:
        load.close()


async def cpu_until_idle(server: Server, timeout: float = 60) -> float:
    """The server's CPU seconds once it is idle again (under a quarter of a core, for three samples
    of 0.2 s in a row: a server starved by other work looks idle for one; serving the probe's
    closed loop of lookups takes about a tenth, and is counted for both servers alike):
    what a phase left to do after its last answer (ours writes a big change into topicQueueTable
    after committing it; Java's collector runs after) is counted in its CPU."""
    deadline = time.monotonic() + timeout
    last, quiet = server.cpu_s(), 0
    while time.monotonic() < deadline and quiet < 3:
        await asyncio.sleep(0.2)
        now = server.cpu_s()
        quiet = quiet + 1 if now - last < 0.05 else 0
        last = now
    return last


class ClientsRefused(RuntimeError):
    """Fewer client connections than the step asks could be opened: how many, and why."""


def open_clients(port: int, count: int) -> list[socket.socket]:
    """``count`` client connections, each having looked the probe's topic up once, held open.
    Each source address (127.0.0.2, .3, ...) takes CLIENTS_PER_SOURCE of them: one address has
    only the ephemeral port range's ports (28,232 by default) towards one server port."""
    clients: list[socket.socket] = []
    try:
        for i in range(count):
            s = socket.socket()
            clients.append(s)
            if hasattr(socket, "IP_BIND_ADDRESS_NO_PORT"):  # the port is picked at connect, by 4-tuple
                s.setsockopt(socket.IPPROTO_IP, socket.IP_BIND_ADDRESS_NO_PORT, 1)
            s.bind((f"127.0.0.{2 + i // CLIENTS_PER_SOURCE}", 0))
            s.settimeout(60)
            s.connect((HOST, port))
            s.sendall(frame(105, {"topic": PROBE_TOPIC}, opaque=1))
            read_frame(s)
    except (OSError, ConnectionError) as exc:
        for s in clients:
            s.close()
        raise ClientsRefused(f"opened {len(clients) - 1} of {count} client connections, then "
                             f"{type(exc).__name__}: {exc}") from exc
    return clients


def routes_gone(port: int, topics: list[str]) -> bool:
    with socket.create_connection((HOST, port), timeout=60) as s:
        for i, topic in enumerate(topics):
            s.sendall(frame(105, {"topic": topic}, opaque=i + 1))
            if read_frame(s).get("code") == 0:
                return False
    return True


async def run_step(step: Step, server: Server, port: int, disconnect_timeout: float,
                   load_idle: bool = False, probe_idle: bool = False, probe_split: bool = False) -> dict[str, Any]:
    """One step's phases on a started server (``probe_split``: the probe that reads the wait's
    split, ``probe_loop``; ``load_idle``, ``probe_idle``: the load, the probe at
    SCHED_IDLE meanwhile, ``load_priority``)."""
    if load_idle:
        load_priority(True)
    try:
        return await _run_step(step, server, port, disconnect_timeout, probe_idle, probe_split)
    finally:
        if load_idle:
            load_priority(False)


def add_server_options(p: argparse.ArgumentParser,
                       tree_help: str = "the checkout whose server runs (this one)") -> None:
    """``--tree`` and ``--python``: which checkout's server a tool measuring a step runs, in which interpreter."""
    p.add_argument("--tree", type=Path, default=REPO, help=tree_help)
    p.add_argument("--python", default=str(Server.PYTHON if Server.PYTHON.exists() else sys.executable),
                   help="the interpreter the server runs in (run.py's .venv-bench when there is one)")


def beside_the_server() -> None:
    """This process (the brokers' load) on core 1, beside the server's core 0, as the curve runs them."""
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {1})


def register_probe(broker: socket.socket) -> None:
    """The probe's topic registered on ``broker``, a connection of a broker of its own, as every tool
    measuring a step registers it (the probe's lookups then find a route)."""
    for frame in register_frames("curve-probe", "127.0.0.1:19999", PROBE_TOPICS, 1):
        broker.sendall(frame)
        read_frame(broker)


async def _run_step(step: Step, server: Server, port: int, disconnect_timeout: float,
                    probe_idle: bool, probe_split: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"rss_mib_idle": server.rss_mib()}
    tables = broker_tables(step)
    first = [register_frames(n, a, t, 1) for n, a, t in tables]
    clients: list[socket.socket] = []
    with socket.create_connection((HOST, port)) as s:  # the probe's topic, on a broker of its own
        register_probe(s)
        stop, (receive, send) = multiprocessing.Event(), multiprocessing.Pipe(duplex=False)
        probe = multiprocessing.Process(target=probe_loop, daemon=True,
                                        args=(port, stop, send, server.main_pid(), probe_idle, probe_split))
        probe.start()
        try:
            await asyncio.sleep(1)
            phases: dict[str, tuple[float, float]] = {}
            cpu: dict[str, float] = {}
            load_cpu: dict[str, float] = {}  # this process's (the brokers'): a load generator at its limit says so
            others: dict[str, float] = {}  # the machine's CPU that none of server, load and probe took
            steal: dict[str, float] = {}  # the host's: the server's core not run at all
            probe_cpu: dict[str, float] = {}  # the probe's, on the load's core ahead of it
            wakeups: dict[str, tuple[int, int]] = {}  # the server's: its main thread's, all its threads'
            faults: dict[str, int] = {}  # the server's page faults that waited for the disk
            trips: dict[str, list[float]] = {}  # each broker's round trips, sorted
            conns = [socket.create_connection((HOST, port)) for _ in tables]
            for conn in conns:
                conn.setblocking(False)
            load = Load(conns)
            for phase, spread in (("first_registration", None), ("repeated_registration", None),
                                  ("heartbeat_storm", 1.0)):
                t0, meter = time.monotonic(), PhaseCpu(server, probe.pid)
                trips[phase] = sorted(load.send(first, spread))
                phases[phase] = (t0, time.monotonic())
                load_cpu[phase], probe_cpu[phase], others[phase] = meter.ended()
                steal[phase], wakeups[phase], faults[phase] = meter.steal_s, meter.wakeups, meter.major_faults
                cpu[phase] = await cpu_until_idle(server) - meter.server0
                if phase == "first_registration":
                    clients = open_clients(port, step.clients)
                    out["rss_mib_registered"] = server.rss_mib()
                await asyncio.sleep(0.3)
            last_topics = sorted({tables[0][2][0], tables[-1][2][-1]})
            load.close()
            t0, meter = time.monotonic(), PhaseCpu(server, probe.pid)
            for conn in conns:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()
            while not routes_gone(port, last_topics):
                if time.monotonic() - t0 > disconnect_timeout:  # recorded as at least the timeout
                    out["mass_disconnect_timed_out"] = True
                    break
                await asyncio.sleep(0.005)
            phases["mass_disconnect"] = (t0, time.monotonic())
            _, probe_cpu["mass_disconnect"], others["mass_disconnect"] = meter.ended()
            steal["mass_disconnect"], wakeups["mass_disconnect"] = meter.steal_s, meter.wakeups
            faults["mass_disconnect"] = meter.major_faults
            cpu["mass_disconnect"] = await cpu_until_idle(server) - meter.server0
            await asyncio.sleep(0.3)
        finally:
            stop.set()
            samples = receive.recv() if receive.poll(150) else []
            probe.join(10)
            for client in clients:
                client.close()
    out["rss_mib_end"] = server.rss_mib()
    # each phase's window on the machine's monotonic clock (not a figure): what a server recorded
    # by that clock is read per phase (server_turns.py --report --records)
    out["phase_windows"] = {phase: [round(t0, 6), round(t1, 6)] for phase, (t0, t1) in phases.items()}
    out["probe_max_at"] = {phase: longest_started(samples, t0, t1) for phase, (t0, t1) in phases.items()}
    out["probe_pid"] = probe.pid
    for phase, (t0, t1) in phases.items():
        out[f"{phase}_s"] = round(t1 - t0, 3)
        out[f"{phase}_cpu_s"] = round(cpu[phase], 3)
        lookups = sum(1 for sample in samples if t0 <= sample[0] <= t1)
        if phase in load_cpu:  # the measuring processes' own share: the load's a frame, the probe's a lookup
            out[f"{phase}_load_cpu_s"] = round(load_cpu[phase], 3)
            out[f"{phase}_load_cpu_us_per_frame"] = round(load_cpu[phase] * 1e6 / sum(map(len, first)), 1)
        out[f"{phase}_probe_cpu_s"] = round(probe_cpu[phase], 3)
        out[f"{phase}_probe_cpu_us_per_lookup"] = round(probe_cpu[phase] * 1e6 / lookups, 1) if lookups else None
        out[f"{phase}_others_cpu_s"] = round(max(0.0, others[phase]), 2)
        out[f"{phase}_server_core_steal_s"] = round(steal[phase], 2)
        # over the phase's window (not until idle, as its CPU: the probe's lookups alone wake a reactor
        # about a thousand times a second), beside the probe's lookups in it, each a wake-up at most
        out[f"{phase}_server_wakeups"], out[f"{phase}_server_thread_wakeups"] = wakeups[phase]
        out[f"{phase}_probe_lookups"] = lookups
        out[f"{phase}_server_major_faults"] = faults[phase]  # each a sleep of a thread, neither running nor runnable
        if trips.get(phase):  # what each broker waited for its answers (a storm's time is its spread's)
            ordered = trips[phase]
            out[f"{phase}_rtt_p50_ms"] = round(ordered[len(ordered) // 2] * 1e3, 2)
            out[f"{phase}_rtt_max_ms"] = round(ordered[-1] * 1e3, 2)
        for key, value in window(samples, t0, t1).items():
            out[f"{phase}_{key}"] = value
    return out


# ---- the curve: steps x servers x rounds, each run written as it ends ------------------------------


def raise_fd_limit(connections: int) -> int:
    """Room for the step's connections here and in the servers (children inherit the limit):
    the soft limit now. Raising the hard limit needs CAP_SYS_RESOURCE; without it, neither this
    process nor a server can hold more connections than the hard limit allows, and it says so."""
    want = connections + 1_000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))
        except (ValueError, OSError) as exc:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            print(f"[curve] RLIMIT_NOFILE: {want} wanted, the hard limit {hard} cannot be raised ({exc}; raising "
                  "it needs CAP_SYS_RESOURCE): a server holds fewer connections than that", file=sys.stderr,
                  flush=True)
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def ours_for(step: Step, scratch: Path) -> str:
    """Our server with maxConnections (default 10,000) above the step's connections: Java has no
    such limit."""
    props = scratch / f"ours-{step.name}.properties"
    props.write_text(f"maxConnections={step.clients + step.brokers + 1000}\n")
    return f"{Server.OURS} -c {props}"


def git_head() -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def load_records(path: Path) -> list[dict[str, Any]]:
    """The runs a records file holds (one JSON object a line; a line cut by a kill is skipped)."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def measure(steps: list[Step], servers: dict[str, str | None], rounds: int, scratch: Path, records_path: Path,
            disconnect_timeout: float, ready_timeout: float, after_each: Any = None,
            quiet_timeout: float = 30, load_idle: bool = False, probe_idle: bool = False,
            probe_split: bool = False) -> list[dict[str, Any]]:
    """Every (round, step, server) not already measured in ``records_path``, appended to it as
    soon as it ends: a run stopped at any point leaves every finished run, and the same command
    goes on from there. A run that failed is tried again. ``ready_timeout``: how long a server
    may take to answer (a command that first waits for a shared resource needs long); ``load_idle``,
    ``probe_idle``: the load, the probe at SCHED_IDLE while each step runs (``load_priority``);
    ``probe_split``: the probe that reads the wait's split (``probe_loop``), said in each record."""
    records = load_records(records_path)
    if records_path.exists() and not records_path.read_bytes().endswith(b"\n"):
        with records_path.open("a") as f:  # a line cut by a kill: the next run starts a line of its own
            f.write("\n")
    done = {(r["round"], r["step"], r["server"]) for r in records if "figures" in r}
    head = git_head()
    for round_ in range(1, rounds + 1):
        for step in steps:
            for label, command in servers.items():
                if (round_, step.name, label) in done:
                    continue
                quiet = wait_for_quiet(quiet_timeout)
                load = os.getloadavg()
                server = Server(command or ours_for(step, scratch), scratch,
                                f"{label}-{step.name}", step=step)
                record: dict[str, Any] = {"round": round_, "step": step.name, "server": label, "commit": head,
                                          "compat": step.compat, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                         time.gmtime()),
                                          "loadavg": [round(x, 2) for x in load], "quiet_before": quiet,
                                          **({"load_priority": "idle"} if load_idle else {}),
                                          **({"probe_priority": "idle"} if probe_idle else {}),
                                          "probe": "split" if probe_split else "minimal"}
                try:
                    port = server.wait_ready(ready_timeout)
                    record["server_pid"] = server.main_pid()
                    figures = asyncio.run(run_step(step, server, port, disconnect_timeout, load_idle, probe_idle,
                                                            probe_split))
                    record["phase_windows"] = figures.pop("phase_windows")
                    # what a scheduler trace of the run needs to say who held the server's core
                    record["probe_max_at"] = figures.pop("probe_max_at")
                    record["curve_pid"], record["probe_pid"] = os.getpid(), figures.pop("probe_pid")
                    record["figures"] = figures
                except Exception as exc:  # noqa: BLE001 - one failed step is recorded, the curve goes on
                    record["error"] = f"{type(exc).__name__}: {exc}"
                finally:
                    server.stop()
                if "figures" in record:
                    server.discard()
                else:  # kept to read why
                    record["log"] = str(server.log_path)
                record["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
                with records_path.open("a") as f:
                    f.write(json.dumps(record) + "\n")
                records.append(record)
                print(f"[curve] round {round_} {step.name} {label}: {record.get('figures') or record['error']}",
                      file=sys.stderr, flush=True)
                if after_each:
                    after_each(records)
    return records


def latest(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per (round, step, server): the last with figures, else the last error."""
    kept: dict[tuple, dict[str, Any]] = {}
    for r in records:
        key = (r["round"], r["step"], r["server"])
        if "figures" in r or "figures" not in kept.get(key, {}):
            kept[key] = r
    return list(kept.values())


def summarize(records: list[dict[str, Any]], servers: list[str]) -> list[dict[str, Any]]:
    """Per step and figure: each server's median and min–max; the median per-round ratio of ours
    to each other server."""
    ours, others = servers[0], servers[1:]
    records = latest(records)
    rows = []
    steps = list(dict.fromkeys(r["step"] for r in records))
    for step in steps:
        got = [r for r in records if r["step"] == step and "figures" in r]
        keys = list(dict.fromkeys(k for r in got for k in r["figures"]))
        for key in keys:
            row: dict[str, Any] = {"step": step, "figure": key}
            for label in servers:
                values = [r["figures"][key] for r in got if r["server"] == label
                          and isinstance(r["figures"].get(key), (int, float))]
                if values:
                    row[label] = {"median": statistics.median(values), "min": min(values), "max": max(values),
                                  "n": len(values)}
            for label in others:
                ratios = [a["figures"][key] / b["figures"][key] for a in got for b in got
                          if a["server"] == ours and b["server"] == label and a["round"] == b["round"]
                          and isinstance(a["figures"].get(key), (int, float)) and b["figures"].get(key)]
                if ratios:
                    row[f"ratio_to_{label}"] = {"median": round(statistics.median(ratios), 3),
                                                "min": round(min(ratios), 3), "max": round(max(ratios), 3),
                                                "n": len(ratios)}
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
    from curve_report import write_report  # the report's writers (markdown, growth, SVG)

    p = argparse.ArgumentParser(prog="scale.py --curve", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", default="reduced", help=f"reduced ({','.join(REDUCED)}), all, or names: "
                   + ",".join(STEPS) + " (NAME@5.3.3 or NAME@4.9.8: that step in the other generation)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--compare", action="append", default=[], metavar="LABEL=CMD",
                   help="another NameServer run at every step, interleaved with ours (e.g. java=CMD)")
    p.add_argument("--records", type=Path, metavar="FILE",
                   help="every run appended here as it ends (JSON lines) and read back at the start: runs "
                        "already there are not run again (default: JSON.records.jsonl beside --json)")
    p.add_argument("--report-only", action="store_true", help="run nothing: the tables and plot from --records")
    p.add_argument("--markdown", type=Path, metavar="FILE", help="also the tables as markdown")
    p.add_argument("--svg", type=Path, metavar="FILE", help="also the curve as an SVG plot")
    p.add_argument("--disconnect-timeout", type=float, default=600, metavar="S",
                   help="give up waiting for the routes to go after a mass disconnect (recorded as ≥ S)")
    p.add_argument("--ready-timeout", type=float, default=120, metavar="S",
                   help="how long a server may take to answer its first request")
    p.add_argument("--quiet-timeout", type=float, default=30, metavar="S",
                   help=f"before each run, wait at most S for the machine to be idle (under {QUIET_CORES} cores "
                        "busy over a second); each record's quiet_before says how long and how busy")
    p.add_argument("--load-idle", action="store_true",
                   help="the load (the brokers, the idle clients) at SCHED_IDLE while a step runs, for either "
                        "server (production's brokers and clients run on other hosts): the records say "
                        "load_priority idle; off by default")
    p.add_argument("--probe-idle", action="store_true",
                   help="the probe at SCHED_IDLE too, not SCHED_FIFO (records: probe_priority idle); off by default")
    p.add_argument("--probe-split", action="store_true",
                   help="the probe reads the server's, its own and the softirq threads' schedstat around each lookup "
                        "(the longest wait's split, probe_max_server_runqueue_ms...; records: probe split): some 10 "
                        "preads a lookup more, and one per thread of the server's, on the load's core; off by "
                        "default, for traces, not for the goal's timing rounds")
    a = p.parse_args(argv)
    every = [n for n in STEPS if n != "tiny"]  # tiny: the tool's smoke run, no curve step
    names = REDUCED if a.steps == "reduced" else every if a.steps == "all" else a.steps.split(",")
    try:
        steps = [step_named(n) for n in names]
    except KeyError as exc:
        p.error(f"unknown step {exc}; known: {', '.join(STEPS)} (each also as NAME@{'/'.join(COMPATS)})")
    servers: dict[str, str | None] = {"ours": server_cmd}
    if server_cmd is None and not a.report_only and not Server.PYTHON.exists():  # said, never silent
        print(f"[curve] no {Server.PYTHON.parents[1].name}: ours runs in {sys.executable}, with the test extras "
              "(pyOpenSSL: about 13 MiB more RSS, not an operator's install); tools/bench/run.py makes it",
              file=sys.stderr, flush=True)
    for item in a.compare:
        label, _, command = item.partition("=")
        if "{port}" not in command:
            p.error("--compare LABEL=CMD needs a {port} placeholder in CMD")
        servers[label] = command
    scratch = Path(tempfile.mkdtemp(prefix="namesrv-curve-"))
    records_path = a.records or (json_out.with_suffix(".records.jsonl") if json_out else scratch / "records.jsonl")
    started = time.monotonic()

    def report(records: list[dict[str, Any]]) -> None:
        rows = summarize([r for r in records if r["step"] in {s.name for s in steps}], list(servers))
        doc = {"steps": [vars(s) for s in steps], "servers": {k: v or "ours" for k, v in servers.items()},
               "rounds": a.rounds, "seconds": round(time.monotonic() - started, 1), "rows": rows,
               "records": latest(records)}
        if json_out:
            json_out.write_text(json.dumps(doc, indent=1))
        write_report(doc, a.markdown, a.svg)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the running server is stopped on the way out
    if a.report_only:
        records = load_records(records_path)
    else:
        raise_fd_limit(max(s.clients + s.brokers for s in steps))
        if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
            os.sched_setaffinity(0, {1})
        print(f"[curve] runs written to {records_path}", file=sys.stderr, flush=True)
        try:
            records = measure(steps, servers, a.rounds, scratch, records_path, a.disconnect_timeout,
                              a.ready_timeout, report, a.quiet_timeout, a.load_idle, a.probe_idle,
                              a.probe_split)
        finally:
            tidy(scratch)
    report(records)
    print(table(summarize([r for r in records if r["step"] in {s.name for s in steps}], list(servers)),
                list(servers)))
    return 0
