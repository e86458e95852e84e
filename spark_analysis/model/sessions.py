"""Where a row was captured: its input file and its session.

A session is one NameServer endpoint observed continuously: within one capture period (the input
files' record spans merged where less than brokers.PERIOD_GAP_S apart), since nothing is known of a
server while nothing was captured. Captures of different clusters, or of one cluster days apart,
are different sessions, and nothing compares observations across sessions; rotated files of one
capture are one period, so one session; a NameServer restarted within a file cuts its period
there (model/periods.restarts_within). It is named ``server@start`` (the period's start, ISO 8601
UTC to the second), the same in every table, brokers.csv and the findings.

Pure (numpy, pyarrow): the decoding tasks fill the ``input`` and ``session`` columns of a batch of
rows in a few vector operations.
"""

from __future__ import annotations

import bisect
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: (first, last, path) of each input file with records, in time order
FileSpans = tuple[tuple[float, float, str], ...]


def iso_time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def iso_time_or_none(seconds: float | None) -> str | None:
    return None if seconds is None else iso_time(seconds)


def period_label(start: float) -> str:
    return f"{iso_time(start)[:19]}Z"


def session_name(server: str | None, period_starts: tuple[float, ...], t: float) -> str:
    """The session of a time at a server: ``server@start of its capture period``."""
    index = max(bisect.bisect_right(period_starts, t) - 1, 0)
    return f"{server or '?'}@{period_label(period_starts[index] if period_starts else t)}"


def files_within(files: FileSpans, first: float, last: float) -> str:
    """The input files whose records span some of [first, last], space-separated."""
    return " ".join(path for start, end, path in files if start <= last and end >= first)


class Places:
    """Fills ``input`` and ``session`` of rows that have ``ts`` (seconds) and ``server``."""

    def __init__(self, files: FileSpans, period_starts: tuple[float, ...]) -> None:
        self._file_starts = np.array([start for start, _, _ in files] or [0.0])
        paths: list[str | None] = [path for _, _, path in files] or [None]
        self._paths = pa.array(paths, pa.string())
        self._period_starts = np.array(period_starts or (0.0,))
        self._periods = pa.array([f"@{period_label(start)}" for start in period_starts or (0.0,)], pa.string())

    def fill(self, rows: pa.StructArray) -> pa.StructArray:
        ts = rows.field("ts").to_numpy(zero_copy_only=False)
        files = np.clip(np.searchsorted(self._file_starts, ts, "right") - 1, 0, None)
        periods = np.clip(np.searchsorted(self._period_starts, ts, "right") - 1, 0, None)
        server = pc.fill_null(rows.field("server"), "?")
        filled = {"input": self._paths.take(pa.array(files)),
                  "session": pc.binary_join_element_wise(server, self._periods.take(pa.array(periods)), "")}
        fields = list(rows.type)
        return pa.StructArray.from_arrays([filled.get(f.name, rows.field(f.name)) for f in fields], fields=fields)
