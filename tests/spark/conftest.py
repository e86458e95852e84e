"""One SparkSession for all Spark tests (local[2,2]: two threads, a failed task tried twice; two
shuffle partitions, no UI, loopback only), a
small synthetic capture with its truth, a helper that runs the job and reads its outputs back, and
what the tests compare of them."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_analysis.spark.job import analyse
from spark_analysis.spark.session import build_session

REPO = Path(__file__).resolve().parents[2]
SYNTH = REPO / "tools" / "synth_pcap.py"
# Impairments far above real rates, so that a few minutes of traffic carry every kind of them.
SYNTH_ARGS = ("--brokers", "8", "--clients", "5", "--topics", "30", "--hours", "0.3", "--seed", "3",
              "--loss", "0.03", "--reorder", "0.2", "--retransmit", "0.1")


@dataclass
class Outputs:
    """What the job wrote, read back as plain Python values."""

    out: str
    counts: Counter
    frames: list[dict]
    calls: list[dict]
    registrations: list[dict]
    brokers: list[dict]  # brokers.csv rows, as text
    summary: dict  # summary.json
    progress: list[str] = field(default_factory=list)  # the lines it logged


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = build_session("local[2,2]", conf={"spark.sql.shuffle.partitions": "2",
                                              "spark.ui.showConsoleProgress": "false"})
    yield session
    session.stop()


def run_job(spark: SparkSession, inputs: list[str], out: str | Path, **options) -> Outputs:
    progress: list[str] = []
    counts = analyse(spark, inputs, str(out), log=progress.append, **options)
    return replace(read_outputs(spark, out, counts), progress=progress)


def read_outputs(spark: SparkSession, out: str | Path, counts: Counter | None = None) -> Outputs:
    """What a run wrote to ``out``, read back; ``counts`` as it returned them (None: a run whose
    counts stayed in another process, e.g. spark-submit's driver)."""
    local_out = str(out).removeprefix("file://")
    tables = [[row.asDict(recursive=True) for row in _with_seconds(spark.read.parquet(f"{out}/{name}")).collect()]
              for name in ("frames", "calls", "registrations")]
    with open(f"{local_out}/brokers.csv", newline="") as f:
        brokers = list(csv.DictReader(f))
    with open(f"{local_out}/summary.json") as f:
        summary = json.load(f)
    if counts is None:
        counts = Counter()
    else:
        assert summary == counts.pop("summary")
    return Outputs(local_out, counts, *tables, brokers, summary)


def without_input(row: dict) -> dict:
    return {key: value for key, value in row.items() if key != "input"}


def evidence_of(summary: dict, sessions: set[str] | None = None) -> list[tuple]:
    """The evidence as (kind, severity, message), of these sessions' brokers if given, else all
    but the files' own (whose names differ: a bad input, the first file a capture began within)."""
    return sorted((item["kind"], item["severity"], item["message"]) for f in summary["findings"]
                  for item in f["evidence"] if (item.get("session") in sessions if sessions is not None
                                                else item["kind"] not in ("bad_input", "began_mid_stream")))


def _with_seconds(table):
    """Timestamps as float seconds: plain numbers to compare, whatever the local time zone."""
    for name, kind in table.dtypes:
        if kind == "timestamp":
            table = table.withColumn(name, F.col(name).cast("double"))
    return table


@pytest.fixture(scope="session")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A synthetic capture (written by the tool, as a user would) and its truth."""
    path = tmp_path_factory.mktemp("synthetic") / "synthetic.pcap"
    subprocess.run([sys.executable, str(SYNTH), str(path), *SYNTH_ARGS], check=True, capture_output=True)
    return path, json.loads(path.with_name("synthetic.truth.json").read_text())


@pytest.fixture(scope="session")
def synthetic_outputs(spark: SparkSession, synthetic: tuple[Path, dict],
                      tmp_path_factory: pytest.TempPathFactory) -> Outputs:
    """The job's outputs on the synthetic capture, read whole; with the report, and lines on the
    tasks done as often as the job can give them."""
    return run_job(spark, [str(synthetic[0])], tmp_path_factory.mktemp("synthetic-out"), report=True,
                   tasks_every=0.05)
