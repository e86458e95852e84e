"""The liveness stage: a shuffle brings each server endpoint's broker and admin events to one task,
which replays them through the NameServer's own state machine (analysis/replay.py) and emits one
row per broker stay: its brokers.csv columns and, as JSON, the rest; and a row of the stories the
stays tell together (fail-overs, moves, re-numbering, topics deleted, write permission) and of the
route lookups that found no route, each with the cause the replay saw (or none). The
decoding tasks' tallies pass through with them to the driver, in one job."""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterable, Iterator
from functools import partial

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, BooleanType, DoubleType, LongType, StringType, StructField, StructType

from spark_analysis.analysis.liveness import Liveness, broker_summary, plot_order
from spark_analysis.analysis.replay import lookup_stories, replay_server
from spark_analysis.decode.schema import BROKER_COLUMNS, EVENT_ROWS
from spark_analysis.model.endpoints import EndpointStory
from spark_analysis.model.periods import PLOTTED_BROKERS, TimeBins
from spark_analysis.model.sessions import FileSpans, Sessions
from spark_analysis.spark import worker

#: brokers.csv columns by type; the rest (JSON ``details``) is read by findings.py and report.py
_COLUMN_TYPES = {
    **dict.fromkeys(("session", "server", "input", "cluster", "broker_name", "role", "broker_addr", "version",
                     "compressed", "ended"),
                    StringType()),
    "unregistered": BooleanType(),
    **dict.fromkeys(("first_seen", "last_seen", "interval_p50_s", "interval_p90_s", "interval_p99_s", "max_gap_s",
                     "body_len_median", "ended_at"), DoubleType()),
}
LIVENESS = StructType([StructField(column, _COLUMN_TYPES.get(column, LongType()), True) for column in BROKER_COLUMNS]
                      + [StructField("details", StringType(), True), StructField("stories", StringType(), True),
                         StructField("tally", BinaryType(), True)])
_ARROW_LIVENESS = to_arrow_schema(LIVENESS)
_EVENT_COLUMNS = EVENT_ROWS.names


def broker_liveness(events: DataFrame, time_bins: TimeBins, files: FileSpans = (), sessions: Sessions | None = None,
                    endpoints: dict[str, EndpointStory] | None = None) -> Liveness:
    """Liveness from the decoded broker events in one pass over them: a column EVENT (pickled lists
    of schema.EVENT_ROWS tuples, each of the server endpoint ``event_server``), and ``tally``, which
    rows of the decoding tasks' tallies hold instead and which is passed on to the driver. One
    column of events: each column of a plan costs the driver a few calls to the JVM, between the
    Spark jobs, with both cores idle."""
    cores = events.sparkSession.sparkContext.defaultParallelism  # a task per core, however few brokers
    sessions = sessions or Sessions(time_bins.starts, period_ends=time_bins.ends)
    rows = events.repartition(cores, "event_server").mapInArrow(
        partial(_liveness_batches, time_bins=time_bins, files=files, sessions=sessions, endpoints=endpoints or {}),
        LIVENESS).collect()
    tallies = [row.tally for row in rows if row.tally is not None]
    stories = [story for row in rows if row.stories is not None for story in json.loads(row.stories)]
    brokers = [{**row.asDict(), **json.loads(row.details)} for row in rows if row.details is not None]
    for broker in brokers:
        del broker["details"], broker["tally"], broker["stories"]
    brokers.sort(key=lambda broker: (broker["session"], broker["broker_addr"], broker["first_seen"]))
    return Liveness(brokers, time_bins, tallies, stories)


def _liveness_batches(batches: Iterable[pa.RecordBatch], time_bins: TimeBins, files: FileSpans,
                      sessions: Sessions, endpoints: dict[str, EndpointStory]) -> Iterator[pa.RecordBatch]:
    """mapInArrow over a partition of events: each server endpoint's replay, one LIVENESS row per
    broker stay, a row of its stories, and the tallies."""
    worker.settle()
    with worker.no_cycle_collection():
        by_server: dict[str, list[dict]] = {}
        tallies = []
        for batch in batches:
            tallies += [tally for tally in batch.column(2).to_pylist() if tally is not None]
            # each pickled list is of one server's events (job._send), which event_server names
            for events, server in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True):
                if events is not None:
                    by_server.setdefault(server or "?", []).extend(
                        [dict(zip(_EVENT_COLUMNS, row, strict=True)) for row in pickle.loads(events)])
        stays, stories = [], []
        for server, events in by_server.items():
            replay = replay_server(server, events, sessions, endpoints.get(server),
                                   lambda t, server=server: sessions.end_of(server, t))
            stays += [stay for stay in replay.stays if stay.events]
            stories += replay.stories + lookup_stories(replay.lookups, server)
        rows = sorted((broker_summary(stay, time_bins, sessions.files_of(stay.server, files),
                                      sessions.end_of(stay.server, stay.registered))
                       for stay in stays), key=plot_order)
        worker.drill("liveness")
        for row in rows[PLOTTED_BROKERS:]:
            row["bins"] = None
        rows = [{**{column: row[column] for column in BROKER_COLUMNS}, "details": json.dumps(
            {key: value for key, value in row.items() if key not in BROKER_COLUMNS}), "tally": None} for row in rows]
        if stories:
            rows.append({"stories": json.dumps(stories)})
        rows += [{"tally": tally} for tally in tallies]
    if rows:
        yield pa.RecordBatch.from_pylist(rows, schema=_ARROW_LIVENESS)
