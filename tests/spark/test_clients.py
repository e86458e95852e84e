"""clients.csv's ``errors``: the answers captured with a non-zero code, counted from the answers, and
unknown (empty) where the captured answers cannot tell it (analysis/clients.py)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa

from spark_analysis.analysis import clients
from spark_analysis.decode.schema import CALL_ROWS, FRAME_ROWS

SESSION, CLIENT, SERVER = "127.0.0.1:9876@2026-11-30T19:52:41Z", "127.0.0.1:51702", "127.0.0.1:9876"
LOOKUP, TOPIC_NOT_EXIST = 105, 17


def frame(direction: str, code: int | None, opaque: int | None, flag: int | None) -> dict[str, Any]:
    return {"ts": 1.0, "conn_id": "c", "client": CLIENT, "server": SERVER, "direction": direction, "code": code,
            "opaque": opaque, "flag": flag, "session": SESSION}


def call(response_code: int | None, cut: bool = False, oneway: bool = False) -> dict[str, Any]:
    return {"ts": 1.0, "conn_id": "c", "client": CLIENT, "server": SERVER, "code": LOOKUP, "opaque": 1,
            "response_code": response_code, "cut": cut, "oneway": oneway, "session": SESSION}


def row(frames: list[dict[str, Any]], calls: list[dict[str, Any]]) -> dict[str, Any]:
    tally: Counter[Any] = Counter()
    clients.count_frames(tally, pa.array(frames, pa.struct(FRAME_ROWS)))
    clients.count_calls(tally, pa.array(calls, pa.struct(CALL_ROWS)))
    (found,) = clients.client_rows(tally)
    return found


def test_an_error_answer_whose_request_was_cut_is_counted() -> None:
    """v5-opsrot at -s 96: a consumer's lookups' opaques cut, so none of its calls holds an answer,
    while the answers themselves say TOPIC_NOT_EXIST: clients.csv said errors 0."""
    frames = [frame("request", LOOKUP, None, 0), frame("request", LOOKUP, None, 0),
              frame("response", TOPIC_NOT_EXIST, None, 1), frame("response", 0, None, 1)]
    found = row(frames, [call(None, cut=True), call(None, cut=True)])
    assert found["errors"] == 1 and found["requests"] == 2 and found["lookups"] == 2


def test_an_error_answer_to_a_request_before_the_capture_is_counted() -> None:
    """A capture begun late: the answer's request is not in it, its code is."""
    frames = [frame("response", TOPIC_NOT_EXIST, 7, 1), frame("request", LOOKUP, 8, 0), frame("response", 0, 8, 1)]
    assert row(frames, [call(0)])["errors"] == 1


def test_answers_that_cannot_tell_make_the_count_unknown() -> None:
    """An answer whose code was cut, or requests whose answers may be among frames the capture cut
    or did not hold (a capture of one direction: no answer at all), leave errors unknown, not 0."""
    cut_code = [frame("request", LOOKUP, 1, 0), frame("response", None, 1, 1)]
    assert row(cut_code, [call(None, cut=True)])["errors"] is None
    one_way = [frame("request", LOOKUP, 1, 0), frame("request", LOOKUP, 2, 0)]
    assert row(one_way, [call(None, cut=True), call(None, cut=True)])["errors"] is None


def test_a_request_left_unanswered_at_the_capture_s_end_leaves_the_count_known() -> None:
    """An answer not captured because the capture stopped first is no unknown error (``cut`` false),
    nor is a oneway request's: errors counts the answers captured."""
    frames = [frame("request", LOOKUP, 1, 0), frame("response", 0, 1, 1), frame("request", LOOKUP, 2, 0),
              frame("request", LOOKUP, 3, 2)]
    assert row(frames, [call(0), call(None), call(None, cut=True, oneway=True)])["errors"] == 0


def test_a_client_whose_every_request_s_code_was_cut_is_counted_too() -> None:
    """A group of requests none of whose codes was read sums no registration (nulls): 0, not a crash."""
    frames = [frame("request", None, None, None), frame("response", 0, None, 1)]
    found = row(frames, [])
    assert found["requests"] == 1 and found["registrations"] == 0 and found["role"] == "client"
