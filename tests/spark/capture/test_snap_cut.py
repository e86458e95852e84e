"""Captures a snap length cut (tcpdump -s N, e.g. -i any -s 200): packets kept shorter than sent.

Every frame is read as far as its bytes go, nothing it does not say is guessed, and the bytes not
captured are counted apart from the bytes a capture lost (sequence gaps)."""

from __future__ import annotations

import itertools
import os
import signal
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_analysis.capture.conversation import conversation_of
from spark_analysis.capture.packets import LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2, PSH, segment_columns, tcp_segments
from spark_analysis.capture.reassembly import reassemble
from spark_analysis.capture.records import index_records, iter_records
from spark_analysis.decode.rows import CALL, EVENT, REGISTRATION, connection_rows, cut_broker_addr
from tests.spark.capture.builders import (
    ACK,
    CLIENT,
    SERVER,
    ethernet,
    handshake,
    ipv4,
    pcap,
    pcapng_block,
    pcapng_idb,
    pcapng_shb,
    registration,
    route_query,
    tcp,
)
from twisted_namesrv.remoting import RemotingCommand, RequestCode
from twisted_namesrv.remoting.frame import FramePart, frame_parts
from twisted_namesrv.remoting.header import read_header_prefix

REAL = Path(__file__).resolve().parents[2] / "data" / "captures" / "real"


def frame(body: bytes, header: bytes = b'{"code":105}') -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), len(header)) + header + body


def test_frame_parts_follow_frames_across_bytes_not_captured() -> None:
    """A 300-byte body of which 30 were captured: the frame after it is found by the length word, and
    each frame says how many of its bytes are missing; a boundary inside a cut gives the place to resume."""
    first, big, last = frame(b"a"), frame(b"b" * 300), frame(b"c")
    kept = 40
    data = first + big[:kept] + last
    parts, stop, resume = frame_parts(data, [(len(first) + kept, len(big) - kept)], 1 << 24)
    assert parts == [FramePart(4, len(first) - 4, len(first) - 4, 0),
                     FramePart(len(first) + 4, len(big) - 4, kept - 4, len(big) - kept),
                     FramePart(len(first) + kept + 4, len(last) - 4, len(last) - 4, 0)]
    assert (stop, resume) == (len(data), None)
    # the cut runs 3 bytes into the next frame: its start is lost, the walk says where to resume
    parts, stop, resume = frame_parts(first + big[:kept], [(len(first) + kept, len(big) - kept + 3)], 1 << 24)
    assert len(parts) == 2 and stop == resume == len(first) + kept
    # a frame longer than what was sent so far is still coming, not cut
    parts, stop, resume = frame_parts(first + big[:kept], [(len(first) + kept, 10)], 1 << 24)
    assert len(parts) == 1 and (stop, resume) == (len(first), None)


@pytest.mark.parametrize("cut", range(1, 60))
def test_a_cut_header_says_only_what_is_certain(cut: int) -> None:
    """At every cut of a JSON header: a number is taken only with its delimiter (``"code":10`` may be
    103), extFields only the entries whole; what is said is always what the whole header says."""
    header = b'{"code":103,"extFields":{"brokerId":"0","brokerAddr":"127.0.0.1:10911"},"flag":0,"opaque":57}'
    known = read_header_prefix(0, header[:cut])
    assert known.code in (None, 103) and known.opaque in (None, 57) and known.flag in (None, 0)
    assert all(header.find(f'"{k}":"{v}"'.encode()) >= 0 for k, v in (known.ext_fields or {}).items())
    if cut <= len(b'{"code":103'):
        assert known.code is None
    assert read_header_prefix(0, header[:len(header) - 1]).opaque is None  # "opaque":57 without its brace
    assert read_header_prefix(0, header).opaque == 57


def _cut_capture(snap: int, linktype: int = 1, form: str = "pcap") -> bytes:
    """A client's route query cut by ``snap``, the next whole; the records kept as tcpdump does:
    captured length at most ``snap``, original length the frame's; ``form``: pcap, nanosecond pcap
    or pcapng."""
    def link(packet: bytes) -> bytes:
        if linktype == LINKTYPE_LINUX_SLL2:
            return struct.pack("!HHIHBB8s", 0x0800, 0, 1, 772, 0, 6, b"") + packet
        if linktype == LINKTYPE_LINUX_SLL:
            return struct.pack("!HHH8sH", 0, 772, 6, b"", 0x0800) + packet
        if linktype == 0:  # NULL: the family in the capturing host's byte order
            return struct.pack("<I", 2) + packet
        if linktype == 101:  # raw IP
            return packet
        return ethernet(packet)

    first = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}, b"x" * 400, opaque=1).encode()
    second = route_query(2)
    ends = {f"{CLIENT[0]}:{CLIENT[1]}": CLIENT, f"{SERVER[0]}:{SERVER[1]}": SERVER}
    sent = [(t, ends[s.src], ends[s.dst], tcp(ends[s.src], ends[s.dst], s.seq, s.flags, s.payload, s.ack))
            for t, s in handshake()]
    sent += [(2.0, CLIENT, SERVER, tcp(CLIENT, SERVER, 1001, PSH | ACK, first, 5001)),
             (2.1, CLIENT, SERVER, tcp(CLIENT, SERVER, 1001 + len(first), PSH | ACK, second, 5001))]
    frames = [(t, link(ipv4(src[0], dst[0], payload))) for t, src, dst, payload in sent]
    if form == "pcapng":
        blocks = [pcapng_shb("<"), pcapng_idb("<", linktype)]
        for t, whole in frames:
            kept, ticks = whole[:snap], round(t * 1e6)
            blocks.append(pcapng_block("<", 6, struct.pack("<IIIII", 0, ticks >> 32, ticks & 0xFFFFFFFF, len(kept),
                                                           len(whole)) + kept))
        return b"".join(blocks)
    return _kept(frames, snap, linktype=linktype, nanos=form == "nanos")


@pytest.mark.parametrize(("linktype", "form"), [
    (1, "pcap"), (LINKTYPE_LINUX_SLL, "pcap"), (LINKTYPE_LINUX_SLL2, "pcap"), (0, "pcap"), (101, "pcap"),
    (LINKTYPE_LINUX_SLL2, "nanos"), (LINKTYPE_LINUX_SLL2, "pcapng"), (1, "pcapng")])
def test_cut_packets_are_no_capture_gap(linktype: int, form: str) -> None:
    """The bytes cut are counted exactly (a record's original length, the IP total length) and never
    taken for a gap: the frame after a cut one is read whole, by both ways of reading packets, over
    every link type tcpdump writes (Ethernet, Linux cooked v1/v2, NULL, raw IP), pcap (micro- and
    nanosecond) and pcapng."""
    data = _cut_capture(200, linktype, form)
    records = index_records(iter_records(data))
    assert int((records.orig_len - records.length).sum()) > 0
    columns = segment_columns(data, records)
    missing = int(columns.missing.sum())
    assert missing == int((records.orig_len - records.length).sum())
    assert sum(segment.missing for _, segment in tcp_segments(iter_records(data))) == missing
    connection = reassemble(tcp_segments(iter_records(data)))[0]
    assert connection.to_server.gaps == [] and sum(n for _, n in connection.to_server.uncaptured) == missing
    conversation = conversation_of(connection)
    assert conversation.lost_bytes == 0 and conversation.uncaptured_bytes == missing
    assert [c.command.opaque for c in conversation.commands] == [2]
    assert [(c.known.code, c.known.opaque, c.is_request, c.missing) for c in conversation.cut] == [
        (105, 1, True, missing)]
    assert np.all(columns.end >= columns.start)


def _kept(packets: list[tuple[float, bytes]], snap: int, linktype: int = 1, nanos: bool = False) -> bytes:
    """A pcap of ``packets`` as tcpdump -s ``snap`` writes it: each record's first ``snap`` bytes."""
    data = pcap(packets, linktype=linktype, snaplen=snap, nanos=nanos)
    at, kept = 24, bytearray(data[:24])
    while at < len(data):
        sec, frac, incl, orig = struct.unpack_from("<IIII", data, at)
        kept += struct.pack("<IIII", sec, frac, min(incl, snap), orig) + data[at + 16:at + 16 + min(incl, snap)]
        at += 16 + incl
    return bytes(kept)


def test_a_cut_capture_that_began_mid_stream_finds_its_frames_at_packet_starts() -> None:
    """A rotated file's broker connections began before it (no SYN) and each packet kept 24 bytes of
    its frame (tcpdump -i any -s 96): frames were looked for only where a header decodes whole, so
    every heartbeat of the file was "lost to gaps" and brokers.csv empty.  A packet whose captured
    start is a frame's length, header length and code starts one; a body's bytes never do."""
    payload = 24
    rest_of_a_body = b'{"topicConfigSerializeWrapper":{"x":1}}' * 3  # of a frame sent before the capture
    frames = [registration("right"), route_query(2), registration("right")]
    sent, seq = [(1.0, tcp(CLIENT, SERVER, 7001, PSH | ACK, rest_of_a_body, 5001))], 7001 + len(rest_of_a_body)
    for number, whole in enumerate(frames):
        sent.append((2.0 + number, tcp(CLIENT, SERVER, seq, PSH | ACK, whole, 5001)))
        seq += len(whole)
    packets = [(t, ethernet(ipv4(CLIENT[0], SERVER[0], segment))) for t, segment in sent]
    snap = len(packets[1][1]) - len(frames[0]) + payload
    conversation = conversation_of(reassemble(tcp_segments(iter_records(_kept(packets, snap))))[0])
    assert [(c.known.code, c.is_request) for c in conversation.cut] == [(103, True), (105, True), (103, True)]
    # the body's captured bytes, passed over: of a frame begun before the capture, not lost to a gap
    assert (conversation.lost_bytes, conversation.mid_frame_bytes) == (0, payload)


def test_a_real_cut_capture_tells_its_brokers_by_their_connections() -> None:
    """tcpdump -i any -s 200 (SLL2) of a 5.3.3 cluster (tests/data/captures/real/v5-cut): nothing lost,
    nothing undecodable; the registrations whose brokerAddr was cut name their connection, unless the
    broker's own UNREGISTER_BROKER on it carries its address whole (broker-a's clean stop: 127.0.0.1:11911,
    as the NameServer logged; it was '? (address not captured ...)' though the capture held it);
    broker-b's kill -9 closes its connection; no registration's topic count, CRC or version is made up,
    and no call whose answer was cut is counted unanswered."""
    import gzip

    raw = gzip.decompress((REAL / "v5-cut" / "v5-cut.pcap.gz").read_bytes())
    rows = list(connection_rows(tcp_segments(iter_records(raw)), frozenset({9876})))
    registrations = [row for kind, row in rows if kind == REGISTRATION]
    assert len(registrations) == 12
    assert {row[4] for row in registrations} == {"127.0.0.1:11911", cut_broker_addr("127.0.0.1:52998")}
    assert all(row[10] is None and row[11] is None for row in registrations)  # crc_ok, topic_count: not captured
    events = [(row[0], row[3]) for kind, row in rows if kind == EVENT and row[3] != 103]
    assert (cut_broker_addr("127.0.0.1:52998"), -1) in events  # kill -9: its connection closed
    assert ("127.0.0.1:11911", 104) in events  # clean stop: UNREGISTER_BROKER
    calls = [row for kind, row in rows if kind == CALL]
    assert not [row for row in calls if row[6] is None and not row[13]]  # unanswered only if not cut


def test_a_cut_answer_s_topic_count_whole_in_its_start_is_read() -> None:
    """tcpdump -i any -s 128 (tests/data/captures/real/v5-midsplit): WIPE_/ADD_WRITE_PERM_OF_BROKER's
    answer keeps ``{"code":0,"extFields":{"wipeTopicCount":"13"},"f`` of its header: the count is whole,
    as the NameServer logged it (13), but only a frame decoded whole was asked for it, so the finding
    said the replay's "0 topics of it held" (its registrations' bodies were cut)."""
    import gzip

    from spark_analysis.decode.schema import EVENT_ROWS

    raw = gzip.decompress((REAL / "v5-midsplit" / "v5-midsplit-052433.pcap.gz").read_bytes())
    names = EVENT_ROWS.names
    code, broker, count = (names.index(n) for n in ("code", "broker_name", "topic_count"))
    events = [(row[code], row[broker], row[count]) for kind, row in connection_rows(
        tcp_segments(iter_records(raw)), frozenset({9876, 9877})) if kind == EVENT and row[code] in (205, 206)]
    assert events == [(RequestCode.WIPE_WRITE_PERM_OF_BROKER, "broker-b", 13)]


def test_with_ports_the_rocketmq_traffic_on_other_ports_is_counted_not_dropped() -> None:
    """--port 9876 over a capture that also holds a broker's port: its connections and frames are
    counted by port (a frame start on 10911, nothing that is no frame on 11912), and said as one info
    finding per port."""
    from collections import Counter

    from spark_analysis.analysis.findings import other_traffic
    from spark_analysis.capture.inputs import CaptureFile, ReadTally, pieces

    broker, ha = ("10.0.0.2", 10911), ("10.0.0.2", 11912)
    sent = [(1.0, CLIENT, SERVER, tcp(CLIENT, SERVER, 1001, PSH | ACK, route_query(1))),
            (1.1, ("10.0.0.1", 40001), broker, tcp(("10.0.0.1", 40001), broker, 7, PSH | ACK, route_query(2))),
            (1.2, broker, ("10.0.0.1", 40001), tcp(broker, ("10.0.0.1", 40001), 9, PSH | ACK, route_query(3))),
            (1.3, ("10.0.0.1", 40002), ha, tcp(("10.0.0.1", 40002), ha, 7, PSH | ACK, b"\x01" * 40))]
    data = pcap([(t, ethernet(ipv4(src[0], dst[0], payload))) for t, src, dst, payload in sent])
    tally = ReadTally()
    read = list(pieces(data, index_records(iter_records(data)), CaptureFile("in.pcap", len(data), 0), (9876,), tally,
                       inline=True))
    assert [piece.ends for piece in read] == [(f"{CLIENT[0]}:{CLIENT[1]}", f"{SERVER[0]}:{SERVER[1]}")]
    assert tally.others == Counter({(10911, "10.0.0.1:40001", "segments"): 2, (10911, "10.0.0.1:40001", "frames"): 2,
                                    (11912, "10.0.0.1:40002", "segments"): 1, (11912, "10.0.0.1:40002", "frames"): 0})
    said = other_traffic(tally.others, (9876,))
    assert [(item["kind"], item["port"], item["connections"], item["frames"]) for item in said] == [
        ("other_port_traffic", 10911, 1, 2)]


def test_a_frame_after_one_whose_start_was_cut_is_read_and_the_walk_ends() -> None:
    """One packet held a registration and the start of a query, cut at 200 bytes; the next packet a
    whole query.  The walk resumed at the whole query's first byte, took the cut behind it for one
    ahead of it, and stood there for ever (a report's task never ended)."""
    ends = {f"{CLIENT[0]}:{CLIENT[1]}": CLIENT, f"{SERVER[0]}:{SERVER[1]}": SERVER}
    sent = [(t, tcp(ends[s.src], ends[s.dst], s.seq, s.flags, s.payload, s.ack)) for t, s in handshake()]
    both, whole = registration("right") + route_query(2), route_query(3)
    sent += [(2.0, tcp(CLIENT, SERVER, 1001, PSH | ACK, both, 5001)),
             (2.1, tcp(CLIENT, SERVER, 1001 + len(both), PSH | ACK, whole, 5001))]
    packets = [(t, ethernet(ipv4(CLIENT[0], SERVER[0], segment))) for t, segment in sent]
    previous = signal.signal(signal.SIGALRM, _late)
    signal.alarm(20)
    try:
        conversation = conversation_of(reassemble(tcp_segments(iter_records(_kept(packets, 54 + 200))))[0])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert [(c.known.code, c.known.opaque) for c in conversation.cut] == [(103, 7)]
    assert [c.command.opaque for c in conversation.commands] == [3]


@settings(max_examples=int(os.environ.get("HOSTILE_EXAMPLES", "200")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(kinds=st.lists(st.sampled_from(["query", "registration", "big"]), min_size=1, max_size=8),
       sizes=st.lists(st.one_of(st.integers(1, 700), st.sampled_from([-1, -2, -3])), min_size=1, max_size=30),
       payload=st.integers(0, 400), skip=st.integers(0, 3))
def test_any_cut_stream_is_walked_to_its_end_inventing_nothing(kinds, sizes, payload, skip) -> None:
    """Frames sent back to back in packets of any sizes (a negative size: that many whole frames, as
    a writer flushing several at once sends them), each packet cut at any snap length, the capture
    beginning at any of the first packets (no SYN then): the walk ends, every frame read whole is
    one that was sent, in order, and every cut frame's code is one that was sent."""
    sent_frames = [route_query(number) if kind == "query" else registration("right") if kind == "registration"
                   else RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}, b"x" * 900,
                                                opaque=number).encode()
                   for number, kind in enumerate(kinds)]
    stream = b"".join(sent_frames)
    ends = {f"{CLIENT[0]}:{CLIENT[1]}": CLIENT, f"{SERVER[0]}:{SERVER[1]}": SERVER}
    sent = [] if skip else [(t, tcp(ends[s.src], ends[s.dst], s.seq, s.flags, s.payload, s.ack))
                            for t, s in handshake()]
    starts = list(itertools.accumulate((len(frame) for frame in sent_frames), initial=0))
    at, number = 0, 0
    while at < len(stream):
        size = sizes[number % len(sizes)]
        if size < 0:  # up to the end of the -size'th frame boundary after ``at``
            later = [start for start in starts if start > at]
            size = later[min(-size, len(later)) - 1] - at
        if number >= skip:
            sent.append((2.0 + number / 1000, tcp(CLIENT, SERVER, 1001 + at, PSH | ACK, stream[at:at + size], 5001)))
        at, number = at + size, number + 1
    if not sent:
        return
    packets = [(t, ethernet(ipv4(CLIENT[0], SERVER[0], segment))) for t, segment in sent]
    previous = signal.signal(signal.SIGALRM, _late)
    signal.alarm(20)
    try:
        connections = reassemble(tcp_segments(iter_records(_kept(packets, 54 + payload))))
        conversations = [conversation_of(connection) for connection in connections]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    wanted = [RemotingCommand.decode(frame[4:]).opaque for frame in sent_frames]
    for conversation in conversations:
        read = iter(wanted)
        assert all(command.command.opaque in read for command in conversation.commands)  # a subsequence
        assert {cut.known.code for cut in conversation.cut} <= {103, 105, None}


def _late(*_: object) -> None:
    raise TimeoutError("the walk over the cut stream did not end")
