"""A local master's reading tasks keep their pieces' rows in files of their own (job.KeptPieces):
what they hand the JVM is where each piece is, and decoding reads the same pieces back."""

from __future__ import annotations

import types
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_analysis.capture import inputs
from spark_analysis.decode import schema
from spark_analysis.output import tables
from spark_analysis.spark import balance, job


@pytest.fixture
def task_attempts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tasks run in process: each KeptPieces an attempt of its own, each decoding task partition 0."""
    attempts = iter(range(1000))
    context = types.SimpleNamespace(partitionId=lambda: 0, attemptNumber=lambda: 0,
                                    getLocalProperty=lambda _: None, taskAttemptId=lambda: next(attempts))
    monkeypatch.setattr(job, "TaskContext", types.SimpleNamespace(get=lambda: context))
    monkeypatch.setattr(job.worker, "TaskContext", types.SimpleNamespace(get=lambda: context))


def _read(capture: Path, kept: str | None) -> list[pa.RecordBatch]:
    file = inputs.CaptureFile(str(capture), capture.stat().st_size, 0)
    tasks = inputs.plan_tasks([file], file.size // 3 + 1)  # three reading tasks, three files kept
    return [batch for index in range(len(tasks)) for batch in job._read_tasks(
        [pa.record_batch([pa.array([index], pa.int64())], names=["id"])], tasks, (), kept=kept)]


def _tables(pieces: list[pa.RecordBatch], out: Path) -> dict[str, list[dict]]:
    tables.prepare(str(out))
    rest = [batch.drop_columns(["tally"]) for batch in pieces if batch.column("tally").null_count == len(batch)]
    for _ in job.decode_batches(rest, servers=frozenset({9876}), tables_out=str(out)):
        pass
    return {name: pq.read_table(out / name).to_pylist() for _, name, _ in tables.TABLES}


def test_the_jvm_gets_where_the_rows_are_and_decoding_reads_them_back(
        synthetic: tuple[Path, dict], tmp_path: Path, task_attempts: None) -> None:
    capture, _ = synthetic
    inline = _read(capture, None)
    (tmp_path / "kept").mkdir()  # the job's spool directory, in a job
    kept = _read(capture, str(tmp_path / "kept"))
    assert sum(len(p.column("rows").to_pylist()[0]) for p in inline if p.column("tally").null_count == len(p)) > 0
    pieces = [batch for batch in kept if batch.column("tally").null_count == len(batch)]
    assert pieces and all(rows == b"" for batch in pieces for rows in batch.column("rows").to_pylist())
    assert all(payload is None for batch in pieces for payload in batch.column("payload").to_pylist())
    assert len({path for batch in pieces for path in batch.column("kept").to_pylist()}) == 3  # one file a task
    assert _tables(kept, tmp_path / "from-kept") == _tables(inline, tmp_path / "inline")


def test_decoding_tasks_writing_the_tables_send_the_jvm_only_events_and_tallies(
        synthetic: tuple[Path, dict], tmp_path: Path, task_attempts: None) -> None:
    """The table columns, always null where the tasks write the tables, were a filter and a
    projection more in the driver's plan between the Spark jobs: the JVM gets EVENTS there, and
    DECODED only where Spark writes the tables."""
    capture, _ = synthetic
    pieces = [batch.drop_columns(["tally"]) for batch in _read(capture, None)
              if batch.column("tally").null_count == len(batch)]
    tables.prepare(str(tmp_path / "out"))
    writing = list(job.decode_batches(pieces, servers=frozenset({9876}), tables_out=str(tmp_path / "out")))
    again = list(job.decode_batches(pieces, servers=frozenset({9876}), events_only=True))
    spark_writes = list(job.decode_batches(pieces, servers=frozenset({9876})))
    assert {batch.schema for batch in writing + again} == {schema.EVENTS}
    assert {batch.schema for batch in spark_writes} == {schema.DECODED}
    events = [batch.column("event") for batch in writing if batch.column("event").null_count < len(batch)]
    assert events and [batch.column("event") for batch in again if batch.column("event").null_count < len(batch)] \
        == events


def _report_files(out: Path) -> dict[str, bytes]:
    return {str(path.relative_to(out)): path.read_bytes() for path in sorted(out.rglob("*")) if path.is_file()}


def test_a_local_master_hands_the_kept_pieces_out_as_spark_shuffled_them(
        spark, synthetic: tuple[Path, dict], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a local master the driver hands each decoding task its kept pieces' places itself
    (_ReadPieces), which the reading tasks gave as a plain RDD's job (job.read_by_rdd): Spark caches
    nothing of the reading job (the second job is planned without the pieces' cache, filters and
    deal, while every core waits for the driver), and every file of the report, each table's part
    files too, is byte for byte what Spark's cache and shuffle of the same pieces, read as a query,
    give."""
    capture = str(synthetic[0])
    persisted: list[object] = []
    frames = type(spark.range(1))  # pyspark's DataFrame as this session makes them
    persist = frames.persist
    monkeypatch.setattr(frames, "persist", lambda frame, *args: persisted.append(frame) or persist(frame, *args))
    job.analyse(spark, [capture], str(tmp_path / "handed"), log=lambda _: None)
    assert persisted == []
    of = job._ReadPieces.of.__func__
    monkeypatch.setattr(job._ReadPieces, "of", classmethod(lambda cls, spark, pieces, kept: of(cls, spark, pieces,
                                                                                           kept=None)))
    monkeypatch.setattr(job, "read_by_rdd", lambda: False)
    job.analyse(spark, [capture], str(tmp_path / "shuffled"), log=lambda _: None)
    assert len(persisted) == 1  # the pieces, cached
    handed, shuffled = _report_files(tmp_path / "handed"), _report_files(tmp_path / "shuffled")
    assert sum(name.endswith(".parquet") for name in handed) > 4
    assert handed == shuffled


def test_a_decoding_task_s_closure_names_its_pieces_never_holds_every_task_s(
        spark, synthetic: tuple[Path, dict], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver hands each decoding task its pieces as a batch of a file in the spool: a Python
    function's closure is pickled, sent to the JVM with the plan (the driver's work between the
    jobs, while every core waits) and unpickled by every task of its stage, so a closure holding
    every task's pieces cost each stage their size once per task."""
    from pyspark.core import rdd

    prepare = rdd._prepare_for_python_RDD
    sizes: list[int] = []

    def prepared(sc, command):
        found = prepare(sc, command)
        function = command[0] if isinstance(command, tuple) else command
        if getattr(function, "func", None) is job._decode_handed:
            sizes.append(len(found[0]))
        return found

    monkeypatch.setattr(rdd, "_prepare_for_python_RDD", prepared)
    job.analyse(spark, [str(synthetic[0])], str(tmp_path / "out"), log=lambda _: None)
    assert sizes and max(sizes) < 8 << 10


def test_the_guessed_clients_are_decoded_by_the_liveness_stage_s_own_function(
        spark, synthetic: tuple[Path, dict], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On two cores the guessed clients' pieces are decoded beside the replay: handed out by the
    driver, by the liveness tasks' own Python function (liveness_stage.Beside), not a plan of their
    own, which the driver made between the jobs while every core waited (~32 calls to the JVM).
    Two queries' Python functions a run, as on one core: decoding and the liveness stage (the
    reading is a plain RDD's job: job.read_by_rdd)."""
    frames = type(spark.range(1))
    map_in_arrow = frames.mapInArrow
    planned: list[str] = []

    def counted(frame, function, *args, **kwargs):
        planned.append(getattr(function, "func", function).__name__)
        return map_in_arrow(frame, function, *args, **kwargs)

    monkeypatch.setattr(frames, "mapInArrow", counted)
    progress: list[str] = []
    job.analyse(spark, [str(synthetic[0])], str(tmp_path / "out"), log=progress.append, counted_cost=0)
    assert any("guessed clients' decoded beside the replay" in line for line in progress)
    assert planned == ["_decode_handed", "_stage_batches"]


def test_the_liveness_stage_runs_a_python_task_a_core_which_take_the_batches_beside(
        spark, synthetic: tuple[Path, dict], tmp_path: Path) -> None:
    """The guessed clients' batches are taken by the liveness stage's tasks for themselves (job.Claims),
    the replay's among them once its replay is done: a Python task a core, not one a batch (each
    costs its worker and the JVM ~30 ms, at the job's end while the other core waits)."""
    sc = spark.sparkContext
    sc.setJobGroup("beside", "the liveness stage's tasks")
    try:
        progress: list[str] = []
        job.analyse(spark, [str(synthetic[0])], str(tmp_path / "out"), log=progress.append, counted_cost=0)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert any("guessed clients' decoded beside the replay" in line for line in progress)
    tracker = sc.statusTracker()
    last = tracker.getJobInfo(max(tracker.getJobIdsForGroup("beside")))
    assert last is not None
    assert tracker.getStageInfo(max(last.stageIds)).numTasks == sc.defaultParallelism


def test_the_decoding_stage_runs_a_python_task_a_core_which_take_the_batches_handed_out(
        spark, synthetic: tuple[Path, dict], tmp_path: Path) -> None:
    """Where the driver hands the pieces out (a local master), the decoding stage's tasks take the
    hand-out's batches for themselves (job.Claims, balance.claimed_decoding): a Python task a core,
    not one a share (each costs its worker and the JVM ~30 ms, and the liveness stage waits for the
    last), the tables' part files numbered by batch, six on two cores, whichever task took each."""
    sc = spark.sparkContext
    sc.setJobGroup("decoding", "the decoding stage's tasks")
    try:
        job.analyse(spark, [str(synthetic[0])], str(tmp_path / "out"), log=lambda _: None, counted_cost=1 << 62)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    tracker = sc.statusTracker()
    last = tracker.getJobInfo(max(tracker.getJobIdsForGroup("decoding")))
    assert last is not None
    assert tracker.getStageInfo(min(last.stageIds)).numTasks == sc.defaultParallelism == 2
    parts = sorted(path.name for path in (tmp_path / "out" / "frames").glob("*.parquet"))
    assert len(parts) == len(balance.claimed_decoding(2)) == 6


def test_the_liveness_stage_reads_the_decoded_rows_in_the_order_of_their_batches() -> None:
    """Rows of two batches come to the liveness stage in the order of the tasks that took them
    (Claims), not of the batches: it reads them by batch, as a task a batch gave them, each batch's
    in its order; rows of no batch (a task's own pieces) as they came."""
    from spark_analysis.spark import liveness_stage

    def rows(*found: tuple[bytes, int | None]) -> pa.RecordBatch:
        return pa.RecordBatch.from_pylist([{"event": event, "event_server": "s", "batch": batch}
                                           for event, batch in found], schema=schema.EVENTS)

    taken = [rows((b"b2", 2), (b"b0-1", 0)), rows((b"b0-2", 0), (b"b1", 1))]
    assert [event for event, _, _ in liveness_stage._in_batch_order(taken)] == [b"b0-1", b"b0-2", b"b1", b"b2"]
    own = [rows((b"x", None), (b"y", None)), rows((b"a", None))]
    assert [event for event, _, _ in liveness_stage._in_batch_order(own)] == [b"x", b"y", b"a"]


def test_each_batch_is_taken_once_and_a_task_run_again_takes_back_its_own(tmp_path: Path) -> None:
    """Two tasks taking a hand-out's batches in turn get each once, in order; a task run again
    (its failed attempt's output dropped by Spark) first takes back what it took, then what is left."""
    handed = str(tmp_path / "handed-0.arrow")
    first, second = job.Claims(handed, 5).taken(0, 0), job.Claims(handed, 5).taken(1, 0)
    assert [next(first), next(second), next(first)] == [0, 1, 2]
    again = list(job.Claims(handed, 5).taken(0, 1))  # task 0's first attempt failed after taking 0 and 2
    assert again == [0, 2, 3, 4]
    assert list(second) == [] and list(first) == []
    assert sorted(path.name for path in tmp_path.iterdir()) == [f"handed-0.arrow.taken-{index}" for index in range(5)]


def test_the_driver_reads_the_default_parallelism_once_a_run(
        spark, synthetic: tuple[Path, dict], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each reading of a session's default parallelism is two calls to the JVM, and the driver read
    it six times a run, five of them between the Spark jobs, while every core waited: now once, at the start."""
    context = type(spark.sparkContext)
    read = context.defaultParallelism
    readings: list[int] = []
    monkeypatch.setattr(context, "defaultParallelism",
                        property(lambda sc: readings.append(1) or read.fget(sc)))
    job.analyse(spark, [str(synthetic[0])], str(tmp_path / "out"), log=lambda _: None)
    assert len(readings) == 1
