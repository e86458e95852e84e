#!/usr/bin/env python3
"""The longest reactor turn while brokers register, in process: what a lookup can wait for.

A benchmark, not a test.  No sockets and no reactor: the server is built on a ``task.Clock``, its
broker connections are fed their REGISTER_BROKER frames 256 KiB a read (as a socket hands them
over), and every read and every reactor turn after it (the Cooperator's, which runs the steps) is
timed by the thread's CPU, so a loaded machine moves the figures far less than the probe of
``run.py --only stall`` or ``scale.py --curve``, whose waits add the scheduler's.  Each phase: the
registrations the first time, the same tables again with a new dataVersion, the same frames once
more (a heartbeat storm's: each renews its broker), then every broker connection lost.  The
longest turn is the pause; the tables are ``curve.py``'s (``--step``), or one broker with
``--topics`` in one body (the stall scenario's registration, 80k by default).  ``--log text`` (or
``json``) makes and writes the server's log lines as ``python -m twisted_namesrv`` does, to
/dev/null: every registration's route event is a line, part of its CPU in the real server.

    .venv/bin/python tools/bench/turns.py [--step topics-1m | --topics 80000] [--compat 4.9.8] [--gc-thresholds A,B,C] \
        [--log text] [--brokers N] [--first-only]
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from twisted.internet import task
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport
from twisted.logger import LogLevel, globalLogBeginner

sys.path.insert(0, str(Path(__file__).resolve().parent))
import curve  # noqa: E402  (tools/bench: the curve's tables and frames)

from twisted_namesrv import logs  # noqa: E402
from twisted_namesrv.schema import SERVER_SCHEMA  # noqa: E402
from twisted_namesrv.service import NamesrvService, tune_gc  # noqa: E402
from twisted_namesrv.state.config import NamesrvConfig  # noqa: E402

READ = 256 * 1024
#: where every broker connection comes from: this machine, as the curve's brokers do.  A remote host
#: brings at most state/topology.GROUPS_PER_HOST (64) groups into the remembered topology: from
#: StringTransport's own peer (192.168.1.1) every group past the 64th was refused there, and its
#: registration counted as cheaper than any real one (``remembered`` fails loudly on it now)
PEER_HOST = "127.0.0.1"


class Timed:
    """A server on a Clock, every read and every due call timed by the thread's CPU (ms)."""

    def __init__(self, compat: str, gc_thresholds: tuple[int, ...] | None = None) -> None:
        self.clock = task.Clock()
        data = Path(tempfile.mkdtemp(prefix="turns-"))
        config = NamesrvConfig({"compatVersion": compat, "listenPort": 0, "bindAddress": "127.0.0.1",
                                "kvConfigPath": str(data / "kvConfig.json"),
                                "configStorePath": str(data / "namesrv.properties")}, schema=SERVER_SCHEMA)
        self.service = NamesrvService.from_config(config, reactor=self.clock)
        # no idle timer per connection: task.Clock sorts all its calls again at every callLater, so
        # 5,000 brokers' timers made every turn a sort of 5,000 (the broker steps read five times
        # their CPU); the reactor keeps them in a heap, where a turn does not pay for them
        self.service.factory.idle_timeout = None
        tune_gc()
        if gc_thresholds:
            gc.set_threshold(*gc_thresholds)
        self.connected = 0
        self.turns: list[float] = []
        self.collections: list[tuple[int, float]] = []  # (generation, ms)
        gc.callbacks.append(self._collected)
        self._collecting = 0.0

    def _collected(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._collecting = time.thread_time()
        else:
            self.collections.append((info["generation"], (time.thread_time() - self._collecting) * 1e3))

    def timed(self, work: Callable[..., object], *args: object) -> None:
        began = time.thread_time()
        work(*args)
        self.turns.append((time.thread_time() - began) * 1e3)

    def settle(self) -> None:
        """Every call due now, each a turn of its own (the Cooperator's reschedule at 0 s)."""
        while self.clock.calls and self.clock.calls[0].getTime() <= self.clock.seconds():
            call = self.clock.calls.pop(0)
            call.called = 1
            self.timed(functools.partial(call.func, *call.args, **call.kw))

    def connect(self):
        """A broker's connection from this machine (``PEER_HOST``), each from a port of its own."""
        self.connected += 1
        peer = IPv4Address("TCP", PEER_HOST, 10000 + self.connected % 50000)
        protocol = self.service.factory.buildProtocol(peer)
        protocol.makeConnection(StringTransport(peerAddress=peer))
        return protocol

    def remembered(self, tables: list[tuple[str, str, list[str]]]) -> None:
        """Fails loudly unless every broker group registered is in the remembered topology: a group
        refused there (a limit, a peer taken as remote) costs less than a real first registration,
        and a count of such registrations measures what no server does."""
        groups = {name for name, _, _ in tables}
        held = len(self.service.state.topology.groups)
        if held < len(groups):
            raise SystemExit(f"{held:,} broker groups remembered of {len(groups):,} registered: the counts would "
                             f"measure refused groups (refused: {self.service.state.topology.refused:,})")

    def feed(self, protocol, data: bytes) -> None:
        for start in range(0, len(data), READ):
            self.timed(protocol.dataReceived, data[start:start + READ])
            self.settle()


def log_to_nothing(log_format: str) -> None:
    """The server's log lines from info up, made as the real server makes them and written (a
    write and a flush a line, as Twisted's FileLogObserver does) to /dev/null."""
    out = open(os.devnull, "w")  # open while the process logs
    filtered = logs.LevelFiltered(logs.observer(log_format, out), LogLevel.info)  # as logs.configured_observer
    globalLogBeginner.beginLoggingTo([filtered],
                                     discardBuffer=True, redirectStandardIO=False)


def phase(bench: Timed, label: str, work: Callable[[], None]) -> None:
    bench.turns.clear()
    bench.collections.clear()
    began = time.thread_time()
    work()
    bench.settle()
    total = (time.thread_time() - began) * 1e3
    top = sorted(bench.turns)[-3:][::-1]
    passes = ", ".join(f"generation {generation}: {max(ms for g, ms in bench.collections if g == generation):.1f} ms "
                       f"({sum(g == generation for g, _ in bench.collections)} passes)"
                       for generation in sorted({g for g, _ in bench.collections}))
    print(f"{label}: {total:,.0f} ms of CPU in {len(bench.turns):,} reads and turns; longest "
          + ", ".join(f"{t:.1f}" for t in top) + " ms; the collector's longest pass per generation: "
          + (passes or "none"), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--step", help="a curve step's brokers and tables (curve.py), e.g. topics-1m")
    p.add_argument("--topics", type=int, default=80_000, help="without --step: one broker, this many topics, one body")
    p.add_argument("--compat", help="4.9.8 or 5.3.3 (default: the step's, else 4.9.8)")
    p.add_argument("--gc-thresholds", metavar="A,B,C", help="the collector's thresholds instead of service.tune_gc's "
                   "(e.g. 10000,10,10: CPython's middle and full ones)")
    p.add_argument("--log", choices=logs.FORMATS, help="write the server's log lines (to /dev/null) as the real "
                   "server does: a line per registration")
    p.add_argument("--brokers", type=int, metavar="N", help="with --step: only its first N brokers")
    p.add_argument("--first-only", action="store_true", help="only the first registration (e.g. to count its "
                   "instructions: see docs/benchmarks.md)")
    p.add_argument("--frames", type=int, metavar="M", help="with --step: make the frames of its first M brokers "
                   "(at least --brokers), register --brokers of them: two counts made with one M differ by the "
                   "server's work alone, not by this tool's making of frames (json.dumps of each body)")
    p.add_argument("--renewals", type=int, default=1, metavar="R", help="send the tables as they were R times (the "
                   "third phase, heartbeats renewed): two counts' difference is a renewal's instructions")
    a = p.parse_args()
    if a.log:
        log_to_nothing(a.log)
    if a.step:
        step = curve.step_named(a.step)
        made_for = curve.broker_tables(step)[:max(a.frames or 0, a.brokers or 0) or None]
        tables = made_for[:a.brokers]
        compat = a.compat or step.compat
        split = curve.SPLIT_TOPICS
    else:
        tables = made_for = [("stall-big", "127.0.0.1:50911", [f"big-topic-{i:07d}" for i in range(a.topics)])]
        compat = a.compat or "4.9.8"
        split = max(1, a.topics)
    curve.SPLIT_TOPICS = split
    bench = Timed(compat, tuple(int(x) for x in a.gc_thresholds.split(",")) if a.gc_thresholds else None)
    brokers = [bench.connect() for _ in tables]
    entries = sum(len(topics) for _, _, topics in tables)
    print(f"{len(tables):,} broker(s), {entries:,} topic-queue entries in pieces of at most {split:,} topics, "
          f"{compat}" + (f"; frames made for {len(made_for):,}" if len(made_for) != len(tables) else ""), flush=True)
    phases = (("first registration", 1), ("the same tables, new dataVersion", 2),
              *[("the same again as it was (heartbeats: renewed)", 2)] * a.renewals)
    made: dict[int, list[list[bytes]]] = {}  # the frames of each dataVersion, made once: not in a count of renewals
    for label, counter in phases[:1] if a.first_only else phases:
        if counter not in made:  # (all of --frames' brokers', the same work whatever --brokers)
            made[counter] = [curve.register_frames(name, addr, topics, counter)
                             for name, addr, topics in made_for][:len(tables)]
        frames = made[counter]

        def register(frames: list[list[bytes]] = frames) -> None:
            for protocol, pieces in zip(brokers, frames, strict=True):
                for piece in pieces:
                    bench.feed(protocol, piece)
        phase(bench, label, register)
        bench.remembered(tables)

    def lose() -> None:
        for protocol in brokers:
            protocol.connectionLost()
    if not a.first_only:
        phase(bench, "every broker connection lost", lose)


if __name__ == "__main__":
    main()
