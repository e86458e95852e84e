"""The liveness stage: a shuffle brings each broker's events to one task, which walks them
(analysis/liveness.py) and emits one row per broker and session: its brokers.csv columns and, as
JSON, the rest; the decoding tasks' tallies pass through with them to the driver, in one job."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from functools import partial

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, BooleanType, DoubleType, LongType, StringType, StructField, StructType

from spark_analysis.analysis.liveness import Liveness, broker_summary, plot_order
from spark_analysis.decode.rows import EVENT
from spark_analysis.decode.schema import BROKER_COLUMNS
from spark_analysis.model.periods import PLOTTED_BROKERS, TimeBins
from spark_analysis.model.sessions import FileSpans
from spark_analysis.spark import worker

#: brokers.csv columns by type; the rest (JSON ``details``) is read by findings.py and report.py
_COLUMN_TYPES = {
    **dict.fromkeys(("session", "input", "cluster", "broker_name", "role", "broker_addr", "version", "compressed",
                     "ended"),
                    StringType()),
    "unregistered": BooleanType(),
    **dict.fromkeys(("first_seen", "last_seen", "interval_p50_s", "interval_p90_s", "interval_p99_s", "max_gap_s",
                     "body_len_median"), DoubleType()),
}
LIVENESS = StructType([StructField(column, _COLUMN_TYPES.get(column, LongType()), True) for column in BROKER_COLUMNS]
                      + [StructField("details", StringType(), True), StructField("tally", BinaryType(), True)])
_ARROW_LIVENESS = to_arrow_schema(LIVENESS)


def broker_liveness(events: DataFrame, time_bins: TimeBins, files: FileSpans = ()
                    ) -> Liveness:
    """Liveness from the decoded broker events in one pass over them: a column EVENT
    (schema.EVENT_ROWS), and ``tally``, which rows of the decoding tasks' tallies hold instead and
    which is passed on to the driver. The events stay one struct column: each column of a plan
    costs the driver a few calls to the JVM, between the Spark jobs, with both cores idle."""
    cores = events.sparkSession.sparkContext.defaultParallelism  # a task per core, however few brokers
    rows = events.repartition(cores, f"{EVENT}.broker_addr").mapInArrow(
        partial(_liveness_batches, time_bins=time_bins, files=files), LIVENESS).collect()
    tallies = [row.tally for row in rows if row.tally is not None]
    brokers = [{**row.asDict(), **json.loads(row.details)} for row in rows if row.tally is None]
    for broker in brokers:
        del broker["details"], broker["tally"]
    brokers.sort(key=lambda broker: (broker["session"], broker["broker_addr"]))
    return Liveness(brokers, time_bins, tallies)


def _liveness_batches(batches: Iterable[pa.RecordBatch], time_bins: TimeBins,
                      files: FileSpans = ()) -> Iterator[pa.RecordBatch]:
    """mapInArrow over a partition of events: one LIVENESS row per broker and session, and the tallies."""
    worker.settle()
    by_broker: dict[tuple, list[dict]] = {}
    tallies = []
    for batch in batches:
        tallies += [tally for tally in batch.column(1).to_pylist() if tally is not None]
        for event in batch.column(0).to_pylist():
            if event is not None:
                key = (event["broker_addr"], event["server"], time_bins.period_of(event["t"]))
                by_broker.setdefault(key, []).append(event)
    rows = sorted((broker_summary(key[0], events, time_bins, files) for key, events in by_broker.items()),
                  key=plot_order)
    worker.drill("liveness")
    for row in rows[PLOTTED_BROKERS:]:
        row["bins"] = None
    rows = [{**{column: row[column] for column in BROKER_COLUMNS}, "details": json.dumps(
        {key: value for key, value in row.items() if key not in BROKER_COLUMNS}), "tally": None} for row in rows]
    rows += [{"tally": tally} for tally in tallies]
    if rows:
        yield pa.RecordBatch.from_pylist(rows, schema=_ARROW_LIVENESS)
