#!/usr/bin/env python3
"""Benchmark (not a test): CPU seconds of the capture report's Python task work per core, in
process, for this checkout and other trees of the project, on the same bytes.

    python tools/bench/decode_cpu.py [--file CAPTURE] [--mib 256] [--rounds 3] [--src TREE ...] [--profile]

The fixed work: the capture's first ``--mib`` MiB read by the job's reading tasks (spark/job.py
``_read_tasks``: records, TCP segments, pieces), then decoded by one decoding task that writes the
tables' part files (``decode_batches``: reassembly, frames, rows, counting, Parquet), as
``local[1]`` runs them, with no JVM around: what one core of the job spends per byte, less the
liveness task and the driver. Each tree (this checkout, then each ``--src``, e.g. a ``git worktree``
of an older commit) runs in a child process of its own with the tree first on its path, round by
round in turn, so a machine whose speed drifts favours none; the figure is the process's CPU time
(``time.process_time``), which other work on a shared machine moves far less than wall-clock time.
The capture defaults to spark_pcap.py's 10-hour synthetic one (made first if missing).
``--profile`` prints where this checkout's time goes instead. ``--instructions`` counts each tree's
instructions instead of its CPU time, under valgrind's cachegrind (no cache simulation), a figure a shared
machine's load does not move: the task work run once and then twice in one process, the difference (the
second run, as a reused worker's later task runs: imports, start-up and the first run's kinds and
templates left out); a minute or two per tree for ``--mib 64``.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_CAPTURE = Path("/tmp/spark_pcap_bench_10h.pcap")  # spark_pcap.py's, --hours 10
TASK_BYTES = 64 << 20  # of the capture per reading task


def task_work(capture: Path, mib: int, profile: bool = False) -> dict:
    """In this process: read and decode the capture's first ``mib`` MiB as the job's tasks do."""
    import pyarrow as pa

    from spark_analysis.capture import inputs
    from spark_analysis.output import tables
    from spark_analysis.spark import job, worker

    worker.drill = lambda stage: None  # type: ignore[assignment]  # no Spark task around: no drill, no freeze
    worker.settle = lambda: None  # type: ignore[assignment]
    job.TaskContext = types.SimpleNamespace(get=lambda: types.SimpleNamespace(partitionId=lambda: 0))  # type: ignore
    whole = inputs.CaptureFile(str(capture), capture.stat().st_size, 0)
    size = min(mib << 20, whole.size)
    tasks = [[inputs.Split(whole, split.start, split.stop) for split in task]
             for task in inputs.plan_tasks([inputs.CaptureFile(str(capture), size, 0)], TASK_BYTES)]
    profiler = cProfile.Profile() if profile else None
    with tempfile.TemporaryDirectory(prefix="decode-cpu-") as out:
        tables.prepare(out)
        started = time.process_time()
        if profiler:
            profiler.enable()
        batches = [batch for index in range(len(tasks)) for batch in job._read_tasks(
            [pa.record_batch([pa.array([index], pa.int64())], names=["id"])], tasks, ())]
        read = time.process_time()
        pieces = [batch.drop_columns(["tally"]) for batch in batches if batch.column("tally").null_count == len(batch)]
        decoded = sum(len(batch) for batch in job.decode_batches(pieces, servers=frozenset({9876}), tables_out=out))
        ended = time.process_time()
        if profiler:
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
    return {"cpu_s": ended - started, "read_s": read - started, "decode_s": ended - read, "batches": decoded}


def instructions(tree: Path, capture: Path, mib: int) -> int:
    """The instructions of the task work's second run in one process of ``tree``'s code (cachegrind)."""
    counted = []
    for times in (1, 2):
        done = subprocess.run(
            ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", sys.executable,
             __file__, "--child", "--file", str(capture), "--mib", str(mib), "--times", str(times)],
            env=dict(os.environ, PYTHONPATH=str(tree)), cwd=tempfile.gettempdir(), check=True, capture_output=True,
            text=True)
        counted.append(int(re.search(r"I\s+refs:\s+([\d,]+)", done.stderr).group(1).replace(",", "")))  # type: ignore[union-attr]
    return counted[1] - counted[0]


def child(tree: Path, capture: Path, mib: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run([sys.executable, __file__, "--child", "--file", str(capture), "--mib", str(mib)],
                          env=env, cwd=tempfile.gettempdir(), check=True, capture_output=True, text=True)
    return json.loads(done.stdout.splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", type=Path, default=DEFAULT_CAPTURE)
    parser.add_argument("--mib", type=int, default=256, help="of the capture's first bytes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--src", type=Path, action="append", default=[], help="another tree of the project")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--instructions", action="store_true", help="count instructions (valgrind), not CPU time")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--times", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        for _ in range(args.times):
            done = task_work(args.file, args.mib)
        print(json.dumps(done))
        return 0
    if not args.file.exists():
        from spark_pcap import BIG, SYNTH  # the capture spark_pcap.py makes, beside this file

        subprocess.run([sys.executable, str(SYNTH), str(args.file), *BIG, "--hours", "10"], check=True)
    if args.profile:
        print(json.dumps(task_work(args.file, args.mib, profile=True)))
        return 0
    trees = [REPO, *(tree.resolve() for tree in args.src)]
    if args.instructions:
        if shutil.which("valgrind") is None:
            parser.error("--instructions needs valgrind (apt-get install valgrind)")
        counts = {str(tree): instructions(tree, args.file, args.mib) for tree in trees}
        print(json.dumps({"file": str(args.file), "mib": args.mib, "instructions": counts,
                          "of_this_checkout": {tree: counts[str(REPO)] / count for tree, count in counts.items()}},
                         indent=1))
        return 0
    runs: dict[Path, list[dict]] = {tree: [] for tree in trees}
    for round_ in range(args.rounds):
        for tree in trees:
            runs[tree].append(child(tree, args.file, args.mib))
            print(f"round {round_ + 1} {tree}: {runs[tree][-1]}", file=sys.stderr)
    figures = {"file": str(args.file), "mib": args.mib, "load": os.getloadavg(), "trees": {}}
    for tree, done in runs.items():
        figures["trees"][str(tree)] = {key: {"min": min(r[key] for r in done), "median": statistics.median(
            r[key] for r in done)} for key in ("cpu_s", "read_s", "decode_s")}
    here = figures["trees"][str(REPO)]["cpu_s"]["min"]
    for tree in trees[1:]:
        figures["trees"][str(tree)]["cpu_of_this_checkout"] = here / figures["trees"][str(tree)]["cpu_s"]["min"]
    print(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
