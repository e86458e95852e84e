"""The session the job builds (session.build_session)."""

from __future__ import annotations

import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark import TaskContext

from spark_analysis import __main__ as cli
from spark_analysis.spark import session
from tests.spark.conftest import REPO


def test_the_session_leaves_no_log_configuration_in_the_temp_directory(spark) -> None:
    # the driver JVM's log4j2 file is written for its start only: one per run would pile up
    assert not list(Path(tempfile.gettempdir()).glob(f"spark-analysis-log4j2-{os.getpid()}*"))


def test_a_good_run_says_nothing_but_its_progress(synthetic, tmp_path) -> None:
    """What a user sees of a run in a log: the numbered lines on stdout, nothing on stderr (no
    incubator warning from the JVM, no progress bar outside a terminal, no worker's traceback as
    Spark stops)."""
    run = subprocess.run([sys.executable, "-m", "spark_analysis", "report", str(synthetic[0]), "--out",
                          str(tmp_path / "out")], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    assert [line[:3] for line in run.stdout.splitlines() if line.startswith("[")] == ["[1]", "[2]", "[3]", "[4]", "[5]"]


def test_the_driver_runs_the_job_without_the_cycle_collector(spark, synthetic, tmp_path, monkeypatch) -> None:
    """The driver's steps between and after the Spark jobs, which every core waits for, run with
    the cycle collector off (a full collection walked every object of the driver's process, a
    quarter of its CPU in a run); on again after the run."""
    import gc

    from spark_analysis.analysis import findings
    from spark_analysis.spark import job
    from tests.spark.conftest import run_job

    collecting = []

    def noting(step):
        def noted(*args, **kwargs):
            collecting.append(gc.isenabled())
            return step(*args, **kwargs)
        return noted

    monkeypatch.setattr(findings, "input_files", noting(findings.input_files))  # between the jobs
    monkeypatch.setattr(job, "served_codes", noting(job.served_codes))  # after the last job
    run_job(spark, [str(synthetic[0])], tmp_path / "out", report=False)
    assert collecting == [False, False]
    assert gc.isenabled()


def test_a_job_says_how_many_tasks_are_done_meanwhile(synthetic_outputs) -> None:
    """In a log, where Spark's progress bar is not: the numbered lines, and between them (here
    every 50 ms) the tasks of the running stages done so far."""
    numbered = [line for line in synthetic_outputs.progress if line.startswith("[")]
    meanwhile = [line for line in synthetic_outputs.progress if not line.startswith("[")]
    assert [line[:3] for line in numbered] == ["[1]", "[2]", "[3]", "[4]", "[5]"]
    assert meanwhile and all(re.fullmatch(r" {4} *\d+\.\ds  (reading|decoding): \d+ of \d+ tasks done", line)
                             for line in meanwhile), meanwhile
    assert any(" decoding: " in line for line in meanwhile)
    assert synthetic_outputs.progress.index(meanwhile[-1]) < synthetic_outputs.progress.index(numbered[2])


def test_a_jvm_that_does_not_start_is_one_line_and_exit_4(synthetic, tmp_path) -> None:
    run = subprocess.run([sys.executable, "-m", "spark_analysis", "report", str(synthetic[0]), "--out",
                          str(tmp_path / "out")], capture_output=True, text=True, timeout=120, cwd=REPO,
                         env={**os.environ, "JAVA_HOME": str(tmp_path / "no-java")})
    assert run.returncode == cli.JVM_FAILED
    assert "no-java/bin/java" in run.stderr  # what the launcher said, passed on
    assert run.stderr.splitlines()[-1].startswith("python -m spark_analysis: error: Spark's JVM did not start;")
    assert "Traceback" not in run.stderr


_PASSED_ON = """
import subprocess, sys, threading
from spark_analysis.spark import session

class Session:
    def stop(self) -> None:
        pass

with session._jvm_stderr():  # a shell in the JVM's place: it keeps the pipe as its stderr
    print("said as the JVM starts", file=sys.stderr, flush=True)
    jvm = subprocess.Popen(["sh", "-c", "echo 'WARNING: Using incubator modules: jdk.incubator.vector' >&2; "
                            "echo 'a JVM error' >&2; read go; echo 'a worker as it stops' >&2"], stdin=subprocess.PIPE)
if sys.argv[1] == "stop":
    session.stop(Session())
jvm.communicate(b"go\\n")
for thread in threading.enumerate():  # the copying thread, until the pipe has no writer left
    if thread.name == "jvm-stderr":
        thread.join(30)
"""


def test_the_jvm_stderr_is_passed_on_without_the_incubator_warning() -> None:
    run = subprocess.run([sys.executable, "-c", _PASSED_ON, "run"], capture_output=True, text=True, timeout=60,
                         cwd=REPO, check=True)
    assert run.stderr == "said as the JVM starts\na JVM error\na worker as it stops\n"


def test_nothing_is_passed_on_once_the_session_stops() -> None:
    run = subprocess.run([sys.executable, "-c", _PASSED_ON.replace("echo 'a JVM error' >&2; ", ""), "stop"],
                         capture_output=True, text=True, timeout=60, cwd=REPO, check=True)
    assert run.stderr == "said as the JVM starts\n"


def test_a_closed_stderr_stays_closed() -> None:
    """2>&-: no pipe takes fd 2's place (the JVM would write its stderr there for nobody to read)."""
    run = subprocess.run([sys.executable, "-c", _FD_2_INSIDE], stdout=subprocess.PIPE, text=True, timeout=60,
                         cwd=REPO, check=True, preexec_fn=lambda: os.close(2))
    assert run.stdout == "False\n"


_FD_2_INSIDE = """
import os
from spark_analysis.spark import session

with session._jvm_stderr():
    print(os.path.exists("/proc/self/fd/2"))
"""


def test_workers_started_early_are_those_the_job_s_tasks_get(spark, monkeypatch) -> None:
    """session.start_workers starts Python workers with a plain RDD job while the driver plans the
    first query; they save a first task's wait only if they are of the pool that the job's tasks
    (mapInArrow, run by Spark's SQL runners) take theirs from: the same PySpark daemon forked them."""

    def daemon(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield pa.RecordBatch.from_pydict({"daemon": [os.getppid()] * batch.num_rows})

    monkeypatch.setattr(session, "_cpus", lambda: 2)  # as on any machine with more than one
    starting = session.start_workers(spark)
    assert starting is not None
    starting.join()
    by_rdd = set(spark.sparkContext.parallelize(range(2), 2).map(lambda _: os.getppid()).collect())
    by_query = {row.daemon for row in spark.range(0, 2, 1, 2).mapInArrow(daemon, "daemon long").collect()}
    assert len(by_rdd) == 1
    assert by_rdd == by_query


def test_prepare_records_the_classes_that_reports_then_map(synthetic, tmp_path) -> None:
    """`prepare` writes the class archive (here where SPARK_ANALYSIS_CLASS_ARCHIVE says) and its
    size; a report's driver JVM then takes Spark's classes from it (the JVM's class log names where
    each came from), quietly. One cut short would crash Java: a report removes it, says so in a
    line, and goes on without."""
    archive = tmp_path / "classes.jsa"
    env = {**os.environ, session.CLASS_ARCHIVE_VARIABLE: str(archive)}
    prepared = subprocess.run([sys.executable, "-m", "spark_analysis", "prepare", str(synthetic[0])],
                              capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert prepared.returncode == 0, prepared.stderr
    assert prepared.stderr == ""
    assert sorted(path.name for path in tmp_path.iterdir()) == ["classes.jsa", "classes.jsa.size"]
    size = archive.stat().st_size

    def report(out: str) -> list[str]:
        """A report into ``out``, its JVMs' class logs beside it: what it said on stderr, but for the JVMs'
        line on the logging option."""
        run = subprocess.run([sys.executable, "-m", "spark_analysis", "report", str(synthetic[0]), "--out",
                              str(tmp_path / out)], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                             env={**env, "JAVA_TOOL_OPTIONS": f"-Xlog:class+load=info:file={tmp_path}/{out}-%p.log"})
        assert run.returncode == 0, run.stderr
        return [line for line in run.stderr.splitlines() if not line.startswith("Picked up JAVA_TOOL_OPTIONS")]

    assert report("mapped") == []
    loaded = "".join(path.read_text() for path in tmp_path.glob("mapped-*.log"))
    assert "org.apache.spark.SparkContext source: shared objects file (top)" in loaded

    archive.chmod(0o644)  # the JVM writes it read-only
    with open(archive, "r+b") as cut:
        cut.truncate(size // 3)
    assert report("damaged") == [f"spark_analysis: the class archive {archive} is {size // 3:,} bytes, not the "
                                 f"{size:,} recorded: removed it; `python -m spark_analysis prepare CAPTURE` "
                                 f"records a new one"]
    assert not archive.exists()
    assert (tmp_path / "damaged" / "report.html").is_file()
    assert not list(tmp_path.glob("hs_err_pid*"))  # no Java crashed


def test_without_the_spark_extra_the_command_says_what_is_missing(tmp_path) -> None:
    """Installed without the spark extra (here plotly made unimportable): one line, not a traceback."""
    run = subprocess.run([sys.executable, "-c", "import runpy, sys; sys.modules['plotly'] = None; "
                          "sys.argv = ['spark_analysis', 'report', 'in.pcap', '--out', 'out']; "
                          "runpy.run_module('spark_analysis', run_name='__main__')"],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert run.returncode == 1
    assert run.stderr == ("python -m spark_analysis: error: plotly not installed: the capture report needs the "
                          "spark extra (tools/setup-env.sh --spark, or pip install '.[spark]')\n")


def test_a_shuffled_partition_starts_in_its_turn_beside_partitions_that_prefer_no_place(spark) -> None:
    """The liveness stage is a union: the replay's partitions (read from a shuffle) first, then the
    guessed clients' decoding (handed out by the driver: no preferred place), and each core takes
    the next partition in order, so the replay, the stage's longest task, starts at once. A local
    master's shuffle names its output's host as 127.0.0.1, its executor's as localhost: a reduce
    partition preferring that host waited for every other partition (Spark's "ANY" locality) and
    started last, with one core idle while it ran. Task attempt ids are given in launch order."""

    def launched(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for _ in batches:
            pass
        context = TaskContext.get()
        yield pa.RecordBatch.from_pydict({"partition": [context.partitionId()], "attempt": [context.taskAttemptId()]})

    shuffled = spark.range(0, 8, 1, 2).repartition(1, "id").mapInArrow(launched, "partition long, attempt long")
    handed = spark.range(0, 4, 1, 4).mapInArrow(launched, "partition long, attempt long")
    order = [row.partition for row in sorted(shuffled.union(handed).collect(), key=lambda row: row.attempt)]
    assert order == [0, 1, 2, 3, 4]


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc settings")
def test_a_local_worker_keeps_the_memory_a_task_freed_for_the_next(spark) -> None:
    """A decoding task's arrays and reassembled streams are megabytes each; glibc's malloc maps a
    block that large for itself and unmaps it when freed (and gives a freed heap top back), so the
    next task faulted every page of it in again. A local session's workers keep it (WORKER_MALLOC):
    a block freed and asked for again costs no page faults the second time."""

    def faults(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for _ in batches:
            pass
        counted = []
        for _ in range(2):
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            block = bytearray(64 << 20)
            block[::4096] = b"\1" * (16 << 10)  # every page written
            counted.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
            del block
        yield pa.RecordBatch.from_pydict({"first": [counted[0]], "again": [counted[1]]})

    row = spark.range(0, 1, 1, 1).mapInArrow(faults, "first long, again long").first()
    assert row.first > 1000  # 16,384 pages, fewer where the heap had some free already
    assert row.again < 100
