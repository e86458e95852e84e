#!/usr/bin/env python3
"""Benchmark tool (not a test): where a multi-core Spark report run leaves a core idle, named.

    python tools/bench/spark_timeline.py CAPTURE [--master 'local[2]'] [--runs 3] [--warm FILE]

In this process (pinned to the master's cores), a session warmed up on ``--warm`` (default: the
capture itself) runs the whole job ``--runs`` times with Spark's event log on. For each run it
lays out, from the run's start to its end, how many tasks ran at each moment (task launch and
finish times from the event log) beside the driver's progress lines, and splits the core-seconds
no task used into named causes:

- ``driver before the first job``, ``driver between jobs`` (each gap named by the progress line
  the driver printed in it), ``driver after the last job``: every core waits for the driver;
- ``scheduling`` the time from a job's submission to its first task's launch (Spark's planning);
- ``stage STAGE: straggler`` a core with no task while another runs the stage's last tasks,
  ``stage boundary`` a core waiting for a stage's tasks while the next stage cannot start yet.

Every 20 ms a thread reads the CPU of the process tree (driver, JVM, Python workers) from /proc,
so each interval also says what each kind of process used in it (and the JVM's busiest threads but
its task threads, which come and go: py4j's serving the driver's calls, the compiler, the collector):
whether an "idle" core was idle or busy with the JVM's or the driver's own work (``sampler``: this
thread's own reading of /proc, counted in the driver's). ``driver_gc_s``: the CPU of the driver's
cycle collections in the run. On a shared machine the wall-clock spans stretch
with the load; the split between causes, and the CPU of each, are what to read.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from functools import partial
from pathlib import Path

from procfs import TICKS as TICK  # beside this file: /proc read one way
from procfs import descendants, pid_stat, thread_ticks

from spark_analysis.spark.job import analyse
from spark_analysis.spark.session import build_session, local_cores


class Sampler(threading.Thread):
    """CPU ticks of each process of this process's tree, every ``every`` seconds, by kind."""

    def __init__(self, every: float = 0.02) -> None:
        super().__init__(daemon=True, name="cpu-sampler")
        self.every, self.samples, self.done = every, [], threading.Event()

    def run(self) -> None:
        root = os.getpid()
        while not self.done.wait(self.every):
            ticks: Counter = Counter()
            for pid in [root, *descendants(root)]:
                stat = pid_stat(pid)
                if stat is None:
                    continue  # gone meanwhile
                kind = "jvm" if stat.comm == "java" else "driver" if pid == root else "workers"
                ticks[kind] += stat.own_ticks
                if kind == "jvm":  # by thread name: the JVM's task threads, compiler, collector, py4j
                    ticks.update({f"jvm:{name}": spent for name, spent in thread_ticks(pid).items()})
            ticks["sampler"] = int(time.thread_time() * TICK)
            self.samples.append((time.time(), ticks))

    def between(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds of each kind from ``start`` to ``end`` (epoch seconds), by the nearest samples."""
        before = max((s for s in self.samples if s[0] <= start), default=None, key=lambda s: s[0])
        after = min((s for s in self.samples if s[0] >= end), default=None, key=lambda s: s[0])
        if before is None or after is None:
            return {}
        used = {
            kind: round((after[1][kind] - before[1][kind]) / TICK, 2)
            for kind in ("driver", "jvm", "workers", "sampler")
        }
        threads = Counter(
            {
                kind: after[1][kind] - before[1][kind]
                for kind in after[1]
                if kind.startswith("jvm:") and not kind.startswith("jvm:Executor task")
            }
        )
        return used | {kind: round(ticks / TICK, 2) for kind, ticks in threads.most_common(4) if ticks}


def new_events(directory: Path, offset: list[int]) -> list[dict]:
    path = next(directory.iterdir())
    with path.open("rb") as f:
        f.seek(offset[0])
        data = f.read()
    whole = data[: data.rfind(b"\n") + 1]
    offset[0] += len(whole)
    return [json.loads(line) for line in whole.splitlines() if line.strip()]


def timeline(
    events: list[dict], marks: list[tuple[float, str]], started: float, ended: float, cores: int, sampler: Sampler
) -> dict:
    """The run's idle core-seconds, split by cause (see the module's docstring)."""
    jobs: dict[int, dict] = {}
    stage_job: dict[int, int] = {}
    tasks: list[tuple[float, float, int]] = []  # launch, finish (epoch s), stage
    for event in events:
        kind = event.get("Event")
        if kind == "SparkListenerJobStart":
            jobs[event["Job ID"]] = {"submitted": event["Submission Time"] / 1000}
            stage_job.update(dict.fromkeys(event.get("Stage IDs", []), event["Job ID"]))
        elif kind == "SparkListenerJobEnd":
            jobs[event["Job ID"]]["completed"] = event["Completion Time"] / 1000
        elif kind == "SparkListenerTaskEnd":
            info = event["Task Info"]
            tasks.append((info["Launch Time"] / 1000, info["Finish Time"] / 1000, event["Stage ID"]))
    points = sorted({started, ended, *(t for task in tasks for t in task[:2]), *(t for t, _ in marks)})
    idle: Counter = Counter()
    cpu: dict[str, Counter] = {}
    first_launch = {job: min((t[0] for t in tasks if stage_job.get(t[2]) == job), default=None) for job in jobs}
    last_finish = {job: max((t[1] for t in tasks if stage_job.get(t[2]) == job), default=None) for job in jobs}
    for start, end in zip(points, points[1:], strict=False):
        if end <= start or end <= started or start >= ended:
            continue
        running = [t for t in tasks if t[0] <= start and t[1] >= end]
        free = cores - len(running)
        if free <= 0:
            continue
        cause = _cause(start, end, running, tasks, jobs, stage_job, first_launch, last_finish, marks)
        idle[cause] += free * (end - start)
        cpu.setdefault(cause, Counter()).update(sampler.between(start, end))
    total = sum(idle.values())
    return {
        "job_s": round(ended - started, 3),
        "idle_core_s": round(total, 3),
        "tasks": len(tasks),
        "causes": [
            {"cause": cause, "idle_core_s": round(seconds, 3), "cpu_s": {k: round(v, 2) for k, v in cpu[cause].items()}}
            for cause, seconds in idle.most_common()
        ],
        "marks": [(round(t - started, 3), text) for t, text in marks],
        "jobs": [
            {
                "job": job,
                "submitted": round(j["submitted"] - started, 3),
                "first_task": round(first_launch[job] - started, 3) if first_launch[job] else None,
                "last_task_end": round(last_finish[job] - started, 3) if last_finish[job] else None,
                "completed": round(j.get("completed", ended) - started, 3),
            }
            for job, j in sorted(jobs.items())
        ],
        "cpu_s": sampler.between(started, ended),
    }


def _cause(
    start: float,
    end: float,
    running: list,
    tasks: list,
    jobs: dict,
    stage_job: dict,
    first_launch: dict,
    last_finish: dict,
    marks: list[tuple[float, str]],
) -> str:
    if running:
        stages = {t[2] for t in running}
        stage = min(stages)
        later = [t for t in tasks if t[2] == stage and t[0] >= end]
        waiting = [
            t for t in tasks if t[0] >= end and stage_job.get(t[2]) == stage_job.get(stage) and t[2] not in stages
        ]
        if later:
            return f"stage {stage}: a core between its tasks"
        return f"stage {stage}: straggler" + (" (next stage waits)" if waiting else "")
    for job, j in jobs.items():
        if j["submitted"] <= start and first_launch[job] is not None and end <= first_launch[job]:
            return "scheduling (job submitted, no task yet)"
        if first_launch[job] is not None and first_launch[job] <= start and end <= last_finish[job]:
            return "within a job, no task"
    launched = [f for f in first_launch.values() if f is not None]
    if not launched or end <= min(launched):
        return "driver before the first job"
    if start >= max(last_finish[j] for j in jobs if last_finish[j] is not None):
        return "driver after the last job"
    said = [text for t, text in marks if t <= start]
    return "driver between jobs, after: " + (said[-1][:90] if said else "?")


def _marking(marks: list[tuple[float, str]]):
    """The job's log: each progress line's first line, when it came and the driver thread's CPU so far."""
    cpu = time.thread_time()

    def mark(message: str) -> None:
        marks.append(
            (time.time(), f"[driver thread {time.thread_time() - cpu:.2f} s CPU] {message.split(chr(10))[0][13:]}")
        )

    return mark


def _collection(collected: list[float], started: dict, phase: str, info: dict) -> None:
    if phase == "start":
        started["cpu"] = time.thread_time()
    elif "cpu" in started:
        collected.append(time.thread_time() - started.pop("cpu"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("capture", type=Path)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warm", type=Path, help="the capture to warm the session up on (default: CAPTURE)")
    parser.add_argument("--json", type=Path, help="also write each run's timeline here")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    cores = local_cores(args.master)
    os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:cores]))
    sampler = Sampler()
    sampler.start()
    collected: list[float] = []  # the CPU of each of the driver's cycle collections
    gc.callbacks.append(partial(_collection, collected, {}))
    results = []
    with tempfile.TemporaryDirectory(prefix="spark-timeline-") as scratch:
        events = Path(scratch, "events")
        events.mkdir()
        spark = build_session(
            args.master,
            conf={
                "spark.ui.showConsoleProgress": "false",
                "spark.eventLog.enabled": "true",
                "spark.eventLog.dir": events.as_uri(),
                "spark.eventLog.compress": "false",
                "spark.eventLog.rolling.enabled": "false",
            },
        )
        offset = [0]
        try:
            analyse(spark, [str(args.warm or args.capture)], f"{scratch}/out", log=lambda message: None)
            new_events(events, offset)
            for _ in range(args.runs):
                marks: list[tuple[float, str]] = []
                started, collections = time.time(), len(collected)
                analyse(spark, [str(args.capture)], f"{scratch}/out", log=_marking(marks))
                ended, gc_s = time.time(), round(sum(collected[collections:]), 3)
                time.sleep(0.1)  # the sampler's next sample
                found = timeline(new_events(events, offset), marks, started, ended, cores, sampler)
                found["load"] = os.getloadavg()[0]
                found["driver_gc_s"] = gc_s
                results.append(found)
                print(json.dumps(found, indent=1), flush=True)
        finally:
            spark.stop()
    sampler.done.set()
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
