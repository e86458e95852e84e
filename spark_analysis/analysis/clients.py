"""The clients table: who talked to each NameServer, in what language and version, how often they
looked a route up and how many answers were errors.

A client is one connection endpoint (``ip:port``) in one session. The decoding tasks count their
batches of frames and calls here (a few vector operations per batch) into their tally; the driver
adds the tallies up and makes one row per client. Pure (pyarrow).

``errors`` counts the answers captured whose code is not 0, from the answers themselves: one whose
request was not captured (a capture begun late) or whose request's code a snap length cut, so that
no call holds it, is counted too, not left out as if it were no error. It is unknown (empty) where
the answers captured cannot tell it: an answer whose code was cut, or requests whose answers may be
among frames the capture cut or did not hold (a capture of one direction) that outnumber the answers
read but not paired with a request.
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
    """Requests per client and (language, version), and its REGISTER_BROKER requests; its answers
    (either way), those with a non-zero code and those whose code was not read (_count_answers)."""
    _count_answers(tally, frames)
    table = _table(frames, *_WHO, "language", "version_name", "direction", "code")
    table = table.filter(pc.equal(table["direction"], "request"))
    if not len(table):
        return
    # a request whose code a snap length cut is no registration (a group of only such: a sum of nulls)
    table = table.append_column("registration", pc.fill_null(pc.equal(table["code"],
                                                                       int(RequestCode.REGISTER_BROKER)), False))
    grouped = table.group_by([*_WHO, "language", "version_name"]).aggregate([
        ("code", "count", pc.CountOptions(mode="all")), ("registration", "sum")])  # a code cut: still a request
    for row in grouped.to_pylist():
        who = tuple(row[name] for name in _WHO)
        requests = ("requests", *who, row["language"], row["version_name"])
        registrations = ("registrations", *who)
        tally[requests] += row["code_count"]
        tally[registrations] += row["registration_sum"]


def answers(frames: pa.StructArray) -> pa.BooleanArray:
    """Which of schema.FRAME_ROWS are answers: a frame whose flag says so; a cut frame whose flag was
    not kept, one its pairing told (its ``direction``, cut_frame_row)."""
    flag = frames.field("flag")
    answer = pc.if_else(pc.is_null(flag), pc.equal(frames.field("direction"), "response"),
                        pc.equal(pc.bit_wise_and(flag, 1), 1))
    return pc.fill_null(answer, False)


def _count_answers(tally: Counter[Any], frames: pa.StructArray) -> None:
    """The answer frames per client (answers): all (``answers``), those whose code is not 0
    (``answer_errors``) and those whose code a snap length cut (``answers_unread``)."""
    code, answer = frames.field("code"), answers(frames)
    if not pc.any(answer).as_py():
        return
    table = pa.table({**{name: frames.field(name) for name in _WHO}, "answer": answer,
                      "error": pc.fill_null(pc.not_equal(code, 0), False), "unread": pc.is_null(code)}).filter(answer)
    _tally_by_client(tally, table, {"answers": ("answer", "count"), "answer_errors": ("error", "sum"),
                                    "answers_unread": ("unread", "sum")})


def count_calls(tally: Counter[Any], calls: pa.StructArray) -> None:
    """Route lookups per client; its calls whose answer is known (``paired``) and those whose answer
    may be among what the capture cut or did not hold (``unsure``: no answer, ``cut``, not oneway)."""
    table = _table(calls, *_WHO, "code", "response_code", "cut", "oneway")
    if not len(table):
        return
    table = table.append_column("lookup", pc.equal(table["code"], int(RequestCode.GET_ROUTEINFO_BY_TOPIC)))
    table = table.append_column("paired", pc.is_valid(table["response_code"]))
    unsure = pc.and_(pc.and_(pc.is_null(table["response_code"]), pc.fill_null(table["cut"], False)),
                     pc.invert(pc.fill_null(table["oneway"], False)))
    table = table.append_column("unsure", unsure)
    _tally_by_client(tally, table, {"lookups": ("lookup", "sum"), "paired": ("paired", "sum"),
                                    "unsure": ("unsure", "sum")})


def _tally_by_client(tally: Counter[Any], table: pa.Table, named: dict[str, tuple[str, str]]) -> None:
    """Each client's (``_WHO``) aggregates of ``table``'s columns added to ``tally``, each under its
    name: ``named`` maps a name to its (column, aggregation)."""
    for row in table.group_by(list(_WHO)).aggregate(list(named.values())).to_pylist():
        who = tuple(row[name] for name in _WHO)
        for name, (column, how) in named.items():
            tally[(name,) + who] += row[f"{column}_{how}"]


def _table(rows: pa.StructArray, *names: str) -> pa.Table:
    return pa.Table.from_arrays([rows.field(name) for name in names], names=list(names))


def client_rows(tally: Counter[Any]) -> list[dict[str, Any]]:
    """One row per client and session (CLIENT_COLUMNS), by session, server and client address; its
    language and version those of most of its requests; ``role``: broker if it registered one."""
    rows: dict[tuple[Any, ...], Counter[str]] = {}
    spoken: dict[tuple[Any, ...], Counter[Any]] = {}
    for (metric, *rest), count in tally.items():
        who = tuple(rest[:3])
        rows.setdefault(who, Counter())[metric] += count
        if metric == "requests":
            spoken.setdefault(who, Counter())[tuple(rest[3:])] += count
    found = []
    for who, row in sorted(rows.items(), key=lambda item: tuple("" if part is None else part for part in item[0])):
        language, version = spoken[who].most_common(1)[0][0] if who in spoken else (None, None)
        found.append(dict(zip(_WHO, who, strict=True)) | {column: row[column] for column in CLIENT_COLUMNS[3:]} | {
            "language": language, "version": version, "role": "broker" if row["registrations"] else "client",
            "errors": errors(row)})
    return found


def errors(row: Counter[str]) -> int | None:
    """A client's answers with a non-zero code, or None where its captured answers cannot tell:
    an answer's code not read, or more of its requests' answers possibly cut or not captured
    (``unsure``) than answers read and paired with no request (the module's docstring)."""
    unpaired = row["answers"] - row["paired"]
    if row["answers_unread"] or row["unsure"] > max(unpaired, 0):
        return None
    return row["answer_errors"]
