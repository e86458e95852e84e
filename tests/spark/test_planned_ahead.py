"""On a local master the second Spark job (the decoding tasks and the liveness stage) is planned
while the first, the reading tasks, runs (job.PlannedAhead): its Python functions read what the
first job's results decide from the job's spool (job.SpooledFunction), so that the plan waits for
none of them. Made between the jobs, it cost the driver about 80 calls to the JVM, and the JVM its
analysis and physical planning, while every core waited."""

from __future__ import annotations

import pickle
import threading
from pathlib import Path

import pytest

from spark_analysis.spark import job


def _report_files(out: Path) -> dict[str, bytes]:
    return {str(path.relative_to(out)): path.read_bytes() for path in sorted(out.rglob("*")) if path.is_file()}


# nothing costs 2^62: nothing counted, none guessed
@pytest.mark.parametrize("counted_cost", [0, 1 << 62], ids=["guessed clients", "none guessed"])
def test_the_second_job_is_planned_before_the_first_runs_and_writes_the_same_files(
        spark, synthetic: tuple[Path, dict], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        counted_cost: int) -> None:
    """The reading job waits here until the second job's plan is made: that plan needs nothing the
    reading returns. Every file of the report, each table's part files too, is byte for byte what
    the same job planned after the reading job gives (the plan made there, as on other masters)."""
    frames = type(spark.range(1))
    map_in_arrow = frames.mapInArrow
    planned: list[tuple[str, bool]] = []
    reading: list[bool] = []

    def counted(frame, function, *args, **kwargs):
        planned.append((getattr(function, "func", function).__name__, bool(reading)))
        return map_in_arrow(frame, function, *args, **kwargs)

    of = job._ReadPieces.of.__func__

    def read_after_planning(cls, pieces, kept):
        for thread in threading.enumerate():
            if thread.name == "plan-ahead":
                thread.join()
        reading.append(True)
        return of(cls, pieces, kept)

    monkeypatch.setattr(frames, "mapInArrow", counted)
    monkeypatch.setattr(job._ReadPieces, "of", classmethod(read_after_planning))
    progress: list[str] = []
    job.analyse(spark, [str(synthetic[0])], str(tmp_path / "ahead"), log=progress.append, counted_cost=counted_cost)
    assert planned == [("_read_tasks", False), ("_decode_handed", False), ("_stage_batches", False)]
    assert any("guessed clients' decoded beside the replay" in line for line in progress) == (counted_cost == 0)

    def fail(*_):
        raise RuntimeError("planning failed")

    monkeypatch.setattr(job.PlannedAhead, "_planned", fail)
    planned.clear()
    reading.clear()
    job.analyse(spark, [str(synthetic[0])], str(tmp_path / "after"), log=lambda _: None, counted_cost=counted_cost)
    replay = "_stage_batches" if counted_cost == 0 else "_liveness_batches"  # as before: no work beside it
    assert planned == [("_read_tasks", False), ("_decode_handed", True), (replay, True)]
    ahead, after = _report_files(tmp_path / "ahead"), _report_files(tmp_path / "after")
    assert sum(name.endswith(".parquet") for name in ahead) > 4
    assert ahead == after


def test_a_spooled_function_is_pickled_as_its_path_and_read_when_called(tmp_path: Path) -> None:
    """What a task unpickles with its command is the spool file's path and the function's name;
    the function, with its arguments, is read from the file at the task's first call, and once."""
    path = str(tmp_path / "second-job.pickle")
    function = job.SpooledFunction(path, "add")
    shipped = pickle.loads(pickle.dumps(function))
    assert len(pickle.dumps(function)) < 200
    with open(path, "wb") as file:
        pickle.dump({"add": _add}, file)
    assert shipped(1, b=2) == (1, 2)
    (tmp_path / "second-job.pickle").unlink()
    assert shipped(3, b=4) == (3, 4)  # read once


def _add(a: int, b: int) -> tuple[int, int]:
    return a, b
