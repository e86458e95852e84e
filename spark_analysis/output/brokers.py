"""brokers.csv and clients.csv (docs/capture-report.md): one writer for both, so that every text
cell a capture's peer chose (a broker's name, its cluster, a client's language) is written as text
a spreadsheet shows, never as a formula it runs."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from typing import Any

from spark_analysis.analysis.clients import CLIENT_COLUMNS
from spark_analysis.decode.schema import BROKERS_CSV_COLUMNS
from spark_analysis.model.sessions import iso_time
from twisted_namesrv.remoting.fastjson import java_utf8

#: what makes Excel, LibreOffice and Google Sheets read a cell as a formula (OWASP's CSV injection
#: list): a broker registered as ``=HYPERLINK("http://…")`` became a link in the operator's sheet
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_text(value: str) -> str:
    """``value``, or ``'value`` where a spreadsheet would take it for a formula (the quote is what a
    spreadsheet itself puts before such text; summary.json and the Parquet tables keep it exact)."""
    return f"'{value}" if value.startswith(FORMULA_STARTS) else value


def brokers_csv(registered: list[dict]) -> bytes:
    """The brokers that registered (Liveness.registered): times as ISO 8601 UTC, durations in
    seconds to the millisecond, booleans as true/false."""
    return _csv(BROKERS_CSV_COLUMNS, ([_broker_value(column, broker[column]) for column in BROKERS_CSV_COLUMNS]
                                 for broker in registered))


def clients_csv(rows: list[dict[str, Any]]) -> bytes:
    """Who talked to the NameServers (analysis/clients.py's rows)."""
    return _csv(CLIENT_COLUMNS, ([_text(row[column]) for column in CLIENT_COLUMNS] for row in rows))


def _csv(columns: Iterable[str], rows: Iterable[list[object]]) -> bytes:
    """``rows`` written as given: their text already made spreadsheet_text (_text), so that a
    number the writer formatted, ``-0.500``, stays a number."""
    text = io.StringIO()
    plain = csv.writer(text, lineterminator="\n")
    # Python's writer quotes a field holding \n (the line terminator) but not one holding a lone \r,
    # where spreadsheets and most readers end the row: a row with one has every field quoted
    quoted = csv.writer(text, lineterminator="\n", quoting=csv.QUOTE_ALL)
    plain.writerow(columns)
    for row in rows:
        (quoted if any(isinstance(cell, str) and "\r" in cell for cell in row) else plain).writerow(row)
    return java_utf8(text.getvalue())  # a lone surrogate (JSON carries one) as Java writes it, '?'


def _text(value: object) -> object:
    """A cell as a peer's value: text as spreadsheet_text, None empty, anything else as it is."""
    if value is None:
        return ""
    return spreadsheet_text(value) if isinstance(value, str) else value


def _broker_value(column: str, value: object) -> object:
    if value is None:
        return ""
    if column in ("first_seen", "last_seen", "ended_at"):
        return iso_time(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.3f}"
    return _text(value)
