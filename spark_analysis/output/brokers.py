"""brokers.csv: one row per broker and session that registered (docs/capture-report.md)."""

from __future__ import annotations

import csv
import io

from spark_analysis.decode.schema import BROKER_COLUMNS
from spark_analysis.model.sessions import iso_time


def brokers_csv(registered: list[dict]) -> bytes:
    """The brokers that registered (Liveness.registered): times as ISO 8601 UTC, durations in
    seconds to the millisecond, booleans as true/false."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(BROKER_COLUMNS)
    for broker in registered:
        writer.writerow([_csv_value(column, broker[column]) for column in BROKER_COLUMNS])
    return text.getvalue().encode()


def _csv_value(column: str, value: object) -> object:
    if value is None:
        return ""
    if column in ("first_seen", "last_seen", "ended_at"):
        return iso_time(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.3f}"
    return value
