#!/usr/bin/env python3
"""Benchmark (not a test): MB/s of pcap per core for the Spark report, with local[1] and local[2],
against ``tshark -r FILE -q -z conv,tcp`` on the same file.

    python tools/bench/spark_pcap.py [--file /tmp/spark_pcap_bench.pcap] [--runs 3] [--json OUT]

Without the file, writes a ~1.2 GB synthetic capture there first (tools/synth_pcap.py: 40 brokers
with 200-odd topics, 80 clients, 10 hours). Every measurement runs in a child process pinned to as
many cores as it is credited with (tshark and local[1] to one, local[2] to two): the JVM's threads
would otherwise lend local[1] a second core. Each master gets its own session, warmed up on a
capture of the same traffic 4 times smaller (the JIT compiles the paths big captures take: after
one capture 20 times smaller the next two big runs were still 10-20% slower), then runs the whole
job (outputs and report) ``--runs`` times; the figures are medians, with the fastest and the
first run beside them (this machine's runs vary by ±15%).
"decode" is everything up to the tables and the brokers' liveness; "job" is everything.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SYNTH = REPO / "tools" / "synth_pcap.py"
BIG = ("--brokers", "40", "--clients", "80", "--topics", "200", "--hours", "10", "--seed", "1")
WARM_UP = ("--brokers", "40", "--clients", "80", "--topics", "200", "--hours", "2.5", "--seed", "2")  # ~300 MB
MB = 1e6


def pinned(cores: int) -> partial:
    """A preexec_fn that keeps a child (and everything it starts) on the first ``cores`` cores."""
    return partial(os.sched_setaffinity, 0, set(sorted(os.sched_getaffinity(0))[:cores]))


def spark_runs(master: str, capture: Path, runs: int) -> list[dict]:
    """In this (pinned) process: warm up, then time ``runs`` whole jobs."""
    from spark_analysis.job import analyse, build_session

    with tempfile.TemporaryDirectory(prefix="spark-pcap-bench-") as scratch:
        warm_up = Path(scratch, "warm_up.pcap")
        subprocess.run([sys.executable, str(SYNTH), str(warm_up), *WARM_UP], check=True, capture_output=True)
        spark = build_session(master, conf={"spark.ui.showConsoleProgress": "false"})
        try:
            analyse(spark, [str(warm_up)], f"{scratch}/out", log=lambda message: None)
            results = []
            for _ in range(runs):
                marks: list[float] = []
                started = time.monotonic()
                analyse(spark, [str(capture)], f"{scratch}/out", log=partial(_mark, marks))
                results.append({"job_s": time.monotonic() - started, "decode_s": marks[2] - marks[0]})
                print(f"  {master}: {results[-1]}", file=sys.stderr)
            return results
        finally:
            spark.stop()


def _mark(marks: list[float], message: str) -> None:
    marks.append(time.monotonic())


def tshark_runs(capture: Path, runs: int) -> list[dict]:
    results = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        subprocess.run(["tshark", "-r", str(capture), "-q", "-z", "conv,tcp"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False, preexec_fn=pinned(1))  # exits 2: last packet cut
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        results.append({"wall_s": time.monotonic() - started, "cpu_s": cpu})
        print(f"  tshark: {results[-1]}", file=sys.stderr)
    return results


def median(results: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in results)


def measure(args: argparse.Namespace) -> dict:
    size = args.file.stat().st_size
    figures: dict = {"file": str(args.file), "bytes": size, "load_before": os.getloadavg()}
    tshark = tshark_runs(args.file, args.runs)
    figures["tshark"] = {"runs": tshark, "MB_per_s": size / MB / median(tshark, "wall_s"),
                         "wall_s": {"median": median(tshark, "wall_s"), "min": min(r["wall_s"] for r in tshark)}}
    for master in args.masters:
        cores = int(master.removeprefix("local[").rstrip("]"))
        child = subprocess.run([sys.executable, __file__, "--file", str(args.file), "--runs", str(args.runs),
                                "--worker", master], check=True, stdout=subprocess.PIPE, preexec_fn=pinned(cores))
        runs = json.loads(child.stdout)
        figures[master] = {"runs": runs, "cores": cores,
                           "job_MB_per_s_per_core": size / MB / median(runs, "job_s") / cores,
                           "decode_MB_per_s_per_core": size / MB / median(runs, "decode_s") / cores,
                           "job_s": {"median": median(runs, "job_s"), "min": min(r["job_s"] for r in runs),
                                     "first": runs[0]["job_s"]}}
    if len(args.masters) == 2:
        one, two = (figures[m]["runs"] for m in args.masters)
        figures["speedup_job"] = median(one, "job_s") / median(two, "job_s")
        figures["speedup_decode"] = median(one, "decode_s") / median(two, "decode_s")
    figures["load_after"] = os.getloadavg()
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", type=Path, default=Path("/tmp/spark_pcap_bench.pcap"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--masters", nargs="+", default=["local[1]", "local[2]"])
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--worker", metavar="MASTER", help=argparse.SUPPRESS)  # a pinned child's job
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.worker:
        print(json.dumps(spark_runs(args.worker, args.file, args.runs)))
        return 0
    if shutil.which("tshark") is None:
        parser.error("tshark is not installed (Debian: apt-get install tshark)")
    if not args.file.exists():
        subprocess.run([sys.executable, str(SYNTH), str(args.file), *BIG], check=True)
    figures = measure(args)
    print(json.dumps({key: {k: v for k, v in value.items() if k != "runs"} if isinstance(value, dict) else value
                      for key, value in figures.items()}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
