"""What the decoding tasks count of the rows they make, into their tally (model/tally.py): the
progress lines' counts, the findings' groups, the calls' latencies, the clients' counts and what
each server endpoint is asked. A batch of rows at a time (a few vector operations each), and a
connection's stats and a controller call's notes one by one.

Pure (pyarrow): spark/job.py's decoding tasks call it between making rows and sending them on.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from spark_analysis.analysis import clients, findings, latency
from spark_analysis.capture.conversation import REQUEST
from spark_analysis.decode.rows import CALL, CONTROLLER, FRAME, REGISTRATION, ConnectionStats
from spark_analysis.model.tally import Tally, add


def count_rows(tally: Tally, kind: str, rows: pa.StructArray) -> None:
    """What the progress lines, findings and the report count of a batch of rows of one kind."""
    if kind == FRAME:
        requests = pc.sum(pc.equal(rows.field("direction"), REQUEST)).as_py() or 0
        tally.frame += len(rows)
        tally.request += requests
        tally.response += len(rows) - requests
        clients.count_frames(tally.clients, rows)
        findings.note_error_answers(tally.groups, rows)
    elif kind == CALL:
        tally.call += len(rows)
        # a call whose answer may be among frames a snap length cut (``cut``) is not known unanswered
        tally.unanswered += pc.sum(pc.and_(pc.is_null(rows.field("response_code")),
                                           pc.invert(pc.fill_null(rows.field("cut"), False)))).as_py() or 0
        tally.latencies.update(latency.count_calls(rows))
        findings.note_calls(tally.groups, rows)
        findings.note_routes_found(tally.routes_found, rows)
        findings.note_served(tally.served, rows)
        clients.count_calls(tally.clients, rows)
    elif kind == CONTROLLER:
        tally.controller += len(rows)
    elif kind == REGISTRATION:
        tally.registration += len(rows)
        tally.crc_failures += pc.sum(pc.equal(rows.field("crc_ok"), False)).as_py() or 0


def count_connections(tally: Tally, connections: Iterable[ConnectionStats]) -> None:
    """Connections decoded, the capture's holes in them and their undecodable bytes (a finding's
    group per connection)."""
    for stats in connections:
        tally.connection += 1
        tally.gaps += stats.gaps
        tally.lost_bytes += stats.lost_bytes
        tally.cut_frames += stats.cut_frames
        tally.uncaptured_bytes += stats.uncaptured_bytes
        tally.unplaced_bytes += stats.unplaced_bytes
        tally.mid_frame_bytes += stats.mid_frame_bytes
        tally.unseen_bytes += stats.unseen_bytes
        tally.undecodable += stats.undecodable_bytes > 0
        if stats.unheard:
            add(tally.groups, findings.UNHEARD, (stats.server, stats.unheard), 1, 0.0, 0.0)
        if stats.undecodable_bytes:
            add(tally.groups, findings.UNDECODABLE, (stats.conn_id, stats.server, stats.protocol),
                stats.undecodable_bytes, 0.0, 0.0)


def note_controller_calls(tally: Tally, notes: Iterable[tuple[Any, ...]]) -> None:
    """The notes of controller calls that say nothing (decode/controller.py), as findings' groups."""
    for group, key, count, first, last, worst in notes:
        add(tally.groups, group, key, count, first, last, worst)
