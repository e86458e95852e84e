#!/usr/bin/env python3
"""Where the real server's memory goes at a curve step (issue 47: RSS at most a quarter of Java's).

A benchmark, not a test.  Starts ``python -m twisted_namesrv`` (from ``--tree``) as the curve does
(on core 0, the brokers on core 1), then the step's phases that hold memory: its brokers connect,
each sends its first registration (8 in flight: ``curve.send_all``), then its clients connect and
look the probe's topic up (``curve.open_clients``).  Prints the server's RSS (VmRSS, MiB) at rest,
with the brokers connected, registered, and with the clients (the curve's RSS column), its
anonymous memory and its heap blocks (``sys.getallocatedblocks``) at the end; a count of blocks
tells a change of a few hundred KB that one run's RSS does not.

``--census``: every object reachable from the collector's, by type (a str, int, tuple, list, dict
or set also by its holder's type), as it grew from rest to the end: what a broker and a
connection keep.  ``--trace N``: the server under tracemalloc (N frames a trace), and the lines
whose memory grew most.  A traced server runs several times slower: its brokers' heartbeat
timeout and the idle timeout are raised for it, so that the registrations stay.  With either,
the RSS read is not the server's alone (the census's and tracemalloc's own memory): read it
from a run without.

    .venv/bin/python tools/bench/memory_where.py [--step brokers-5000] [--census] [--trace 1] [--tree DIR]

RSS moves by a few hundred KB from run to run on one tree (the heap's layout): compare trees in
interleaved runs, and blocks within one.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shlex
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import curve  # noqa: E402  (tools/bench: the curve's tables, frames and server child)
from phase_calls import until_idle  # noqa: E402
from procfs import status_kib  # noqa: E402

TOOLS = Path(__file__).resolve().parent
#: the types told apart by their holder: alone they say nothing of what keeps them
HELD = ("str", "int", "float", "bytes", "tuple", "list", "dict", "set")

#: the server: ``python -c`` of this, then twisted_namesrv's own arguments; SIGUSR2 writes what it
#: holds to OUT (a JSON file; OUT.snap: tracemalloc's snapshot)
SERVER = """
import json, os, signal, sys, tracemalloc
FRAMES, CENSUS, OUT, TOOLS = {frames}, {census}, {out!r}, {tools!r}
sys.path.insert(0, TOOLS)
from procfs import anonymous_kib  # (imported before the server: in every reading alike)
if FRAMES:
    tracemalloc.start(FRAMES)
    import twisted_namesrv.state.routes as routes
    routes.DEFAULT_BROKER_CHANNEL_EXPIRED_TIME = 3_600_000  # a traced server is slow: its brokers stay
def _held(*_):
    held = {{"blocks": sys.getallocatedblocks()}}
    held["anonymous_kib"] = anonymous_kib()
    if CENSUS:
        from memory_where import census
        held["census"] = census()
    if FRAMES:
        tracemalloc.take_snapshot().dump(OUT + ".snap")
    with open(OUT + ".tmp", "w") as f:
        json.dump(held, f)
    os.rename(OUT + ".tmp", OUT)
signal.signal(signal.SIGUSR2, _held)
from twisted_namesrv.__main__ import main
main()
"""


def census() -> list[tuple[str, int, int]]:
    """Every object reachable from the collector's (untracked ones too: the strings and numbers a
    tracked one holds), as (kind, count, bytes) by ``sys.getsizeof``: its type's name, and for
    HELD types ``in`` its holder's kind, the first object met that refers to it, up to three
    holders (``list in dict in TopicQueueTable``; ``-``: none met). An instance's attributes kept
    in its own values (3.11's managed dicts) are not in its size."""
    import gc

    found = gc.get_objects()
    objects = {id(obj): obj for obj in found}
    holder_of: dict[int, int] = {}
    stack = list(found)
    own = {id(found), id(objects), id(holder_of), id(stack)}  # this count's own containers
    while stack:
        obj = stack.pop()
        if id(obj) in own:
            continue
        inners = gc.get_referents(obj)
        if type(obj) is dict:
            inners += obj.keys()  # (a dict of str keys does not name them to the collector)
        for inner in inners:
            key = id(inner)
            if key in own or inner is obj:
                continue
            holder_of.setdefault(key, id(obj))
            if key not in objects:
                objects[key] = inner
                stack.append(inner)
    kinds: dict[int, str] = {}

    def kind(key: int, depth: int = 0) -> str:
        if key in kinds:
            return kinds[key]
        name = type(objects[key]).__qualname__
        if name in HELD:
            up = holder_of.get(key)
            above = "-" if up is None else kind(up, depth + 1) if depth < 2 else type(objects[up]).__qualname__
            name += " in " + above
        if depth == 0:
            kinds[key] = name
        return name

    count: collections.Counter[str] = collections.Counter()
    size: collections.Counter[str] = collections.Counter()
    for key, obj in objects.items():
        if key not in own:
            name = kind(key)
            count[name] += 1
            size[name] += sys.getsizeof(obj)
    return [(name, count[name], size[name]) for name in size]


def grown(before: list[Any], after: list[Any], top: int) -> list[tuple[str, int, int]]:
    """The kinds of ``census`` whose bytes grew most from ``before`` to ``after``: (kind, count, bytes)."""
    was = {kind: (count, size) for kind, count, size in before}
    rows = [(kind, count - was.get(kind, (0, 0))[0], size - was.get(kind, (0, 0))[1]) for kind, count, size in after]
    return sorted(rows, key=lambda row: -row[2])[:top]


def held(pid: int, out: Path, timeout: float = 600) -> dict[str, Any]:
    """What the server holds now (SERVER's SIGUSR2 handler writes it to ``out``)."""
    out.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR2)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if out.exists():
            return json.loads(out.read_text())  # type: ignore[no-any-return]
        time.sleep(0.1)
    raise RuntimeError(f"the server {pid} did not say what it holds")


def rss_mib(pid: int) -> float:
    return round((status_kib(pid, ("VmRSS",)) or {"VmRSS": 0})["VmRSS"] / 1024, 1)


def measure(tree: Path, step: curve.Step, python: str, frames: int, with_census: bool, top: int) -> dict[str, Any]:
    tables = curve.broker_tables(step)
    first = [curve.register_frames(name, addr, topics, 1) for name, addr, topics in tables]
    scratch = Path(tempfile.mkdtemp(prefix="namesrv-memory-"))
    out = scratch / "held.json"
    props = scratch / "max.properties"
    idle = "serverChannelMaxIdleTimeSeconds=3600\n" if frames else ""
    props.write_text(f"maxConnections={step.brokers + step.clients + 1000}\n{idle}")
    code = SERVER.format(frames=frames, census=with_census, out=str(out), tools=str(TOOLS))
    command = (f"{shlex.quote(python)} -c {shlex.quote(code)}".replace("{", "{{").replace("}", "}}")
               + f" --port {{port}} --bind {curve.HOST} --data-dir {{data_dir}} --compat {{compat}} -c {props}")
    curve.REPO = tree  # the server's working directory: its code
    curve.raise_fd_limit(step.brokers + step.clients)
    server = curve.Server(command, scratch, "memory", step=step)
    conns: list[socket.socket] = []
    clients: list[socket.socket] = []
    try:
        port = server.wait_ready(120)
        pid = server.main_pid()
        result: dict[str, Any] = {"tree": str(tree), "step": step.name, "rest_mib": rss_mib(pid)}
        rest = held(pid, out) if frames or with_census else {}
        rest_snapshot = scratch / "rest.snap"
        if frames:
            Path(str(out) + ".snap").rename(rest_snapshot)
        with socket.create_connection((curve.HOST, port)) as probe:  # the probe's topic, as the curve registers it
            curve.register_probe(probe)
            conns = [socket.create_connection((curve.HOST, port)) for _ in tables]
            for conn in conns:
                conn.setblocking(False)
            until_idle(pid)
            result["connected_mib"] = rss_mib(pid)
            curve.send_all(conns, first, None)
            until_idle(pid)
            result["registered_mib"] = rss_mib(pid)
            clients = curve.open_clients(port, step.clients)
            until_idle(pid)
            result["with_clients_mib"] = rss_mib(pid)
            end = held(pid, out)
        result.update(blocks=end["blocks"], anonymous_mib=round(end["anonymous_kib"] / 1024, 1))
        if with_census:
            result["census_grown"] = grown(rest["census"], end["census"], top)
        if frames:
            result["lines_grown"] = lines_grown(Path(str(out) + ".snap"), top, rest_snapshot)
        return result
    finally:
        curve.ended(server, conns, clients)
        for made in (out, Path(str(out) + ".snap"), scratch / "rest.snap", props):
            made.unlink(missing_ok=True)
        curve.tidy(scratch)


def lines_grown(snapshot: Path, top: int, rest_snapshot: Path | None) -> list[tuple[str, int, int]]:
    """tracemalloc's lines holding the most at the end (less at rest when given): (file:line, blocks, bytes)."""
    import tracemalloc

    end = tracemalloc.Snapshot.load(str(snapshot))
    stats = (end.compare_to(tracemalloc.Snapshot.load(str(rest_snapshot)), "lineno") if rest_snapshot
             else end.statistics("lineno"))
    rows = []
    for stat in stats[:top]:
        frame = stat.traceback[0]
        count = getattr(stat, "count_diff", stat.count)
        rows.append((f"{frame.filename}:{frame.lineno}", count, getattr(stat, "size_diff", stat.size)))
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--step", default="brokers-5000", help="the curve step whose brokers and clients connect")
    p.add_argument("--census", action="store_true", help="the objects that grew, by type and holder")
    p.add_argument("--trace", type=int, default=0, metavar="N", help="tracemalloc with N frames a trace: the lines")
    p.add_argument("--top", type=int, default=40, help="rows of each table")
    curve.add_server_options(p)
    a = p.parse_args()
    curve.beside_the_server()
    result = measure(a.tree.resolve(), curve.step_named(a.step), a.python, a.trace, a.census, a.top)
    tables = {key: result.pop(key) for key in ("census_grown", "lines_grown") if key in result}
    print(json.dumps(result), flush=True)
    for key, rows in tables.items():
        print(f"\n{key}: kind or line, count, KiB")
        for name, count, size in rows:
            print(f"{size / 1024:10.1f} {count:8d}  {name}")


if __name__ == "__main__":
    main()
