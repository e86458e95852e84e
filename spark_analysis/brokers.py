"""Per-broker liveness from the decoded broker events: the rows of brokers.csv and the intervals
the report plots. Computed in Spark; only one row per broker reaches the driver.

A broker stays alive at the NameServer through REGISTER_BROKER requests that are not refused,
QUERY_DATA_VERSION (brokers with forceRegister=false send it every 30 s instead of registering)
and BROKER_HEARTBEAT (5.x); intervals and gaps are measured between those. Brokers are told
apart by their brokerAddr header field.
"""

from __future__ import annotations

import csv
import io
from datetime import datetime, timezone

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from spark_analysis.schema import BROKER_COLUMNS
from twisted_namesrv.remoting import RequestCode

#: a broker silent this long is removed by the NameServer (4.9.8's BROKER_CHANNEL_EXPIRED_TIME,
#: 5.x's default heartbeatTimeoutMillis)
EXPIRY_SECONDS = 120


def broker_events(events: DataFrame) -> DataFrame:
    """The decoded broker events (schema.EVENT_ROWS) with ``interval``: for alive ones, seconds
    since the broker's previous sign of life."""
    earlier = Window.partitionBy("broker_addr").orderBy("t").rowsBetween(Window.unboundedPreceding, -1)
    previous_alive = F.max(F.when(F.col("alive"), F.col("t"))).over(earlier)
    return events.withColumn("interval", F.when(F.col("alive"), F.col("t") - previous_alive))


def broker_rows(events: DataFrame) -> list[dict]:
    """brokers.csv as dicts, sorted by address, from broker_events. ``unregistered``: the broker's
    last word was UNREGISTER_BROKER (no registration after it); ``first_seen``/``last_seen``
    (seconds) span every request naming it, and ``broker_name`` is the last name they gave."""
    registered_at = F.when(F.col("code") == RequestCode.REGISTER_BROKER, F.col("t"))
    summary = events.groupBy("broker_addr").agg(
        F.min("t").alias("first_seen"), F.max("t").alias("last_seen"),
        F.max_by("broker_name", F.when(F.col("broker_name").isNotNull(), F.col("t"))).alias("broker_name"),
        F.count(registered_at).alias("registrations"), F.max(registered_at).alias("last_registration"),
        F.max_by("topic_count", registered_at).alias("last_topic_count"),
        F.percentile("interval", 0.5).alias("median_interval_s"), F.max("interval").alias("max_gap_s"),
        F.max(F.when(F.col("code") == RequestCode.UNREGISTER_BROKER, F.col("t"))).alias("last_unregister"),
    ).orderBy("broker_addr")
    return [_broker_row(row.asDict()) for row in summary.collect()]


def _broker_row(row: dict) -> dict:
    last_unregister, last_registration = row["last_unregister"], row["last_registration"]
    row["would_expire"] = (row["max_gap_s"] or 0) > EXPIRY_SECONDS
    row["unregistered"] = last_unregister is not None and (
        last_registration is None or last_unregister >= last_registration)
    return {column: row[column] for column in BROKER_COLUMNS}


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
