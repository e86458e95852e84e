"""The report submitted to a real Spark standalone cluster, as README's "On a cluster" says: a master
and a worker (one core) started here from PySpark's own distribution on 127.0.0.1, the zip of
tools/spark_zip.py and spark-submit, driver and executors in a virtual environment without this
project (the zip is all they get of it). Spark writes the tables there (not the tasks), tasks run in
executor processes: what a local run leaves out. Its output must equal the local run's, and so
must that of ``python -m spark_analysis report --master spark://...``, which ships the zip itself."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pyspark
import pytest

from spark_analysis.spark.session import QUICK_JVM  # the JVMs the test starts run as the local driver does
from tests.spark.conftest import REPO, Outputs, read_outputs
from tests.spark.test_report import same_rows

SPARK_HOME = Path(pyspark.__file__).parent
#: of the test environment's packages, what the clean one leaves out: this project, and what the zip carries
NOT_INSTALLED = re.compile(r"__editable__|twisted_namesrv|spark_analysis|construct|crcmod|__pycache__")
STARTUP_SECONDS = 120  # a JVM daemon's start on a busy two-core machine takes ~5 s
SUBMIT_SECONDS = 300
#: small, on loopback, no UI; two shuffle partitions for the per-broker aggregates (200 tasks on one core cost seconds)
SUBMIT_CONF = {"spark.executor.memory": "512m", "spark.executor.extraJavaOptions": QUICK_JVM,
               "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1", "spark.ui.enabled": "false",
               "spark.sql.shuffle.partitions": "2"}


def test_submitted_to_a_standalone_cluster_the_report_equals_the_local_run(
        spark, synthetic, synthetic_outputs: Outputs, tmp_path: Path) -> None:
    python = clean_python(tmp_path / "env")
    missing = subprocess.run([python, "-c", "import spark_analysis"], capture_output=True, text=True, cwd=tmp_path)
    assert "No module named 'spark_analysis'" in missing.stderr  # only the zip brings the job
    zip_path = tmp_path / "dist" / "spark_analysis.zip"
    subprocess.run([sys.executable, str(REPO / "tools" / "spark_zip.py"), "--out", str(zip_path)], check=True,
                   capture_output=True)
    env = spark_env(tmp_path, python)
    out = tmp_path / "out"
    with standalone_cluster(tmp_path, env) as master:
        conf = [arg for key, value in SUBMIT_CONF.items() for arg in ("--conf", f"{key}={value}")]
        submitted = run_logged([str(SPARK_HOME / "bin" / "spark-submit"), "--master", master, "--driver-memory", "512m",
                                "--driver-java-options", QUICK_JVM, *conf, "--py-files", str(zip_path),
                                str(zip_path.with_name("spark_analysis_main.py")),
                                "report", str(synthetic[0]), "--out", str(out)],
                               tmp_path / "submit.log", env, SUBMIT_SECONDS)
        # the command line itself with --master spark://: it ships the same zip (the executors'
        # Python has nothing else of the project), with its own --driver-memory and --conf
        direct = run_logged([sys.executable, "-m", "spark_analysis", "report", str(synthetic[0]), "--out",
                             str(tmp_path / "direct"), "--master", master, "--driver-memory", "512m", *conf],
                            tmp_path / "direct.log", {**env, "PYSPARK_DRIVER_PYTHON": sys.executable},
                            SUBMIT_SECONDS)
    assert submitted == 0, tails(tmp_path)
    assert direct == 0, tails(tmp_path)
    assert list((tmp_path / "work").glob("app-*/0/stderr")), "no executor ran on the worker"

    cluster = read_outputs(spark, out)
    local = synthetic_outputs
    assert [len(cluster.frames), len(cluster.calls), len(cluster.registrations)] == [
        len(local.frames), len(local.calls), len(local.registrations)]
    assert same_rows(cluster, local)
    assert (out / "brokers.csv").read_text() == Path(local.out, "brokers.csv").read_text()
    assert cluster.summary == local.summary
    assert (out / "report.html").stat().st_size > 0
    shipped = read_outputs(spark, tmp_path / "direct")
    assert same_rows(shipped, local) and shipped.summary == local.summary
    # Spark's writer on a cluster writes the timestamps the local tasks write: microseconds, UTC
    for name in ("frames", "calls", "registrations"):
        assert pq.read_schema(next((out / name).glob("*.parquet"))).field("ts").type == pa.timestamp("us", tz="UTC")


def clean_python(root: Path) -> str:
    """A virtual environment with the test environment's packages but for NOT_INSTALLED: PySpark,
    its sql extra and plotly, as a cluster's nodes would have them."""
    site = root / "site"
    site.mkdir(parents=True)
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not NOT_INSTALLED.search(entry.name):
            (site / entry.name).symlink_to(entry)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    python = root / "venv" / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "packages.pth").write_text(f"{site}\n")
    return str(python)


def spark_env(root: Path, python: str) -> dict[str, str]:
    """Every Spark process here: PySpark's distribution, loopback only, no configuration of the
    machine's, the clean Python for driver and executors."""
    conf = root / "conf"
    conf.mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SPARK_", "PYSPARK_", "PYTHON"))}
    env.update(SPARK_HOME=str(SPARK_HOME), SPARK_CONF_DIR=str(conf), SPARK_LOCAL_IP="127.0.0.1",
               SPARK_DAEMON_MEMORY="256m", SPARK_DAEMON_JAVA_OPTS=QUICK_JVM,
               SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
               PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python)
    return env


@contextmanager
def standalone_cluster(root: Path, env: dict[str, str]) -> Iterator[str]:
    """A master and a worker with one core on 127.0.0.1, killed on the way out with every
    process they started (executors, Python workers); yields the master's URL once it serves."""
    port = free_port()
    master = f"spark://127.0.0.1:{port}"
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    with ExitStack() as stack:
        stack.enter_context(daemon([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                    "--port", str(port), "--webui-port", "0"], root / "master.log", env))
        stack.enter_context(daemon([spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                    "--port", "0", "--webui-port", "0", "--cores", "1", "--memory", "1g",
                                    "--work-dir", str(root / "work"), master], root / "worker.log", env))
        # the driver starts while the worker registers: it waits for an executor anyway
        wait_for(root / "master.log", "I have been elected leader")
        yield master


@contextmanager
def daemon(args: list[str], log: Path, env: dict[str, str]) -> Iterator[subprocess.Popen]:
    """A process in a session of its own, killed with its whole process group."""
    with open(log, "wb") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=log.parent,
                                   start_new_session=True)
    try:
        yield process
    finally:
        kill_group(process)


def run_logged(args: list[str], log: Path, env: dict[str, str], timeout: float) -> int:
    """Run to the end (its process group killed after ``timeout``); its exit status."""
    with daemon(args, log, env) as process:
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{args[0]} still running after {timeout} s\n{tails(log.parent)}")


def kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def wait_for(log: Path, line: str) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while line not in log.read_text(errors="replace"):
        if time.monotonic() > deadline:
            pytest.fail(f"no {line!r} in {log.name} after {STARTUP_SECONDS} s\n{tail(log)}")
        time.sleep(0.2)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def tail(log: Path, lines: int = 40) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def tails(root: Path) -> str:
    """The end of every process's log: the submission's, the worker's (an executor that could not
    start), the master's."""
    return "\n".join(f"--- {log.name}\n{tail(log)}" for log in sorted(root.glob("*.log")))
