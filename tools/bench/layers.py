#!/usr/bin/env python3
"""Where a first registration's instructions go, layer by layer: each function's inclusive count.

A benchmark, not a test.  In process (``turns.py``'s server on a Clock, its log lines written to
/dev/null as the real server writes them), a curve step's brokers register for the first time, the
first ``--warm`` of them uncounted; then one function at a time (``--layer``, as ``module:Class:name``
or ``module::name``) is wrapped so that each call of it runs through ``operator.call``, and valgrind's
callgrind counts only what runs inside that C function (``--collect-atstart=no
--toggle-collect=_operator_call``: nothing else of the server or the interpreter calls it).  The
count over the brokers counted is that layer's instructions a first registration, its callees
included, the same on a loaded machine.  The layer is wrapped before the server is built (a bound
method the composition root subscribes, as ``Topology.heard``, is the wrapper), and routed through
``operator.call`` only once the counted brokers begin.  A generator function (a handler's steps) is
run at once inside the call (none of the curve's small registrations takes a step; running them so,
a few calls, is in its count).  A name is wrapped where it is looked up: a function imported by name
into another module is wrapped there (``processor::plan_steps``, not
``state.registration::plan_steps``; ``service::log_route_event``).  The real server's own count, its
reactor, reads and sends included, is ``instructions.py``; this says which of its layers the
in-process part is made of.

``--lines`` counts instead, with no valgrind and in seconds, the lines of Python run a first
registration, by function (any code's: the server's, Twisted's, a dataclass's generated
``__init__``, named with its class): at about 0.5 k instructions a line, where the count goes.

    .venv/bin/python tools/bench/layers.py [--step brokers-5000] [--brokers 400] [--jobs 2] [--layer L ...]
    .venv/bin/python tools/bench/layers.py --lines [--top 40]

Needs valgrind (callgrind); each layer is a run of a minute or two (more on a busy machine),
``--jobs`` at a time.
"""

from __future__ import annotations

import argparse
import collections
import gc
import importlib
import inspect
import operator
import os
import re
import subprocess
import sys
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

#: a first registration's layers, outermost first (module:Class:name; module::name for a module's function)
LAYERS = (
    "twisted_namesrv.server:RemotingProtocol:dataReceived",
    "twisted_namesrv.dispatch:Dispatcher:answer",
    "twisted_namesrv.remoting.command:RemotingCommand:decode",
    "twisted_namesrv.processor::split_data_version",
    "twisted_namesrv.processor::registration_digest",
    "twisted_namesrv.processor::decode_register_body_steps",
    "twisted_namesrv.processor::plan_steps",
    "twisted_namesrv.state.routes:RouteInfoManager:apply_registration",
    "twisted_namesrv.state.routes:RouteInfoManager:_publish",
    "twisted_namesrv.state.routes:RouteInfoManager:_hear",
    "twisted_namesrv.service::log_route_event",
    "twisted_namesrv.state.topology:Topology:heard",
    "twisted_namesrv.processor::renewable_answer",
    "twisted_namesrv.dispatch:Dispatcher:_answer_frame",
    "twisted_namesrv.answer_cache:AnswerCache:keep_renewal",
)
COLLECTED = re.compile(r"Collected : (\d+)")
#: whether a wrapped layer's calls run inside operator.call yet (from the first broker counted on)
COUNTING = [False]


def wrap(layer: str) -> None:
    """Every call of ``layer`` from now on runs inside ``operator.call`` (a generator function's
    steps run at once in it, the result handed back as a generator that returns it; a class's
    static or class method as it binds)."""
    module, owner_name, name = layer.split(":")
    owner = getattr(importlib.import_module(module), owner_name) if owner_name else importlib.import_module(module)
    made = inspect.getattr_static(owner, name)
    if isinstance(made, staticmethod | classmethod):  # (the class's own: its bound method, wrapped as static)
        bound = getattr(owner, name)
        setattr(owner, name, staticmethod(lambda *args, **kwargs: operator.call(bound, *args, **kwargs)
                                          if COUNTING[0] else bound(*args, **kwargs)))
        return
    if inspect.isgeneratorfunction(made):
        from twisted_namesrv.steps import run_steps

        def done(value: object):  # type: ignore[no-untyped-def]
            return value
            yield  # (a generator)

        def wrapped(*args: object, **kwargs: object) -> object:
            if not COUNTING[0]:
                return made(*args, **kwargs)
            return done(operator.call(lambda: run_steps(made(*args, **kwargs))))
    else:
        def wrapped(*args: object, **kwargs: object) -> object:
            return operator.call(made, *args, **kwargs) if COUNTING[0] else made(*args, **kwargs)
    setattr(owner, name, wrapped)


def registered(step_name: str, brokers: int, warm: int, layer: str | None,
               lines: collections.Counter[str] | None = None) -> tuple[int, int]:
    """The run valgrind counts: ``warm`` brokers registered, ``layer`` wrapped, ``brokers`` more;
    with ``lines``, the lines run in those counted, by function, instead: the calls and lines in all."""
    sys.path.insert(0, str(HERE))
    import curve
    import turns
    turns.log_to_nothing("text")
    step = curve.step_named(step_name)
    tables = curve.broker_tables(step)[:warm + brokers]
    if layer is not None:
        wrap(layer)  # (before the server is built: what it subscribes is the wrapper)
    bench = turns.Timed(step.compat)
    protocols = [bench.connect() for _ in tables]
    frames = [curve.register_frames(name, addr, topics, 1) for name, addr, topics in tables]
    calls = 0

    def traced(frame: types.FrameType, event: str, arg: object) -> object:
        nonlocal calls
        if event == "line":
            code = frame.f_code
            name = code.co_name
            if code.co_filename == "<string>" and "self" in frame.f_locals:  # a dataclass's __init__: whose
                name = f"{type(frame.f_locals['self']).__qualname__}.{name}"
            lines[f"{code.co_filename.rpartition('site-packages/')[2].replace(str(REPO) + '/', '')}:"  # type: ignore[index]
                  f"{name}"] += 1
        elif event == "call":
            calls += 1
        return traced

    for index, (protocol, pieces) in enumerate(zip(protocols, frames, strict=True)):
        if index == warm:
            if lines is not None:
                gc.disable()  # (its callbacks are no registration's)
                sys.settrace(traced)
            COUNTING[0] = True
        for piece in pieces:
            protocol.dataReceived(piece)
            bench.settle()
    sys.settrace(None)
    if len(bench.service.state.routes.brokerLiveTable) != len(tables):
        raise SystemExit(f"{len(bench.service.state.routes.brokerLiveTable)} brokers registered of {len(tables)}")
    bench.remembered(tables)
    return calls, sum(lines.values()) if lines is not None else 0


def count(step: str, brokers: int, warm: int, layer: str) -> float:
    """``layer``'s instructions a first registration (a run of its own under callgrind)."""
    command = ["valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=_operator_call",
               "--callgrind-out-file=/dev/null", sys.executable, __file__, "--counted", layer,
               "--step", step, "--brokers", str(brokers), "--warm", str(warm)]
    run = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    found = COLLECTED.search(run.stderr)
    if run.returncode != 0 or found is None:
        raise SystemExit(f"{layer}: valgrind exited {run.returncode}\n{run.stderr[-2000:]}")
    return int(found.group(1)) / brokers


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--step", default="brokers-5000", help="the curve step whose brokers register (curve.py)")
    p.add_argument("--brokers", type=int, default=400, metavar="N", help="first registrations counted")
    p.add_argument("--warm", type=int, default=50, metavar="N", help="first registrations before, uncounted")
    p.add_argument("--layer", action="append", metavar="L", help=f"a layer to count (default: {len(LAYERS)} of them)")
    p.add_argument("--jobs", type=int, default=2, help="runs under valgrind at once")
    p.add_argument("--lines", action="store_true", help="count the lines of Python run instead, by function")
    p.add_argument("--top", type=int, default=40, metavar="N", help="with --lines: the N functions running most")
    p.add_argument("--counted", metavar="L", help=argparse.SUPPRESS)  # (the run valgrind counts)
    a = p.parse_args()
    if a.lines:
        sys.path.insert(0, str(REPO))
        by_function: collections.Counter[str] = collections.Counter()
        calls, lines = registered(a.step, a.brokers, a.warm, None, by_function)
        print(f"a first registration: {calls / a.brokers:.1f} Python calls, {lines / a.brokers:.1f} lines run "
              f"({a.step}, {a.brokers:,} counted after {a.warm:,}, in process); the lines by function:")
        for function, counted in by_function.most_common(a.top):
            print(f"{counted / a.brokers:7.1f}  {function}")
        return
    if a.counted:
        sys.path.insert(0, str(REPO))
        registered(a.step, a.brokers, a.warm, a.counted)
        return
    layers = a.layer or list(LAYERS)
    with ThreadPoolExecutor(a.jobs) as pool:
        counts = list(pool.map(lambda layer: count(a.step, a.brokers, a.warm, layer), layers))
    print(f"a first registration's instructions by layer, callees included ({a.step}, {a.brokers:,} counted "
          f"after {a.warm:,}, in process):")
    for layer, counted in zip(layers, counts, strict=True):
        print(f"{counted / 1e3:9.1f} k  {layer}", flush=True)


if __name__ == "__main__":
    main()
