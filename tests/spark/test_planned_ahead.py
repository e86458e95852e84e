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

    def read_after_planning(cls, spark, pieces, kept):
        for thread in threading.enumerate():
            if thread.name == "plan-ahead":
                thread.join()
        reading.append(True)
        return of(cls, spark, pieces, kept)

    monkeypatch.setattr(frames, "mapInArrow", counted)
    monkeypatch.setattr(job._ReadPieces, "of", classmethod(read_after_planning))
    progress: list[str] = []
    job.analyse(spark, [str(synthetic[0])], str(tmp_path / "ahead"), log=progress.append, counted_cost=counted_cost)
    assert planned == [("_decode_handed", False), ("_stage_batches", False)]  # the reading: an RDD's job
    assert any("guessed clients' decoded beside the replay" in line for line in progress) == (counted_cost == 0)

    def fail(*_):
        raise RuntimeError("planning failed")

    monkeypatch.setattr(job.PlannedAhead, "_planned", fail)
    planned.clear()
    reading.clear()
    job.analyse(spark, [str(synthetic[0])], str(tmp_path / "after"), log=lambda _: None, counted_cost=counted_cost)
    replay = "_stage_batches" if counted_cost == 0 else "_liveness_batches"  # as before: no work beside it
    assert planned == [("_decode_handed", True), (replay, True)]
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


def test_the_liveness_stage_s_rows_reach_the_driver_through_the_spool_not_the_jvm(
        spark, synthetic: tuple[Path, dict], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a local master the liveness stage's tasks write their rows (the brokers, the stories,
    the replay's routes, the tallies) to the job's spool, which the driver reads once the job is
    done: the JVM turned them into Spark's rows, into the tasks' results and then pickled them for
    the driver after the last task, while every core waited. The JVM's collect now gives none, and
    the report is what the rows sent through the JVM gave (the plan made after the first job)."""
    frames = type(spark.range(1))
    collect = frames.collect
    collected: list[int] = []

    def counted(frame):
        rows = collect(frame)
        collected.append(len(rows))
        return rows

    monkeypatch.setattr(frames, "collect", counted)
    job.analyse(spark, [str(synthetic[0])], str(tmp_path / "spooled"), log=lambda _: None)
    assert collected == [0]
    brokers = (tmp_path / "spooled" / "brokers.csv").read_text().splitlines()
    assert len(brokers) > 1

    def fail(*_):
        raise RuntimeError("planning failed")

    monkeypatch.setattr(job.PlannedAhead, "_planned", fail)
    collected.clear()
    job.analyse(spark, [str(synthetic[0])], str(tmp_path / "collected"), log=lambda _: None)
    assert collected and collected[-1] > len(brokers)
    assert _report_files(tmp_path / "spooled") == _report_files(tmp_path / "collected")


class _Attempt:
    """What _write_rows reads of a task's TaskContext."""

    def __init__(self, partition: int, attempt_id: int) -> None:
        self.partition, self.attempt_id = partition, attempt_id

    def partitionId(self) -> int:  # noqa: N802 - PySpark's name
        return self.partition

    def taskAttemptId(self) -> int:  # noqa: N802 - PySpark's name
        return self.attempt_id


def test_a_task_s_spooled_rows_are_whole_or_absent_and_read_task_by_task(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task whose rows fail half-way leaves no file the driver reads (its attempt's own name,
    renamed only when complete); the attempt run again writes them whole. The driver reads them
    task by task, each task's in the order it made them, as a collect gives them; a task that
    wrote nothing gives none."""
    from spark_analysis.spark import liveness_stage

    def batches(*rows: dict):
        for row in rows:
            yield liveness_stage.arrow_batch([row], liveness_stage._ARROW_LIVENESS)

    def failing():
        yield from batches({"server": "a:9876", "stories": "[]"})
        raise OSError("worker lost")

    spool = str(tmp_path)
    monkeypatch.setattr(liveness_stage.TaskContext, "get", classmethod(lambda cls: _Attempt(1, 7)))
    with pytest.raises(OSError, match="worker lost"):
        liveness_stage._write_rows(failing(), spool)
    assert liveness_stage.spooled_rows(spool, 2) == []
    assert not list(tmp_path.iterdir())
    liveness_stage._write_rows(batches({"server": "b:9876", "batch": 3}, {"tally": b"\x80t"}), spool)
    monkeypatch.setattr(liveness_stage.TaskContext, "get", classmethod(lambda cls: _Attempt(0, 9)))
    liveness_stage._write_rows(batches({"server": "a:9876", "misplaced": True}), spool)
    rows = liveness_stage.spooled_rows(spool, 3)
    assert [(row.server, row.batch, row.tally, row.misplaced) for row in rows] == [
        ("a:9876", None, None, True), ("b:9876", 3, None, None), (None, None, b"\x80t", None)]
    assert list(rows[0].asDict()) == liveness_stage.LIVENESS.names
