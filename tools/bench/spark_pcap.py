#!/usr/bin/env python3
"""Benchmark (not a test): MB/s of pcap per core for the Spark report, with local[1] and local[2],
against ``tshark -r FILE -q -z conv,tcp`` on the same file.

    python tools/bench/spark_pcap.py [--hours 10 | --file FILE] [--runs 5] [--json OUT] [--conf KEY=VALUE ...]

Without ``--file``, on a synthetic capture of ``--hours`` of traffic (tools/synth_pcap.py: 40
brokers with 200-odd topics, 80 clients; 10 hours, the default, ~1.2 GB; 30 hours ~3.6 GB), written
to /tmp/spark_pcap_bench_<hours>h.pcap if not there yet. Every measurement runs in a child process
pinned to as many cores as it is credited with (tshark and local[1] to one, local[2] to two): the
JVM's threads would otherwise lend local[1] a second core. Each master gets its own child process
and session, warmed up on ~300 MB of the same traffic (the JIT compiles the paths big captures
take), its Python workers kept between runs (keep_workers), the last run's garbage freed before
each (settle_driver); then, ``--runs`` times, tshark and each
master run once in turn, the masters running the whole job (outputs and report). The figures are
medians, with the fastest and the first run beside them.
"decode" is everything up to the tables and the brokers' liveness; "job" is everything; "tail" what
the driver does after the last Spark job (brokers.csv, summary.json, report.html). "cpu_s" is
the CPU time of a master's whole process tree in a job ("jvm_cpu_s" its JVM's, "python_cpu_s" the
driver's and Python workers'), "busy" that over job time x cores: where a two-core run uses as much
CPU as a one-core run, what it lacks of 2x is time a core sat idle; "python_faults" and
"jvm_faults" their minor page faults. "others_cpu_s": the CPU other
processes took of a run's cores meanwhile (from /proc/stat: what a slow round lost to the machine's
other work), and, in the probe, of both its cores in each of its six runs.
"two_core_probe": in every round, the job's own Python work without Spark (reading and decoding
the capture's first 512 MiB) timed alone on each of the two cores, on both at once twice, and alone
on each again (two_core_probe); its "scaling" is what two cores gave that fixed work at that moment
(2.0 where running side by side costs nothing): the ceiling the job's two-core speedup is read
against on a shared machine; "scaling_first" the former probe's (alone on each once, then together
once), kept to compare, and "cpu_scaling" the same from the copies' own CPU seconds (what side by
side costs the work itself, which others' work on the cores moves far less).
"speedup_of_probe": the job's two-core speedup over the probe's scaling, per round (both measured
within a minute of each other) and their median, and the same of the medians; "first_rounds" over
"scaling_first".
"stages": from Spark's event log, each stage of a job, in order: its tasks, its span from the first
task's launch to the last task's end, and the core-seconds its cores sat idle within that span
(span x cores - the tasks' time), each task's span in launch order ("task_s"), and what its tasks'
JVM side spent and moved (their task threads' CPU, deserializing the tasks, garbage collection,
shuffle and result bytes); "idle_core_s" the same within each job's span, summed over the jobs
(stages that run side by side counted once), "last_stage_s" the last stage's span (the liveness
stage: one task per NameServer, which the other cores wait for); "stages_s" the time some stage
ran, and "outside_stages_s" the rest of the job: the driver's own (before the first job, between
the jobs, after the last), every core waiting.
"share_lost": per round, where the share went, from that round's runs and probe (share_lost): the
share points the driver's time outside the stages cost, those the two-core run's idle cores within
its stages cost, the rest below 1, and the driver's seconds as a share of the two-core run.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import multiprocessing
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from functools import partial
from pathlib import Path

from procfs import TICKS, cores_busy_s, descendants, pid_stat  # beside this file: /proc read one way
from pyspark.sql import SparkSession

from spark_analysis.capture.inputs import CaptureFile, Split
from spark_analysis.capture.reassembly import DEFAULT_SERVER_PORT
from spark_analysis.decode.rows import split_rows
from spark_analysis.spark.job import analyse
from spark_analysis.spark.session import WORKER_MALLOC_KEPT, build_session, local_cores

REPO = Path(__file__).resolve().parents[2]
SYNTH = REPO / "tools" / "synth_pcap.py"
BIG = ("--brokers", "40", "--clients", "80", "--topics", "200", "--seed", "1")  # and --hours
WARM_UP = ("--brokers", "40", "--clients", "80", "--topics", "200", "--hours", "2.5", "--seed", "2")  # ~300 MB
MB = 1e6
#: of the capture, read and decoded by the two-core probe: about 2 s a run, as long as the two-core job
#: (at 128 MiB its 0.5 s runs scaled 1.56-1.97 in three quiet rounds while the job's speedup moved
#: 1.61-1.70: a short run's scaling is the noise of a moment)
PROBE_BYTES = 512 << 20
KEEP_WORKERS_S = 30
#: glibc's mallopt parameters, those session.WORKER_MALLOC's variables set
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def pinned(cores: int) -> partial:
    """A preexec_fn that keeps a child (and everything it starts) on the first ``cores`` cores."""
    return partial(os.sched_setaffinity, 0, set(sorted(os.sched_getaffinity(0))[:cores]))


def serve_runs(master: str, capture: Path, conf: list[str]) -> None:
    """In this (pinned) process: warm up, say "ready", then time one whole job per line read from
    stdin, answering each with a line of JSON; stop at end of input."""
    with tempfile.TemporaryDirectory(prefix="spark-pcap-bench-") as scratch:
        warm_up = Path(scratch, "warm_up.pcap")
        subprocess.run([sys.executable, str(SYNTH), str(warm_up), *WARM_UP], check=True, capture_output=True)
        events = Path(scratch, "events")
        events.mkdir()
        settings = dict(setting.split("=", 1) for setting in conf)
        spark = build_session(master, conf=settings | {
            "spark.ui.showConsoleProgress": "false", "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": events.as_uri(), "spark.eventLog.compress": "false",
            "spark.eventLog.rolling.enabled": "false"})
        cores = local_cores(master)
        busy, stop = threading.Lock(), threading.Event()
        threading.Thread(target=keep_workers, args=(spark, busy, stop), daemon=True).start()
        try:
            with busy:
                analyse(spark, [str(warm_up)], f"{scratch}/out", log=lambda message: None)
            log = EventLog(events)
            log.new_events()  # the warm-up's
            print("ready", flush=True)
            for _ in sys.stdin:
                marks: list[float] = []
                with busy:
                    log.new_events()  # keep_workers' jobs between runs
                    settle_driver(spark)
                    started = time.monotonic()
                    analyse(spark, [str(capture)], f"{scratch}/out", log=partial(_mark, marks))
                    ended = time.monotonic()
                    result = {"job_s": ended - started, "decode_s": marks[2] - marks[0], "tail_s": ended - marks[2]}
                result |= stage_idle(log.new_events(), cores)
                result["outside_stages_s"] = round(max(0.0, result["job_s"] - result["stages_s"]), 3)
                print(f"  {master}: {result}", file=sys.stderr)
                print(json.dumps(result), flush=True)
        finally:
            stop.set()
            with busy:
                spark.stop()


def settle_driver(spark: SparkSession) -> None:
    """Free what the last run left in the driver before timing the next, as a one-shot run never
    meets it: the job runs without the cycle collector (worker.no_cycle_collection), so the last
    run's DataFrames and plans, in cycles, were freed at the next collection, in the next run, and
    py4j's finalizer thread then told the JVM of each of their Java objects, one call each (121 in
    a warm two-core run on the 10 h capture, none of them the job's: a third of its calls)."""
    gc.collect()
    pending = getattr(spark.sparkContext._gateway._gateway_client, "finalizer_deque", None) or ()  # ClientServer's
    deadline = time.monotonic() + 5
    while pending and time.monotonic() < deadline:
        time.sleep(0.01)


def keep_workers(spark: SparkSession, busy: threading.Lock, stop: threading.Event) -> None:
    """Spark ends a session's idle Python workers once none has run a task for a minute (a fixed
    timeout). On a 3.6 GB capture a master waits longer than that between its runs (tshark alone
    takes ~40 s), so without this it would start some runs with new workers (new processes, their
    imports, new mappings of the capture) and others not, as its wait fell: on 1.2 GB none. A
    Python task every KEEP_WORKERS_S, between runs, keeps them."""
    while not stop.wait(KEEP_WORKERS_S):
        with busy:
            spark.range(1).mapInArrow(lambda batches: batches, "id long").collect()


class EventLog:
    """Spark's event log of this session (one JSON object a line), read as it grows."""

    def __init__(self, directory: Path) -> None:
        self.directory, self.offset = directory, 0

    def new_events(self) -> list[dict]:
        """The events logged since the last call (Spark flushes its log at each stage's and job's end)."""
        path = next(self.directory.iterdir())
        with path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        whole = data[:data.rfind(b"\n") + 1]
        self.offset += len(whole)
        return [json.loads(line) for line in whole.splitlines() if line.strip()]


def stage_idle(events: list[dict], cores: int) -> dict:
    """Per stage of the events' jobs, in order of their first task: tasks, span (first launch to
    last end) and the core-seconds idle within it (a stage run beside another counts the other's
    tasks as idle: the jobs' figure does not); ``idle_core_s``: the same within each job's span,
    summed over the jobs; and the last stage's span."""
    tasks: dict[int, list[tuple[int, int]]] = {}
    job_of: dict[int, int] = {}
    metrics: dict[int, Counter] = {}
    for event in events:
        if event.get("Event") == "SparkListenerJobStart":
            job_of.update(dict.fromkeys(event.get("Stage IDs", []), event["Job ID"]))
        elif event.get("Event") == "SparkListenerTaskEnd":
            info = event["Task Info"]
            tasks.setdefault(event["Stage ID"], []).append((info["Launch Time"], info["Finish Time"]))
            metrics.setdefault(event["Stage ID"], Counter()).update(_task_metrics(event.get("Task Metrics") or {}))
    by_job: dict[int | None, list[tuple[int, int]]] = {}
    for stage, times in tasks.items():
        by_job.setdefault(job_of.get(stage), []).extend(times)
    stages = [{"tasks": len(times), "span_s": _span(times), "idle_core_s": _idle(times, cores),
               "task_s": [round((end - start) / 1000, 3) for start, end in sorted(times)],
               **{name: round(value, 3) for name, value in sorted(metrics.get(stage, Counter()).items()) if value}}
              for stage, times in sorted(tasks.items(), key=lambda item: min(item[1]))]
    return {"stages": stages, "idle_core_s": round(sum(_idle(times, cores) for times in by_job.values()), 3),
            "last_stage_s": stages[-1]["span_s"] if stages else 0.0,
            "stages_s": _covered([(min(start for start, _ in times), max(end for _, end in times))
                                  for times in tasks.values()])}


def _covered(spans: list[tuple[int, int]]) -> float:
    """Seconds within any of the spans (ms), each moment once: the time some stage was running,
    from its first task's launch to its last task's end; the rest of a run is the driver's own
    (before the first job, between the jobs, after the last), every core waiting for it."""
    covered, reached = 0, None
    for start, end in sorted(spans):
        if reached is not None and start < reached:
            start = reached
        if end > start:
            covered += end - start
        reached = end if reached is None else max(reached, end)
    return round(covered / 1000, 3)


def share_lost(one: dict, two: dict, scaling: float, cores: int = 2) -> dict:
    """Where one round's share (the two-core run's speedup over the one-core run's, over the probe's
    ``scaling`` in the same round) went, from the two runs' own figures: ``driver`` the share points
    the driver's time outside the stages cost (the share had neither run spent it: ``outside_stages_s``,
    which a second core does not shorten), ``idle`` those the two-core run's cores idle within its
    stages cost (its ``idle_core_s`` over the cores: a straggler, a stage boundary), ``rest`` what
    is left below 1 (the stages' work scaling worse than the probe's: more tasks' fixed costs, the
    JVM's share of the cores). The driver's seconds also as a share of the two-core run's wall."""
    share = one["job_s"] / two["job_s"] / scaling
    no_driver = (one["job_s"] - one["outside_stages_s"]) / (two["job_s"] - two["outside_stages_s"]) / scaling
    no_idle = one["job_s"] / (two["job_s"] - two["idle_core_s"] / cores) / scaling
    return {"share": round(share, 3), "driver": round(no_driver - share, 3), "idle": round(no_idle - share, 3),
            "rest": round(1 - no_driver - (no_idle - share), 3),
            "driver_of_job": round(two["outside_stages_s"] / two["job_s"], 3)}


def _task_metrics(metrics: dict) -> dict[str, float]:
    """What a task's JVM side spent (its task thread; a Python worker's CPU is its own process's,
    counted in the run's ``python_cpu_s``) and moved: CPU, deserializing the task, collecting
    garbage (the pauses stop every task), shuffle and result bytes."""
    written = metrics.get("Shuffle Write Metrics") or {}
    read = metrics.get("Shuffle Read Metrics") or {}
    return {"jvm_cpu_s": metrics.get("Executor CPU Time", 0) / 1e9,
            "deserialize_cpu_s": metrics.get("Executor Deserialize CPU Time", 0) / 1e9,
            "gc_s": metrics.get("JVM GC Time", 0) / 1000,
            "shuffle_written_mb": written.get("Shuffle Bytes Written", 0) / MB,
            "shuffle_read_mb": (read.get("Local Bytes Read", 0) + read.get("Remote Bytes Read", 0)) / MB,
            "result_mb": metrics.get("Result Size", 0) / MB}


def _span(times: list[tuple[int, int]]) -> float:
    return (max(end for _, end in times) - min(start for start, _ in times)) / 1000


def _idle(times: list[tuple[int, int]], cores: int) -> float:
    """Core-seconds idle between the first launch and the last end of these tasks."""
    return round(max(0.0, _span(times) * cores - sum(end - start for start, end in times) / 1000), 3)


def _mark(marks: list[float], message: str) -> None:
    marks.append(time.monotonic())


class SparkChild:
    """A pinned child process with its own session for one master, run by serve_runs."""

    def __init__(self, master: str, capture: Path, conf: list[str]) -> None:
        self.master = master
        self.cores = local_cores(master)
        self.on = set(sorted(os.sched_getaffinity(0))[:self.cores])  # what pinned() gives it
        command = [sys.executable, __file__, "--file", str(capture), "--worker", master,
                   *(f"--conf={setting}" for setting in conf)]
        self.process = subprocess.Popen(command,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                        preexec_fn=pinned(self.cores))

    def wait_ready(self) -> None:
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{self.master}: the child failed to warm up")

    def run(self) -> dict:
        """One whole job; with the CPU seconds its process tree used (driver, JVM, Python workers)
        and how busy that kept its cores: what a second core does not get to do shows there."""
        before, busy = tree_cpu_by_kind(self.process.pid), cores_busy_s(self.on)
        self.process.stdin.write("run\n")
        self.process.stdin.flush()
        result = json.loads(self.process.stdout.readline())
        after, busy = tree_cpu_by_kind(self.process.pid), cores_busy_s(self.on) - busy
        result |= {f"{kind}_cpu_s": round(after[kind] - before[kind], 3) for kind in ("jvm", "python")}
        result |= {kind: after[kind] - before[kind] for kind in ("jvm_faults", "python_faults")}
        result["cpu_s"] = result["jvm_cpu_s"] + result["python_cpu_s"]
        result["others_cpu_s"] = round(max(0.0, busy - result["cpu_s"]), 3)
        result["busy"] = result["cpu_s"] / (result["job_s"] * self.cores)
        return result

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def tree_cpu_by_kind(root: int) -> dict[str, float]:
    """User and system CPU seconds of a process and all its descendants, living or reaped (Linux
    /proc), split: ``jvm``, the JVM's own threads (tasks' JVM side, shuffles, the
    driver's calls, its compiler and collector), and ``python``, the driver's process and the
    Python workers (with any of them reaped); and, as ``jvm_faults`` and ``python_faults``, their
    minor page faults (a page mapped, zeroed or found in the page cache: what a worker's freed and
    reused memory costs again, a count the machine's load does not move)."""
    ticks = {"jvm": 0, "python": 0}
    faults = {"jvm_faults": 0, "python_faults": 0}
    for pid in [root, *descendants(root)]:
        stat = pid_stat(pid)
        if stat is None:  # gone meanwhile
            continue
        kind = "jvm" if stat.comm == "java" else "python"
        ticks[kind] += stat.own_ticks
        faults[f"{kind}_faults"] += stat.minflt
        if pid != root:  # the root's reaped children: the launcher's JVM, before any run
            ticks["python"] += stat.reaped_ticks
            faults["python_faults"] += stat.cminflt
    return {kind: count / TICKS for kind, count in ticks.items()} | faults


def tshark_run(capture: Path) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    subprocess.run(["tshark", "-r", str(capture), "-q", "-z", "conv,tcp"], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False, preexec_fn=pinned(1))  # exits 2: last packet cut
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    result = {"wall_s": time.monotonic() - started, "cpu_s": cpu}
    print(f"  tshark: {result}", file=sys.stderr)
    return result


def probe_work(capture: Path) -> float:
    """Seconds this process takes to read and decode the connections in the capture's first
    PROBE_BYTES the way the job's tasks do, with no Spark around it."""
    started = time.monotonic()
    file = CaptureFile(str(capture), capture.stat().st_size, 0)
    for _ in split_rows([Split(file, 0, min(PROBE_BYTES, file.size))], DEFAULT_SERVER_PORT):
        pass
    return time.monotonic() - started


def _probe_on(core: int, capture: Path, results) -> None:
    os.sched_setaffinity(0, {core})
    _malloc_as_workers()
    seconds = probe_work(capture)
    used = resource.getrusage(resource.RUSAGE_SELF)
    results.put((core, (seconds, used.ru_utime + used.ru_stime)))


def _malloc_as_workers() -> None:
    """This process's glibc malloc set as a local master's Python workers' is (session.WORKER_MALLOC,
    there given as environment variables, which glibc reads as a process starts: a forked copy
    inherits its parent's settings instead), so that the probe's work is the tasks': with glibc's
    defaults its arrays were mapped and unmapped chunk by chunk, 71.9k page faults a copy against
    35.8k as the workers run it (2026-11-30)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: nor are the workers' settings read there
        return
    libc.mallopt(M_MMAP_THRESHOLD, WORKER_MALLOC_KEPT)
    libc.mallopt(M_TRIM_THRESHOLD, WORKER_MALLOC_KEPT)


def probes(capture: Path, cores: list[int], probed: list[int]) -> tuple[list[tuple[float, float]], float]:
    """probe_work on each of ``cores`` at once, in a forked process each (no JVM lives here): each
    copy's seconds and its process's CPU seconds; with the CPU other processes took meanwhile of all
    the ``probed`` cores, those running no copy too (a copy "alone" on one core shares the
    machine's caches and memory with whatever the other core runs)."""
    context = multiprocessing.get_context("fork")
    results = context.SimpleQueue()
    workers = [context.Process(target=_probe_on, args=(core, capture, results)) for core in cores]
    busy, own = cores_busy_s(set(probed)), _children_cpu_seconds()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    seconds = dict(results.get() for _ in workers)
    others = round(max(0.0, cores_busy_s(set(probed)) - busy - (_children_cpu_seconds() - own)), 3)
    return [seconds[core] for core in cores], others


def _children_cpu_seconds() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def two_core_probe(capture: Path) -> dict:
    """The probe alone on each of the first two cores, together on both twice, and alone on each
    again in the reverse order (ABBA: a machine whose speed drifts steadily through the round moves
    the alone and the together runs alike); ``scaling``: the lesser of each core's two alone runs
    over the lesser of the two together runs (each its slower copy's). Whatever else runs only
    lengthens a run: the Spark children's JVMs finishing their run (the former probe's first run
    after them met 0.17-0.21 s of other CPU in two quiet rounds of six), other work on the core, or
    on the other core while a copy ran "alone" there; the lesser of two is each kind's least
    disturbed, and the together runs, exposed on two cores, gain more by it than the alone ones do
    (a higher scaling: a lower share, not a higher one). ``scaling_first``: the former probe's
    figure, the first alone runs and the first together run, kept to compare."""
    cores = sorted(os.sched_getaffinity(0))[:2]
    runs: list[dict] = []

    def run(kind: str, on: list[int]) -> list[float]:
        copies, others = probes(capture, on, cores)
        runs.append({"kind": kind, "s": [round(s, 3) for s, _ in copies], "cpu_s": [round(c, 3) for _, c in copies],
                     "others_cpu_s": others})
        return [s for s, _ in copies]

    first = [run(f"alone on {core}", [core])[0] for core in cores]
    together = [max(run("together", cores)) for _ in range(2)]
    second = [run(f"alone on {core}", [core])[0] for core in reversed(cores)][::-1]
    alone = [min(pair) for pair in zip(first, second, strict=True)]
    cpu = {kind: statistics.mean(c for r in runs if r["kind"].startswith(kind) for c in r["cpu_s"])
           for kind in ("alone", "together")}
    result = {"alone_s": alone, "together_s": min(together), "scaling": sum(alone) / min(together),
              "scaling_first": sum(first) / together[0], "cpu_scaling": 2 * cpu["alone"] / cpu["together"],
              "runs": runs}
    print(f"  two-core probe: {result}", file=sys.stderr)
    return result


def median(results: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in results)


def measure(args: argparse.Namespace) -> dict:
    """Round after round, tshark then each master once: a machine whose speed drifts (this one's
    runs vary by ±15%) then favours none of them."""
    size = args.file.stat().st_size
    figures: dict = {"file": str(args.file), "bytes": size, "conf": args.conf, "load_before": os.getloadavg()}
    children = [SparkChild(master, args.file, args.conf) for master in args.masters]
    try:
        for child in children:
            child.wait_ready()
        tshark, runs, probed = [], {child.master: [] for child in children}, []
        for _ in range(args.runs):
            tshark.append(tshark_run(args.file))
            for child in children:
                runs[child.master].append(child.run())
            probed.append(two_core_probe(args.file))
    finally:
        for child in children:
            child.close()
    figures["two_core_probe"] = {"runs": probed, **{key: {"median": median(probed, key),
                                                          "min": min(r[key] for r in probed),
                                                          "max": max(r[key] for r in probed)}
                                                    for key in ("scaling", "scaling_first", "cpu_scaling")}}
    figures["tshark"] = {"runs": tshark, "MB_per_s": size / MB / median(tshark, "wall_s"),
                         "wall_s": {"median": median(tshark, "wall_s"), "min": min(r["wall_s"] for r in tshark)}}
    for child in children:
        done = runs[child.master]
        figures[child.master] = {"runs": done, "cores": child.cores,
                                 "job_MB_per_s_per_core": size / MB / median(done, "job_s") / child.cores,
                                 "decode_MB_per_s_per_core": size / MB / median(done, "decode_s") / child.cores,
                                 "job_s": {"median": median(done, "job_s"), "min": min(r["job_s"] for r in done),
                                           "first": done[0]["job_s"]},
                                 "tail_s": median(done, "tail_s"), "cpu_s": median(done, "cpu_s"),
                                 "jvm_cpu_s": median(done, "jvm_cpu_s"), "python_cpu_s": median(done, "python_cpu_s"),
                                 "python_faults": median(done, "python_faults"),
                                 "jvm_faults": median(done, "jvm_faults"),
                                 "others_cpu_s": median(done, "others_cpu_s"),
                                 "busy": median(done, "busy"), "idle_core_s": median(done, "idle_core_s"),
                                 "last_stage_s": median(done, "last_stage_s")}
    if len(args.masters) == 2:
        one, two = (figures[m]["runs"] for m in args.masters)
        figures["speedup_job"] = median(one, "job_s") / median(two, "job_s")
        figures["speedup_job_rounds"] = [a["job_s"] / b["job_s"] for a, b in zip(one, two, strict=True)]
        figures["speedup_decode"] = median(one, "decode_s") / median(two, "decode_s")
        # the goal's measure: the job's speedup as a share of what two cores gave the probe, round by round
        shares = [speedup / r["scaling"] for speedup, r in zip(figures["speedup_job_rounds"], probed, strict=True)]
        firsts = [speedup / r["scaling_first"] for speedup, r in zip(figures["speedup_job_rounds"], probed,
                                                                      strict=True)]
        figures["speedup_of_probe"] = {"median": statistics.median(shares), "rounds": shares, "first_rounds": firsts,
                                       "of_medians": figures["speedup_job"] / figures["two_core_probe"]["scaling"][
                                           "median"]}
        figures["share_lost"] = [share_lost(a, b, r["scaling"], local_cores(args.masters[1]))
                                 for a, b, r in zip(one, two, probed, strict=True)]
    figures["load_after"] = os.getloadavg()
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", type=Path, help="a capture to measure on (default: a synthetic one)")
    parser.add_argument("--hours", type=float, default=10, help="of synthetic traffic, without --file")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--masters", nargs="+", default=["local[1]", "local[2]"])
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for both masters' sessions, e.g. spark.executorEnv.PYTHONMALLOC=malloc")
    parser.add_argument("--worker", metavar="MASTER", help=argparse.SUPPRESS)  # a pinned child's job
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.worker:
        serve_runs(args.worker, args.file, args.conf)
        return 0
    if shutil.which("tshark") is None:
        parser.error("tshark is not installed (Debian: apt-get install tshark)")
    if args.file is None:
        args.file = Path(f"/tmp/spark_pcap_bench_{args.hours:g}h.pcap")
        if not args.file.exists():
            subprocess.run([sys.executable, str(SYNTH), str(args.file), *BIG, "--hours", str(args.hours)], check=True)
    figures = measure(args)
    print(json.dumps({key: {k: v for k, v in value.items() if k != "runs"} if isinstance(value, dict) else value
                      for key, value in figures.items()}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
