"""The clients table: who talked to each NameServer, in what language and version, how often they
looked a route up and how many answers were errors.

A client is one connection endpoint (``ip:port``) in one session. The decoding tasks count their
batches of frames and calls here (a few vector operations per batch) into their tally; the driver
adds the tallies up and makes one row per client. Pure (pyarrow).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from twisted_namesrv.remoting import RequestCode

#: clients.csv and summary.json's ``clients``, in this order
CLIENT_COLUMNS = ("session", "client", "server", "role", "language", "version", "requests", "lookups", "errors",
                  "registrations")
_WHO = ("session", "client", "server")


def count_frames(tally: Counter[Any], frames: pa.StructArray) -> None:
    """Requests per client and (language, version), and its REGISTER_BROKER requests."""
    table = _table(frames, *_WHO, "language", "version_name", "direction", "code")
    table = table.filter(pc.equal(table["direction"], "request"))
    if not len(table):
        return
    table = table.append_column("registration", pc.equal(table["code"], int(RequestCode.REGISTER_BROKER)))
    grouped = table.group_by([*_WHO, "language", "version_name"]).aggregate([("code", "count"),
                                                                            ("registration", "sum")])
    for row in grouped.to_pylist():
        who = tuple(row[name] for name in _WHO)
        requests = ("requests", *who, row["language"], row["version_name"])
        registrations = ("registrations", *who)
        tally[requests] += row["code_count"]
        tally[registrations] += row["registration_sum"]


def count_calls(tally: Counter[Any], calls: pa.StructArray) -> None:
    """Route lookups per client, and answers with a non-zero code."""
    table = _table(calls, *_WHO, "code", "response_code")
    if not len(table):
        return
    table = table.append_column("lookup", pc.equal(table["code"], int(RequestCode.GET_ROUTEINFO_BY_TOPIC)))
    table = table.append_column("error", pc.fill_null(pc.not_equal(table["response_code"], 0), False))
    for row in table.group_by(list(_WHO)).aggregate([("lookup", "sum"), ("error", "sum")]).to_pylist():
        who = tuple(row[name] for name in _WHO)
        lookups, errors = ("lookups", *who), ("errors", *who)
        tally[lookups] += row["lookup_sum"]
        tally[errors] += row["error_sum"]


def _table(rows: pa.StructArray, *names: str) -> pa.Table:
    return pa.Table.from_arrays([rows.field(name) for name in names], names=list(names))


def client_rows(tally: Counter[Any]) -> list[dict[str, Any]]:
    """One row per client and session (CLIENT_COLUMNS), by session, server and client address; its
    language and version those of most of its requests; ``role``: broker if it registered one."""
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    spoken: dict[tuple[Any, ...], Counter[Any]] = {}
    for (metric, *rest), count in tally.items():
        who = tuple(rest[:3])
        row = rows.setdefault(who, {**dict(zip(_WHO, who, strict=True)), "requests": 0, "lookups": 0, "errors": 0,
                                    "registrations": 0})
        row[metric] += count
        if metric == "requests":
            spoken.setdefault(who, Counter())[tuple(rest[3:])] += count
    found = []
    for who, row in sorted(rows.items(), key=lambda item: tuple("" if part is None else part for part in item[0])):
        language, version = spoken[who].most_common(1)[0][0] if who in spoken else (None, None)
        found.append({column: row.get(column) for column in CLIENT_COLUMNS} | {
            "language": language, "version": version, "role": "broker" if row["registrations"] else "client"})
    return found
