"""Refusals: a refusal is always one line and one count, whatever fields its caller names."""

from __future__ import annotations

from twisted.logger import globalLogPublisher

from twisted_namesrv.refusals import Refusals


def test_a_field_named_like_the_refusals_own_still_gives_its_line_and_count() -> None:
    seen: list[dict[str, object]] = []
    globalLogPublisher.addObserver(seen.append)
    try:
        refusals = Refusals()
        for name in ("limit", "listener", "host", "reason", "peer", "refused"):
            refusals("http", "host", "127.0.0.1:5000", "a field named {" + name + "}", **{name: "x"})
    finally:
        globalLogPublisher.removeObserver(seen.append)
    assert refusals.counts["http", "host"] == 6
    lines = [e for e in seen if e.get("log_namespace") == "twisted_namesrv.refusals"]
    assert len(lines) == 6
    assert all(e["listener"] == "http" and e["reason"] == "host" for e in lines)
