"""The SparkSession the job runs in: local runs kept on loopback, quick to start and quiet.

Under spark-submit the submitted settings rule. Otherwise this process starts the driver JVM, and
sets it up here: Spark's log at a level of the user's choosing from the JVM's first line, the
garbage collector and compiler that suit a job whose work is done by Python tasks, and stderr
without the warning every start of Spark >= 4 on Java 17 prints, and mapping the classes it loads
from an archive where `python -m spark_analysis prepare` recorded them (class_archive). The command
starts the Python workers while the driver plans its first Spark job (start_workers), on any master.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pyspark
from pyspark import SparkContext
from pyspark.sql import SparkSession

from spark_analysis.spark.job import start_worker

#: Spark's log level unless asked otherwise: its warnings drown the progress lines
SPARK_LOG = "ERROR"
#: a local driver JVM's options unless the user sets some (build_session says why)
QUICK_JVM = "-XX:+UseParallelGC -XX:TieredStopAtLevel=1"
#: the class archive's path instead of class_archive()'s (a read-only environment, tests)
CLASS_ARCHIVE_VARIABLE = "SPARK_ANALYSIS_CLASS_ARCHIVE"
#: glibc's malloc in a local master's Python workers (build_session says why): blocks up to this size
#: from its heap, and this much of the heap's free top kept rather than given back to the kernel
WORKER_MALLOC_KEPT = 256 << 20
WORKER_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(WORKER_MALLOC_KEPT), "MALLOC_TRIM_THRESHOLD_": str(WORKER_MALLOC_KEPT)}


def build_session(master: str | None = None, ui: bool = False, conf: dict[str, str] | None = None,
                  log_level: str = SPARK_LOG, record_classes: Path | None = None) -> SparkSession:
    """A session for ``master``. Under spark-submit without ``master`` the submitted settings
    rule; a local master is kept on loopback, with the UI off unless asked for, with as many
    SQL shuffle partitions as cores (per-broker aggregates are small; 200 tasks each cost more),
    without adaptive execution (every shuffle here has its partitions set; AQE ran each stage as a
    job of its own), without a shuffle's reduce tasks preferring the host of its output (a local
    master's shuffle names it 127.0.0.1 and its one executor's localhost, so such a task waited
    behind every task of its stage that prefers no place: the liveness replay, the liveness
    stage's first and longest task, ran last with a core idle), with Python workers on Unix sockets
    (Spark >= 4.1: cheaper per task than TCP) whose glibc malloc keeps the memory its tasks free
    for the next (WORKER_MALLOC: by default a block over 128 KiB-32 MiB is mapped for itself and
    unmapped when freed, and the heap's free top given back, so that each task's arrays and
    streams faulted their pages in again, page by page: on the 10 h capture a two-core run's
    workers took 110k page faults, 36k now; a worker may hold up to WORKER_MALLOC_KEPT more once
    its tasks are done, until Spark ends it), and, unless JVM options are configured (QUICK_JVM),
    with the parallel garbage collector (it stops the tasks while it collects, with every core,
    where the serial one left all but one idle and G1's concurrent threads slow a first job by
    taking cores from the tasks) and with the
    JIT's quick compiler only (Python tasks do the work; the JVM mostly moves their batches, and a
    one-shot run never earns back the optimising compiler's CPU), mapping the classes recorded in
    class_archive() if it is there, or recording them into ``record_classes`` as the JVM exits
    (record_classes() below). What each choice measured: docs/benchmarks.md, "Figures behind
    design choices". Spark logs at
    ``log_level`` from the JVM's start (log4j2 set up before the session exists), without the
    native-library warning every local run gives; Spark's progress bar only on a terminal (in a log
    it is a line of carriage returns). On any master, PySpark does not tell the JVM
    the Python line of every DataFrame call (its "DataFrame debugging": four more calls to the
    JVM each, which the driver makes between the Spark jobs with every core idle; the job's plan
    is its own, so a Python line in Spark's errors would name the job's code, not the user's)."""
    builder = SparkSession.builder.appName("namesrv-capture-report")
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit
        master = "local[*]"
    if master is not None:
        builder = builder.master(master)
    if master is not None and master.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # else Spark warns of a loopback hostname
        builder = (builder.config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.python.unix.domain.socket.enabled", "true")
                   .config("spark.ui.enabled", str(ui).lower())
                   .config("spark.sql.shuffle.partitions", str(local_cores(master)))
                   .config("spark.sql.adaptive.enabled", "false")
                   .config("spark.shuffle.reduceLocality.enabled", "false"))
        for variable, value in WORKER_MALLOC.items():
            builder = builder.config(f"spark.executorEnv.{variable}", value)
        if not _java_options_configured(conf or {}):
            builder = builder.config("spark.driver.defaultJavaOptions", _quick_jvm(record_classes))
    builder = (builder.config("spark.sql.session.timeZone", "UTC")
               # Spark's writer, as the local tasks' pyarrow one (tables.py): microseconds adjusted to
               # UTC, not INT96 nanoseconds without a zone (Spark's default on a cluster)
               .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
               .config("spark.ui.showConsoleProgress", str(os.isatty(2)).lower())
               .config("spark.python.sql.dataFrameDebugging.enabled", "false"))
    log_configuration = None
    if "spark.driver.extraJavaOptions" not in (conf or {}):
        log_configuration = _log4j2(log_level)
        builder = builder.config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile={log_configuration}")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    try:
        with _jvm_stderr():
            spark = builder.getOrCreate()
    finally:
        if log_configuration:  # read once, as the JVM started: not left behind in the temp directory
            os.unlink(log_configuration)
    spark.sparkContext.setLogLevel(log_level)
    _workers_as_queries(spark)
    return spark


def _workers_as_queries(spark: SparkSession) -> None:
    """Every Python function of this context gets the environment Spark's SQL runners (those of
    the job's mapInArrow tasks) add to a Python worker's: workers are pooled by their environment,
    so that a plain RDD's tasks (start_workers', a local master's reading: job.read_by_rdd) and a
    query's take theirs from one pool, not two pools of a worker a core each."""
    sc = spark.sparkContext
    for key, default, variable in _SQL_WORKER_ENVIRONMENT:
        if spark.conf.get(key, default) == "true":
            sc.environment[variable] = "1"


def _log4j2(level: str) -> str:
    """A log4j2 configuration for the driver JVM: Spark's console logging at ``level``."""
    path = os.path.join(tempfile.gettempdir(), f"spark-analysis-log4j2-{os.getpid()}.properties")
    with open(path, "w") as f:
        f.write(_LOG4J2.format(level=level.lower()))
    return path


_LOG4J2 = """rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{HH:mm:ss}} %p %c{{1}}: %m%n%ex
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = {level}
"""


def class_archive() -> Path | None:
    """Where the classes a driver JVM loads are kept (a CDS archive: mapped at its start instead of
    each class read, verified and parsed from its jar: the JVM starts in about half the time), for
    this environment's PySpark and the Java that runs it; None without Java. An archive
    of another Java or PySpark is never used: its name differs, and the JVM checks it too."""
    if os.environ.get(CLASS_ARCHIVE_VARIABLE):
        return Path(os.environ[CLASS_ARCHIVE_VARIABLE])
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")  # as spark-submit finds it
    if not java or not os.path.isfile(java):
        return None
    real = os.path.realpath(java)
    stat = os.stat(real)
    java_id = hashlib.sha256(f"{real} {stat.st_size} {stat.st_mtime_ns}".encode()).hexdigest()[:12]
    return Path(sys.prefix, "share", "spark_analysis", f"jvm-classes-pyspark-{pyspark.__version__}-{java_id}.jsa")


def record_classes(archive: Path, run: Callable[[SparkSession], None]) -> None:
    """In a process whose driver JVM is yet to start: start it recording the classes it loads,
    ``run`` a job in it, end it and keep what it wrote as ``archive`` (written beside it and
    renamed when the JVM has exited: a run never maps half an archive)."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(f"{archive.name}.{os.getpid()}.part")
    spark = build_session("local[*]", record_classes=partial)
    try:
        try:
            run(spark)
        finally:
            stop(spark)
            _end_jvm()
        _recorded_size(archive).write_text(str(partial.stat().st_size))
        os.replace(partial, archive)
    finally:
        partial.unlink(missing_ok=True)


def _end_jvm() -> None:
    """End the driver JVM this process started, and wait for it (it writes a class archive as it
    exits); PySpark would leave that to the end of this process."""
    gateway = SparkContext._gateway
    gateway.shutdown()
    gateway.proc.stdin.close()  # what the JVM's gateway server waits for to exit
    gateway.proc.wait()
    SparkContext._gateway = SparkContext._jvm = None


def _quick_jvm(record_classes: Path | None) -> str:
    """QUICK_JVM with the class archive's options: to record one, or to map it if it is there,
    whole. The JVM checks its checksums as it maps it, and maps none that does not match this Java
    and its class path: silently, it starts without."""
    archive = class_archive()
    if record_classes is not None:
        sharing = f'"-XX:ArchiveClassesAtExit={record_classes}"'
    elif archive is not None and _usable(archive):
        sharing = f'"-XX:SharedArchiveFile={archive}" -XX:+VerifySharedSpaces'
    else:
        return QUICK_JVM
    return f"{QUICK_JVM} {sharing} -Xlog:cds=off -Xlog:cds+dynamic=off"


def whole(archive: Path) -> bool:
    """Whether the class archive is there, as long as `prepare` recorded it."""
    size, recorded = _sizes(archive)
    return size is not None and size == recorded


def _usable(archive: Path) -> bool:
    """Whether to map the class archive: it is whole. One cut short (a copy, a full disk) would
    crash Java as it maps it: it is removed, and said so, and the run goes on without."""
    if whole(archive):
        return True
    size, recorded = _sizes(archive)
    if size is None:
        return False
    try:
        archive.unlink()
        done = "removed it"
    except OSError as error:
        done = f"remove it ({error.strerror})"
    print(f"spark_analysis: the class archive {archive} is {size:,} bytes, not the "
          f"{f'{recorded:,}' if recorded else '?'} recorded: {done}; `python -m spark_analysis prepare CAPTURE` "
          f"records a new one", file=sys.stderr)
    return False


def _sizes(archive: Path) -> tuple[int | None, int | None]:
    """The archive's size and the one recorded beside it (None: not there, or unreadable)."""
    try:
        size = archive.stat().st_size
    except FileNotFoundError:
        return None, None
    try:
        return size, int(_recorded_size(archive).read_text())
    except (OSError, ValueError):
        return size, None


def _recorded_size(archive: Path) -> Path:
    return archive.with_name(f"{archive.name}.size")


def _java_options_configured(conf: dict[str, str]) -> bool:
    """Whether driver JVM options come from the caller, the environment or spark-defaults.conf."""
    if any(key.endswith("JavaOptions") for key in conf) or "JavaOptions" in os.environ.get("PYSPARK_SUBMIT_ARGS", ""):
        return True
    spark_home = os.environ.get("SPARK_HOME")
    for conf_dir in filter(None, [os.environ.get("SPARK_CONF_DIR"), spark_home and os.path.join(spark_home, "conf")]):
        defaults = os.path.join(conf_dir, "spark-defaults.conf")
        if os.path.isfile(defaults):
            with open(defaults) as f:
                if "JavaOptions" in f.read():
                    return True
    return False


def local_cores(master: str) -> int:
    """The thread count of local, local[N], local[N,F] or local[*]."""
    threads = master.partition("[")[2].split(",")[0].rstrip("]") or "1"
    return (os.cpu_count() or 1) if threads == "*" else int(threads)


def start_workers(spark: SparkSession) -> threading.Thread | None:
    """Start a Python worker per core while the driver plans the job's first Spark job, which in a
    new JVM takes more than a second; a first task otherwise waits as long again for its worker
    (PySpark's daemon, the interpreter, the job's modules imported). Started by a job of its own
    from a thread: a plain RDD job, which needs no query planning. Python workers are pooled by
    their environment, to which Spark's SQL runners (those of the job's tasks) add the traceback
    settings: build_session gives every Python function of the context them too, or the workers
    started would not be the ones the job's tasks get. Returns the thread (join it before stopping
    the session), or None where this process has one CPU: the driver and the workers would take
    turns on it."""
    sc = spark.sparkContext
    if sc.master.startswith("local") and _cpus() < 2:
        return None
    thread = threading.Thread(target=_start_workers, args=(sc,), name="start-workers", daemon=True)
    thread.start()
    return thread


#: what Spark's SQL runners add to a Python worker's environment, each if a setting (its default) says so
_SQL_WORKER_ENVIRONMENT = (
    ("spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled", "true", "SPARK_SIMPLIFIED_TRACEBACK"),
    ("spark.sql.execution.pyspark.udf.hideTraceback.enabled", "false", "SPARK_HIDE_TRACEBACK"))


def _start_workers(sc: SparkContext) -> None:
    cores = sc.defaultParallelism
    try:
        sc.parallelize(range(cores), cores).foreachPartition(start_worker)
    except Exception:  # noqa: BLE001 - the job's own tasks then start their workers, and say what fails
        pass


def _cpus() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def stop(spark: SparkSession) -> None:
    """Stop the session once the job is over, without what its Python workers say as Spark ends
    them: a worker idle in its reuse loop at that moment prints a BrokenPipeError traceback
    (PySpark's daemon), which after a good run would look like a failure."""
    _STOPPING.set()
    spark.stop()


#: set by stop, cleared as a session is built: while set, the JVM's stderr is not passed on
_STOPPING = threading.Event()


@contextmanager
def _jvm_stderr() -> Iterator[None]:
    """Start the driver JVM, if this starts it, with its stderr passed on without "WARNING: Using
    incubator modules: jdk.incubator.vector" (Spark >= 4 always adds that module, and Java has no
    switch to keep the line quiet), and without what comes while a session stops (stop). While
    the JVM starts, stderr (fd 2) is a pipe, which the JVM and the Python workers it starts keep
    for good; a thread copies what comes through it to the real stderr, in chunks as they come
    (Spark's progress bar rewrites a line without ending it). PySpark starts one JVM a process."""
    _STOPPING.clear()
    if getattr(SparkContext, "_gateway", None) is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        yield  # the JVM runs already
        return
    try:
        stderr = os.dup(2)
    except OSError:  # stderr closed (2>&-): nothing to pass on, and the pipe must not become fd 2
        yield
        return
    read, write = os.pipe()
    threading.Thread(target=_pass_on, args=(read, stderr), name="jvm-stderr", daemon=True).start()
    sys.stderr.flush()
    os.dup2(write, 2)
    os.close(write)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(stderr, 2)


_INCUBATOR_WARNING = re.compile(rb"WARNING: Using incubator modules: [^\n]*\n")


def _pass_on(read: int, stderr: int) -> None:
    """Copy the pipe to stderr until every writer has closed it. It keeps reading if stderr
    fails: a full pipe would stop the JVM at its next line."""
    while chunk := os.read(read, 1 << 16):
        rest = memoryview(b"" if _STOPPING.is_set() else _INCUBATOR_WARNING.sub(b"", chunk))
        try:
            while rest:
                rest = rest[os.write(stderr, rest):]
        except OSError:
            pass
    os.close(read)
    os.close(stderr)
