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


class Sessions:
    """The sessions of each server endpoint: a capture period, cut where that endpoint restarted
    (model/endpoints.py: its own evidence, never another endpoint's); named ``server@start``."""

    def __init__(self, period_starts: tuple[float, ...], runs: dict[str, tuple[float, ...]] | None = None) -> None:
        self.period_starts = period_starts
        self.runs = runs or {}

    def starts(self, server: str | None) -> tuple[float, ...]:
        return tuple(sorted({*self.period_starts, *self.runs.get(server or "", ())}))

    def start_of(self, server: str | None, t: float) -> float:
        starts = self.starts(server)
        return starts[max(bisect.bisect_right(starts, t) - 1, 0)] if starts else t

    def name(self, server: str | None, t: float) -> str:
        return session_name(server, self.starts(server), t)


def files_within(files: FileSpans, first: float, last: float) -> str:
    """The input files whose records span some of [first, last], space-separated."""
    return " ".join(path for start, end, path in files if start <= last and end >= first)


class Places:
    """Fills ``input`` and ``session`` of rows that have ``ts`` (seconds) and ``server``."""

    def __init__(self, files: FileSpans, sessions: Sessions) -> None:
        self._file_starts = np.array([start for start, _, _ in files] or [0.0])
        paths: list[str | None] = [path for _, _, path in files] or [None]
        self._paths = pa.array(paths, pa.string())
        self._sessions = sessions

    def fill(self, rows: pa.StructArray) -> pa.StructArray:
        ts = rows.field("ts").to_numpy(zero_copy_only=False)
        files = np.clip(np.searchsorted(self._file_starts, ts, "right") - 1, 0, None)
        server = pc.fill_null(rows.field("server"), "?")
        labels = np.empty(len(ts), object)
        servers = server.to_numpy(zero_copy_only=False)
        for name in set(servers.tolist()):
            starts = np.array(self._sessions.starts(name) or (0.0,))
            mine = servers == name
            index = np.clip(np.searchsorted(starts, ts[mine], "right") - 1, 0, None)
            labels[mine] = np.array([f"@{period_label(start)}" for start in starts], object)[index]
        filled = {"input": self._paths.take(pa.array(files)),
                  "session": pc.binary_join_element_wise(server, pa.array(labels, pa.string()), "")}
        fields = list(rows.type)
        return pa.StructArray.from_arrays([filled.get(f.name, rows.field(f.name)) for f in fields], fields=fields)
