"""summary.json: the findings (analysis/findings.py), inputs, counts, brokers, calls and clients, in
the layout fixed by SCHEMA_VERSION (docs/capture-report.md)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from spark_analysis.analysis.findings import SLOW_MS, Groups, attention, evidence, response_groups, response_name
from spark_analysis.analysis.latency import PERCENTILES, CodeStats
from spark_analysis.decode.schema import BROKERS_CSV_COLUMNS
from spark_analysis.model.periods import EXPIRY_SECONDS, NEAR_EXPIRY_S, PERIOD_GAP_S
from spark_analysis.model.sessions import iso_time
from spark_analysis.model.sessions import iso_time_or_none as _iso

SCHEMA_VERSION = 2


def summary(file_rows: list[dict], periods: list[tuple[float, float]], counts: dict[str, int], groups: Groups,
            brokers: list[dict], codes: list[CodeStats], server_codes: list[CodeStats] | None = None,
            clients: list[dict] | None = None, endpoints: list[dict] | None = None,
            stories: list[dict] | None = None, controller: dict | None = None,
            others: list[dict] | None = None, routes_found: dict[Any, float] | None = None,
            missing: Collection[float] = ()) -> dict:
    """summary.json: findings first, then the inputs (``file_rows``: input_files; the capture
    periods and the gaps between them), the server endpoints found (``endpoints``:
    findings.endpoint_rows) and the NameServers among them, what the controllers' traffic tells
    (``controller``: analysis/controller.controller_story), counts, brokers and calls by code;
    ``others``: the findings the driver makes itself (findings.other_traffic: what --port left out;
    the copies of connections read once: findings.second_points, findings.translated_copies);
    ``routes_found``: when each topic's route was first served (findings.note_routes_found);
    ``missing``: the starts of the captures that go on after files of a rotated set missing
    (model/periods.Capture.after_missing: the gap before each is nothing captured)."""
    registered = [b for b in brokers if b["registrations"]]
    responses = response_groups(groups)
    nameservers = [e for e in endpoints or [] if e["kind"] == "nameserver"]
    return {
        "schema_version": SCHEMA_VERSION,
        "thresholds": {"expiry_s": EXPIRY_SECONDS, "near_expiry_s": NEAR_EXPIRY_S, "slow_ms": SLOW_MS,
                       "period_gap_s": PERIOD_GAP_S},
        **attention(evidence(file_rows, groups, brokers, responses, endpoints, stories, controller, counts,
                             others, routes_found), len(nameservers)),
        "nameservers": nameservers,
        "controllers": [e for e in endpoints or [] if e["kind"] == "controller"],
        "controller": controller or {"groups": [], "undecodable": [], "counts": {}},
        "endpoints": endpoints or [],
        "inputs": {
            "files": file_rows,
            "periods": [{"start": iso_time(a), "end": iso_time(b), "seconds": b - a} for a, b in periods],
            "gaps": [{"start": iso_time(a[1]), "end": iso_time(b[0]), "seconds": b[0] - a[1],
                      "cause": _gap_cause(b[0] - a[1], b[0] in missing)}
                     for a, b in zip(periods, periods[1:], strict=False)],
        },
        "counts": counts,
        "brokers": [{column: _json_value(column, b[column]) for column in BROKERS_CSV_COLUMNS} for b in registered],
        "addresses_never_registered": [b["broker_addr"] for b in brokers if not b["registrations"]],
        "calls_by_code": [_code_row(s) for s in codes],
        "calls_by_server": [{"server": s.server, **_code_row(s)} for s in server_codes or ()],
        "clients": clients or [],
        "response_codes": _response_codes(responses),
    }


def _code_row(stats: CodeStats) -> dict:
    return {"code_name": stats.code_name, "requests": stats.requests, "answered": stats.answered, "cut": stats.cut,
            **{f"p{round(p * 100)}_ms": v for p, v in zip(PERCENTILES, stats.p or (None,) * len(PERCENTILES),
                                                           strict=True)}}


def _response_codes(responses: dict[tuple, dict]) -> list[dict]:
    """The response-code table (of response_groups): every non-zero answer by request code,
    response code and remark."""
    return [{"code_name": name, "response_code": response, "response_name": response_name(response),
             "remark": remark, "count": entry["count"], "requesters": entry["requesters"]}
            for (name, response, remark), entry in responses.items()]


def _json_value(column: str, value: object) -> object:
    return _iso(value) if column in ("first_seen", "last_seen", "ended_at") else value


def _gap_cause(seconds: float, after_missing: bool = False) -> str:
    """Why one capture period ends and the next begins: a capture that starts after the others
    ended and continues none of their connections (another session), or nothing captured (longer,
    or files of a rotated set missing: its connections go on past bytes no file holds). (A
    NameServer's restart is its endpoint's story: a finding, not a gap.)"""
    return "another session" if seconds <= PERIOD_GAP_S and not after_missing else "nothing captured"
