"""The output contract: columns of ``frames/``, ``calls/``, ``registrations/`` and ``brokers.csv``.

Other tools read these, so names, order and types are fixed here and nowhere else, as Arrow
schemas (the Spark layer derives its StructTypes from them: spark/struct_types.py). ``*_ROWS`` describe
the tuples decode/rows.py builds (times as seconds or milliseconds); the files have those columns
as timestamps (SECONDS_COLUMNS, MILLIS_COLUMNS).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pyarrow as pa

from twisted_namesrv.remoting.fastjson import java_utf8

T = TypeVar("T")


def _schema(*fields: tuple[str, pa.DataType]) -> pa.Schema:
    return pa.schema([pa.field(name, kind, True) for name, kind in fields])


def arrow_array(values: Any, kind: pa.DataType | None = None) -> pa.Array:
    """``pa.array(values, kind)``, text holding a lone surrogate written as Java writes it to its peers
    (String.getBytes: ``?``, fastjson.java_utf8): JSON carries one (``"\\ud800"`` in a header or a
    body), the NameServer keeps it in a name as Java's does, and Arrow's text is UTF-8, which cannot
    hold it. Before, one such registration in a capture stopped the whole report (UnicodeEncodeError).
    The values are looked through only when Arrow refuses them: no cost for every other capture."""
    return _as_utf8(lambda text: pa.array(text, kind), values)


def arrow_batch(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.RecordBatch:
    """``pa.RecordBatch.from_pylist(rows, schema)``, text as arrow_array writes it."""
    return _as_utf8(lambda text: pa.RecordBatch.from_pylist(text, schema=schema), rows)


def _as_utf8(make: Callable[[Any], T], values: Any) -> T:
    """``make(values)``, or, when Arrow refuses a text of them, ``make`` of them as UTF-8 holds them."""
    try:
        return make(values)
    except UnicodeEncodeError:
        return make(utf8_values(values))


def utf8_values(value: Any) -> Any:
    """``value`` with every text in it (in lists, tuples and dicts, keys too) as UTF-8 holds it: a lone
    surrogate as ``?``, as Java writes it (arrow_array; the CSV files)."""
    if isinstance(value, str):
        return java_utf8(value).decode()
    if isinstance(value, (list, tuple)):
        return type(value)(map(utf8_values, value)) if type(value) in (list, tuple) else value
    if isinstance(value, dict):
        return {utf8_values(key): utf8_values(item) for key, item in value.items()}
    return value


FRAME_ROWS = _schema(
    ("ts", pa.float64()), ("conn_id", pa.string()), ("client", pa.string()), ("server", pa.string()),
    ("direction", pa.string()), ("code", pa.int32()), ("code_name", pa.string()), ("opaque", pa.int32()),
    ("flag", pa.int32()), ("oneway", pa.bool_()), ("version", pa.int32()), ("version_name", pa.string()),
    ("language", pa.string()), ("serialize_type", pa.string()), ("remark", pa.string()),
    ("ext", pa.map_(pa.string(), pa.string())), ("body_len", pa.int32()), ("missing", pa.int32()),
    ("input", pa.string()), ("session", pa.string()),
)

CALL_ROWS = _schema(
    ("ts", pa.float64()), ("conn_id", pa.string()), ("client", pa.string()), ("code", pa.int32()),
    ("code_name", pa.string()), ("opaque", pa.int32()), ("response_code", pa.int32()),
    ("latency_ms", pa.float64()), ("oneway", pa.bool_()), ("topic", pa.string()), ("response_remark", pa.string()),
    ("server", pa.string()), ("broker_addr", pa.string()), ("cut", pa.bool_()), ("input", pa.string()),
    ("session", pa.string()),
)

REGISTRATION_ROWS = _schema(
    ("ts", pa.float64()), ("conn_id", pa.string()), ("cluster", pa.string()), ("broker_name", pa.string()),
    ("broker_addr", pa.string()), ("broker_id", pa.int64()), ("ha_server_addr", pa.string()),
    ("compressed", pa.bool_()), ("body_len", pa.int32()), ("crc_declared", pa.int64()),
    ("crc_ok", pa.bool_()), ("topic_count", pa.int32()), ("data_version_counter", pa.int64()),
    ("data_version_ts", pa.int64()), ("filter_servers", pa.list_(pa.string())),
    ("response_code", pa.int32()), ("version_name", pa.string()),
    ("server", pa.string()), ("input", pa.string()), ("session", pa.string()),
)

#: one per call to a 5.x controller (decode/controller.py), and one per broker group its answer tells of:
#: the broker's fields as asked (BROKER_HEARTBEAT's epoch: the masterEpoch the broker knows) and, answered
#: SUCCESS, the controller's view (master, masterEpoch, syncStateSet and its epoch); ``note``: why the
#: call says nothing (undecodable), else null
CONTROLLER_ROWS = _schema(
    ("ts", pa.float64()), ("conn_id", pa.string()), ("client", pa.string()), ("server", pa.string()),
    ("code", pa.int32()), ("code_name", pa.string()), ("response_code", pa.int32()), ("latency_ms", pa.float64()),
    ("oneway", pa.bool_()), ("cluster", pa.string()), ("broker_name", pa.string()), ("broker_id", pa.int64()),
    ("broker_addr", pa.string()), ("broker_epoch", pa.int32()), ("master_broker_id", pa.int64()),
    ("master_addr", pa.string()), ("master_epoch", pa.int32()), ("sync_state_set", pa.list_(pa.int64())),
    ("sync_state_set_epoch", pa.int32()), ("note", pa.string()), ("input", pa.string()), ("session", pa.string()),
)

#: what the NameServer's replay (analysis/replay.py) applies, per server endpoint, and brokers.csv and the
#: report's liveness plots are computed from: requests naming a broker (code: REGISTER_BROKER or a
#: decode.NAMING_CODES; alive: keeps the broker registered), an administrator's route changes
#: (decode.ADMIN_CODES: DELETE_TOPIC_IN_NAMESRV's ``topic``; ``topic_count``: the count WIPE/ADD_WRITE_PERM
#: answered), route lookups answered TOPIC_NOT_EXIST (GET_ROUTEINFO_BY_TOPIC, ``topic``), and the closes of
#: connections brokers registered over (decode.CONNECTION_CLOSED; ``closed``: how). ``server``: the
#: NameServer endpoint; ``client``: who asked; ``version``: the request's MQVersion ordinal; ``ext``: the
#: header fields of a REGISTER_BROKER, UNREGISTER_BROKER or administrator's request, which the replay reads
#: by the server's rules (RegisterBrokerHeader); ``body_key``: a REGISTER_BROKER body's digest, ``body``:
#: the body itself the first time its connection sent it (null after: the replay keeps it by its key);
#: ``missed``, ``missed_since``: a decode.CAPTURE_MISSED row's bytes the broker sent that the capture
#: missed (a sequence gap in its connection), sent between ``missed_since`` and ``t``
EVENT_ROWS = _schema(
    ("broker_addr", pa.string()), ("broker_name", pa.string()), ("t", pa.float64()), ("code", pa.int32()),
    ("alive", pa.bool_()), ("topic_count", pa.int32()), ("cluster", pa.string()), ("broker_id", pa.int64()),
    ("version_name", pa.string()), ("response_code", pa.int32()), ("crc_ok", pa.bool_()),
    ("body_len", pa.int32()), ("compressed", pa.bool_()), ("data_version_counter", pa.int64()),
    ("data_version_ts", pa.int64()), ("oneway", pa.bool_()), ("server", pa.string()),
    ("closed", pa.string()), ("topic", pa.string()), ("client", pa.string()), ("version", pa.int32()),
    ("ext", pa.map_(pa.string(), pa.string())), ("body_key", pa.binary()), ("body", pa.binary()),
    ("missed", pa.int64()), ("missed_since", pa.float64()),
)

#: what the decoding tasks send the JVM: each row fills the column of its kind (decode/rows.py's tags);
#: table rows only when Spark writes the tables (job.py), connections never (they are only counted);
#: events as a pickled list of EVENT_ROWS tuples of one server endpoint (``event_server``) a row: the
#: JVM only moves them to that endpoint's liveness task, where a row per event cost it a conversion
#: each way; a task's last row carries only its ``tally`` (job.py: what the driver counts, returned as data);
#: ``batch``: the hand-out's batch decoded (job.Claims: any task may take it), by which the liveness stage
#: orders what it reads, as the shuffle of a task a batch would have brought it (null: the task's own)
_EVENTS_AND_TALLY = (("event", pa.binary()), ("event_server", pa.string()), ("tally", pa.binary()),
                     ("batch", pa.int64()))
DECODED = _schema(*((name, pa.struct(list(rows))) for name, rows in (
    ("frame", FRAME_ROWS), ("call", CALL_ROWS), ("registration", REGISTRATION_ROWS), ("controller", CONTROLLER_ROWS))),
    *_EVENTS_AND_TALLY)
#: what the decoding tasks send the JVM where they write the tables themselves, or decode again for
#: the events only (job.py): DECODED's last columns, all the liveness stage reads; the table columns,
#: always null there, made the driver's plan of the job a filter and a projection longer and every
#: node of it a schema of the tables' nested rows to analyse, between the Spark jobs, with every core idle
EVENTS = _schema(*_EVENTS_AND_TALLY)

#: columns given as seconds (float) or milliseconds (int) in the rows, timestamps in the files
SECONDS_COLUMNS = ("ts",)
MILLIS_COLUMNS = ("data_version_ts",)

#: one row per broker stay: address and session, a registration to its end (docs/capture-report.md)
BROKER_COLUMNS = (
    "session", "server", "input",
    "cluster", "broker_name", "broker_id", "role", "broker_addr", "version", "first_seen", "last_seen",
    "registrations", "refused_registrations", "crc_failures", "interval_p50_s", "interval_p90_s", "interval_p99_s",
    "max_gap_s", "near_expiry", "would_expire", "body_len_min", "body_len_median", "body_len_max", "compressed",
    "topic_count_first", "topic_count_last", "topic_count_max", "unregistered", "ended", "ended_at",
    "connection_closes",
)
#: brokers.csv's columns (summary.json's brokers and the page's table too): the liveness stage's, then
#: what the driver notes once every input is known (findings.note_clock_steps: its times stamped on
#: both sides of a clock's step back)
BROKERS_CSV_COLUMNS = (*BROKER_COLUMNS, "across_clock_step")
