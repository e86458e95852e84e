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


def test_every_refused_peer_is_written_by_one_rule() -> None:
    """Seven places wrote a peer's ``host:port`` inline, with three fallbacks for an address
    without a host or a port (``?``, the address object, port ``0``): one rule, refusals.peer_text."""
    import re
    from pathlib import Path

    from twisted.internet.address import IPv4Address, IPv6Address

    from twisted_namesrv.refusals import peer_host, peer_text

    assert peer_text(IPv4Address("TCP", "10.1.2.3", 5)) == "10.1.2.3:5"
    assert peer_host(peer_text(IPv6Address("TCP", "2001:db8::1", 7))) == "2001:db8::1"
    assert peer_text(None) == "?:?"
    package = Path(__file__).resolve().parents[1] / "twisted_namesrv"
    inline = re.compile(r"""getattr\([\w.]+, ["']port["']""")
    found = [f"{path.relative_to(package)}: {line.strip()}" for path in package.rglob("*.py")
             if path.name != "refusals.py" for line in path.read_text().splitlines() if inline.search(line)]
    assert found == []
