"""The Spark job: captures -> frames/, calls/, registrations/ (Parquet), brokers.csv, report.html.

Plan: tasks read byte ranges of the captures and emit, per connection 4-tuple, the batch of TCP
segments they found; a shuffle brings every batch of a 4-tuple to one task, which orders them
in capture order and reassembles and decodes that 4-tuple's connections (port reuse is told
apart there, by SYN). The driver only plans splits and collects counts and per-broker
aggregates: never packets or frames.
"""

from __future__ import annotations

import os
import sys
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from operator import itemgetter

from pyspark import RDD, AccumulatorParam, SparkContext, StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_analysis import inputs
from spark_analysis.brokers import EXPIRY_SECONDS, broker_rows, brokers_csv
from spark_analysis.conversation import REQUEST, RESPONSE
from spark_analysis.decode import CALL, CONNECTION, FRAME, REGISTRATION, ConnectionStats, batch_rows
from spark_analysis.inputs import CaptureFile, ConnectionKey, Split
from spark_analysis.schema import CALL_ROWS, FRAME_ROWS, MILLIS_COLUMNS, REGISTRATION_ROWS, SECONDS_COLUMNS
from spark_analysis.streams import DEFAULT_SERVER_PORT

TABLES = ((FRAME, "frames", FRAME_ROWS), (CALL, "calls", CALL_ROWS), (REGISTRATION, "registrations", REGISTRATION_ROWS))
_DIRECTION = FRAME_ROWS.names.index("direction")
_RESPONSE_CODE = CALL_ROWS.names.index("response_code")
_CRC_OK = REGISTRATION_ROWS.names.index("crc_ok")


def build_session(master: str | None = None, ui: bool = False, conf: dict[str, str] | None = None) -> SparkSession:
    """A session for ``master``. Under spark-submit without ``master`` the submitted settings
    rule; a local master is kept on loopback, with the UI off unless asked for, and with as many
    SQL shuffle partitions as cores (per-broker aggregates are small; 200 tasks each cost more)."""
    builder = SparkSession.builder.appName("namesrv-capture-report")
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit
        master = "local[*]"
    if master is not None:
        builder = builder.master(master)
    if master is not None and master.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = (builder.config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.ui.enabled", str(ui).lower())
                   .config("spark.sql.shuffle.partitions", str(_local_cores(master))))
    builder = builder.config("spark.sql.session.timeZone", "UTC").config("spark.ui.showConsoleProgress", "true")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _local_cores(master: str) -> int:
    """The thread count of local, local[N], local[N,F] or local[*]."""
    threads = master.partition("[")[2].split(",")[0].rstrip("]") or "1"
    return (os.cpu_count() or 1) if threads == "*" else int(threads)


def analyse(spark: SparkSession, paths: Iterable[str], out: str, server_port: int = DEFAULT_SERVER_PORT,
            split_size: int | None = None, report: bool = True, log: Callable[[str], None] = print) -> Counter:
    """Run the whole job; returns the counts it printed."""
    from spark_analysis.report import write_report  # matplotlib only when a report is wanted

    sc = spark.sparkContext
    progress = _Progress(log)
    out = _absolute(out)
    files = inputs.discover(paths, partial(_list_hadoop, spark))
    local = [f for f in files if inputs.is_local(f.path)]
    remote = [f for f in files if not inputs.is_local(f.path)]
    total = sum(f.size for f in files)
    size = split_size or inputs.split_bytes(total, sc.defaultParallelism)
    tasks = inputs.plan_tasks(local, size)
    progress(f"inputs: {len(files)} files, {_mib(total)}; {len(tasks)} tasks of up to "
             f"{_mib(size)} over local files, {len(remote)} remote files read whole")

    tally = sc.accumulator(Counter(), _CounterParam())
    segments = _segments(sc, tasks, remote, server_port, tally)
    # by bytes, not tasks: tiny ranges must not multiply the shuffle's partitions and output files;
    # about 32 MiB of capture each, so that whole connections spread evenly over the cores
    partitions = max(2 * sc.defaultParallelism, 2 * (total // inputs.DEFAULT_SPLIT_BYTES + 1))
    rows = (segments.partitionBy(partitions, _connection_partition)
            .mapPartitions(partial(_decode_partition, server_port=server_port))
            .persist(StorageLevel.MEMORY_AND_DISK))
    counts = rows.aggregate(Counter(), _count, _merge)
    counts.update(tally.value)
    progress(f"read {counts['records']:,} records ({_mib(counts['bytes'])}), {counts['segments']:,} TCP segments "
             f"on port {server_port}; {counts[CONNECTION]:,} connections, {counts[FRAME]:,} frames "
             f"({counts[REQUEST]:,} requests, {counts[RESPONSE]:,} responses), {counts['gaps']} capture gaps, "
             f"{counts['lost_bytes']:,} bytes lost to gaps, {counts['undecodable']} connections with undecodable "
             f"bytes, {counts['not_captures']} files that are no captures")

    for kind, name, schema in TABLES:
        # one task (and Parquet file) per core, not per shuffle partition: the tables are far
        # smaller than the capture, and each task and file costs the same whatever its size
        selected = rows.filter(partial(_is_kind, kind)).map(itemgetter(1)).coalesce(sc.defaultParallelism)
        table = spark.createDataFrame(selected, schema, verifySchema=False).transform(with_timestamps)
        table.write.mode("overwrite").parquet(f"{out}/{name}")
    rows.unpersist()
    progress(f"wrote frames/ ({counts[FRAME]:,} rows), calls/ ({counts[CALL]:,} rows, {counts['unanswered']} "
             f"unanswered), registrations/ ({counts[REGISTRATION]:,} rows, {counts['crc_failures']} CRC failures)")

    frames, registrations = (spark.read.parquet(f"{out}/{name}") for name in ("frames", "registrations"))
    brokers = broker_rows(frames, registrations)
    write_bytes(spark, f"{out}/brokers.csv", brokers_csv(brokers))
    counts["brokers"] = len(brokers)
    progress(f"wrote brokers.csv ({len(brokers)} brokers, {sum(b['would_expire'] for b in brokers)} with a gap "
             f"over {EXPIRY_SECONDS} s)")
    if report:
        write_report(spark, out, brokers, counts, write_bytes)
        progress("wrote report.html")
    return counts


# -- reading and decoding ---------------------------------------------------------------------------


def _segments(sc: SparkContext, tasks: list[list[Split]], remote: list[CaptureFile], server_port: int,
              tally) -> RDD:
    parts = []
    if tasks:
        parts.append(sc.parallelize(tasks, len(tasks)).flatMap(
            partial(_tallied, inputs.read_task, server_port=server_port, accumulator=tally)))
    if remote:
        index = {f.path: f.index for f in remote}
        whole = sc.binaryFiles(",".join(f.path for f in remote), minPartitions=len(remote))
        parts.append(whole.flatMap(
            lambda item: _tallied(inputs.read_whole, item[1], index.get(item[0], 0), server_port=server_port,
                                  accumulator=tally)))
    return parts[0] if len(parts) == 1 else sc.union(parts)


def _tallied(read: Callable[..., Iterator], *args, server_port: int, accumulator) -> Iterator:
    """Run a reader with a local tally, added to the accumulator once the reader is done."""
    tally: Counter = Counter()
    yield from read(*args, server_port, tally)
    accumulator.add(tally)


def _connection_partition(key: ConnectionKey) -> int:
    """Deterministic in every worker, unlike hash() of strings."""
    return zlib.crc32(f"{key[0]}|{key[1]}".encode())


def _decode_partition(batches: Iterable[tuple[ConnectionKey, list]], server_port: int) -> Iterator[tuple]:
    """Decode each 4-tuple of the partition from all its batches."""
    by_connection: dict[ConnectionKey, list[list]] = {}
    for key, batch in batches:
        by_connection.setdefault(key, []).append(batch)
    while by_connection:
        _, parts = by_connection.popitem()
        yield from batch_rows(parts, server_port)


def _is_kind(kind: str, tagged: tuple[str, tuple]) -> bool:
    return tagged[0] == kind


def _count(counts: Counter, tagged: tuple[str, tuple]) -> Counter:
    """Everything the progress lines and the report need, in one pass over the decoded rows."""
    kind, row = tagged
    counts[kind] += 1
    if kind == FRAME:
        counts[row[_DIRECTION]] += 1
    elif kind == CALL:
        counts["unanswered"] += row[_RESPONSE_CODE] is None
    elif kind == REGISTRATION:
        counts["crc_failures"] += row[_CRC_OK] is False
    elif kind == CONNECTION:
        stats = ConnectionStats(*row)
        counts["gaps"] += stats.gaps
        counts["lost_bytes"] += stats.lost_bytes
        counts["undecodable"] += stats.undecodable_bytes > 0
    return counts


def _merge(counts: Counter, more: Counter) -> Counter:
    counts.update(more)
    return counts


class _CounterParam(AccumulatorParam):
    def zero(self, value: Counter) -> Counter:
        return Counter()

    def addInPlace(self, value1: Counter, value2: Counter) -> Counter:
        return _merge(value1, value2)


# -- writing ----------------------------------------------------------------------------------------


def with_timestamps(table: DataFrame) -> DataFrame:
    """Seconds and milliseconds columns as timestamps, in place."""
    for name in SECONDS_COLUMNS:
        table = table.withColumn(name, F.timestamp_seconds(name))
    for name in MILLIS_COLUMNS:
        if name in table.columns:
            table = table.withColumn(name, F.timestamp_millis(name))
    return table


def write_bytes(spark: SparkSession, uri: str, data: bytes) -> None:
    """Write a small driver-side file locally, or through Hadoop's FileSystem for other schemes."""
    if inputs.is_local(uri):
        path = inputs.local_path(uri)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        return
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    stream = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).create(path, True)
    try:
        stream.write(bytearray(data))
    finally:
        stream.close()


def _list_hadoop(spark: SparkSession, uri: str) -> list[tuple[str, int]]:
    """Files at a glob, file or directory (recursively) on any Hadoop filesystem, as (uri, size)."""
    jvm = spark.sparkContext._jvm
    pattern = jvm.org.apache.hadoop.fs.Path(uri)
    fs = pattern.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    found = []
    for status in fs.globStatus(pattern) or []:
        if not status.isDirectory():
            found.append((status.getPath().toString(), status.getLen()))
            continue
        listing = fs.listFiles(status.getPath(), True)
        while listing.hasNext():
            entry = listing.next()
            if not entry.getPath().getName().startswith((".", "_")):
                found.append((entry.getPath().toString(), entry.getLen()))
    return sorted(found)


def _absolute(out: str) -> str:
    return os.path.abspath(inputs.local_path(out)) if inputs.is_local(out) else out.rstrip("/")


def _mib(count: int) -> str:
    return f"{count / (1 << 20):,.1f} MiB"


class _Progress:
    """Numbered stage lines with the time since the job started."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self.log, self.stage, self.started = log, 0, time.monotonic()

    def __call__(self, message: str) -> None:
        self.stage += 1
        self.log(f"[{self.stage}] {time.monotonic() - self.started:7.1f}s  {message}")
