"""brokers.csv across a clock's step back: a stay stamped on both sides of it (v5-pause-stepped's
broker-b, heartbeats 30 s apart throughout) has its intervals between stamps of the two sides (a
p50 of 19.5 s), which a data engineer reading the file alone took for the broker's; the row says so
(``across_clock_step``), by the rule the clock_stepped_back finding names those stays by."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from spark_analysis.analysis.findings import broker_label
from tests.spark.conftest import run_job
from tests.spark.test_truth import REAL, truth_of


def test_a_stay_stamped_on_both_sides_of_a_step_back_says_so_in_brokers_csv(spark, tmp_path: Path) -> None:
    name = "v5-pause-stepped"
    out = run_job(spark, [str(REAL / name / f) for f in truth_of(name)["files"]], tmp_path / "out", report=False)
    step, = [i for f in out.summary["findings"] for i in f["evidence"] if i["kind"] == "clock_stepped_back"]
    assert len(step["brokers_across"]) == 1
    rows = list(csv.DictReader(io.StringIO(Path(out.out, "brokers.csv").read_text())))
    assert {row["across_clock_step"] for row in rows} == {"true", "false"}
    assert sorted(broker_label(b) for b in out.summary["brokers"] if b["across_clock_step"]) == step["brokers_across"]
    assert [row["broker_name"] for row in rows if row["across_clock_step"] == "true"] == ["broker-b"]
