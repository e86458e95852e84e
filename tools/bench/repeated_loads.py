#!/usr/bin/env python3
"""The curve's repeated registration sent by two loads in turn on one server: whether a phase's time
moved with the server or with the load that measures it.

A benchmark, not a test.  Starts our server (``python -m twisted_namesrv`` of ``--tree``, core 0, as the
curve runs it; ``--server-cmd`` another), registers a curve step's brokers once (this checkout's
``curve.Load``, 8 in flight) with the probe's topic and, unless ``--no-probe``, this checkout's probe
looking it up throughout (core 1, as the curve's), then sends every broker's table again ``--rounds``
times by each load in turn: this checkout's ``curve.Load`` and the one of ``--bench DIR`` (another
checkout's tools/bench, a ``git worktree``: its ``Load`` when it has one, else its ``send_all``, the
load before ``curve.Load``).  Per sending, one JSON line: its time, the server's CPU over it and until
it is idle again (the curve's ``cpu_until_idle``), its main thread's wake-ups over it (the curve's
``server_wakeups``) and the load's own CPU.  One server for both loads, the sendings a few seconds
apart: what the machine's other work does to one does the same to the other; the counts (wake-ups)
say how the load batched the server's reads, the times say little on a loaded machine.

    .venv/bin/python tools/bench/repeated_loads.py --bench OLD/tools/bench [--tree T] [--rounds 3] \\
        [--step brokers-5000] [--no-probe] [--server-cmd CMD]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing
import os
import socket
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import curve  # noqa: E402  (tools/bench: this checkout's load, probe and server child)
from procfs import thread_switches  # noqa: E402  (beside this file: /proc read one way)


def other_curve(bench: Path) -> ModuleType:
    """``bench``/curve.py loaded under a name of its own (its helpers from this checkout's procfs)."""
    spec = importlib.util.spec_from_file_location("other_curve", bench / "curve.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"no curve.py in {bench}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["other_curve"] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


def sender(module: ModuleType, conns: list[socket.socket]) -> Any:
    """How ``module``'s curve sends a step's tables, 8 in flight: a ``Load`` kept for the step where it
    has one (this checkout's way), else its ``send_all`` (the load before it)."""
    if hasattr(module, "Load"):
        load = module.Load(conns)
        return lambda frames: load.send(frames, None)
    return lambda frames: module.send_all(conns, frames, None)


def idle_cpu(server: curve.Server) -> float:
    """The server's CPU seconds once it is idle again (``curve.cpu_until_idle``'s rule)."""
    last, quiet = server.cpu_s(), 0
    while quiet < 3:
        time.sleep(0.2)
        now = server.cpu_s()
        quiet = quiet + 1 if now - last < 0.05 else 0
        last = now
    return last


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bench", type=Path, required=True, help="another checkout's tools/bench, whose load is compared")
    p.add_argument("--step", default="brokers-5000", help="the curve step whose brokers register (curve.py)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no-probe", action="store_true", help="no probe looking a route up meanwhile")
    p.add_argument("--server-cmd", metavar="CMD", help="another NameServer, as the curve's --compare runs it")
    curve.add_server_options(p, "the checkout whose server runs (this one)")
    a = p.parse_args()
    other = other_curve(a.bench.resolve())
    curve.beside_the_server()
    step = curve.step_named(a.step)
    scratch = Path(tempfile.mkdtemp(prefix="namesrv-repeated-loads-"))
    curve.REPO = a.tree.resolve()  # the server's working directory: its code
    command = a.server_cmd or (f"{a.python} -m twisted_namesrv --port {{port}} --bind {curve.HOST} "
                               "--data-dir {data_dir} --compat {compat}")
    server = curve.Server(command, scratch, "repeated-loads", step=step)
    conns: list[socket.socket] = []
    stop, (receive, send) = multiprocessing.Event(), multiprocessing.Pipe(duplex=False)
    probe = None
    try:
        port = server.wait_ready()
        pid = server.main_pid()
        tables = curve.broker_tables(step)
        frames = [curve.register_frames(name, addr, topics, 1) for name, addr, topics in tables]
        with socket.create_connection((curve.HOST, port)) as probe_broker:
            curve.register_probe(probe_broker)
            if not a.no_probe:
                probe = multiprocessing.Process(target=curve.probe_loop, args=(port, stop, send, pid), daemon=True)
                probe.start()
                time.sleep(1)
            conns = [socket.create_connection((curve.HOST, port)) for _ in tables]
            for conn in conns:
                conn.setblocking(False)
            loads = {"this": sender(curve, conns), str(a.bench): sender(other, conns)}
            loads["this"](frames)  # the first registration
            idle_cpu(server)
            for round_ in range(1, a.rounds + 1):
                for name, send_all in loads.items():
                    time.sleep(0.3)
                    cpu0, switches0, load0 = server.cpu_s(), thread_switches(pid), time.process_time()
                    began = time.monotonic()
                    send_all(frames)
                    took = time.monotonic() - began
                    load_cpu, switches = time.process_time() - load0, thread_switches(pid)
                    print(json.dumps({"round": round_, "load": name, "s": round(took, 3),
                                      "server_cpu_s": round(idle_cpu(server) - cpu0, 3),
                                      "server_wakeups": switches[0] - switches0[0], "load_cpu_s": round(load_cpu, 3),
                                      "loadavg": round(os.getloadavg()[0], 1)}), flush=True)
            stop.set()
            if probe is not None:
                if receive.poll(30):
                    receive.recv()  # (its samples: the probe's only load here)
                probe.join(10)
    finally:
        curve.ended(server, conns)
        curve.tidy(scratch)


if __name__ == "__main__":
    main()
