"""frames/, calls/ and registrations/ written by the decoding tasks themselves, with pyarrow.

When the output is a local directory and the tasks run on this machine (a local master), each
decoding task writes its rows as one Parquet part file per table: ~15x cheaper than sending the
rows to the JVM, caching them there and writing them with Spark (the three writes cost more than
decoding did). Outputs on other filesystems (hdfs://, s3a://) or under a cluster master keep
Spark's writer (job.py); both give the same columns, with times as UTC timestamps (microseconds).

A task's part files are named by its partition, written under a temporary name and renamed when
complete, so a task run again replaces its files instead of adding rows.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spark_analysis.decode.rows import CALL, CONTROLLER, FRAME, REGISTRATION
from spark_analysis.decode.schema import (
    CALL_ROWS,
    CONTROLLER_ROWS,
    FRAME_ROWS,
    MILLIS_COLUMNS,
    REGISTRATION_ROWS,
    SECONDS_COLUMNS,
)

#: each table's rows kind, directory and row schema (schema.py)
TABLES = ((FRAME, "frames", FRAME_ROWS), (CALL, "calls", CALL_ROWS), (REGISTRATION, "registrations",
                                                                      REGISTRATION_ROWS),
          (CONTROLLER, "controller", CONTROLLER_ROWS))
_TIMESTAMP = pa.timestamp("us", tz="UTC")  # a Parquet timestamp adjusted to UTC: Spark's TimestampType
_ROWS = {kind: rows for kind, _, rows in TABLES}
_DIRECTORY = {kind: name for kind, name, _ in TABLES}


def _file_schema(rows: pa.Schema) -> pa.Schema:
    return pa.schema([field.with_type(_TIMESTAMP) if field.name in SECONDS_COLUMNS + MILLIS_COLUMNS else field
                      for field in rows])


_FILE = {kind: _file_schema(rows) for kind, rows in _ROWS.items()}


def row_type(kind: str) -> pa.StructType:
    """The Arrow struct of a table's rows as decode/rows.py builds them."""
    return pa.struct(list(_ROWS[kind]))


class OutputError(Exception):
    """An output file that could not be written (a full disk, a quota, no permission): its message,
    ``cannot write PATH: REASON``, reaches the driver by this class's name from a task (spark/job.py
    output_problem) and is the run's one line."""


@contextmanager
def writing(path: str) -> Iterator[None]:
    """OSError while writing ``path`` as OutputError naming it."""
    try:
        yield
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise OutputError(f"cannot write {path}: {reason}") from None


def prepare(out: str) -> None:
    """Empty the tables' directories (the job overwrites, as Spark's writer does)."""
    for _, name, _ in TABLES:
        with writing(os.path.join(out, name)):
            shutil.rmtree(os.path.join(out, name), ignore_errors=True)
            os.makedirs(os.path.join(out, name))


def commit(out: str) -> None:
    """Mark the tables complete, as Spark's writer does."""
    for _, name, _ in TABLES:
        open(os.path.join(out, name, "_SUCCESS"), "wb").close()


class PartWriter:
    """One task's part files. Partition 0 writes all three, even empty, so that every table has
    a file giving its schema."""

    def __init__(self, out: str, partition: int) -> None:
        self.out, self.partition = out, partition
        self._writers: dict[str, tuple[pq.ParquetWriter, str]] = {}

    def write(self, kind: str, rows: pa.StructArray) -> None:
        writer, path = self._writer(kind)
        with writing(path):
            writer.write_batch(to_file_batch(kind, rows))

    def close(self) -> None:
        if self.partition == 0:
            for kind in _FILE:
                self._writer(kind)
        for writer, path in self._writers.values():
            with writing(path):
                writer.close()
                os.replace(f"{path}.tmp", path)
        self._writers.clear()

    def _writer(self, kind: str) -> tuple[pq.ParquetWriter, str]:
        if kind not in self._writers:
            path = os.path.join(self.out, _DIRECTORY[kind], f"part-{self.partition:05d}.parquet")
            with writing(path):
                self._writers[kind] = (pq.ParquetWriter(f"{path}.tmp", _FILE[kind], compression="snappy"), path)
        return self._writers[kind]


def to_file_batch(kind: str, rows: pa.StructArray) -> pa.RecordBatch:
    """Rows as the file's columns: seconds and milliseconds become timestamps, converted as
    Spark's timestamp_seconds and timestamp_millis do (seconds x 10^6 truncated, exact millis)."""
    columns = pa.RecordBatch.from_struct_array(rows).columns
    schema = _FILE[kind]
    for index, name in enumerate(schema.names):
        if name in SECONDS_COLUMNS:
            seconds = columns[index].to_numpy(zero_copy_only=False)
            micros = np.trunc(seconds * 1e6).astype(np.int64)
            columns[index] = pa.array(micros, mask=~np.isfinite(seconds), type=pa.int64()).cast(_TIMESTAMP)
        elif name in MILLIS_COLUMNS:
            millis = columns[index]
            columns[index] = pc.multiply(millis, 1000).cast(_TIMESTAMP)
    return pa.RecordBatch.from_arrays(columns, schema=schema)
