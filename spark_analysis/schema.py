"""The output contract: columns of ``frames/``, ``calls/``, ``registrations/`` and ``brokers.csv``.

Other tools read these, so names, order and types are fixed here and nowhere else. ``*_ROWS``
describe the tuples decode.py builds (times as seconds or milliseconds); the job turns those
columns into timestamps, giving the ``*_COLUMNS`` of the files.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)


def _schema(*fields: tuple[str, object]) -> StructType:
    return StructType([StructField(name, kind, True) for name, kind in fields])


FRAME_ROWS = _schema(
    ("ts", DoubleType()), ("conn_id", StringType()), ("client", StringType()), ("server", StringType()),
    ("direction", StringType()), ("code", IntegerType()), ("code_name", StringType()), ("opaque", IntegerType()),
    ("flag", IntegerType()), ("oneway", BooleanType()), ("version", IntegerType()), ("version_name", StringType()),
    ("language", StringType()), ("serialize_type", StringType()), ("remark", StringType()),
    ("ext", MapType(StringType(), StringType(), True)), ("body_len", IntegerType()),
    ("input", StringType()), ("session", StringType()),
)

CALL_ROWS = _schema(
    ("ts", DoubleType()), ("conn_id", StringType()), ("client", StringType()), ("code", IntegerType()),
    ("code_name", StringType()), ("opaque", IntegerType()), ("response_code", IntegerType()),
    ("latency_ms", DoubleType()), ("oneway", BooleanType()), ("topic", StringType()), ("response_remark", StringType()),
    ("server", StringType()), ("broker_addr", StringType()), ("input", StringType()), ("session", StringType()),
)

REGISTRATION_ROWS = _schema(
    ("ts", DoubleType()), ("conn_id", StringType()), ("cluster", StringType()), ("broker_name", StringType()),
    ("broker_addr", StringType()), ("broker_id", LongType()), ("ha_server_addr", StringType()),
    ("compressed", BooleanType()), ("body_len", IntegerType()), ("crc_declared", LongType()),
    ("crc_ok", BooleanType()), ("topic_count", IntegerType()), ("data_version_counter", LongType()),
    ("data_version_ts", LongType()), ("filter_servers", ArrayType(StringType(), True)),
    ("response_code", IntegerType()), ("version_name", StringType()), ("topics_held", IntegerType()),
    ("server", StringType()), ("input", StringType()), ("session", StringType()),
)

#: requests naming a broker: what brokers.csv and the report's liveness plots are computed from
#: (code: REGISTER_BROKER, a decode.NAMING_CODES or decode.CONNECTION_CLOSED; alive: keeps the broker
#: registered; server: the NameServer endpoint; closed: how the connection it registered over ended;
#: topics_held: what the NameServer holds for it after a registration, by its own logic)
EVENT_ROWS = _schema(
    ("broker_addr", StringType()), ("broker_name", StringType()), ("t", DoubleType()), ("code", IntegerType()),
    ("alive", BooleanType()), ("topic_count", IntegerType()), ("cluster", StringType()), ("broker_id", LongType()),
    ("version_name", StringType()), ("response_code", IntegerType()), ("crc_ok", BooleanType()),
    ("body_len", IntegerType()), ("compressed", BooleanType()), ("data_version_counter", LongType()),
    ("data_version_ts", LongType()), ("oneway", BooleanType()), ("server", StringType()),
    ("closed", StringType()), ("topics_held", IntegerType()),
)

#: what the decoding tasks send the JVM: each row fills the column of its kind (decode.py's tags);
#: table rows only when Spark writes the tables (job.py), connections never (they are only counted);
#: a task's last row carries only its ``tally`` (job.py: what the driver counts, returned as data)
DECODED = _schema(("frame", FRAME_ROWS), ("call", CALL_ROWS), ("registration", REGISTRATION_ROWS),
                  ("event", EVENT_ROWS), ("tally", BinaryType()))

#: columns given as seconds (float) or milliseconds (int) in the rows, timestamps in the files
SECONDS_COLUMNS = ("ts",)
MILLIS_COLUMNS = ("data_version_ts",)

#: one row per broker (address) and session that registered (docs/capture-report.md says what each means)
BROKER_COLUMNS = (
    "session", "input",
    "cluster", "broker_name", "broker_id", "role", "broker_addr", "version", "first_seen", "last_seen",
    "registrations", "refused_registrations", "crc_failures", "interval_p50_s", "interval_p90_s", "interval_p99_s",
    "max_gap_s", "near_expiry", "would_expire", "body_len_min", "body_len_median", "body_len_max", "compressed",
    "topic_count_first", "topic_count_last", "topic_count_max", "unregistered", "ended", "connection_closes",
)
