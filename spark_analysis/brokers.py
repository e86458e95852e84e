"""Per-broker liveness from the decoded broker events: the rows of brokers.csv and what the
report plots of each broker.

A broker stays alive at the NameServer through REGISTER_BROKER requests that are not refused,
QUERY_DATA_VERSION (brokers with forceRegister=false send it every 30 s instead of registering)
and BROKER_HEARTBEAT (5.x); intervals and gaps are measured between those. Brokers are told
apart by their brokerAddr header field.

A shuffle brings each broker's events to one task, which walks them in time order once (a broker
has a few thousand a day) and emits one row: its brokers.csv columns, its intervals counted in
buckets, its gaps over the expiry and its heartbeats and topic counts per time bin. The driver
collects those rows in one job, with time bins only where the report may plot them: a task keeps
the bins of its first PLOTTED_BROKERS in the report's order, which include all it has of the
brokers plotted.
"""

from __future__ import annotations

import csv
import io
import statistics
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from typing import NamedTuple

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, Row
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from spark_analysis import worker
from spark_analysis.schema import BROKER_COLUMNS
from twisted_namesrv.remoting import RequestCode

#: a broker silent this long is removed by the NameServer (4.9.8's BROKER_CHANNEL_EXPIRED_TIME,
#: 5.x's default heartbeatTimeoutMillis)
EXPIRY_SECONDS = 120
#: the report's per-broker plots: at most this many brokers (those with expiring gaps first), over
#: this many equal time bins of the capture's NameServer traffic
PLOTTED_BROKERS = 60
TIME_BINS = 800
#: the report's interval histogram: buckets this wide, the last one this many seconds and more
INTERVAL_BUCKET_S = 5
INTERVAL_RANGE_S = 300
_LAST_BUCKET = INTERVAL_RANGE_S // INTERVAL_BUCKET_S


def _struct(*fields: tuple[str, object]) -> StructType:
    return StructType([StructField(name, kind, True) for name, kind in fields])


LIVENESS = _struct(
    ("broker_addr", StringType()), ("broker_name", StringType()), ("first_seen", DoubleType()),
    ("last_seen", DoubleType()), ("registrations", LongType()), ("median_interval_s", DoubleType()),
    ("max_gap_s", DoubleType()), ("would_expire", BooleanType()), ("unregistered", BooleanType()),
    ("last_topic_count", IntegerType()),
    ("interval_buckets", ArrayType(LongType())),  # index: bucket
    ("gaps", ArrayType(_struct(("t", DoubleType()), ("interval", DoubleType())))),
    # per time bin with events, as three lists (a struct per bin costs the driver a Row object each)
    ("bins", _struct(("bin", ArrayType(IntegerType())), ("heartbeats", ArrayType(IntegerType())),
                     ("topics", ArrayType(IntegerType())))),
)
_ARROW_LIVENESS = to_arrow_schema(LIVENESS)


class TimeBins(NamedTuple):
    """TIME_BINS equal bins from ``start``, spanning the capture's segments on the port (the
    reading tasks find that span before anything is decoded)."""

    start: float
    width: float

    @classmethod
    def spanning(cls, first: float | None, last: float | None) -> TimeBins:
        if first is None or last is None:
            return cls(0.0, 1.0)
        return cls(first, max(last - first, 1.0) / TIME_BINS)

    def of(self, t: float) -> int:
        return int((t - self.start) // self.width)

    def middle(self, index: int | np.ndarray) -> float | np.ndarray:
        """The middle time of a bin (or of each of an array of bins)."""
        return self.start + (index + 0.5) * self.width


@dataclass
class Liveness:
    """What the driver holds: brokers.csv rows sorted by address, the interval histogram of all
    brokers, the gaps over the expiry and the time bins of the plotted brokers."""

    brokers: list[dict]
    interval_counts: dict[int, int]  # bucket -> intervals
    gaps: list[tuple[str, float, float]]  # (broker_addr, t, interval): silent from t - interval to t
    bins: dict[str, list[tuple[int, int, int | None]]]  # broker_addr -> (bin, heartbeats, topics)
    time_bins: TimeBins


def broker_liveness(events: DataFrame, time_bins: TimeBins) -> Liveness:
    """Liveness from the decoded broker events (schema.EVENT_ROWS), in one pass over them."""
    cores = events.sparkSession.sparkContext.defaultParallelism  # a task per core, however few brokers
    rows = events.repartition(cores, "broker_addr").mapInArrow(partial(_liveness_batches, time_bins=time_bins),
                                                               LIVENESS).collect()
    plotted = sorted(rows, key=plot_order)[:PLOTTED_BROKERS]
    bins = {row.broker_addr: list(zip(*row.bins, strict=True)) for row in plotted}
    rows.sort(key=lambda row: row.broker_addr)
    interval_counts: Counter = Counter()
    gaps = []
    for row in rows:
        interval_counts.update({bucket: n for bucket, n in enumerate(row.interval_buckets) if n})
        gaps += [(row.broker_addr, gap.t, gap.interval) for gap in row.gaps]
    brokers = [{column: row[column] for column in BROKER_COLUMNS} for row in rows]
    return Liveness(brokers, dict(interval_counts), gaps, bins, time_bins)


def _liveness_batches(batches: Iterable[pa.RecordBatch], time_bins: TimeBins) -> Iterator[pa.RecordBatch]:
    """mapInArrow over a partition of events: one LIVENESS row per broker."""
    worker.settle()
    by_broker: dict[str, list[tuple]] = {}
    for batch in batches:
        columns = batch.to_pydict()
        for addr, *event in zip(columns["broker_addr"], columns["t"], columns["broker_name"], columns["code"],
                                columns["alive"], columns["topic_count"], strict=True):
            by_broker.setdefault(addr, []).append(event)
    rows = sorted((broker_summary(addr, events, time_bins) for addr, events in by_broker.items()), key=plot_order)
    for row in rows[PLOTTED_BROKERS:]:
        row["bins"] = None
    if rows:
        yield pa.RecordBatch.from_pylist(rows, schema=_ARROW_LIVENESS)


def plot_order(broker: dict | Row) -> tuple[bool, str]:
    """The report plots brokers with expiring gaps first, then by address."""
    return not broker["would_expire"], broker["broker_addr"]


def broker_summary(addr: str, events: list[list], time_bins: TimeBins) -> dict:
    """One broker's LIVENESS row from its events as [t, broker_name, code, alive, topic_count].

    ``broker_name``: the last name its requests gave; ``registrations``: its REGISTER_BROKER
    requests, refused or not; ``last_topic_count``: its last registration's; ``unregistered``: its
    last word was UNREGISTER_BROKER (no registration after it)."""
    events.sort(key=lambda event: event[0])
    name = last_topic_count = previous_alive = last_registration = last_unregister = None
    registrations = 0
    intervals: list[float] = []
    gaps: list[dict] = []
    bins: dict[int, list] = {}
    for t, broker_name, code, alive, topic_count in events:
        if broker_name is not None:
            name = broker_name
        if code == RequestCode.REGISTER_BROKER:
            registrations += 1
            last_registration, last_topic_count = t, topic_count
        elif code == RequestCode.UNREGISTER_BROKER:
            last_unregister = t
        cell = bins.setdefault(time_bins.of(t), [0, None])
        if topic_count is not None and (cell[1] is None or topic_count > cell[1]):
            cell[1] = topic_count
        if not alive:
            continue
        cell[0] += 1
        if previous_alive is not None:
            intervals.append(t - previous_alive)
            if intervals[-1] > EXPIRY_SECONDS:
                gaps.append({"t": t, "interval": intervals[-1]})
        previous_alive = t
    buckets = [0] * (_LAST_BUCKET + 1)
    for interval in intervals:
        buckets[min(int(interval // INTERVAL_BUCKET_S), _LAST_BUCKET)] += 1
    max_gap = max(intervals, default=None)
    ordered_bins = sorted(bins)
    return {
        "broker_addr": addr, "broker_name": name, "first_seen": events[0][0], "last_seen": events[-1][0],
        "registrations": registrations, "median_interval_s": statistics.median(intervals) if intervals else None,
        "max_gap_s": max_gap, "would_expire": (max_gap or 0) > EXPIRY_SECONDS,
        "unregistered": last_unregister is not None and (last_registration is None
                                                         or last_unregister >= last_registration),
        "last_topic_count": last_topic_count, "interval_buckets": buckets, "gaps": gaps,
        "bins": {"bin": ordered_bins, "heartbeats": [bins[index][0] for index in ordered_bins],
                 "topics": [bins[index][1] for index in ordered_bins]},
    }


def brokers_csv(brokers: list[dict]) -> bytes:
    """Times as ISO 8601 UTC, durations in seconds to the millisecond, booleans as true/false."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(BROKER_COLUMNS)
    for broker in brokers:
        writer.writerow([_csv_value(column, broker[column]) for column in BROKER_COLUMNS])
    return text.getvalue().encode()


def _csv_value(column: str, value: object) -> object:
    if value is None:
        return ""
    if column in ("first_seen", "last_seen"):
        return iso_time(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.3f}"
    return value


def iso_time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")
