"""The liveness stage: a shuffle brings each server endpoint's broker and admin events to one task,
which replays them through the NameServer's own state machine (analysis/replay.py) and emits one
row per broker stay: its brokers.csv columns and, as JSON, the rest; and a row of the stories the
stays tell together (fail-overs, moves, re-numbering, topics deleted, write permission) and of the
route lookups that found no route, each with the cause the replay saw (or none); and a row of its
sessions' routes over time. The decoding tasks' tallies pass through with them to the driver, in
one job.

The 4-tuples guessed clients' (spark/balance.py) are decoded beside the replay, in the same stage
(job.py: work the replay's tasks take for themselves once their replay is done, Beside, or a union): their rows say
the failed lookups they found (``asked``), which the driver judges by the replay's routes with the
replay's own rule (replay.judge_lookups), and whether they carried any event the replay needed
(``misplaced``: the guess was wrong, and the caller replays again with every 4-tuple's events, so
that a wrong guess costs time, never a word of the report)."""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Callable, Iterable, Iterator
from contextlib import suppress
from functools import partial
from operator import itemgetter
from typing import NamedTuple

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import DataFrame, Row
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, BooleanType, DoubleType, LongType, StringType, StructField, StructType

from spark_analysis.analysis.liveness import Liveness, broker_summary, plot_order
from spark_analysis.analysis.replay import SessionRoutes, judge_lookups, lookup_stories, replay_server
from spark_analysis.decode.schema import BROKER_COLUMNS, EVENT_ROWS, arrow_batch
from spark_analysis.model.endpoints import EndpointStory
from spark_analysis.model.periods import PLOTTED_BROKERS, TimeBins
from spark_analysis.model.sessions import FileSpans, Sessions
from spark_analysis.spark import worker
from twisted_namesrv.remoting import RequestCode

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
                         StructField("tally", BinaryType(), True), StructField("routes", BinaryType(), True),
                         StructField("asked", BinaryType(), True), StructField("misplaced", BooleanType(), True),
                         StructField("batch", LongType(), True)])
_ARROW_LIVENESS = to_arrow_schema(LIVENESS)
_EVENT_COLUMNS = EVENT_ROWS.names
_EVENT_CODE, _EVENT_T, _EVENT_TOPIC, _EVENT_CLIENT = (_EVENT_COLUMNS.index(name)
                                                      for name in ("code", "t", "topic", "client"))
_LOOKUP = int(RequestCode.GET_ROUTEINFO_BY_TOPIC)
_OWN_COLUMNS = ("details", "stories", "tally", "routes", "asked", "misplaced", "batch")


class Beside(NamedTuple):
    """Work the liveness stage's tasks take for themselves, in the replay's own Python function
    (the guessed clients' decoding: beside_replay): ``run(partition, attempt)`` gives the LIVENESS
    batches of what task ``partition``'s attempt took (job.Claims), each row naming its ``batch``.
    The stage has a task a core: the one replaying a NameServer takes some once its replay is done,
    the others (with nothing to replay) from the start.
    A second Python function would be a second plan to make, as the driver makes the liveness
    stage's while every core waits: about 32 calls to the JVM (docs/benchmarks.md)."""

    run: Callable[[int, int], Iterator[pa.RecordBatch]]


def broker_liveness(events: DataFrame, time_bins: TimeBins, files: FileSpans = (), sessions: Sessions | None = None,
                    endpoints: dict[str, EndpointStory] | None = None, beside: DataFrame | Beside | None = None,
                    servers: int | None = None, cores: int | None = None) -> tuple[Liveness, bool]:
    """Liveness from the decoded broker events in one pass over them: a column EVENT (pickled lists
    of schema.EVENT_ROWS tuples, each of the server endpoint ``event_server``), and ``tally``, which
    rows of the decoding tasks' tallies hold instead and which is passed on to the driver. One
    column of events: each column of a plan costs the driver a few calls to the JVM, between the
    Spark jobs, with both cores idle. ``beside``: LIVENESS rows of the guessed clients' decoding
    (beside_replay), run in the liveness tasks' stage: a DataFrame of them (unioned after the replay's),
    or work the replay's own tasks take (Beside). With the Liveness, whether it is whole: False
    where a guessed client's 4-tuple carried an event the replay needed (or a lookup past where a
    session's replay ran), and the replay is to run again with every 4-tuple's events. ``servers``:
    how many server endpoints the events can be of, at most (a task per core, but none that could
    only be empty: an empty Python task costs ~10 ms of the JVM's CPU, in the stage the job ends with).
    ``cores``: the session's default parallelism, where the caller has read it (each reading is calls
    to the JVM, made while every core waits)."""
    cores = cores or events.sparkSession.sparkContext.defaultParallelism
    sessions = sessions or Sessions(time_bins.starts, period_ends=time_bins.ends)
    endpoints = endpoints or {}
    replay = liveness_replay(time_bins, files, sessions, endpoints)
    tasks = cores if isinstance(beside, Beside) else liveness_tasks(cores, servers)
    return liveness_of(liveness_plan(events, replay, beside, tasks).collect(), time_bins, sessions, endpoints)


def liveness_replay(time_bins: TimeBins, files: FileSpans, sessions: Sessions,
                    endpoints: dict[str, EndpointStory]) -> Callable[[Iterable[pa.RecordBatch]],
                                                                     Iterator[pa.RecordBatch]]:
    """The liveness tasks' replay (a mapInArrow function over a partition of events)."""
    return partial(_liveness_batches, time_bins=time_bins, files=files, sessions=sessions, endpoints=endpoints)


def liveness_plan(events: DataFrame, replay: Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]],
                  beside: DataFrame | Beside | None, tasks: int, rows_to: str | None = None) -> DataFrame:
    """The liveness stage over ``events`` in ``tasks`` tasks, each running ``replay`` (liveness_replay)
    over the servers its partition holds; with Beside, a task a core (``tasks``), each then taking
    work beside the replay; with a DataFrame of the work beside, that unioned after the replay's.
    ``rows_to``: a directory of the driver's machine (a local master's spool) where each task writes
    its rows instead of sending them to the JVM (the plan's rows are then none): the driver reads
    them there (spooled_rows) once the job is done."""
    if isinstance(beside, Beside) or rows_to is not None:
        assert not isinstance(beside, DataFrame), "a union's rows go to the JVM"
        # a task a core, each replaying the servers its partition holds (none, for all but one where the
        # capture has one NameServer), then taking work beside the replay while there is some
        return events.repartition(tasks, "event_server").mapInArrow(
            partial(_stage_batches, replay=replay, beside=beside.run if beside else None, rows_to=rows_to),
            LIVENESS)
    replayed = events.repartition(tasks, "event_server").mapInArrow(replay, LIVENESS)
    return replayed if beside is None else replayed.union(beside)


def spooled_rows(rows_to: str, tasks: int) -> list[Row]:
    """The rows the liveness stage's ``tasks`` tasks wrote to ``rows_to`` (liveness_plan), in the order
    a collect of them gives: task by task, each task's in the order it made them. Sent to the JVM,
    the rows (the replay's routes and the brokers' details, the tasks' tallies: 2.3 MB on the 10 h
    benchmark capture) were turned from Arrow into Spark's rows by the task, into the task's result,
    and then pickled by the JVM for the driver after the last task, while every core waited: a job
    of two tasks giving these rows took the JVM 0.10-0.15 s of CPU, 0.06-0.09 s with the rows written
    (docs/benchmarks.md). A task that wrote none (its Python function not run: no rows) is skipped."""
    rows: list[Row] = []
    for task in range(tasks):
        try:
            with pa.OSFile(_rows_path(rows_to, task)) as source:
                table = pa.ipc.open_file(source).read_all()
        except FileNotFoundError:
            continue
        rows += [Row(**row) for row in table.to_pylist()]
    return rows


def _rows_path(rows_to: str, task: int) -> str:
    return os.path.join(rows_to, f"liveness-rows-{task}.arrow")


def liveness_of(rows: list[Row], time_bins: TimeBins, sessions: Sessions,
                endpoints: dict[str, EndpointStory]) -> tuple[Liveness, bool]:
    """The Liveness of the liveness stage's collected ``rows`` (liveness_plan), and whether it is
    whole (broker_liveness)."""
    # the rows decoded beside in the order of their batches, whichever task took each (the order of
    # a union's partitions, a batch each; the replay's first): a union's are in that order already
    rows = sorted(rows, key=lambda row: -1 if row.batch is None else row.batch)
    tallies = [row.tally for row in rows if row.tally is not None]
    # each server's stories in its replay's order, the servers by name: not the order of the tasks
    # that replayed them, which moves with the cores (the report is the same on any master)
    stories = sorted((story for row in rows if row.stories is not None for story in json.loads(row.stories)),
                     key=itemgetter("server"))
    brokers = [{**row.asDict(), **json.loads(row.details)} for row in rows if row.details is not None]
    for broker in brokers:
        for column in _OWN_COLUMNS:
            del broker[column]
    brokers.sort(key=lambda broker: (broker["session"], broker["broker_addr"], broker["first_seen"]))
    routes = {row.server: pickle.loads(row.routes) for row in rows if row.routes is not None}
    asked: dict[str, list[tuple]] = {}
    for row in rows:
        if row.asked is not None:
            asked.setdefault(row.server, []).extend(pickle.loads(row.asked))
    judged = [_judged(server, found, routes.get(server, []), sessions, endpoints.get(server))
              for server, found in asked.items()]
    whole = not any(row.misplaced for row in rows) and None not in judged
    if whole and judged:
        stories = _lookups_in_order(stories, judged)
    return Liveness(brokers, time_bins, tallies, stories), whole


def liveness_tasks(cores: int, servers: int | None) -> int:
    """The liveness stage's tasks: one per core, however few brokers, but no more than ``servers``
    (the server endpoints whose events there can be, if known), and at least one. In the union
    with the guessed clients' decoding they are the first partitions."""
    return cores if servers is None else max(1, min(cores, servers))


def _judged(server: str, found: list[tuple], routes: list[SessionRoutes], sessions: Sessions,
            story: EndpointStory | None) -> list[dict] | None:
    """The stories of failed lookups decoded beside the replay, judged by its routes; None where
    one is past where its session's replay ran (a lookup sets its session's end: replay_server).
    One look at each session's end, as the replay closes each session once (at its last event):
    within a session the end a time is observed to grows with it (Sessions.end_of), so the
    session's last lookup says whether any of its lookups is past the replay's end; a client
    failing lookups all day sent tens of thousands, each a search of its server's spans."""
    asked = sorted(({"t": t, "topic": topic, "client": client} for t, topic, client in found), key=itemgetter("t"))
    ran = {session.start: session for session in routes}
    for start, _, after in sessions.runs_of(server, [event["t"] for event in asked]):
        session = ran.get(start)
        if session is None or session.stopped:
            continue
        if sessions.end_of(server, asked[after - 1]["t"]) > session.end:
            return None
    return lookup_stories(judge_lookups(server, asked, routes, sessions, story), server)


def _lookups_in_order(stories: list[dict], more: list[list[dict] | None]) -> list[dict]:
    """The stories, with the failed lookups judged on the driver among the replay's own: each
    server's in order of first (as one replay judges them), the servers by name."""
    lookups = [story for story in stories if story["kind"] == "lookup_failed"]
    lookups += [story for found in more for story in found or ()]
    lookups.sort(key=itemgetter("server", "first"))
    return [story for story in stories if story["kind"] != "lookup_failed"] + lookups


def _stage_batches(batches: Iterable[pa.RecordBatch], replay: Callable[[Iterable[pa.RecordBatch]],
                                                                       Iterator[pa.RecordBatch]],
                   beside: Callable[[int, int], Iterator[pa.RecordBatch]] | None,
                   rows_to: str | None = None) -> Iterator[pa.RecordBatch]:
    """mapInArrow over the liveness stage's partitions, one a core: each replays the events of
    the servers it holds (maybe none), then takes work beside the replay (Beside, if any) while
    there is some; its rows written to ``rows_to`` (liveness_plan), if given, not sent on."""
    made = _made(batches, replay, beside)
    if rows_to is None:
        yield from made
    else:
        _write_rows(made, rows_to)


def _made(batches: Iterable[pa.RecordBatch], replay: Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]],
          beside: Callable[[int, int], Iterator[pa.RecordBatch]] | None) -> Iterator[pa.RecordBatch]:
    yield from replay(batches)
    if beside is not None:
        context = TaskContext.get()
        yield from beside(context.partitionId(), context.attemptNumber())


def _write_rows(made: Iterator[pa.RecordBatch], rows_to: str) -> None:
    """A task's rows as a file of ``rows_to`` named by its partition, whole or not at all: written
    under the attempt's own name (unique in the application) and renamed when complete, so that a
    failed attempt leaves no half of it, and the attempt run again writes it whole."""
    context = TaskContext.get()
    assert context is not None, "run by a task"
    path = _rows_path(rows_to, context.partitionId())
    writing = f"{path}.{context.taskAttemptId()}"
    try:
        with pa.OSFile(writing, "wb") as sink, pa.ipc.new_file(sink, _ARROW_LIVENESS) as writer:
            for batch in made:
                writer.write_batch(batch)
    except BaseException:
        with suppress(OSError):
            os.unlink(writing)
        raise
    os.replace(writing, path)


def beside_replay(decoded: Iterable[pa.RecordBatch], handed: int | None = None) -> Iterator[pa.RecordBatch]:
    """The guessed clients' decoding (job.decode_batches' DECODED batches, the tables written by
    the task) as LIVENESS rows: each server's failed lookups (``asked``: time, topic and client
    each), whether any other event came (``misplaced``), and the task's tally; each row naming the
    hand-out's batch decoded (``handed``, its ``batch``: Beside)."""
    for batch in decoded:
        rows: list[dict] = []
        columns = (batch.column(name).to_pylist() for name in ("event", "event_server", "tally"))
        for events, server, tally in zip(*columns, strict=True):
            if tally is not None:
                rows.append({"tally": tally})
            if events is None:
                continue
            found = pickle.loads(events)
            # what judging a lookup reads of it (a client failing lookups all day sends many)
            asked = [(event[_EVENT_T], event[_EVENT_TOPIC], event[_EVENT_CLIENT]) for event in found
                     if event[_EVENT_CODE] == _LOOKUP]
            if asked:
                rows.append({"server": server, "asked": pickle.dumps(asked)})
            if len(asked) < len(found):
                rows.append({"server": server, "misplaced": True})
        if rows:
            yield arrow_batch([{**row, "batch": handed} for row in rows], _ARROW_LIVENESS)


def _in_batch_order(batches: Iterable[pa.RecordBatch]) -> list[tuple[bytes | None, str | None, bytes | None]]:
    """The events, servers and tallies of a partition's rows, ordered by the hand-out's batch each
    names (job.Claims: a decoding task takes batches as it is free, so the rows of two batches come
    in the order their tasks ran them), else as they came: what a task a batch, shuffled here in the
    order of the tasks, gives, whichever task took which batch. The replay's order of events at
    one time is the order they come in."""
    rows = []
    for batch in batches:
        columns = [batch.column(name).to_pylist() for name in ("event", "event_server", "tally")]
        at = batch.schema.get_field_index("batch")
        handed = batch.column(at).to_pylist() if at >= 0 else [None] * batch.num_rows
        rows += zip(handed, *columns, strict=True)
    if any(row[0] is not None for row in rows):
        rows.sort(key=lambda row: -1 if row[0] is None else row[0])  # stable: a batch's rows in their order
    return [row[1:] for row in rows]


def _liveness_batches(batches: Iterable[pa.RecordBatch], time_bins: TimeBins, files: FileSpans,
                      sessions: Sessions, endpoints: dict[str, EndpointStory]) -> Iterator[pa.RecordBatch]:
    """mapInArrow over a partition of events: each server endpoint's replay, one LIVENESS row per
    broker stay, a row of its stories, and the tallies."""
    worker.settle()
    with worker.no_cycle_collection():
        by_server: dict[str, list[dict]] = {}
        tallies = []
        for events, server, tally in _in_batch_order(batches):
            if tally is not None:
                tallies.append(tally)
            # each pickled list is of one server's events (job._send), which event_server names
            if events is not None:
                by_server.setdefault(server or "?", []).extend(
                    [dict(zip(_EVENT_COLUMNS, row, strict=True)) for row in pickle.loads(events)])
        stays, stories, routes = [], [], []
        for server, events in by_server.items():
            replay = replay_server(server, events, sessions, endpoints.get(server),
                                   lambda t, server=server: sessions.end_of(server, t))
            stays += [stay for stay in replay.stays if stay.events]
            stories += replay.stories + lookup_stories(replay.lookups, server)
            routes.append({"server": server, "routes": pickle.dumps(replay.routes)})
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
        rows += [{"tally": tally} for tally in tallies] + routes
    if rows:
        yield arrow_batch(rows, _ARROW_LIVENESS)
