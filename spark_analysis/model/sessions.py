"""Where a row was captured: its input file and its session.

A session is one NameServer endpoint observed continuously: within the captures that carried its
segments (model/periods.rotated_sets: a file, or a rotated set of files each continuing the one
before, in whatever order they were given; captures running at once are observed together), since
nothing is known of a server while nothing captured it. Captures of different clusters, or of one
cluster days apart, are different sessions, and nothing compares observations across sessions; the
rotated files of one capture are one session; a NameServer restarted within them cuts its session
there (model/endpoints.py). It is named ``server@start`` (the period's start, ISO 8601
UTC to the second), the same in every table, brokers.csv and the findings.

Pure (numpy, pyarrow): the decoding tasks fill the ``input`` and ``session`` columns of a batch of
rows in a few vector operations.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_analysis.capture.inputs import shown_name

#: (first, last, path) of each input file with records, in time order
FileSpans = tuple[tuple[float, float, str], ...]


def iso_time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def iso_datetime(text: str) -> datetime:
    """An iso_time's text read back (summary.json's times, as the findings compare them)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def iso_seconds(text: str) -> float:
    """iso_time's inverse: the seconds since the epoch of summary.json's ISO 8601 UTC text."""
    return iso_datetime(text).timestamp()


def iso_time_or_none(seconds: float | None) -> str | None:
    return None if seconds is None else iso_time(seconds)


def period_label(start: float) -> str:
    return f"{iso_time(start)[:19]}Z"


def session_name(server: str | None, period_starts: tuple[float, ...], t: float) -> str:
    """The session of a time at a server: ``server@start of its capture period``."""
    index = max(bisect.bisect_right(period_starts, t) - 1, 0)
    return f"{server or '?'}@{period_label(period_starts[index] if period_starts else t)}"


class Sessions:
    """The sessions of each server endpoint: a span of time it was observed (the captures that
    carried any of its segments: model/periods.observed_spans; without those, the capture
    periods), cut where that endpoint restarted (model/endpoints.py: its own evidence, never
    another endpoint's); named ``server@start``."""

    def __init__(self, period_starts: tuple[float, ...], runs: dict[str, tuple[float, ...]] | None = None,
                 observed: dict[str, tuple[tuple[float, float], ...]] | None = None,
                 period_ends: tuple[float, ...] = (), files: dict[str, frozenset[str]] | None = None) -> None:
        self.period_starts = period_starts
        self.period_ends = period_ends
        self.runs = runs or {}
        self.observed = observed or {}
        self.files = files or {}  # endpoint -> the input files with its segments
        self._starts: dict[str | None, tuple[float, ...]] = {}  # starts(), worked out once per endpoint

    def files_of(self, server: str | None, files: FileSpans) -> FileSpans:
        """Those of ``files`` that carried the endpoint's segments (all, where not known)."""
        mine = self.files.get(server or "")
        return files if not mine else tuple(span for span in files if span[2] in mine)

    def spans(self, server: str | None) -> tuple[tuple[float, float], ...]:
        """When the endpoint was observed: its own spans, else the capture periods."""
        found = self.observed.get(server or "")
        if found:
            return found
        return tuple(zip(self.period_starts, self.period_ends or (float("inf"),) * len(self.period_starts),
                         strict=True))

    def starts(self, server: str | None) -> tuple[float, ...]:
        found = self._starts.get(server)
        if found is None:
            found = self._starts[server] = tuple(sorted({*(start for start, _ in self.spans(server)),
                                                         *self.runs.get(server or "", ())}))
        return found

    def start_of(self, server: str | None, t: float) -> float:
        starts = self.starts(server)
        return starts[max(bisect.bisect_right(starts, t) - 1, 0)] if starts else t

    def runs_of(self, server: str | None, times: Sequence[float]) -> list[tuple[float, int, int]]:
        """``start_of`` of ascending ``times``, by runs: (session start, first index, index after)
        of each session that holds some, in order. One search per session, where a replay of
        50k events searched once per event."""
        starts = self.starts(server)
        if not starts:
            return [(t, index, index + 1) for index, t in enumerate(times)]  # start_of's own answer
        cuts = [0, *(bisect.bisect_left(times, start) for start in starts[1:]), len(times)]
        return [(start, first, after) for start, first, after in zip(starts, cuts, cuts[1:], strict=False)
                if after > first]

    def end_of(self, server: str | None, t: float) -> float:
        """The end of the span the endpoint was observed in that holds ``t`` (a session ends
        there, or where the endpoint went away: model/endpoints.py)."""
        spans = self.spans(server)
        index = max(bisect.bisect_right([start for start, _ in spans], t) - 1, 0)
        return max(spans[index][1], t) if spans else t

    def name(self, server: str | None, t: float) -> str:
        return session_name(server, self.starts(server), t)


#: a row names at most this many input files one by one; more are a run of the time-ordered files,
#: named by its ends and its count (a day of ``tcpdump -G 60`` is 1,440 files: listed whole, one
#: broker's brokers.csv cell was 47 KB, past the 32,767 characters a spreadsheet's cell holds)
LISTED_FILES = 8


def files_within(files: FileSpans, first: float, last: float) -> str:
    """The input files whose records span some of [first, last], space-separated; more than
    LISTED_FILES, the first and the last of them: ``FIRST ... LAST (N files)``."""
    within = [shown_name(path) for start, end, path in files if start <= last and end >= first]
    if len(within) <= LISTED_FILES:
        return " ".join(within)
    return f"{within[0]} ... {within[-1]} ({len(within)} files)"


class Places:
    """Fills ``input`` and ``session`` of rows that have ``ts`` (seconds) and ``server``: the
    input is the last file to start before the row among those that carried its server's segments
    (captures running at once on other machines or ports are not its input)."""

    def __init__(self, files: FileSpans, sessions: Sessions) -> None:
        self._files = files
        paths: list[str | None] = [shown_name(path) for _, _, path in files] or [None]
        self._paths = pa.array(paths, pa.string())
        self._sessions = sessions
        self._by_server: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def _files_of(self, server: str) -> tuple[np.ndarray, np.ndarray]:
        """The indexes and start times of the files that carried the server's segments."""
        found = self._by_server.get(server)
        if found is None:
            carried = {path for _, _, path in self._sessions.files_of(server, self._files)}
            indexes = [n for n, (_, _, path) in enumerate(self._files) if path in carried] or [0]
            found = self._by_server[server] = (np.array(indexes), np.array(
                [self._files[n][0] for n in indexes] if self._files else [0.0]))
        return found

    def fill(self, rows: pa.StructArray) -> pa.StructArray:
        ts = rows.field("ts").to_numpy(zero_copy_only=False)
        server = pc.fill_null(rows.field("server"), "?")
        labels = np.empty(len(ts), object)
        inputs = np.zeros(len(ts), np.int64)  # index into self._paths
        servers = server.to_numpy(zero_copy_only=False)
        for name in set(servers.tolist()):
            starts = np.array(self._sessions.starts(name) or (0.0,))
            mine = servers == name
            index = np.clip(np.searchsorted(starts, ts[mine], "right") - 1, 0, None)
            labels[mine] = np.array([f"@{period_label(start)}" for start in starts], object)[index]
            files, file_starts = self._files_of(name)
            inputs[mine] = files[np.clip(np.searchsorted(file_starts, ts[mine], "right") - 1, 0, None)]
        filled = {"input": self._paths.take(pa.array(inputs)),
                  "session": pc.binary_join_element_wise(server, pa.array(labels, pa.string()), "")}
        fields = list(rows.type)
        return pa.StructArray.from_arrays([filled.get(f.name, rows.field(f.name)) for f in fields], fields=fields)
