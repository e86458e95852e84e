"""The Spark job: captures -> frames/, calls/, registrations/ (Parquet), brokers.csv, report.html.

Plan: Python tasks (mapInArrow, like every Python step here: Arrow batches, no pickled rows) read
byte ranges of the captures and emit, per connection 4-tuple, a piece: where the TCP segments they
found are (inputs.Piece, ~30 bytes a segment; payloads stay in the file); they run as a job of their
own, whose span of segments sets the report's time bins, and their pieces are kept (on a local
master the rows and payloads in the tasks' own files, and the driver hands each decoding task where
its pieces are: KeptPieces, _ReadPieces; elsewhere cached by Spark and shuffled). Every piece of a
4-tuple goes to one task (the costliest 4-tuples dealt out over tasks of decreasing
size by what the reading tasks estimated: balance.py), which orders them in capture order, maps the
file, and reassembles and decodes that 4-tuple's connections (port reuse is told apart there, by
SYN). With a local output and master, that task writes its rows of the tables as Parquet part
files itself (tables.py); otherwise the rows go to the JVM as Arrow batches (mapInArrow), one struct
column per table, and are cached there while Spark writes the tables. Broker events go to the JVM
either way and on, by broker, to the liveness tasks (spark/liveness_stage.py), in the same job.
Where the decoding tasks write the tables and more than one core runs the job (one core has none
waiting: balance.decode_beside_replay), the 4-tuples guessed clients' (balance.guessed_clients)
are decoded in the liveness tasks' stage instead, beside the replay, which needs none of their
events but their failed lookups, judged on the driver by its routes; a wrong guess is found there
and the replay run again with every 4-tuple's events (liveness_stage.py).

What the driver counts comes back as data, never through accumulators (a retried or speculative
task would add its counts twice): each reading task ends its output with a row holding only its
tally, which the reading job's action collects; each decoding task ends with one
too, which the liveness tasks pass on with the brokers' rows. Spark keeps the output of one
successful attempt of each task, so the counts are exact under retries. The driver only plans
splits and collects counts and per-broker aggregates: never packets or frames.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from functools import partial, reduce
from typing import BinaryIO

import pyarrow as pa
from pyspark import RDD, SparkContext, StorageLevel, TaskContext, cloudpickle
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from spark_analysis.analysis import clients, counting, findings, latency
from spark_analysis.analysis.controller import controller_story, with_controller_view
from spark_analysis.analysis.findings import endpoint_rows
from spark_analysis.analysis.liveness import Liveness
from spark_analysis.capture import inputs
from spark_analysis.capture.inputs import CaptureFile, ConnectionKey, Piece, Split, shown_name
from spark_analysis.capture.packets import Ports
from spark_analysis.capture.reassembly import Servers
from spark_analysis.decode import schema
from spark_analysis.decode.rows import (
    CALL,
    CALLS,
    CONNECTION,
    CONTROLLER_NOTE,
    EVENT,
    FRAME,
    FRAMES,
    call_array,
    frame_array,
    piece_rows,
)
from spark_analysis.decode.schema import MILLIS_COLUMNS, SECONDS_COLUMNS, arrow_array
from spark_analysis.model.capture_points import second_points
from spark_analysis.model.endpoints import endpoint_stories, merged_ends, nameserver_endpoints, server_sides
from spark_analysis.model.periods import (
    Capture,
    ConnectionEnds,
    FileParts,
    TimeBins,
    capture_periods,
    endpoint_files,
    file_parts,
    note_ends,
    observed_spans,
    rotated_sets,
)
from spark_analysis.model.sessions import Places, Sessions, iso_time
from spark_analysis.model.tally import Tally
from spark_analysis.model.translated import translated_copies
from spark_analysis.output import summary as summary_json
from spark_analysis.output import tables
from spark_analysis.output.brokers import brokers_csv, clients_csv
from spark_analysis.spark import balance, worker
from spark_analysis.spark.liveness_stage import (
    LIVENESS,
    Beside,
    beside_replay,
    broker_liveness,
    liveness_of,
    liveness_plan,
    liveness_replay,
    liveness_tasks,
    spooled_rows,
)
from spark_analysis.spark.struct_types import DECODED, EVENTS
from twisted_namesrv.escapes import clipped_name, escaped

PIECES = StructType([StructField("lower", StringType(), False), StructField("higher", StringType(), False),
                     # the file's name as the file system has it: not always UTF-8 (os.fsencode)
                     StructField("path", BinaryType(), False), StructField("rows", BinaryType(), False),
                     StructField("payload", BinaryType(), True), StructField("tally", BinaryType(), True),
                     # where a local master's reading task kept the piece's rows and payload (KeptPieces)
                     StructField("kept", StringType(), True), StructField("kept_at", LongType(), True),
                     StructField("kept_len", LongType(), True)])
_ARROW_DECODED = schema.DECODED
_ARROW_EVENTS = schema.EVENTS
_TABLE_KINDS = tuple(name for name, _, _ in tables.TABLES)  # the struct columns of DECODED: a table's rows each
#: the kinds of rows decoding gives as a connection's block each, and what makes a block's rows one array
_BLOCKS = {FRAMES: (FRAME, frame_array), CALLS: (CALL, call_array)}
_BLOCKED = {kind: (blocks, make) for blocks, (kind, make) in _BLOCKS.items()}
_EVENT_SERVER = schema.EVENT_ROWS.names.index("server")
_ARROW_PIECES = to_arrow_schema(PIECES)
_BATCH_BYTES = 64 << 20  # of pieces per Arrow batch sent to the JVM (those of files read whole carry payloads)
_BATCH_ROWS = 50_000  # decoded rows per Arrow batch sent on (each batch's counting and row group cost ~ms)


def analyse(spark: SparkSession, paths: Iterable[str], out: str, ports: Ports = (),
            split_size: int | None = None, report: bool = True, log: Callable[[str], None] = print,
            tasks_every: float | None = None, counted_cost: int = balance.COUNTED_COST) -> Counter:
    """Run the whole job; returns the counts it printed (and ``summary``: summary.json's content).
    With ``tasks_every``, while a Spark job runs, a line that often says how many of its tasks are
    done (in a log, where Spark's progress bar is not, an hour's stage is otherwise silence).
    On a local master, local gzip captures are inflated into a spool directory for the job's time
    (inputs.inflated_copy). ``counted_cost``: what decoding a 4-tuple's piece must cost for it
    to be dealt and guessed a client's or not by itself (balance.py; less in tests).
    The driver runs without the cycle collector (worker.no_cycle_collection): it works between and
    after the Spark jobs, while every core waits for it, and a full collection there walked every
    object of the driver's process (PySpark, pyarrow, plotly: 0.06-0.07 s each, once or twice a
    run on the 10 h benchmark capture, a quarter of the driver's own CPU); its objects are few and
    hardly any in cycles.
    A run that fails while a local capture is shorter than it was listed raises InputShrank,
    saying so (inputs.shrank_while_read: its reading task was killed)."""
    spool = tempfile.mkdtemp(prefix="spark-analysis-gz-") if spark.sparkContext.master.startswith("local") else None
    listed: list[inputs.CaptureFile] = []
    try:
        with worker.no_cycle_collection():
            return _analyse(spark, paths, out, ports, split_size, report, log, tasks_every, spool, counted_cost,
                            listed)
    except Exception as error:
        shrank = inputs.shrank_while_read(listed)
        if shrank is None or output_problem(error) is not None:  # an output not written says so itself
            raise
        raise inputs.InputShrank(shrank) from error
    finally:
        if spool is not None:
            shutil.rmtree(spool, ignore_errors=True)


def _analyse(spark: SparkSession, paths: Iterable[str], out: str, ports: Ports, split_size: int | None,
             report: bool, log: Callable[[str], None], tasks_every: float | None, spool: str | None,
             counted_cost: int, listed: list[inputs.CaptureFile]) -> Counter:
    sc = spark.sparkContext
    cores = sc.defaultParallelism  # read once: two calls to the JVM each time, most of them while every core waits
    progress = _Progress(log, sc, tasks_every)
    out = _absolute(out)
    skipped: list[str] = []
    files = inputs.discover(paths, partial(_list_hadoop, spark), skipped)
    listed += files
    listed_at = time.time()
    spooled = [f for f in files if spool is not None and inputs.is_local(f.path) and inputs.compressed(f.path)]
    local = [f for f in files if inputs.read_by_range(f)]
    whole = [f for f in files if not inputs.read_by_range(f) and f not in spooled]
    total = sum(f.size for f in files)
    size = split_size or inputs.split_bytes(total, cores)
    tasks = inputs.plan_tasks(local + spooled, size)
    progress(f"inputs: {len(files)} files, {_mib(total)}; {len(tasks)} tasks of up to "
             f"{_mib(size)} over local files ({len(spooled)} compressed, inflated as a stream), {len(whole)} "
             f"remote files read whole" + (f"; skipped {', '.join(map(shown_name, skipped))}" if skipped else ""))

    tables_out = out if _tasks_write_tables(sc.master, out) else None
    # two per core, of decreasing size (balance.py): a task has a fixed cost whatever its size,
    # so few, but the small last ones go to whichever core is free; a task holds its pieces, whose
    # payloads are inline for the files read whole (a compressed one inflates to several times its size)
    whole_bytes = sum(map(inputs.planned_bytes, whole))
    at_least = whole_bytes // inputs.MAX_SPLIT_BYTES + 1
    # where the driver hands the pieces out (a local master), a task a core takes the batches for itself
    shares = balance.task_shares(cores, at_least) if spool is None else balance.claimed_decoding(cores, at_least)

    # The reading tasks run first: the capture periods their records span set the time bins in
    # which the brokers' liveness is counted, so that decoding, writing the tables and the
    # liveness are then one job. Their pieces are kept for it (_ReadPieces), and the same action
    # collects the tally each task ends with. Meanwhile the second job is planned (PlannedAhead).
    first = _pieces(spark, tasks, whole, ports, spool, counted_cost, kept=spool)
    _ready_to_submit(first)  # before the threads below take the interpreter's lock from the driver's thread
    ahead = PlannedAhead(spark, spool, cores, shares) if spool is not None and tables_out else None
    page_ready = report_ready() if report else None  # while the Spark jobs run, not after the last
    with progress.meanwhile("reading"):
        pieces, read = _ReadPieces.of(spark, first, kept=spool)
    file_rows = findings.input_files(files, read)
    # said on the console only: the report files of a capture stay the same whenever it is read
    still = {file.path: why for file, row in zip(files, file_rows, strict=True) if findings.may_be_still_written(row)
             and (why := inputs.still_written(file, listed_at))}
    dropped = findings.dropped_packets(files, read)
    by_file = findings.file_spans(files, read)
    stretches: dict[str, dict[int, dict[ConnectionKey, ConnectionEnds]]] = {}
    for (index, offset), found in read.ends.items():
        stretches.setdefault(files[index].path, {})[offset] = found
    parts = file_parts(by_file, {path: inputs.silences(facts.spans) for path, facts in read.files.items()},
                       stretches)
    cut = [f for f in file_rows if f["cut_records"]]
    progress(f"read {read.records:,} records ({_mib(read.bytes)}), {read.segments:,} TCP segments "
             f"{_on_ports(ports)}" + "".join(
                 f"\n      {_said(f['path'])}: packets cut at {f['cut_at']:,} bytes: {f['cut_records']:,} of "
                 f"{f['records']:,} packets, {f['uncaptured_bytes']:,} bytes not captured" for f in cut)
             + "".join(f"\n      {escaped(item['message'])}" for item in dropped)
             + "".join(f"\n      {_said(f['path'])}: {findings.problem_text(f)}"
                       + (f": {still[f['path']]}" if f["path"] in still else "") for f in file_rows
                       if f["problem"] and not findings.quiet_file(f))
             + _quiet_files([f["path"] for f in file_rows if findings.quiet_file(f)])
             + "".join(f"\n      {_said(path)}: {len(times) + 1} captures in one file: nothing captured "
                       + ", ".join(f"{after - before:,.0f} s from {iso_time(before)} to {iso_time(after)}"
                                   for before, after in times)
                       + " (no connection carries on over it)" for path, times in parts.not_captured().items()))
    captures = rotated_sets(parts.spans, parts.ends, {name: read.files[path].link_type
                                                      for name, path in parts.paths.items()})
    missing = findings.missing_files(captures)
    for item in missing:
        progress(escaped(item["message"]))  # messages name files: a name's ESC or newline shown, not obeyed
    sources = {f.path: inputs.spool_target(f, spool) for f in spooled if spool is not None}  # the pieces' paths
    by_path, ends, left_out, copies = _one_copy_each(parts, captures, progress, sources)
    findings.note_cut_read_elsewhere(file_rows, cut_read_elsewhere(parts, by_path))
    sides = server_sides(ends)
    servers: Servers = frozenset(sides.values()) | frozenset(ports)
    endpoints = endpoint_stories(ends, sides)
    periods = capture_periods(captures)
    time_bins = TimeBins.over(periods)
    sessions = Sessions(time_bins.starts, {e: story.run_starts() for e, story in endpoints.items()},
                        observed_spans(captures, by_path), time_bins.ends, endpoint_files(by_path, parts.paths))

    if tables_out:
        tables.prepare(tables_out)
    if inputs.is_local(out):
        _forget_earlier_report(inputs.local_path(out))
    decode = partial(decode_batches, servers=servers, tables_out=tables_out, places=Places(by_file, sessions),
                     left_out=left_out)
    # what the decoding tasks send the JVM: the events and tallies only where they write the tables
    sent = EVENTS if tables_out else DECODED
    # The 4-tuples guessed clients' (balance.guessed_clients) are decoded beside the replay, in the
    # liveness tasks' stage, where the other cores would wait for it; the others first, as the
    # replay needs their events (with Spark writing the tables, all are decoded first: one output;
    # with one core, too: no core waits for the replay there, see balance.decode_beside_replay)
    guessed = balance.guessed_clients(read.sent, sides) if tables_out and balance.decode_beside_replay(
        cores) else frozenset()
    beside = None
    server_ends = len(set(sides.values()))  # the liveness stage's tasks, one a core at most (liveness_tasks)
    planned = ahead.made() if ahead is not None and pieces.hands_out else None
    if planned is not None:
        assert ahead is not None
        # the plan made while the reading tasks ran: its functions and pieces written to the spool
        ahead.write(decode=decode, replay=liveness_replay(time_bins, by_file, sessions, endpoints),
                    beside=partial(_beside_replay, decode=decode, first_part=len(shares)) if guessed
                    else _nothing_beside)
        pieces.hand_out(Counter({key: cost for key, cost in read.costs.items() if key not in guessed}), shares,
                        read.hashed_cost, guessed, False, ahead.handed)
        if ahead.beside:  # nothing to take where no 4-tuple was guessed a client's
            pieces.hand_out(Counter({key: read.costs[key] for key in guessed}), balance.claimed_shares(cores), 0,
                            guessed, True, ahead.claimed)
    elif guessed:
        decoded = pieces.decoded(decode, sent, Counter({key: cost for key, cost in read.costs.items()
                                                           if key not in guessed}), shares, read.hashed_cost,
                                 guessed=guessed, among=False, cores=cores)
        # in the liveness stage, their part files numbered after the others'
        beside = pieces.beside(partial(_beside_replay, decode=decode),
                               Counter({key: read.costs[key] for key in guessed}),
                               balance.claimed_shares(cores), guessed, first_part=len(shares),
                               replay_tasks=liveness_tasks(cores, server_ends))
    else:
        decoded = pieces.decoded(decode, sent, read.costs, shares, read.hashed_cost, cores=cores)
    with progress.meanwhile("decoding"):
        if planned is not None:
            assert ahead is not None
            liveness, whole = liveness_of(ahead.rows(planned), time_bins, sessions, endpoints)
        elif not tables_out:  # Spark writes the tables, then the liveness reads the same decoded rows
            decoded = decoded.persist(StorageLevel.MEMORY_AND_DISK)
            for kind, name, _ in tables.TABLES:
                # one task (and Parquet file) per core, not per shuffle partition: the tables are far
                # smaller than the capture, and each task and file costs the same whatever its size
                _rows_of(decoded, kind).coalesce(cores).transform(with_timestamps).write.mode(
                    "overwrite").parquet(f"{out}/{name}")
            liveness, whole = broker_liveness(_events_of(decoded), time_bins, by_file, sessions, endpoints, beside,
                                              server_ends, cores)
        else:
            liveness, whole = broker_liveness(decoded, time_bins, by_file, sessions, endpoints, beside, server_ends,
                                              cores)
        if not whole:  # a guess was wrong: the replay again with every 4-tuple's events, the tables as written
            progress(f"a 4-tuple of the {len(guessed)} guessed clients' carried an event the replay needed: "
                     f"replaying again with every 4-tuple's events")
            again = pieces.decoded(partial(decode_batches, servers=servers, left_out=left_out, events_only=True),
                                   EVENTS, read.costs, shares, read.hashed_cost, cores=cores)
            replayed, _ = broker_liveness(again, time_bins, by_file, sessions, endpoints,
                                          servers=server_ends, cores=cores)
            liveness = Liveness(replayed.brokers, time_bins, liveness.tallies, replayed.stories)
    if tables_out:
        tables.commit(tables_out)
    tally = Tally().merge(read).merge(_merged(liveness.tallies))
    talkers = clients.client_rows(tally.clients)
    progress(f"decoded {tally.connection:,} connections, {tally.frame:,} frames ({tally.request:,} requests, "
             f"{tally.response:,} responses), {tally.gaps} capture gaps, {tally.lost_bytes:,} bytes lost "
             f"to gaps" + (f", {tally.mid_frame_bytes:,} bytes of frames begun before the capture (no loss)"
                           if tally.mid_frame_bytes else "")
             + (f", {tally.unseen_bytes:,} bytes received before the capture began, out of order (no loss)"
                if tally.unseen_bytes else "")
             + f", {tally.undecodable} connections with undecodable bytes"
             + (f", {tally.cut_frames:,} frames cut by the snap length ({tally.uncaptured_bytes:,} stream bytes not "
                f"captured, {tally.unplaced_bytes:,} captured bytes no frame could be placed in)"
                if tally.cut_frames or tally.uncaptured_bytes else "") + f"; wrote frames/ ({tally.frame:,} "
             f"rows), calls/ ({tally.call:,} rows, {tally.unanswered:,} with no answer captured, oneway ones "
             f"included), registrations/ "
             f"({tally.registration:,} rows, {tally.crc_failures} CRC failures), controller/ "
             f"({tally.controller:,} rows)" + _beside_note(len(guessed)))
    counts = Counter(tally.counts())
    namesrv_codes, controller_codes = served_codes()
    nameservers = nameserver_endpoints(tally.served, namesrv_codes)
    liveness.only_at(nameservers)
    findings.note_clock_steps(liveness.brokers, file_rows)  # its intervals stamped both sides of a step: said
    registered = liveness.registered()
    write_bytes(spark, f"{out}/{inputs.BROKERS_FILE}", brokers_csv(registered))
    counts["brokers"] = len(registered)
    write_bytes(spark, f"{out}/{inputs.CLIENTS_FILE}", clients_csv(talkers))
    codes = latency.code_stats(tally.latencies)
    found_endpoints = endpoint_rows(endpoints, nameservers, tally.served, controller_codes)
    began = findings.began_mid_stream(captures, by_path, sides, nameservers,
                                      {(client, b["server"]): (b["broker_name"], b["broker_addr"])
                                       for b in liveness.brokers for client in b["clients"]}, endpoints, talkers)
    findings.calls_at(tally.groups, {row["endpoint"] for row in found_endpoints
                                     if row["kind"] in ("nameserver", "controller")})
    controller = controller_story(tally.groups, [e["endpoint"] for e in found_endpoints if e["kind"] == "controller"],
                                  periods[-1][1] if periods else None)
    summary = summary_json.summary(file_rows, periods, tally.counts(), tally.groups, liveness.brokers, codes,
                                   latency.code_stats(tally.latencies, by_server=True), talkers, found_endpoints,
                                   with_controller_view(liveness.stories, controller), controller,
                                   findings.other_traffic(tally.others, ports) + copies + dropped + missing + began,
                                   tally.routes_found, {c.first for c in captures if c.after_missing})
    write_bytes(spark, f"{out}/{inputs.SUMMARY_FILE}", json.dumps(summary, indent=1).encode())
    found = summary["findings"]
    progress(f"wrote brokers.csv ({len(registered)} brokers) and summary.json: {summary['attention']}" + "".join(
        f"\n      {finding['severity']}: {escaped(finding['message'])}" for finding in found[:10])
        + (f"\n      ... {len(found) - 10} more" if len(found) > 10 else ""))
    if report:
        assert page_ready is not None
        page_ready.join()
        from spark_analysis.output.report import write_report  # plotly only when a report is wanted

        write_report(out, summary, liveness, codes, partial(write_bytes, spark))
        progress("wrote report.html")
    if not tables_out:
        decoded.unpersist()
    pieces.unpersist()
    counts["summary"] = summary
    return counts


def report_ready() -> threading.Thread:
    """A thread that gets report.html's fixed part ready (report.ready: Plotly's figure code imported,
    plotly.js read and hashed) while the Spark jobs run and the driver waits for them: in a one-shot
    run the first page of the process took 131 ms of CPU against 30 ms for later ones, on the driver
    after the last Spark job, with every core waiting. What fails there fails again, and is said,
    where the page is written."""
    thread = threading.Thread(target=_page_ready, name="report-ready", daemon=True)
    thread.start()
    return thread


def _page_ready() -> None:
    with suppress(Exception):
        from spark_analysis.output.report import ready

        ready()


def served_codes() -> tuple[frozenset[int], frozenset[int]]:
    """The requests only a NameServer is asked and those only a controller is: the server's two
    handler tables (processor.CODES: in one go or in steps, controller/processor.HANDLERS) less
    what both serve (BROKER_HEARTBEAT). Imported here, on the driver only: the handler modules log
    through Twisted, which executors need not have (spark/ship.py)."""
    from twisted_namesrv.controller.processor import HANDLERS as CONTROLLER_HANDLERS
    from twisted_namesrv.processor import CODES

    return CODES - frozenset(CONTROLLER_HANDLERS), frozenset(CONTROLLER_HANDLERS) - CODES


def _merged(tallies: Iterable[bytes]) -> Tally:
    """The tasks' tallies (pickled model.tally.Tally) added up."""
    total = Tally()
    for pickled in tallies:
        total.merge(pickle.loads(pickled))
    return total


def start_worker(_: Iterable) -> None:
    """A task that only starts its Python worker: pickled by reference, it has the worker import
    this module and so every module of the job's tasks (session.start_workers)."""


# -- reading and decoding ---------------------------------------------------------------------------


def _one_copy_each(parts: FileParts, captures: list[Capture], progress: Callable[[str], None],
                   sources: dict[str, str]
                   ) -> tuple[dict[str, dict[ConnectionKey, ConnectionEnds]], dict[ConnectionKey, ConnectionEnds],
                              frozenset[tuple[str, ConnectionKey]], list[findings.Item]]:
    """Each connection read once: a connection in two captures taken at two points (the NameServer's
    host and a broker's) from one of them (model/capture_points.py), one captured again under translated
    addresses (NAT) once (model/translated.py). Returns the reading tasks' ends without the copies (by
    file's part, and merged over the files), the (piece path, 4-tuple) pairs the decoding leaves out
    (``sources``: the path an input's pieces carry where it is not the input's own, a compressed
    capture's spool file), and the findings that say so."""
    by_path = parts.ends
    points = second_points(captures, by_path, server_sides(merged_ends(by_path)))
    by_path = points.without(by_path)
    ends = merged_ends(by_path)
    translated = translated_copies(ends, server_sides(ends))
    left_out = points.left_out | {(path, key) for path, found in by_path.items() for key in found
                                  if key in translated.left_out}
    by_path = {path: translated.without(found) for path, found in by_path.items()}
    left_out = frozenset((sources.get(parts.path(name), parts.path(name)), key) for name, key in left_out)
    told = findings.second_points(points) + findings.translated_copies(translated)
    for item in told:
        progress(escaped(item["message"]))
    return by_path, translated.without(ends), left_out, told


def cut_read_elsewhere(parts: FileParts, kept: Mapping[str, Mapping[ConnectionKey, ConnectionEnds]]) -> set[str]:
    """The files a snap length cut whose every cut connection was read from another capture's copy
    (_one_copy_each: a second point that kept it whole): nothing the report reads of them is cut."""
    cut: set[str] = set()
    read_cut: set[str] = set()
    for name, found in parts.ends.items():
        path = parts.path(name)
        for key, ends in found.items():
            if ends.uncaptured:
                cut.add(path)
                if key in kept.get(name, {}):
                    read_cut.add(path)
    return cut - read_cut


def _pieces(spark: SparkSession, tasks: list[list[Split]], whole: list[CaptureFile], ports: Ports,
            spool: str | None = None, counted_cost: int = balance.COUNTED_COST,
            kept: str | None = None) -> DataFrame | RDD[bytes]:
    """The pieces of every input, as Arrow batches from Python tasks: one task per local task of
    splits (its index is all the task is given), and tasks over the files Spark reads whole; each
    task's last row holds its tally. ``kept``: a directory of this machine (a local master) where
    the tasks keep their pieces' rows and payloads (KeptPieces); there, with no file read whole, a
    plain RDD job whose tasks give their batches as an Arrow stream each (read_by_rdd)."""
    if kept is not None and tasks and not whole and read_by_rdd():
        return spark.sparkContext.parallelize(range(len(tasks)), len(tasks)).mapPartitions(
            partial(_read_tasks_streamed, tasks=tasks, ports=ports, spool=spool, counted_cost=counted_cost, kept=kept))
    parts = []
    if tasks:
        indexes = spark.range(0, len(tasks), 1, len(tasks))
        parts.append(indexes.mapInArrow(partial(_read_tasks, tasks=tasks, ports=ports, spool=spool,
                                                counted_cost=counted_cost, kept=kept), PIECES))
    if whole:
        files = spark.read.format("binaryFile").load([f.path for f in whole]).select("path", "content")
        by_uri = {os.path.abspath(f.path) if inputs.is_local(f.path) else f.path: f for f in whole}
        parts.append(files.mapInArrow(partial(_read_files, whole=by_uri, ports=ports, counted_cost=counted_cost,
                                              kept=kept), PIECES))
    return reduce(DataFrame.union, parts)


def _ready_to_submit(pieces: DataFrame | RDD[bytes]) -> None:
    """Make the reading job's RDD on the JVM side now (its task's Python command pickled, its
    PythonRDD made: the calls to the JVM of an RDD's first action but the action's own), so that its
    action is one call. The threads started next (PlannedAhead: about 90 calls to the JVM; the
    report's page made ready) would otherwise take turns with the driver's thread for the
    interpreter's lock while it made them, delaying the first job's submission while every core
    waits for it. A DataFrame's plan is made by its action."""
    if isinstance(pieces, RDD):
        pieces._jrdd  # noqa: B018 - the property makes and keeps the JVM's RDD


def read_by_rdd() -> bool:
    """Whether a local master's reading tasks, keeping their pieces (KeptPieces), over local files
    only, run as a plain RDD job: what they give the driver is a few thousand places of tens of
    bytes, which a query (mapInArrow, then toArrow) cost the driver 60 calls to the JVM and the JVM
    its analysis and planning of the query before the first task, and the batches' conversion to
    its rows and back, with every core waiting at the run's start; an RDD's job 31 calls and half
    the JVM's CPU (docs/benchmarks.md). Elsewhere the pieces are a DataFrame that Spark caches and
    shuffles to the decoding tasks."""
    return True


def _read_tasks(batches: Iterable[pa.RecordBatch], tasks: list[list[Split]], ports: Ports,
                spool: str | None = None, counted_cost: int = balance.COUNTED_COST,
                kept: str | None = None) -> Iterator[pa.RecordBatch]:
    worker.settle()
    for batch in batches:
        for index in batch.column(0).to_pylist():
            yield from _read_task(index, tasks, ports, spool, counted_cost, kept)


def _read_tasks_streamed(indexes: Iterable[int], tasks: list[list[Split]], ports: Ports,
                         spool: str | None = None, counted_cost: int = balance.COUNTED_COST,
                         kept: str | None = None) -> Iterator[bytes]:
    """_read_tasks in an RDD's task (read_by_rdd): the same batches, as one Arrow stream a task."""
    worker.settle()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, _ARROW_PIECES) as writer:
        for index in indexes:
            for batch in _read_task(index, tasks, ports, spool, counted_cost, kept):
                writer.write_batch(batch)
    yield sink.getvalue().to_pybytes()


def _read_task(index: int, tasks: list[list[Split]], ports: Ports, spool: str | None, counted_cost: int,
               kept: str | None) -> Iterator[pa.RecordBatch]:
    with _kept_pieces(kept) as keep:
        yield from _piece_batches(partial(inputs.read_task, spool=spool), tasks[index], ports=ports,
                                  counted_cost=counted_cost, keep=keep)


def _read_files(batches: Iterable[pa.RecordBatch], whole: dict[str, CaptureFile], ports: Ports,
                counted_cost: int = balance.COUNTED_COST, kept: str | None = None) -> Iterator[pa.RecordBatch]:
    """Files as Spark read them whole: ``whole`` has them by URI, local ones by absolute path
    (Spark names /x/y.gz file:/x/y.gz)."""
    worker.settle()
    for batch in batches:
        for uri, content in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True):
            file = whole.get(uri) or whole.get(inputs.local_path(uri), CaptureFile(uri, 0, 0))
            with _kept_pieces(kept) as keep:
                yield from _piece_batches(inputs.read_whole, content, file, ports=ports, counted_cost=counted_cost,
                                          keep=keep)


class KeptPieces:
    """A reading task attempt's file of its pieces' rows and payloads, on a local master (the
    decoding tasks run on this machine): what goes to the JVM is then where each piece is in it,
    tens of bytes, not its rows (~30 bytes a TCP segment) nor a file read whole's payloads. The
    JVM otherwise converted them from Arrow, cached, shuffled and converted them back: on the 10 h
    capture, 46 MB, about a third of its CPU in a one-core run (docs/benchmarks.md). Each attempt
    writes its own file (Spark keeps one successful attempt's rows, which name it); the job's
    spool directory, and so every file, is removed when the job ends."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, f"pieces-{TaskContext.get().taskAttemptId()}")
        self.file = open(self.path, "wb")  # noqa: SIM115 - closed by _kept_pieces
        self.at = 0

    def keep(self, piece: Piece) -> tuple[str, int, int]:
        """Write the piece's rows and payload; where they are: (file, offset, length)."""
        data = pickle.dumps((piece.rows, piece.payload), protocol=pickle.HIGHEST_PROTOCOL)
        self.file.write(data)
        at, self.at = self.at, self.at + len(data)
        return self.path, at, len(data)


@contextmanager
def _kept_pieces(directory: str | None) -> Iterator[KeptPieces | None]:
    if directory is None:
        yield None
        return
    kept = KeptPieces(directory)
    try:
        yield kept
    finally:
        kept.file.close()


class _KeptReader:
    """The kept pieces' rows and payloads read back in a decoding task: each file opened once."""

    def __init__(self) -> None:
        self.files: dict[str, BinaryIO] = {}

    def read(self, path: str, at: int, length: int) -> tuple[bytes, bytes | None]:
        file = self.files.get(path)
        if file is None:
            file = self.files[path] = open(path, "rb")  # noqa: SIM115 - closed by close()
        file.seek(at)
        return pickle.loads(file.read(length))

    def close(self) -> None:
        for file in self.files.values():
            file.close()
        self.files.clear()


def _piece_batches(read: Callable[..., Iterator[Piece]], *args, ports: Ports,
                   counted_cost: int = balance.COUNTED_COST, keep: KeptPieces | None = None
                   ) -> Iterator[pa.RecordBatch]:
    """Run a reader; its pieces as Arrow batches of about _BATCH_BYTES (with ``keep``, only where
    it kept them), then a row with its tally: the decoding costs of its costly pieces by 4-tuple
    (and the bytes each way), of the others in all."""
    tally = Tally()
    pending: list[Piece] = []
    where: list[tuple[str, int, int] | None] = []
    size = 0
    for piece in read(*args, ports, tally):
        note_ends(tally.ends.setdefault((piece.input_index, piece.part), {}), piece)
        if (cost := balance.decode_cost(piece)) >= counted_cost:
            tally.costs[piece.ends] += cost
            by_lower, by_higher = balance.sent_bytes(piece)
            tally.sent[piece.ends, True] += by_lower
            tally.sent[piece.ends, False] += by_higher
        else:
            tally.hashed_cost += cost
        if keep is not None:
            where.append(keep.keep(piece))
            piece = piece._replace(rows=b"", payload=None)
        pending.append(piece)
        size += len(piece.rows) + len(piece.payload or b"")
        if size >= _BATCH_BYTES:
            yield _piece_batch(pending, where=where)
            worker.drill("read")
            pending, where, size = [], [], 0
    if pending:
        yield _piece_batch(pending, where=where)
    worker.drill("read")
    yield _piece_batch([Piece(("", ""), "", b"", None)], pickle.dumps(tally))


def _piece_batch(pieces: list[Piece], tally: bytes | None = None,
                 where: list[tuple[str, int, int] | None] | None = None) -> pa.RecordBatch:
    lower, higher = zip(*(piece.ends for piece in pieces), strict=True)
    kept, at, length = zip(*where, strict=True) if where else ([None] * len(pieces),) * 3
    paths = [os.fsencode(p.path) for p in pieces]
    columns = (lower, higher, paths, [p.rows for p in pieces], [p.payload for p in pieces], [tally] * len(pieces), kept,
               at, length)
    return pa.RecordBatch.from_arrays([pa.array(column, type=field.type) for column, field in
                                       zip(columns, _ARROW_PIECES, strict=True)], schema=_ARROW_PIECES)


def _beside_note(guessed: int) -> str:
    return f"; {guessed} 4-tuples guessed clients' decoded beside the replay (their failed lookups judged by its " \
        "routes)" if guessed else ""


def _places(pieces: DataFrame | RDD[bytes]) -> pa.Table:
    """The reading tasks' batches, collected: a DataFrame's by Arrow, an RDD's streams (read_by_rdd)
    read in the order of its tasks, as a DataFrame's come."""
    if isinstance(pieces, DataFrame):
        return pieces.toArrow()
    return pa.Table.from_batches([batch for stream in pieces.collect() for batch in pa.ipc.open_stream(stream)],
                                 schema=_ARROW_PIECES)


class _ReadPieces:
    """The reading tasks' pieces, as the decoding tasks get them: a task per share, the costliest
    4-tuples dealt out (balance.deal), the others by Spark's hash of their ends.

    Where the reading tasks kept their pieces (KeptPieces: a local master), the JVM holds only
    where each is, a few thousand rows of tens of bytes: the action that ran the reading tasks
    collected them all, and the driver hands each decoding task its own (balance.task_of: the task
    the shuffle would send them to, in the order it would) as a batch of a file in the job's spool
    directory that its closure names (in the closure, every task's were pickled and sent to the JVM
    with the plan, and every task unpickled all of them: 117 and 216 KB for the 10 h capture's two
    decoding stages on two cores, the first part of that while every core waits for the driver), so that
    the second job is planned without the pieces' cache, its filters and the deal's expression, and
    runs without their shuffle (on the 10 h capture, half of the driver's calls to the JVM between
    the jobs, while every core waits for it). Elsewhere they stay cached in Spark and are shuffled
    to their tasks."""

    def __init__(self, spark: SparkSession, cached: DataFrame | None, located: pa.Table | None,
                 spool: str | None = None) -> None:
        self.spark, self.cached, self.located, self.spool = spark, cached, located, spool
        self.handed = 0  # the hand-outs written so far (each decoded() of located pieces writes one)

    @classmethod
    def of(cls, spark: SparkSession, pieces: DataFrame | RDD[bytes], kept: str | None) -> tuple[_ReadPieces, Tally]:
        """Run the reading tasks (_pieces): their pieces, and their tallies added up. ``kept``: the
        job's spool directory where the reading tasks kept them (KeptPieces), and where the hand-outs go."""
        if kept is None:
            assert isinstance(pieces, DataFrame), "Spark caches and shuffles the pieces"
            pieces = pieces.persist(StorageLevel.MEMORY_AND_DISK)
            read = _merged(row.tally for row in pieces.where("tally IS NOT NULL").select("tally").collect())
            # conditions as SQL text: one call to the JVM each
            return cls(spark, pieces.where("tally IS NULL").drop("tally"), None), read
        table = _places(pieces)
        tallies = table.column("tally")
        read = _merged(tally for tally in tallies.to_pylist() if tally is not None)
        return cls(spark, None, table.filter(tallies.is_null()).drop_columns(["tally"]), kept), read

    @property
    def hands_out(self) -> bool:
        """Whether the driver hands the pieces out (the reading tasks kept them), or Spark shuffles them."""
        return self.located is not None

    def decoded(self, decode: Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]], schema: StructType,
                costs: Counter, shares: list[int], hashed: int = 0, guessed: frozenset[ConnectionKey] = frozenset(),
                among: bool = False, cores: int = 1) -> DataFrame:
        """``decode`` (a mapInArrow function over batches of pieces) over a task per share (cached:
        Spark shuffles them) or over a batch of the hand-out per share, which ``cores`` tasks take for
        themselves (handed out: _handed_plan); with ``guessed``, only the pieces of those 4-tuples
        (``among``) or of the others."""
        if self.cached is not None:
            dealt = balance.deal(costs, shares, hashed=hashed)
            pieces = self.cached.where(balance.among(guessed) if among else ~balance.among(guessed)) if guessed \
                else self.cached
            return pieces.repartition(len(shares), balance.task_column(dealt, len(shares))).mapInArrow(decode, schema)
        return _handed_plan(self.spark, self.hand_out(costs, shares, hashed, guessed, among), decode, schema,
                            len(shares), cores)

    def beside(self, decode: Callable[..., Iterator[pa.RecordBatch]], costs: Counter, shares: list[int],
               guessed: frozenset[ConnectionKey], first_part: int, replay_tasks: int) -> DataFrame | Beside:
        """The ``guessed`` 4-tuples' pieces decoded in the liveness stage (``decode`` gives its
        LIVENESS rows), a part of them per share, their part files numbered from ``first_part``:
        handed out, a batch of the hand-out per share, which the stage's tasks take for themselves
        (Beside, Claims: the replay's own function, one plan fewer to make, and a Python task a
        core, not one a share); cached, a stage of their own unioned after the ``replay_tasks``."""
        if self.cached is not None:
            return self.decoded(partial(decode, first_part=first_part - replay_tasks), LIVENESS, costs, shares,
                                guessed=guessed, among=True)
        return _claimed_beside(self.hand_out(costs, shares, 0, guessed, True), len(shares),
                               partial(decode, first_part=first_part))

    def hand_out(self, costs: Counter, shares: list[int], hashed: int, guessed: frozenset[ConnectionKey],
                 among: bool, path: str | None = None) -> str:
        """The located pieces (of the ``guessed`` 4-tuples or of the others, as ``among`` says) dealt
        to a task per share, written as a file of a batch per task (at ``path``, else the spool's
        next); its path."""
        dealt = balance.deal(costs, shares, hashed=hashed)
        located = self.located
        assert located is not None
        tasks: dict[ConnectionKey, int] = {}
        handed: list[list[int]] = [[] for _ in shares]
        for row, key in enumerate(zip(located.column("lower").to_pylist(), located.column("higher").to_pylist(),
                                      strict=True)):
            if (guessed or among) and (key in guessed) != among:
                continue
            task = tasks.get(key)
            if task is None:
                task = tasks[key] = balance.task_of(key, dealt, len(shares))
            handed[task].append(row)
        if path is None:
            assert self.spool is not None
            path = os.path.join(self.spool, f"handed-{self.handed}.arrow")
            self.handed += 1
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, located.schema) as writer:
            for rows in handed:  # batch i: task i's pieces
                own = located.take(pa.array(rows, pa.int64()))
                writer.write_batch(pa.RecordBatch.from_arrays([column.combine_chunks() for column in own.columns],
                                                              schema=located.schema))
        return path

    def unpersist(self) -> None:
        if self.cached is not None:
            self.cached.unpersist()


def _handed_plan(spark: SparkSession, handed: str, decode: Callable[..., Iterator[pa.RecordBatch]],
                 schema: StructType, batches: int, cores: int) -> DataFrame:
    """``decode`` over the ``batches`` of the ``handed`` file (_ReadPieces: a batch per share, which
    may be written after the plan is made, PlannedAhead), in a task a core (at most one a batch),
    each taking the next batch nobody took when it is free, biggest first (Claims): a Python task
    costs its worker and the JVM ~30 ms whatever its size, and the next stage waits for the last
    one. A task a share (two a core, of two and one shares) was 4 Python tasks on two cores against
    2 now, and the core that ended first waited up to a share, a sixth of the stage's work, where
    it now waits at most the last batch, a fourteenth (balance.claimed_decoding)."""
    tasks = max(1, min(cores, batches))
    return spark.range(0, tasks, 1, tasks).mapInArrow(partial(_decode_handed, handed=handed,
                                                              batches_handed=batches, decode=decode), schema)


def _claimed_beside(handed: str, batches: int, decode: Callable[..., Iterator[pa.RecordBatch]]) -> Beside:
    """The liveness stage's work beside the replay: the ``batches`` of the ``handed`` file, each
    taken by whichever task is free (Claims) and given to ``decode`` (its LIVENESS rows)."""
    return Beside(partial(_decode_claimed, handed=handed, batches=batches, decode=decode))


class PlannedAhead:
    """The second Spark job (the decoding tasks, then the liveness stage) planned while the first,
    the reading tasks, runs: on a local master whose decoding tasks write the tables, the plan's
    Python functions read their arguments, which the first job's results decide, from the job's
    spool (SpooledFunction), and its tasks their pieces from hand-outs at paths named now
    (_ReadPieces.hand_out). Made between the jobs, the plan cost the driver about 80 calls to the
    JVM and the JVM its analysis and physical planning while every core waited (docs/benchmarks.md).

    The plan's shape is what the first job cannot change on this master: the decoding stage a task
    a core taking the hand-out's batches (balance.claimed_decoding: the files Spark reads whole are
    known before), the liveness
    stage one task on one core, else a task a core with the guessed clients' decoding beside the
    replay (balance.decode_beside_replay; where no 4-tuple is guessed a client's, nothing is
    beside: _nothing_beside, and a core with no NameServer to replay has an empty task, ~10 ms of
    the JVM's CPU against the plan's). Where planning here failed, ``made`` says so and the job
    plans as it does on other masters, after the first job (failing the same way, or not). A
    thread, not the driver's own: the driver waits in the first job's action meanwhile."""

    def __init__(self, spark: SparkSession, spool: str, cores: int, shares: list[int]) -> None:
        self.functions = os.path.join(spool, "second-job.pickle")
        self.handed = os.path.join(spool, "handed-decoding.arrow")
        self.claimed = os.path.join(spool, "handed-beside.arrow")
        self.rows_to = spool  # where the liveness stage's tasks write their rows (liveness_plan)
        self.beside = balance.decode_beside_replay(cores)
        self.tasks = cores if self.beside else 1
        self.plan: DataFrame | None = None
        self._thread = threading.Thread(target=self._make, args=(spark, cores, shares), name="plan-ahead",
                                        daemon=True)
        self._thread.start()

    def _make(self, spark: SparkSession, cores: int, shares: list[int]) -> None:
        with suppress(Exception):  # planned again after the first job, the same way: whatever failed fails there
            self.plan = self._planned(spark, cores, shares)

    def _planned(self, spark: SparkSession, cores: int, shares: list[int]) -> DataFrame:
        decoded = _handed_plan(spark, self.handed, SpooledFunction(self.functions, "decode"), EVENTS, len(shares),
                               cores)
        beside = _claimed_beside(self.claimed, len(balance.claimed_shares(cores)),
                                 SpooledFunction(self.functions, "beside")) if self.beside else None
        plan = liveness_plan(decoded, SpooledFunction(self.functions, "replay"), beside, self.tasks, self.rows_to)
        plan._jdf.queryExecution().executedPlan()  # its physical plan now, which the action then reuses
        return plan

    def made(self) -> DataFrame | None:
        """The plan, once made (None: planning failed)."""
        self._thread.join()
        return self.plan

    def rows(self, plan: DataFrame) -> list[Row]:
        """The plan's action: the liveness stage's rows, which its tasks wrote to the spool, not
        sent to the JVM (liveness_stage.spooled_rows), after any it sent."""
        return plan.collect() + spooled_rows(self.rows_to, self.tasks)

    def write(self, **functions: Callable) -> None:
        """The plan's functions with their arguments, written to the spool before its action runs."""
        with open(self.functions, "wb") as file:
            file.write(cloudpickle.dumps(functions))


class SpooledFunction:
    """A task's function read from a file of the job's spool (``key`` of its pickled dict), where
    the driver writes it after the plan naming it was made (PlannedAhead): what a task unpickles
    with its command is this, a path and a name; read once a task, when first called."""

    def __init__(self, path: str, key: str) -> None:
        self.path, self.key = path, key
        self._function: Callable | None = None

    def __call__(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN204 - whatever the function read takes
        if self._function is None:
            with open(self.path, "rb") as file:
                self._function = pickle.load(file)[self.key]
        return self._function(*args, **kwargs)

    def __reduce__(self) -> tuple:
        return SpooledFunction, (self.path, self.key)


def _nothing_beside(batches: Iterable[pa.RecordBatch], batch: int | None = None) -> Iterator[pa.RecordBatch]:
    """The work beside the replay where no 4-tuple was guessed a client's (PlannedAhead): none."""
    return iter(())


def _decode_handed(batches: Iterable[pa.RecordBatch], handed: str, batches_handed: int,
                   decode: Callable[..., Iterator[pa.RecordBatch]]) -> Iterator[pa.RecordBatch]:
    """A decoding task given its pieces by the driver (_ReadPieces): the batches of the ``handed``
    file it takes (Claims; its partition holds only its index), each decoded as its own part
    (``decode``'s ``handed``: its part files and rows numbered by the batch, not by the task)."""
    for _ in batches:
        pass
    context = TaskContext.get()
    for index in Claims(handed, batches_handed).taken(context.partitionId(), context.attemptNumber()):
        yield from _decode_own(index, handed, partial(decode, handed=index))


def _decode_own(index: int, handed: str, decode: Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]
                ) -> Iterator[pa.RecordBatch]:
    """Decode task ``index``'s pieces, batch ``index`` of the ``handed`` file (_ReadPieces)."""
    with pa.OSFile(handed) as source:
        own = pa.ipc.open_file(source).get_batch(index)
    yield from decode([own])


def _decode_claimed(partition: int, attempt: int, handed: str, batches: int,
                    decode: Callable[..., Iterator[pa.RecordBatch]]) -> Iterator[pa.RecordBatch]:
    """Decode the batches of the ``handed`` file (_ReadPieces) that this task takes (Claims), each
    as its own part (``decode``'s ``batch``)."""
    for index in Claims(handed, batches).taken(partition, attempt):
        yield from _decode_own(index, handed, partial(decode, batch=index))


class Claims:
    """The batches of a hand-out that a stage's tasks take for themselves, each the next one nobody
    took when it is free, biggest first: a Python task a core, not one a batch (each costs its
    worker and the JVM ~30 ms, at the job's end while the other core waits), and the core that
    ends its replay first takes what is left. A batch is taken by a file beside the hand-out
    naming the task (linked in whole: taken or not, never half), so that a task run again first
    takes back what its failed attempt took, whose output Spark dropped with it: every batch's
    rows come once, from one successful attempt. Spark runs one attempt of a task at a time
    (a local master, the only one the driver hands out to, runs no speculative copies)."""

    def __init__(self, handed: str, batches: int) -> None:
        self.handed, self.batches = handed, batches

    def taken(self, partition: int, attempt: int) -> Iterator[int]:
        """The batches task ``partition`` decodes, in order, each taken only when the one before is done."""
        if attempt:
            yield from (index for index in range(self.batches) if self._holder(index) == partition)
        for index in range(self.batches):
            if self._take(index, partition, attempt):
                yield index

    def _path(self, index: int) -> str:
        return f"{self.handed}.taken-{index}"

    def _holder(self, index: int) -> int | None:
        try:
            with open(self._path(index), "rb") as file:
                return int(file.read())
        except FileNotFoundError:
            return None

    def _take(self, index: int, partition: int, attempt: int) -> bool:
        path = self._path(index)
        if os.path.exists(path):
            return False
        mine = f"{path}.{partition}.{attempt}"
        with open(mine, "wb") as file:
            file.write(str(partition).encode())
        try:
            os.link(mine, path)
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(mine)


def _events_of(decoded: DataFrame) -> DataFrame:
    """What the liveness stage reads of the decoded rows where they are DECODED (Spark writes the
    tables): the events and the tallies, all EVENTS holds."""
    return decoded.where(f"{EVENT} IS NOT NULL OR tally IS NOT NULL").select(*EVENTS.names)


def _beside_replay(batches: Iterable[pa.RecordBatch], decode: Callable[..., Iterator[pa.RecordBatch]],
                   first_part: int, batch: int | None = None) -> Iterator[pa.RecordBatch]:
    """The guessed clients' pieces decoded in the liveness stage, as its rows (liveness_stage.beside_replay)."""
    return beside_replay(decode(batches, first_part=first_part, handed=batch), batch)


def decode_batches(batches: Iterable[pa.RecordBatch], servers: Servers, tables_out: str | None = None,
                   places: Places | None = None, left_out: frozenset[tuple[str, ConnectionKey]] = frozenset(),
                   events_only: bool = False, first_part: int = 0, handed: int | None = None
                   ) -> Iterator[pa.RecordBatch]:
    """mapInArrow over a partition of pieces: decode each 4-tuple from all its pieces. The rows of
    the tables go to this task's part files when it writes them (``tables_out``), else, like the
    broker events, back to the JVM as batches of DECODED (each row fills the struct column of its
    kind; EVENTS, where the task writes the tables or ``events_only``: no table rows are sent); the
    last row holds the task's tally: counts, calls' latencies and findings' groups.
    ``places`` fills the tables' ``input`` and ``session`` columns; the (file, 4-tuple) pieces in
    ``left_out`` are copies of others read elsewhere (_one_copy_each), not decoded. ``events_only``:
    no table rows (the events replayed again, the tables written already). ``first_part``: the
    number of the part files of the stage's partition 0 (the guessed clients' are numbered after
    the others'); ``handed``: which of a hand-out's batches the pieces are, where any task may take
    it (Claims): the part files are numbered by it, not by the task."""
    worker.settle()
    by_connection: dict[tuple[str, str], list[Piece]] = {}
    kept = _KeptReader()
    for batch in batches:
        for lower, higher, path, rows, payload, kept_in, kept_at, kept_len in zip(
                *(column.to_pylist() for column in batch.columns), strict=True):
            path = os.fsdecode(path)
            if not left_out or (path, (lower, higher)) not in left_out:
                if kept_in is not None:
                    rows, payload = kept.read(kept_in, kept_at, kept_len)
                by_connection.setdefault((lower, higher), []).append(Piece((lower, higher), path, rows, payload))
    kept.close()
    part = first_part + (TaskContext.get().partitionId() if handed is None else handed)
    writer = tables.PartWriter(tables_out, part) if tables_out else None
    pending: dict[str, list] = {kind: [] for kind in (*_TABLE_KINDS, *_BLOCKS, EVENT, CONNECTION, CONTROLLER_NOTE)}
    appends = {kind: rows.append for kind, rows in pending.items()}
    tally = Tally()
    blocked = 0  # the rows in the pending blocks (counted as they come: summing the blocks was a walk of them all)
    with worker.no_cycle_collection():
        while by_connection:
            _, pieces = by_connection.popitem()
            for kind, row in piece_rows(pieces, servers, blocks=True):
                appends[kind](row)
                if kind in _BLOCKS:
                    blocked += len(row)
            if sum(map(len, pending.values())) + blocked >= _BATCH_ROWS:
                yield from _send(pending, writer, tally, places, events_only, handed)
                blocked = 0
                worker.drill("decode")
        yield from _send(pending, writer, tally, places, events_only, handed)
    worker.drill("decode")
    if writer is not None:
        writer.close()
    yield _decoded_batch(_sent_schema(writer, events_only), 1, tally=pa.array([pickle.dumps(tally)], pa.binary()),
                         batch=pa.array([handed], pa.int64()))


def _send(pending: dict[str, list], writer: tables.PartWriter | None, tally: Tally,
          places: Places | None = None, events_only: bool = False, handed: int | None = None
          ) -> Iterator[pa.RecordBatch]:
    """Count the pending rows and send them on, emptying them: table rows to the part files if
    ``writer``, every other kind as one batch to the JVM with the other kinds' columns null. FRAME
    and CALL rows come as blocks (rows.FrameBlock, rows.CallBlock), made into columns. Events name
    the hand-out's batch they are of (``handed``), if any."""
    counting.count_connections(tally, pending[CONNECTION])
    pending[CONNECTION].clear()
    counting.note_controller_calls(tally, pending[CONTROLLER_NOTE])
    pending[CONTROLLER_NOTE].clear()
    for kind in _TABLE_KINDS:
        blocks, make = _BLOCKED.get(kind, (kind, None))
        rows = pending[blocks]
        if not rows or events_only:
            rows.clear()
            continue
        array = arrow_array(rows, _ARROW_DECODED.field(kind).type) if make is None else make(rows)
        rows.clear()
        if places is not None:
            array = places.fill(array)
        counting.count_rows(tally, kind, array)
        if writer is not None:
            writer.write(kind, array)
            continue
        yield _decoded_batch(_ARROW_DECODED, len(array), **{kind: array})
    if pending[EVENT]:
        by_server: dict[str | None, list[tuple]] = {}
        for event in pending[EVENT]:
            by_server.setdefault(event[_EVENT_SERVER], []).append(event)
        pending[EVENT].clear()
        events = pa.array([pickle.dumps(rows) for rows in by_server.values()], pa.binary())
        yield _decoded_batch(_sent_schema(writer, events_only), len(by_server), event=events,
                             event_server=pa.array(list(by_server), pa.string()),
                             batch=pa.array([handed] * len(by_server), pa.int64()))


def _sent_schema(writer: tables.PartWriter | None, events_only: bool) -> pa.Schema:
    """What a decoding task sends the JVM: EVENTS where it sends no table rows, else DECODED."""
    return _ARROW_EVENTS if writer is not None or events_only else _ARROW_DECODED


def _decoded_batch(sent: pa.Schema, length: int, **columns: pa.Array) -> pa.RecordBatch:
    """A batch of ``sent`` (DECODED or EVENTS) of ``length`` rows: the ``columns`` given, the others null."""
    return pa.RecordBatch.from_arrays([columns.get(field.name, pa.nulls(length, field.type)) for field in sent],
                                      schema=sent)


def _tasks_write_tables(master: str, out: str) -> bool:
    """Whether the decoding tasks write the tables (tables.py): the output is a local directory
    and they run on this machine."""
    return inputs.is_local(out) and master.startswith("local")


def _rows_of(decoded: DataFrame, kind: str) -> DataFrame:
    """The decoded rows of one kind, as that kind's columns."""
    return decoded.where(F.col(kind).isNotNull()).select(f"{kind}.*")


# -- writing ----------------------------------------------------------------------------------------


def with_timestamps(table: DataFrame) -> DataFrame:
    """Seconds and milliseconds columns as timestamps, in place."""
    for name in SECONDS_COLUMNS:
        table = table.withColumn(name, F.timestamp_seconds(name))
    for name in MILLIS_COLUMNS:
        if name in table.columns:
            table = table.withColumn(name, F.timestamp_millis(name))
    return table


def write_bytes(spark: SparkSession, uri: str, data: bytes) -> None:
    """Write a small driver-side file locally, or through Hadoop's FileSystem for other schemes; a
    local one whole or not at all (written aside, then renamed: a full disk leaves no half of it)."""
    if inputs.is_local(uri):
        path = inputs.local_path(uri)
        with tables.writing(path):
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            try:
                with open(f"{path}.tmp", "wb") as f:
                    f.write(data)
                os.replace(f"{path}.tmp", path)
            except OSError:
                with suppress(OSError):
                    os.remove(f"{path}.tmp")
                raise
        return
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    stream = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).create(path, True)
    try:
        stream.write(bytearray(data))
    finally:
        stream.close()


def _forget_earlier_report(out: str) -> None:
    """Remove the report files an earlier run left in ``out`` (inputs.WRITTEN_FILES), each that can
    be; then OutputError for the first that could not."""
    failed: tables.OutputError | None = None
    for name in inputs.WRITTEN_FILES:
        try:
            with tables.writing(os.path.join(out, name)), suppress(FileNotFoundError):
                os.remove(os.path.join(out, name))
        except tables.OutputError as error:
            failed = failed or error
    if failed:
        raise failed


def output_problem(error: BaseException) -> str | None:
    """The ``cannot write PATH: REASON`` of an output a task or the driver could not write
    (tables.OutputError; from a task it arrives as the text of a Python worker's exception)."""
    if isinstance(error, tables.OutputError):
        return str(error)
    found = re.search(r"OutputError: (cannot write [^\n]*)", str(error))
    return found.group(1) if found else None


def _list_hadoop(spark: SparkSession, uri: str) -> list[tuple[str, int]]:
    """Files at a glob, file or directory (recursively) on any Hadoop filesystem, as (uri, size)."""
    jvm = spark.sparkContext._jvm
    pattern = jvm.org.apache.hadoop.fs.Path(uri)
    fs = pattern.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    found = []
    for status in fs.globStatus(pattern) or []:
        if not status.isDirectory():
            found.append((status.getPath().toString(), status.getLen()))
            continue
        listing = fs.listFiles(status.getPath(), True)
        while listing.hasNext():
            entry = listing.next()
            if not entry.getPath().getName().startswith((".", "_")):
                found.append((entry.getPath().toString(), entry.getLen()))
    return sorted(found)


def _absolute(out: str) -> str:
    return os.path.abspath(inputs.local_path(out)) if inputs.is_local(out) else out.rstrip("/")


def _on_ports(ports: Ports) -> str:
    return f"on port{'s' if len(ports) > 1 else ''} {', '.join(map(str, ports))}" if ports else "on any port"


def _said(path: str) -> str:
    """An input's name in a console line: clipped past escapes.SHOWN_MAX characters as the findings'
    lines clip it, its controls escaped (shown_name)."""
    return shown_name(clipped_name(path))


def _quiet_files(paths: list[str]) -> str:
    """A rotation's files of quiet times, in one line, as their finding says them (findings.quiet_files)."""
    return f"\n      {shown_name(findings.quiet_files(paths))}" if paths else ""


def _mib(count: int) -> str:
    return f"{count / (1 << 20):,.1f} MiB"


class _Progress:
    """Numbered stage lines with the time since the job started; and, meanwhile, the tasks done."""

    def __init__(self, log: Callable[[str], None], sc: SparkContext, tasks_every: float | None) -> None:
        self.log, self.sc, self.tasks_every = log, sc, tasks_every
        self.stage, self.started = 0, time.monotonic()

    def __call__(self, message: str) -> None:
        self.stage += 1
        self.log(f"[{self.stage}] {self._elapsed()}  {message}")

    @contextmanager
    def meanwhile(self, what: str) -> Iterator[None]:
        """While the Spark jobs of the block run, every ``tasks_every`` seconds a line with the tasks
        of their running stages done so far (from a thread: the block waits in the JVM)."""
        if self.tasks_every is None:
            yield
            return
        done = threading.Event()
        thread = threading.Thread(target=self._tasks_until, args=(what, done), name="progress", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    def _tasks_until(self, what: str, done: threading.Event) -> None:
        tracker = self.sc.statusTracker()
        while not done.wait(self.tasks_every):
            stages = [stage for stage in map(tracker.getStageInfo, tracker.getActiveStageIds()) if stage]
            if stages:
                finished, total = (sum(getattr(s, key) for s in stages) for key in ("numCompletedTasks", "numTasks"))
                self.log(f"    {self._elapsed()}  {what}: {finished:,} of {total:,} tasks done")

    def _elapsed(self) -> str:
        return f"{time.monotonic() - self.started:7.1f}s"
