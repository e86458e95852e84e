#!/usr/bin/env python3
"""Who held the server's core while the probe waited: the scale curve's phases read from a
scheduler trace.

A benchmark's reader, not a test.  The curve (``scale.py --curve``) says how long the probe's longest
lookup waited and, from the server main thread's schedstat, how much of it that thread was runnable
but not running; this says what ran on the server's core instead.  Record the curve's whole command
under ``perf sched record`` on the monotonic clock (the curve's phase windows and the probe's
longest wait, ``probe_max_at``, are on it), then read the trace with the curve's records:

    taskset -c 1 perf sched record -k CLOCK_MONOTONIC -o sched.data -- \\
        .venv/bin/python tools/bench/scale.py --curve --steps brokers-5000 --rounds 3 --records R.jsonl ...
    .venv/bin/python tools/bench/core_holders.py sched.data --records R.jsonl [--core 0]

For every run and phase it prints how the core's time went, over the phase and over the probe's
longest wait: the server (its main thread, and its other threads apart), ``host`` (the virtual CPU
not running at all, from the gap between a task's wall time and its runtime: the host ran
something else), the core idle, kernel threads (softirqs deferred to ``ksoftirqd``, workqueues,
memory compaction...), the curve's own processes (its load and probe: they belong on the other
core) and every other process by name; and, for our server, how long its main thread was
runnable on the core in that wait and how long it slept uninterruptibly (state D: a page fault on a
page the kernel's compaction was moving held it 30 ms once); and every wait of its main thread for
the core over the phase, by who had the core as it began (``main_waits_by_holder``: a wake-up onto
the idle core against one behind another task, which lasts until that task's slice ends).  Java
serves from many threads, so for Java the core's split is what to compare.  Linux's ``perf`` only;
pin ``perf`` itself to the load's core (``taskset -c 1 perf sched record ...``), or its writer takes
the servers' core in bursts.
"""

from __future__ import annotations

import argparse
import bisect
import json
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

#: names of the kernel's own threads (no process of anyone's): what runs for the kernel on a core
KERNEL_THREAD = re.compile(r"^(ksoftirqd|kworker|rcu_|migration|kcompactd|kdamond|kswapd|khugepaged|cpuhp|"
                           r"watchdog|kthreadd|jbd2|idle_inject|irq/|oom_reaper|writeback|kauditd|khungtaskd)")

SWITCH = re.compile(r"prev_comm=(?P<prev_comm>.*?) prev_pid=(?P<prev_pid>\d+) prev_prio=\d+ "
                    r"prev_state=(?P<prev_state>\S+) ==> next_comm=(?P<next_comm>.*?) next_pid=(?P<next_pid>\d+)")
WAKEUP = re.compile(r"comm=(?P<comm>.*?) pid=(?P<pid>\d+) prio=\d+ target_cpu=(?P<cpu>\d+)")
#: a thread made runnable (``perf sched record`` takes ``sched_waking`` where the kernel has it)
WAKING = frozenset({"sched:sched_waking", "sched:sched_wakeup", "sched:sched_wakeup_new"})
RUNTIME = re.compile(r"pid=(?P<pid>\d+) runtime=(?P<ns>\d+)")
#: ``perf script -F pid,tid,cpu,time,event,trace``: "PID/TID [CPU] TIME: EVENT: TRACE"
LINE = re.compile(r"^\s*(?P<pid>-?\d+)/(?P<tid>-?\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<time>[\d.]+):\s+"
                  r"(?P<event>[\w:]+):\s*(?P<trace>.*)$")


@dataclass(slots=True)
class Span:
    """One stretch of a core's time given to one task (``tid`` 0: idle), and the part of it the
    virtual CPU did not run at all (``stolen`` s, ending at ``stolen_until``: see ``read_trace``)."""

    start: float
    end: float
    tid: int
    comm: str
    pid: int = 0  # its process then (thread ids are reused in a long trace)
    stolen: float = 0.0
    stolen_until: float = 0.0


@dataclass
class Trace:
    """A core's timeline from the switches on it, each thread's process, and when each thread
    was runnable on that core but not running (woken or preempted until switched in)."""

    spans: list[Span] = field(default_factory=list)
    process_of: dict[int, int] = field(default_factory=dict)
    runnable: dict[int, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    #: when each thread slept uninterruptibly (switched out in state D until woken: a page fault
    #: waiting for a page the kernel is moving, a disk read, a lock in the kernel)
    blocked: dict[int, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))


def read_trace(lines: Iterable[str], core: int) -> Trace:
    """Parse ``perf script -F pid,tid,cpu,time,event,trace`` of ``sched:sched_switch``,
    ``sched:sched_waking`` (or ``sched_wakeup``) and ``sched:sched_stat_runtime`` events; others
    are ignored.

    The host's share: a task's runtime (``sched_stat_runtime``, what ``perf sched record`` also
    records) leaves out the time its virtual CPU was not running (the kernel's steal clock), so a
    span's wall time less its runtime is that; it is placed in the span's longest silence between
    events on the core (a busy core has a tick event every few ms: a silence longer is the host's)."""
    trace = Trace()
    on_core: tuple[float, int, str] | None = None  # since, tid, comm
    ran, last, silence = 0, 0.0, (0.0, 0.0)  # the span's runtime (ns), its last event, its longest silence
    queued: dict[int, float] = {}
    asleep: dict[int, float] = {}  # threads in state D since
    for line in lines:
        m = LINE.match(line)
        if not m:
            continue
        pid, tid, cpu, t, event = int(m["pid"]), int(m["tid"]), int(m["cpu"]), float(m["time"]), m["event"]
        if tid > 0 and pid > 0:
            trace.process_of[tid] = pid
        if event in WAKING:
            w = WAKEUP.search(m["trace"])
            if w and int(w["cpu"]) == core:
                queued.setdefault(int(w["pid"]), t)
                if int(w["pid"]) in asleep:
                    trace.blocked[int(w["pid"])].append((asleep.pop(int(w["pid"])), t))
        if cpu != core:
            continue
        if t - last > silence[1] - silence[0]:
            silence = (last, t)
        last = t
        if event == "sched:sched_stat_runtime":
            r = RUNTIME.search(m["trace"])
            if r and on_core is not None and int(r["pid"]) == on_core[1]:
                ran += int(r["ns"])
            continue
        if event != "sched:sched_switch":
            continue
        s = SWITCH.search(m["trace"])
        if not s:
            continue
        prev, nxt = int(s["prev_pid"]), int(s["next_pid"])
        if on_core is not None:  # (before the trace's first switch on the core: unknown since when)
            span = Span(on_core[0], t, on_core[1], on_core[2], pid if tid == on_core[1] else on_core[1])
            if span.tid and ran:  # the idle task has no runtime; a span without one says nothing
                span.stolen = min(max(0.0, t - on_core[0] - ran / 1e9), silence[1] - silence[0])
                span.stolen_until = silence[1]
            trace.spans.append(span)
        if s["prev_state"].startswith("R"):
            queued[prev] = t  # preempted: runnable from now
        elif s["prev_state"].startswith("D"):
            asleep[prev] = t
        if nxt in queued:
            trace.runnable[nxt].append((queued.pop(nxt), t))
        on_core, ran, silence = (t, nxt, s["next_comm"]), 0, (t, t)
    return trace


def overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def kind_of(span: Span, trace: Trace, server: set[int], curve: set[int]) -> str:
    """Who a span of the core was: ``server`` (its main thread), ``server:threads``, ``idle``,
    ``kernel:NAME``, ``curve`` or ``other:NAME``
    (``held`` adds ``host``: the virtual CPU not running)."""
    if span.tid == 0:
        return "idle"
    pid = span.pid or trace.process_of.get(span.tid, span.tid)
    if pid in server:
        return "server" if span.tid == pid else "server:threads"  # its main thread (our reactor's), or another
    if pid in curve:
        return "curve"
    if KERNEL_THREAD.match(span.comm):
        return "kernel:" + re.sub(r"[/:].*$", "", span.comm)
    return "other:" + span.comm


def held(trace: Trace, t0: float, t1: float, server: set[int], curve: set[int], named: int = 4) -> dict[str, float]:
    """Milliseconds of the core in [t0, t1] by who had it (see ``kind_of``), largest first: the
    ``named`` largest other processes by name, the rest of them as ``other:(rest)``."""
    out: dict[str, float] = defaultdict(float)
    for span in trace.spans:
        if span.end > t0 and span.start < t1:
            stolen = overlap(span.stolen_until - span.stolen, span.stolen_until, t0, t1)
            out[kind_of(span, trace, server, curve)] += (overlap(span.start, span.end, t0, t1) - stolen) * 1e3
            out["host"] += stolen * 1e3
    others = sorted((v, k) for k, v in out.items() if k.startswith("other:"))
    for _, k in others[:-named] if named else others:
        out["other:(rest)"] = out.get("other:(rest)", 0.0) + out.pop(k)
    return dict(sorted(((k, round(v, 2)) for k, v in out.items() if v >= 0.005), key=lambda kv: -kv[1]))


def runnable_ms(trace: Trace, tid: int, t0: float, t1: float) -> float:
    """How long ``tid`` was runnable on the core but not running within [t0, t1]."""
    return round(sum(overlap(a, b, t0, t1) for a, b in trace.runnable.get(tid, [])) * 1e3, 2)


def blocked_ms(trace: Trace, tid: int, t0: float, t1: float) -> float:
    """How long ``tid`` slept uninterruptibly (state D) within [t0, t1]."""
    return round(sum(overlap(a, b, t0, t1) for a, b in trace.blocked.get(tid, [])) * 1e3, 2)


def waits_by_holder(trace: Trace, tid: int, t0: float, t1: float, server: set[int], curve: set[int]) -> dict[str, dict]:
    """``tid``'s waits for the core that began in [t0, t1] (woken, or preempted, until it ran), by who had
    the core as each began (``kind_of``; ``idle``: a wake-up the core was free for): how many, how many
    of 1 ms or more, and the longest (ms). A wait behind another task lasts until the scheduler takes
    the core from it (its slice's end is seen at a tick: 4 ms at 250 Hz); one onto an idle core, the
    wake-up's own latency."""
    starts = [span.start for span in trace.spans]
    out: dict[str, dict] = {}
    for a, b in trace.runnable.get(tid, []):
        if not t0 <= a <= t1:
            continue
        i = bisect.bisect_right(starts, a) - 1
        kind = kind_of(trace.spans[i], trace, server, curve) if i >= 0 and trace.spans[i].end > a else "unknown"
        row = out.setdefault(kind, {"n": 0, "over_1_ms": 0, "max_ms": 0.0})
        row["n"] += 1
        row["over_1_ms"] += b - a >= 1e-3
        row["max_ms"] = max(row["max_ms"], round((b - a) * 1e3, 3))
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["max_ms"]))


def run_report(trace: Trace, record: dict, curve: set[int]) -> Iterator[dict]:
    """One row per phase of a curve record (it needs ``server_pid``, ``phase_windows`` and
    ``probe_max_at``)."""
    pid = record.get("server_pid")
    if not pid:
        return
    server = {pid}
    figures = record.get("figures", {})
    for phase, (t0, t1) in record.get("phase_windows", {}).items():
        row = {"round": record["round"], "step": record["step"], "server": record["server"], "phase": phase,
               "phase_s": round(t1 - t0, 3), "core_in_phase_ms": held(trace, t0, t1, server, curve),
               "main_runnable_in_phase_ms": runnable_ms(trace, pid, t0, t1),
               "main_waits_by_holder": waits_by_holder(trace, pid, t0, t1, server, curve)}
        at, wait = record.get("probe_max_at", {}).get(phase), figures.get(f"{phase}_probe_max_ms")
        if at is not None and wait is not None:
            w0, w1 = at, at + wait / 1e3
            row |= {"probe_max_ms": wait, "core_in_longest_wait_ms": held(trace, w0, w1, server, curve),
                    "main_runnable_in_longest_wait_ms": runnable_ms(trace, pid, w0, w1),
                    "main_blocked_in_longest_wait_ms": blocked_ms(trace, pid, w0, w1),
                    "main_longest_runnable_ms": round(max((overlap(a, b, w0, w1) for a, b in
                                                           trace.runnable.get(pid, [])), default=0.0) * 1e3, 2)}
        yield row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data", type=Path, help="perf sched record's file (recorded with -k CLOCK_MONOTONIC)")
    p.add_argument("--records", type=Path, required=True, help="the curve's records (JSON lines)")
    p.add_argument("--core", type=int, default=0, help="the servers' core (the curve's: 0)")
    a = p.parse_args()
    records = [json.loads(line) for line in a.records.read_text().splitlines() if line.strip()]
    # read as perf writes it: a few minutes' trace is gigabytes of text
    with subprocess.Popen(["perf", "script", "-i", str(a.data), "-F", "pid,tid,cpu,time,event,trace"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as script:
        assert script.stdout is not None
        trace = read_trace(script.stdout, a.core)
    if script.returncode:
        raise SystemExit(f"perf script exited {script.returncode}")
    curve = {r[key] for r in records for key in ("curve_pid", "probe_pid") if r.get(key)}
    for record in records:
        for row in run_report(trace, record, curve):
            print(json.dumps(row))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
