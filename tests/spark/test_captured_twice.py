"""A connection captured twice is read once.

A NameServer in a container, captured on its host with `tcpdump -i any`: every connection that came
in through a published port (DNAT), or went out from a container (SNAT), is captured twice, outside
and inside, under two 4-tuples with the same sequence numbers; it is counted once, under the
addresses the NameServer itself saw (model/translated.py). Captures of the NameServer's host and of
a broker's host given together hold the broker's connections twice, stamped by two clocks: each is
read from one capture (model/capture_points.py). Both are said."""

from __future__ import annotations

import gzip
import re
import struct
from collections import Counter
from pathlib import Path

import pytest

from spark_analysis.model.capture_points import second_points
from spark_analysis.model.endpoints import server_sides
from spark_analysis.model.periods import Capture, ConnectionEnds
from spark_analysis.model.sessions import iso_time
from spark_analysis.model.translated import translated_copies
from tests.spark.conftest import run_job
from tests.spark.truth_check import seconds

REAL = Path(__file__).resolve().parents[1] / "data" / "captures" / "real" / "v4-ours" / "v4-ours.pcap.gz"
OUTSIDE, INSIDE = "192.168.77.1", "10.88.0.2"


def ends(first: float, isns: tuple[int, int], opened: bool = True, last: float = 60.0,
         sent: tuple[int, int] = (500, 90)) -> ConnectionEnds:
    """A connection's ends, ways given client first (the tests' 4-tuples put the client lower)."""
    return ConnectionEnds(first, opened, last, True, syn_by_lower=True if opened else None,
                          first_seq=isns, next_seq=(isns[0] + sent[0], isns[1] + sent[1]))


def test_a_published_port_s_copies_are_counted_once_as_the_server_saw_them() -> None:
    client = "192.168.77.2:40136"
    found = {(client, f"{OUTSIDE}:9876"): ends(1.0, (111, 222)),
             (client, f"{INSIDE}:9876"): ends(1.00003, (111, 222)),  # the SYN forwarded inside, captured after
             ("192.168.77.2:40140", f"{INSIDE}:9876"): ends(2.0, (333, 444))}  # not a copy: its own numbers
    translated = translated_copies(found, server_sides(found))
    assert translated.left_out == {(client, f"{OUTSIDE}:9876")}
    assert translated.seen_as() == [(f"{OUTSIDE}:9876", f"{INSIDE}:9876", "192.168.77.2", "192.168.77.2", 1)]
    assert set(translated.without(found)) == set(found) - translated.left_out


def test_a_container_s_client_going_out_is_counted_under_the_address_the_server_saw() -> None:
    server = "10.0.0.9:9876"  # the client's SYN is captured inside first, then outside (masqueraded)
    found = {("10.88.0.5:41000", server): ends(5.0, (7, 8)), ("10.0.0.1:41000", server): ends(5.00002, (7, 8))}
    translated = translated_copies(found, server_sides(found))
    assert translated.left_out == {("10.88.0.5:41000", server)}
    assert translated.seen_as() == [(server, server, "10.88.0.5", "10.0.0.1", 1)]


def test_connections_older_than_the_capture_follow_the_copies_with_a_syn() -> None:
    client = "192.168.77.2:{}"
    found = {}
    for port, isns, opened in ((1, (10, 20), True), (2, (30, 40), False), (3, (50, 60), False)):
        for at, host in ((0.0, OUTSIDE), (0.00002, INSIDE)):
            found[(client.format(port), f"{host}:9876")] = ends(3.0 + at, isns, opened)
    translated = translated_copies(found, server_sides(found))
    assert {seen for seen, _ in translated.left_out} == {client.format(p) for p in (1, 2, 3)}
    assert {server for _, server in translated.left_out} == {f"{OUTSIDE}:9876"}


def test_numbers_alike_at_other_moments_or_one_way_only_are_no_copy() -> None:
    found = {("10.0.0.1:1", "10.0.0.2:9876"): ends(1.0, (5, 6)),
             ("10.0.0.3:1", "10.0.0.2:9876"): ends(9.0, (5, 6), last=70.0),  # the same numbers 8 s later
             ("10.0.0.4:1", "10.0.0.2:9876"): ConnectionEnds(1.0, True, 1.1, False, syn_by_lower=True,
                                                             first_seq=(77, None), next_seq=(78, None)),
             ("10.0.0.5:1", "10.0.0.2:9876"): ConnectionEnds(1.0, True, 1.1, False, syn_by_lower=True,
                                                             first_seq=(77, None), next_seq=(78, None))}
    assert not translated_copies(found, server_sides(found)).copies


class CountedStr(str):
    """An address whose comparisons for equality are counted (``calls``)."""

    calls = 0

    def __eq__(self, other: object) -> bool:
        CountedStr.calls += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def comparisons_for(groups: int) -> int:
    """Address comparisons translated_copies makes for ``groups`` connections with a SYN and as
    many older than the capture, each captured twice."""
    found = {}
    for port in range(groups):
        for opened in (True, False):
            isns = (port * 4 + opened * 2, port * 4 + opened * 2 + 1)
            for at, host in ((0.0, OUTSIDE), (0.00002, INSIDE)):
                key = (CountedStr(f"192.168.77.2:{1000 + 2 * port + opened}"), CountedStr(f"{host}:9876"))
                found[key] = ends(3.0 + port + at, isns, opened)
    sides = server_sides(found)
    CountedStr.calls = 0
    assert len(translated_copies(found, sides).copies) == 2 * groups
    return CountedStr.calls


def test_telling_the_copies_apart_costs_in_proportion_to_the_connections() -> None:
    # each older group was looked for among the opened ones by comparing lists: 14x the work for 4x the groups
    assert comparisons_for(400) <= 4.5 * comparisons_for(100)


def translated_capture(path: Path) -> Path:
    """The real capture of our server and Java brokers (loopback, Ethernet link layer) with each
    packet to or from port 9876 captured again 20 us later with the server's address translated,
    as a published port's traffic is seen inside a container host's bridge."""
    data = gzip.decompress(REAL.read_bytes())
    assert data[:4] == b"\xd4\xc3\xb2\xa1" and struct.unpack_from("<I", data, 20)[0] == 1  # us, Ethernet
    out, at = bytearray(data[:24]), 24
    inside = bytes(int(n) for n in INSIDE.split("."))
    while at < len(data):
        sec, usec, incl, orig = struct.unpack_from("<IIII", data, at)
        frame = data[at + 16:at + 16 + incl]
        at += 16 + incl
        out += struct.pack("<IIII", sec, usec, incl, orig) + frame
        ihl = (frame[14] & 0x0F) * 4
        sport, dport = struct.unpack_from("!HH", frame, 14 + ihl)
        copy = bytearray(frame)
        if dport == 9876:
            copy[30:34] = inside
        if sport == 9876:
            copy[26:30] = inside
        ticks = sec * 1_000_000 + usec + 20
        out += struct.pack("<IIII", ticks // 1_000_000, ticks % 1_000_000, incl, orig) + bytes(copy)
    path.write_bytes(out)
    return path


def test_a_capture_with_every_connection_translated_tells_what_the_capture_alone_tells(spark, tmp_path: Path) -> None:
    alone = run_job(spark, [str(REAL)], tmp_path / "alone", report=False)
    doubled = translated_capture(tmp_path / "twice.pcap")  # gzipped, as captures are kept: read from a spool file
    gzipped = tmp_path / "twice.pcap.gz"
    gzipped.write_bytes(gzip.compress(doubled.read_bytes()))
    twice = run_job(spark, [str(gzipped)], tmp_path / "twice", report=False)

    def named(text: str) -> str:
        """The row or line as the capture alone has it: the copies kept are inside (the server's
        address translated) and captured 20 us later."""
        text = text.replace(f"{INSIDE}:9876", "127.0.0.1:9876")
        return re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", lambda m: iso_time((seconds(m.group()) or 0) - 20e-6),
                      text)

    assert [{k: named(v) for k, v in row.items() if k != "input"} for row in twice.brokers] == \
        [{k: v for k, v in row.items() if k != "input"} for row in alone.brokers]
    for count in ("connection", "frame", "request", "registration", "call"):
        assert twice.counts[count] == alone.counts[count], count
    assert [e["endpoint"] for e in twice.summary["nameservers"]] == [f"{INSIDE}:9876"]
    (copies,) = [f for f in twice.summary["findings"] if f["kind"] == "translated_copies"]
    assert [(e["seen_as"], e["counted_as"]) for e in copies["evidence"]] == [("127.0.0.1:9876", f"{INSIDE}:9876")]
    assert copies["evidence"][0]["connections"] == alone.counts["connection"]
    assert named(twice.summary["attention"]) == alone.summary["attention"]


# -- the same connections in captures taken at two points (model/capture_points.py) --------------------


def shifted_copy(path: Path, seconds: float, keep: int | None = None) -> Path:
    """The real capture as another host saw it: its clock ``seconds`` ahead; ``keep``: only the
    packets of the ``keep`` client ports with the most packets (a broker's host sees its own)."""
    data = gzip.decompress(REAL.read_bytes())
    records, at = [], 24
    while at < len(data):
        sec, usec, incl, orig = struct.unpack_from("<IIII", data, at)
        frame = data[at + 16:at + 16 + incl]
        at += 16 + incl
        ihl = (frame[14] & 0x0F) * 4
        ports = struct.unpack_from("!HH", frame, 14 + ihl)
        client_port = ports[0] if ports[1] == 9876 else ports[1]
        records.append((sec * 1_000_000 + usec + round(seconds * 1e6), incl, orig, frame, client_port))
    if keep is not None:
        busiest = {port for port, _ in Counter(r[4] for r in records).most_common(keep)}
        records = [r for r in records if r[4] in busiest]
    path.write_bytes(data[:24] + b"".join(struct.pack("<IIII", t // 1_000_000, t % 1_000_000, incl, orig) + frame
                                          for t, incl, orig, frame, _ in records))
    return path


def test_two_hosts_captures_of_the_same_connections_are_read_once(spark, tmp_path: Path) -> None:
    alone = run_job(spark, [str(REAL)], tmp_path / "alone", report=False)
    server_host = shifted_copy(tmp_path / "ns.pcap", 0.0)
    for ahead in (0.35, -2.5):  # the broker's host: its clock ahead, or behind, of the NameServer's host's
        broker_host = shifted_copy(tmp_path / f"broker{ahead}.pcap", ahead, keep=2)
        both = run_job(spark, [str(server_host), str(broker_host)], tmp_path / f"both{ahead}", report=False)
        assert [{k: v for k, v in row.items() if k != "input"} for row in both.brokers] == \
            [{k: v for k, v in row.items() if k != "input"} for row in alone.brokers]
        for count in ("connection", "frame", "request", "registration", "call"):
            assert both.counts[count] == alone.counts[count], count
        (twice,) = [f for f in both.summary["findings"] if f["kind"] == "same_traffic_twice"]
        (item,) = twice["evidence"]
        assert (item["paths"], item["read_from"], item["connections"]) == ([str(broker_host)], [str(server_host)], 2)
        assert item["clock_s"] == pytest.approx(ahead, abs=1e-3)
        assert twice["severity"] == ("warning" if abs(ahead) >= 1 else "info")


def test_a_capture_that_saw_less_of_a_connection_than_the_other_is_read_too() -> None:
    a, b = "10.0.0.1:40000", "10.0.0.2:9876"
    whole = ConnectionEnds(0.0, True, 100.0, True, syn_by_lower=True, first_seq=(1000, 5000), next_seq=(9000, 7000))
    part = ConnectionEnds(50.3, False, 150.3, False, first_seq=(4000, 6000), next_seq=(12000, 8000))  # goes on after
    inside = ConnectionEnds(50.3, False, 80.3, False, first_seq=(4000, 6000), next_seq=(8000, 6500))
    captures = [Capture(0.0, 100.0, ("ns.pcap",)), Capture(50.3, 150.3, ("broker.pcap",))]
    for theirs, left_out in ((part, set()), (inside, {("broker.pcap", (a, b))})):
        by_path = {"ns.pcap": {(a, b): whole, ("10.0.0.3:1", b): whole._replace(first_seq=(1, 2))},
                   "broker.pcap": {(a, b): theirs}}
        points = second_points(captures, by_path, {key: b for ends in by_path.values() for key in ends})
        assert points.left_out == left_out


def test_the_server_s_host_is_read_whichever_clock_is_behind() -> None:
    """Both captures hold the same one connection: the one that saw the SYN-ACK microseconds after
    the SYN is the server's host (the other saw it a round trip later), even when the other's clock is
    behind and its capture begun first by that clock."""
    a, b = "10.77.0.2:40000", "10.77.0.1:9876"
    at_server = ConnectionEnds(10.0, True, 60.0, True, syn_by_lower=True, accepted_at=10.000015,
                               first_seq=(1000, 5000), next_seq=(9000, 7000))
    for ahead in (-0.35, 0.35):
        at_client = at_server._replace(first=10.0 + ahead - 0.0004, accepted_at=10.0 + ahead + 0.0004,
                                       last=60.0 + ahead)
        captures = [Capture(10.0, 60.0, ("ns.pcap",)), Capture(10.0 + ahead - 0.0004, 60.0 + ahead, ("broker.pcap",))]
        by_path = {"ns.pcap": {(a, b): at_server}, "broker.pcap": {(a, b): at_client}}
        points = second_points(sorted(captures), by_path, {(a, b): b})
        assert points.left_out == {("broker.pcap", (a, b))}, ahead
        (point,) = points.points
        assert point.kept_paths == ("ns.pcap",) and point.clock_s == pytest.approx(ahead, abs=1e-5)


def test_the_trip_between_the_two_points_is_not_told_as_a_clock_difference() -> None:
    """Two hosts on one clock, a link of 5 ms each way between them (a WAN, or a lossy link whose
    retransmitted SYN reached the server a second late): the SYN is stamped 5 ms later at the server,
    the SYN-ACK 5 ms later at the client. Their clocks agree; the trips cancel out (as NTP's offset
    does), and a connection whose SYN or SYN-ACK was captured at one point only in a later copy says
    nothing of the clocks (its round trip is the longest)."""
    b = "10.66.0.1:9876"
    captures = [Capture(0.0, 100.0, ("ns.pcap",)), Capture(0.0, 100.0, ("broker.pcap",))]
    by_path: dict[str, dict] = {"ns.pcap": {}, "broker.pcap": {}}
    for n, syn_resent in enumerate((False, False, True)):
        a, t = f"10.66.0.2:{40000 + n}", 10.0 * (n + 1)
        at_server = ConnectionEnds(t + 0.005 + syn_resent, True, 60.0 + n, True, syn_by_lower=True,
                                   accepted_at=t + 0.005 + syn_resent + 0.00002,
                                   first_seq=(1000 * n, 5000), next_seq=(1000 * n + 900, 7000))
        at_client = at_server._replace(first=t, accepted_at=at_server.accepted_at + 0.005)
        by_path["ns.pcap"][a, b], by_path["broker.pcap"][a, b] = at_server, at_client
    points = second_points(captures, by_path, {key: b for key in by_path["ns.pcap"]})
    (point,) = points.points
    assert point.kept_paths == ("ns.pcap",) and point.clock_s == pytest.approx(0.0, abs=1e-4)


def test_a_clock_difference_that_rounds_to_nothing_has_no_sign() -> None:
    """Two capture points on one clock (v5-bothcut: two namespaces of one host) measure a difference of
    about -1 us: the finding said "its clock reads -0.000 s against the other's"."""
    from spark_analysis.analysis import findings
    from spark_analysis.model.capture_points import CapturePoints, SecondPoint

    for clock in (-0.000001, 0.0, 0.0004):
        point = SecondPoint("10.79.0.1:9876", ("broker.pcap",), ("ns.pcap",), 5, clock)
        (item,) = findings.second_points(CapturePoints(points=(point,)))
        assert item["message"].endswith("its clock reads +0.000 s against the other's"), clock


def test_a_connection_a_snap_length_cut_at_one_point_is_read_where_it_was_kept_whole() -> None:
    """The brokers' host captured at -s 200 (its tcpdump begun first), the NameServer's host at full
    length, on one clock with a round trip under RTT_STEP_S between them (two namespaces): both hold
    every connection, and the server's own host was not told apart from the other by the SYN-ACK, so
    the capture begun first was read, the cut one: registrations' bodies and broker addresses lost
    though the other file held them. A copy a snap length cut is read from the capture that kept more
    of it, when that one saw every byte it did (else as before); a cut copy in both, the lesser cut."""
    from spark_analysis.analysis import findings

    a, b = "10.81.0.2:40000", "10.81.0.1:9876"
    whole = ConnectionEnds(10.0, True, 60.0, True, syn_by_lower=True, accepted_at=10.00002,
                           first_seq=(1000, 5000), next_seq=(9000, 7000))
    cut = whole._replace(uncaptured=4200)
    captures = [Capture(9.0, 60.0, ("broker.pcap",)), Capture(10.0, 60.0, ("ns.pcap",))]
    for at_broker, at_ns, read_from in ((cut, whole, "ns.pcap"), (whole, cut, "broker.pcap"),
                                        (whole, whole, "broker.pcap"), (cut, cut._replace(uncaptured=900), "ns.pcap"),
                                        (cut, whole._replace(first_seq=(3000, 5000), opened=False), "broker.pcap")):
        by_path = {"broker.pcap": {(a, b): at_broker}, "ns.pcap": {(a, b): at_ns}}
        points = second_points(captures, by_path, {(a, b): b})
        if at_ns.opened:
            assert points.left_out == {({"ns.pcap": "broker.pcap"}.get(read_from, "ns.pcap"), (a, b))}, read_from
            (point,) = points.points
            assert point.kept_paths == (read_from,)
            (item,) = findings.second_points(points)
            assert ("snap length" in item["message"]) == (point.fuller == 1) == (at_broker != at_ns and read_from
                                                                                 == "ns.pcap")
        else:  # the whole copy began later: it did not see every byte the cut one did, which is read, as before
            assert points.left_out == {("ns.pcap", (a, b))}


def test_attempts_refused_that_the_capture_holds_twice_are_counted_once(spark, tmp_path: Path) -> None:
    """`dumpcap -i any -i lo` holds every packet twice, one copy per interface (a real capture of ours:
    32 launch-script polls refused, told as 64): every record of v5-launch written twice, as a bridge and
    its port give them, tells the same refused attempts as the capture once."""
    folder = REAL.parents[1] / "v5-launch"
    raw = gzip.decompress((folder / "v5-launch.pcap.gz").read_bytes())
    twice, offset = [raw[:24]], 24
    while offset + 16 <= len(raw):
        length = struct.unpack("<I", raw[offset + 8:offset + 12])[0]
        twice += [raw[offset:offset + 16 + length]] * 2
        offset += 16 + length
    (tmp_path / "once.pcap").write_bytes(raw)
    (tmp_path / "twice.pcap").write_bytes(b"".join(twice))
    once = run_job(spark, [str(tmp_path / "once.pcap")], tmp_path / "out-once", report=False)
    doubled = run_job(spark, [str(tmp_path / "twice.pcap")], tmp_path / "out-twice", report=False)

    def refused(summary: dict) -> list:
        return [(n["endpoint"], n["refused"]) for n in summary["nameservers"]]

    assert refused(doubled.summary) == refused(once.summary) and refused(once.summary)[0][1]


def test_a_byte_identical_copy_given_with_its_original_is_one_capture(spark, tmp_path: Path) -> None:
    """An operator hands over ns.pcap.gz and, in another folder, the same file again (sent twice,
    copied into a second directory): the report said "59 connections ... are also in ... (captured
    at two points ...); its clock reads +0.000 s against the other's", two capture points that were
    one. The copy is read once: no second point, the same counts as the file alone, and the console
    names the copy as skipped."""
    copy = tmp_path / "sent-again" / REAL.name
    copy.parent.mkdir()
    copy.write_bytes(REAL.read_bytes())
    both = run_job(spark, [str(REAL), str(copy)], tmp_path / "both", report=False)
    assert not [f for f in both.summary["findings"] if f["kind"] == "same_traffic_twice"]
    assert [f["path"] for f in both.summary["inputs"]["files"]] == [str(REAL)]
    assert f"{copy} (the same bytes as {REAL}: a copy, read once)" in both.progress[0]
