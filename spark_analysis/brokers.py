"""Per-broker liveness from the decoded broker events: the rows of brokers.csv, what the findings
say of each broker and what the report plots of it.

A broker stays alive at the NameServer through REGISTER_BROKER requests that are not refused,
QUERY_DATA_VERSION (brokers with forceRegister=false send it every 30 s instead of registering)
and BROKER_HEARTBEAT (5.x); intervals and gaps are measured between those, within a capture
period only (nothing is known of a broker while nothing was captured), and not across an
UNREGISTER_BROKER (a broker that said goodbye is not silent). A broker last heard more than the
expiry before its period's end is silent until that end (an open gap). Brokers are told apart by
their brokerAddr header field.

A shuffle brings each broker's events to one task, which walks them in time order once (a broker
has a few thousand a day) and emits one row: its brokers.csv columns and, as JSON, its gaps,
CRC failures, refusals, topic-count drops, data versions going backwards, id changes, intervals
counted in buckets and heartbeats and topic counts per time bin. The driver collects those rows in
one job, with time bins only where the report may plot them: a task keeps the bins of its first
PLOTTED_BROKERS in the report's order, which include all it has of the brokers plotted.
"""

from __future__ import annotations

import bisect
import csv
import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, BooleanType, DoubleType, LongType, StringType, StructField, StructType

from spark_analysis import worker
from spark_analysis.decode import CONNECTION_CLOSED, EVENT
from spark_analysis.schema import BROKER_COLUMNS
from spark_analysis.sessions import FileSpans, files_within, iso_time, session_name
from twisted_namesrv.remoting import RequestCode

#: a broker silent this long is removed by the NameServer (4.9.8's BROKER_CHANNEL_EXPIRED_TIME,
#: 5.x's default heartbeatTimeoutMillis); a gap over NEAR_EXPIRY_S up to it came close
EXPIRY_SECONDS = 120
NEAR_EXPIRY_S = EXPIRY_SECONDS // 2
#: files whose records are further apart than this are separate capture periods
PERIOD_GAP_S = 60.0
#: the report's per-broker plots: at most this many brokers (those with findings first), over
#: about this many time bins of the capture periods
PLOTTED_BROKERS = 60
TIME_BINS = 800
#: the report's interval distributions: buckets this wide, the last one this many seconds and more
INTERVAL_BUCKET_S = 1
INTERVAL_RANGE_S = 300
_LAST_BUCKET = INTERVAL_RANGE_S // INTERVAL_BUCKET_S
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


class TimeBins(NamedTuple):
    """Time bins over the capture periods, never between them: each period gets a share of
    TIME_BINS by its length (at least one bin), of equal width within it."""

    starts: tuple[float, ...]
    ends: tuple[float, ...]
    first_bin: tuple[int, ...]  # and one more: the total
    widths: tuple[float, ...]

    @classmethod
    def over(cls, periods: list[tuple[float, float]]) -> TimeBins:
        periods = periods or [(0.0, 1.0)]
        total = sum(max(end - start, 1.0) for start, end in periods)
        counts = [max(1, round(TIME_BINS * max(end - start, 1.0) / total)) for start, end in periods]
        firsts = [0]
        for count in counts:
            firsts.append(firsts[-1] + count)
        return cls(tuple(s for s, _ in periods), tuple(e for _, e in periods), tuple(firsts),
                   tuple(max(end - start, 1.0) / count for (start, end), count in zip(periods, counts, strict=True)))

    def period_of(self, t: float) -> int:
        return max(bisect.bisect_right(self.starts, t) - 1, 0)

    def of(self, t: float) -> int:
        period = self.period_of(t)
        within = int((t - self.starts[period]) // self.widths[period])
        return self.first_bin[period] + min(max(within, 0), self.first_bin[period + 1] - self.first_bin[period] - 1)

    def middle(self, index: int) -> float:
        """The middle time of a bin."""
        period = bisect.bisect_right(self.first_bin, index) - 1
        return self.starts[period] + (index - self.first_bin[period] + 0.5) * self.widths[period]


class ConnectionEnds(NamedTuple):
    """How one 4-tuple's segments start and end within one file: whether its first is a SYN (a
    connection opened there) and its last a FIN or RST (closed there)."""

    first: float
    opened: bool
    last: float
    closed: bool

    def merge(self, other: ConnectionEnds | None) -> ConnectionEnds:
        """The same 4-tuple in another byte range of the file: the earlier start, the later end."""
        if other is None:
            return self
        start = self if self.first <= other.first else other
        end = self if self.last >= other.last else other
        return ConnectionEnds(start.first, start.opened, end.last, end.closed)


def server_restarts(files: FileSpans, ends: dict[str, dict[tuple[str, str], ConnectionEnds]]) -> set[float]:
    """The first record times of files that start another server's story although they follow
    the file before within PERIOD_GAP_S: no TCP connection goes on from the one to the other (a
    4-tuple still open at the end of the first that the second carries on without a SYN). Rotated
    files of one capture share the brokers' long-lived connections; captures of another cluster,
    or of a NameServer started again, share none."""
    starts = set()
    for (_, last, before), (first, _, after) in zip(files, files[1:], strict=False):
        if first - last > PERIOD_GAP_S:
            continue
        earlier, later = ends.get(before, {}), ends.get(after, {})
        if not any(not earlier[key].closed and not later[key].opened for key in earlier.keys() & later.keys()):
            starts.add(first)
    return starts


def capture_periods(spans: list[tuple[float, float]], restarts: set[float] = frozenset()  # type: ignore[assignment]
                    ) -> list[tuple[float, float]]:
    """Files' (first, last) record times merged where less than PERIOD_GAP_S apart, unless the
    later file starts another session (``restarts``: server_restarts)."""
    periods: list[list[float]] = []
    for first, last in sorted(spans):
        if periods and first - periods[-1][1] <= PERIOD_GAP_S and first not in restarts:
            periods[-1][1] = max(periods[-1][1], last)
        else:
            periods.append([first, last])
    return [(first, last) for first, last in periods]


@dataclass
class Liveness:
    """What the driver holds: one row per broker address sorted by address (brokers.csv columns
    plus ``details``, parsed), the time bins, and the tallies the rows' tasks passed on."""

    brokers: list[dict]
    time_bins: TimeBins
    tallies: list[bytes]

    def registered(self) -> list[dict]:
        """brokers.csv: the addresses that registered."""
        return [broker for broker in self.brokers if broker["registrations"]]


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


def plot_order(broker: dict) -> tuple:
    """The report plots brokers that registered, with gaps first, then by cluster, name, id and address."""
    return (not broker["registrations"], not (broker["would_expire"] or broker["near_expiry"]), broker["cluster"] or "",
            broker["broker_name"] or "",
            broker["broker_id"] if broker["broker_id"] is not None else -1, broker["broker_addr"])


def role(broker_id: int | None) -> str | None:
    """RocketMQ's own rule: brokerId 0 is the master."""
    return None if broker_id is None else "MASTER" if broker_id == 0 else "SLAVE"


class _Walk:
    """One broker's events walked in time order."""

    def __init__(self, time_bins: TimeBins) -> None:
        self.time_bins = time_bins
        self.intervals: list[float] = []
        self.gaps: list[dict] = []
        self.previous_alive: float | None = None
        self.trailing: list[float] = []  # silences open at a period's end, whatever their length

    def alive(self, t: float) -> None:
        previous = self.previous_alive
        if previous is not None:
            if self.time_bins.period_of(previous) == self.time_bins.period_of(t):
                self.interval(previous, t, False)
            else:
                self.silent_until_period_end()
        self.previous_alive = t

    def interval(self, start: float, end: float, open_: bool) -> None:
        seconds = end - start
        if not open_:
            self.intervals.append(seconds)
        if seconds > NEAR_EXPIRY_S:
            self.gaps.append({"from": start, "to": end, "seconds": seconds, "expired": seconds > EXPIRY_SECONDS,
                              "open": open_})

    def silent_until_period_end(self) -> float | None:
        """A broker still registered when its period ended is silent till then: that silence
        counts in max_gap_s, and over NEAR_EXPIRY_S it is a gap (open). Returns its length."""
        seconds = None
        if self.previous_alive is not None:
            end = self.time_bins.ends[self.time_bins.period_of(self.previous_alive)]
            seconds = max(end - self.previous_alive, 0.0)
            self.trailing.append(seconds)
            self.interval(self.previous_alive, end, True)
        self.previous_alive = None
        return seconds


#: how a broker's story ended (brokers.csv ``ended``; docs/capture-report.md)
ENDED_UNREGISTERED, ENDED_CLOSED, ENDED_EXPIRED, ENDED_NEAR_EXPIRY, ENDED_ALIVE, ENDED_REFUSED = (
    "unregistered", "connection_closed", "expired", "near_expiry", "alive", "refused")


def broker_summary(addr: str, events: list[dict], time_bins: TimeBins,
                   files: FileSpans = ()) -> dict:
    """One broker's brokers.csv columns and details from its events (schema.EVENT_ROWS as dicts).

    Names, cluster, id and version: the last its requests gave; ``registrations``: its
    REGISTER_BROKER requests, refused or not; body sizes: of those; topic counts: what the
    NameServer held for it after each accepted registration (held.py; a slave, whose table the
    server does not apply: what it announced), and their drops; data versions going backwards: of
    accepted registrations; ``closes``: the connections it registered over that closed while it was
    registered (no UNREGISTER_BROKER before: a crash or a kill; the NameServer forgets it at once);
    ``ended``: how its story ended (ENDED_UNREGISTERED ... ENDED_ALIVE)."""
    events.sort(key=lambda event: (event["t"], event["code"] == CONNECTION_CLOSED))
    walk = _Walk(time_bins)
    last: dict = {}
    registered: list[dict] = []
    crc_failures: list[float] = []
    refused: list[dict] = []
    id_changes: list[dict] = []
    closes: list[dict] = []
    bins: dict[int, list] = {}
    last_unregister = None
    ending = None  # ENDED_UNREGISTERED or ENDED_CLOSED while the broker is gone from the server
    for event in events:
        t = event["t"]
        if event["code"] == CONNECTION_CLOSED:
            if ending is None and walk.previous_alive is not None:
                closes.append({"t": t, "how": event["closed"], "last_alive": walk.previous_alive, "back": None,
                               "server": event["server"]})
                walk.previous_alive = None
                ending = ENDED_CLOSED
            continue
        if event["broker_id"] is not None and last.get("broker_id") not in (None, event["broker_id"]):
            id_changes.append({"t": t, "from": last["broker_id"], "to": event["broker_id"]})
        last.update({key: value for key, value in event.items() if value is not None})
        cell = bins.setdefault(time_bins.of(t), [0, None])
        if event["code"] == RequestCode.REGISTER_BROKER:
            if event["crc_ok"] is False:
                crc_failures.append(t)
            if event["response_code"]:
                refused.append({"t": t, "response_code": event["response_code"],
                                "crc_failure": event["crc_ok"] is False})
            else:
                registered.append(event)
                held = _topics(event)
                if held is not None:
                    cell[1] = max(cell[1] or 0, held)
        elif event["code"] == RequestCode.UNREGISTER_BROKER:
            last_unregister = t
            walk.previous_alive = None
            ending = ENDED_UNREGISTERED
        if event["alive"]:
            cell[0] += 1
            if ending == ENDED_CLOSED and closes and closes[-1]["back"] is None:
                closes[-1]["back"] = t
            ending = None
            walk.alive(t)
    trailing = walk.silent_until_period_end()
    registrations = [e for e in events if e["code"] == RequestCode.REGISTER_BROKER]
    requests = [e for e in events if e["code"] != CONNECTION_CLOSED] or events
    unregistered = last_unregister is not None and (not registrations or last_unregister >= registrations[-1]["t"])
    if not any(event["alive"] for event in events):
        ending = ENDED_REFUSED  # never registered: the server refused every registration
    elif ending is None:
        ending = ENDED_ALIVE if trailing is None or trailing <= NEAR_EXPIRY_S else (
            ENDED_EXPIRED if trailing > EXPIRY_SECONDS else ENDED_NEAR_EXPIRY)
    topics = [held for held in map(_topics, registered) if held is not None]
    sizes = [e["body_len"] for e in registrations if e["body_len"] is not None]
    compressed = {e["compressed"] for e in registrations if e["compressed"] is not None}
    percentiles = np.percentile(walk.intervals, [50, 90, 99]).tolist() if walk.intervals else [None] * 3
    buckets = [0] * (_LAST_BUCKET + 1)
    for interval in walk.intervals:
        buckets[min(int(interval // INTERVAL_BUCKET_S), _LAST_BUCKET)] += 1
    ordered_bins = sorted(bins)
    return {
        "session": session_name(last.get("server"), time_bins.starts, events[0]["t"]),
        "input": files_within(files, events[0]["t"], events[-1]["t"]),
        "cluster": last.get("cluster"), "broker_name": last.get("broker_name"), "broker_id": last.get("broker_id"),
        "role": role(last.get("broker_id")), "broker_addr": addr, "version": last.get("version_name"),
        "first_seen": requests[0]["t"], "last_seen": requests[-1]["t"], "registrations": len(registrations),
        "refused_registrations": len(refused), "crc_failures": len(crc_failures),
        "interval_p50_s": percentiles[0], "interval_p90_s": percentiles[1], "interval_p99_s": percentiles[2],
        "max_gap_s": max(walk.intervals + walk.trailing, default=None),
        "near_expiry": sum(not gap["expired"] for gap in walk.gaps),
        "would_expire": sum(gap["expired"] for gap in walk.gaps),
        "body_len_min": min(sizes, default=None), "body_len_median": float(np.median(sizes)) if sizes else None,
        "body_len_max": max(sizes, default=None),
        "compressed": "mixed" if len(compressed) > 1 else str(compressed.pop()).lower() if compressed else None,
        "topic_count_first": topics[0] if topics else None, "topic_count_last": topics[-1] if topics else None,
        "topic_count_max": max(topics, default=None), "unregistered": unregistered, "ended": ending,
        "connection_closes": len(closes),
        "gaps": walk.gaps, "crc_failure_times": crc_failures, "refused": refused, "id_changes": id_changes,
        "closes": closes, "last_alive": max((e["t"] for e in events if e["alive"]), default=None),
        "trailing_s": trailing, "server": last.get("server"), "unregistered_at": last_unregister,
        "topic_drops": _drops([{**e, "held": held} for e in registered if (held := _topics(e)) is not None], "held"),
        "version_backwards": _drops(registered, "data_version_counter", "data_version_ts"),
        "interval_buckets": buckets,
        "bins": {"bin": ordered_bins, "heartbeats": [bins[index][0] for index in ordered_bins],
                 "topics": [bins[index][1] for index in ordered_bins]},
    }


def _topics(registration: dict) -> int | None:
    """The topics the NameServer holds for a broker after an accepted registration; for a slave,
    whose table it does not apply, the topics it announced."""
    held = registration["topics_held"]
    return registration["topic_count"] if held is None else held


def _drops(registrations: list[dict], key: str, *also: str) -> list[dict]:
    """Where ``key`` of accepted registrations went down from one to the next (with ``also``)."""
    drops = []
    previous = None
    for event in registrations:
        if event[key] is None:
            continue
        if previous is not None and event[key] < previous[key]:
            drops.append({"t": event["t"], "from": previous[key], "to": event[key],
                          **{f"{name}_from": previous[name] for name in also},
                          **{f"{name}_to": event[name] for name in also}})
        previous = event
    return drops


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
    if column in ("first_seen", "last_seen"):
        return iso_time(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.3f}"
    return value
