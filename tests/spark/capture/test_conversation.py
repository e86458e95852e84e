"""Cutting reassembled streams into commands: resynchronising after capture gaps and mid-stream
starts, and refusing what Java refuses from a stream seen from its SYN."""

from __future__ import annotations

import pytest

from spark_analysis.capture.conversation import conversation_of, frame_start
from spark_analysis.capture.packets import ACK
from spark_analysis.capture.reassembly import reassemble
from tests.spark.capture.builders import (
    CLIENT,
    SERVER,
    client_stream,
    handshake,
    only,
    registration,
    route_query,
    segment,
)
from twisted_namesrv.remoting import RemotingCommand, SerializeType


def requests_of(packets: list) -> list[RemotingCommand]:
    conversation = conversation_of(only(reassemble(packets)))
    return [c.command for c in conversation.commands]


# --- resynchronising ---------------------------------------------------------------------------------


def test_a_capture_gap_resumes_at_the_next_frame() -> None:
    frames = [route_query(n) for n in range(1, 6)]
    packets = client_stream(*frames, cut=20)
    del packets[9]  # inside the second frame: the capture missed it and nothing filled the hole
    conversation = conversation_of(only(reassemble(handshake() + packets)))
    assert [c.command.opaque for c in conversation.commands] == [1, 3, 4, 5]
    assert conversation.lost_bytes > 0 and not conversation.undecodable


def test_a_capture_starting_mid_frame_resumes_at_the_next_frame() -> None:
    """The bytes before it were captured, of a frame begun before the capture: not lost to a gap
    (v5-midreg, a capture begun in a broker's 500 kB registration, said "0 capture gaps, 214,420
    bytes lost to gaps")."""
    frames = [registration("right"), route_query(2), registration("right", SerializeType.ROCKETMQ)]
    packets = client_stream(*frames, cut=100)[3:]  # no SYN, and the first frame's start is missing
    assert [(c.code, c.opaque) for c in requests_of(packets)] == [(105, 2), (103, 7)]
    conversation = conversation_of(only(reassemble(packets)))
    assert (conversation.lost_bytes, conversation.mid_frame_bytes) == (0, len(frames[0]) - 300)


def test_frames_are_followed_across_bytes_received_before_the_capture() -> None:
    """A capture begun while a registration's segments arrived out of order: its body's segment at
    400-450 arrived before tcpdump started, the one at 450-500 is the first captured, then the
    NameServer's ACK (1001, SACK 1401-1501) and the late ones from 1001. The registration is read as far as its
    bytes go (its header whole: a cut frame), the lookups around it whole, nothing lost to a gap."""
    frames = [route_query(1), registration("right"), route_query(3)]
    packets = client_stream(*frames, cut=50)
    first_captured = packets[9]
    late, rest = packets[:8], packets[10:]
    dup_ack = (1.9, segment(SERVER, CLIENT, 5001, ACK, ack=1001)._replace(sack=(1401, 1501)))
    conversation = conversation_of(only(reassemble([first_captured, dup_ack, *late, *rest])))
    assert [(c.command.code, c.command.opaque) for c in conversation.commands] == [(105, 1), (105, 3)]
    assert [(frame.known.code, frame.known.opaque) for frame in conversation.cut] == [(103, 7)]
    assert (conversation.unseen_bytes, conversation.lost_bytes, conversation.mid_frame_bytes) == (50, 0, 0)


def test_a_stream_from_its_syn_is_cut_from_its_first_byte() -> None:
    """A frame the codec refuses there is what Java closes the channel for, not noise to skip."""
    packets = handshake() + client_stream(b"\x00\x00\x00\x05junk!", route_query(1))
    conversation = conversation_of(only(reassemble(packets)))
    assert (conversation.undecodable, conversation.lost_bytes) == (b"\x00\x00\x00\x05junk!", 0)


@pytest.mark.parametrize("noise", [b"", b"x" * 50, bytes(range(256)) * 3, b"\x00\x00\x01\x00\x00\x00\x00\x10{"])
def test_frame_start_skips_what_only_looks_like_a_header(noise: bytes) -> None:
    frames = route_query(1) + route_query(2)
    assert frame_start(noise + frames) == len(noise)
    assert frame_start(noise) is None


def test_frames_alike_the_one_before_are_told_without_a_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run of frames of one kind (a client asking the same route, its answers) is told apart by
    comparing each header with the one before in place: the opaque is searched for (json_split) in
    the first three only (a kind found by its key twice in a row is tried first), and in a frame of
    another kind in between; every frame is decoded as the codec decodes it (counted)."""
    from spark_analysis.capture import conversation

    searched = []
    split = conversation.json_split
    monkeypatch.setattr(conversation, "json_split", lambda data, start, end: searched.append(start) or split(
        data, start, end))
    other = RemotingCommand.request(105, {"topic": "Other"}, opaque=99).encode()
    frames = [route_query(n) for n in (1, 2, 3, 40, 500)] + [other] + [route_query(n) for n in (6, 7000, 8)]
    conversation.forget_kinds()
    commands = conversation_of(only(reassemble(handshake() + client_stream(*frames, cut=4096)))).commands
    assert [(c.command.ext, c.opaque) for c in commands] == [
        ({"topic": "TopicTest"}, n) for n in (1, 2, 3, 40, 500)] + [({"topic": "Other"}, 99)] + [
        ({"topic": "TopicTest"}, n) for n in (6, 7000, 8)]
    # the first's kind is new (read by the codec), the second's and third's found by their key, the
    # next two alike; "Other" is tried, then searched (new); the TopicTest ones after it are alike
    assert len(searched) == 4


def test_a_header_of_a_kind_not_met_is_searched_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its key and opaque, found where it lies, are what its template is then looked up and kept by:
    json_split runs once for it, not again by the kind's lookup and the templates' (counted)."""
    from spark_analysis.capture import conversation
    from twisted_namesrv.remoting import header

    searched = []
    split = header.json_split

    def counted(data: bytes, start: int = 0, end: int | None = None) -> tuple[bytes, int] | None:
        searched.append(start)
        return split(data, start, end)

    monkeypatch.setattr(conversation, "json_split", counted)
    monkeypatch.setattr(header, "json_split", counted)
    monkeypatch.setitem(conversation._SPLIT, SerializeType.JSON.value, counted)
    conversation.forget_kinds()
    frame = RemotingCommand.request(105, {"topic": "NotMetYet"}, opaque=5).encode()
    commands = conversation_of(only(reassemble(handshake() + client_stream(frame)))).commands
    assert [(c.command.ext, c.opaque) for c in commands] == [({"topic": "NotMetYet"}, 5)]
    assert len(searched) == 1


def test_a_brokers_repeated_registration_header_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A capture holds every registration of a broker, its header the same but for the opaque until its
    topics change: the capture's templates keep it (a server's do not), so it is parsed once (counted)."""
    from spark_analysis.capture import conversation
    from twisted_namesrv.remoting import header

    parsed = []
    parse = header._parse_json_header
    monkeypatch.setattr(header, "_parse_json_header", lambda data: parsed.append(data) or parse(data))
    ext = {"brokerName": "b", "brokerAddr": "10.0.0.1:10911", "clusterName": "c", "brokerId": "0",
           "bodyCrc32": "1456383825", "compressed": "false"}
    frames = [RemotingCommand.request(103, ext, opaque=opaque).encode()[4:] for opaque in (11, 12, 13)]
    decoded = [RemotingCommand.decode(frame, conversation._TEMPLATES) for frame in frames]
    assert [(command.ext, command.opaque) for command in decoded] == [(ext, 11), (ext, 12), (ext, 13)]
    assert len(parsed) == 1


def test_the_kinds_kept_are_bounded_in_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kind's key is a header's bytes, any peer's choice up to KEPT_HEADER_MAX: the kinds a worker
    keeps start over where the capture's templates do, past ``max_bytes`` of keys, not only past
    their count. Before, only the count (65,536) bounded them, and a capture of 65,000 distinct route
    lookups of 3.3 KB (215 MB, tiny extFields each) took a Python worker from 69 to 1,318 MB, kept
    for every task the worker ran after; the templates themselves held 14 MB of keys then."""
    from spark_analysis.capture import conversation
    from twisted_namesrv.remoting.header import KEPT_HEADER_MAX, HeaderTemplates

    small = HeaderTemplates(64, keep_registrations=True)  # 32 KiB of keys: the real one's rule, smaller
    monkeypatch.setattr(conversation, "_TEMPLATES", small)
    monkeypatch.setitem(conversation._TEMPLATE_OF, SerializeType.JSON.value, small.template_of)
    monkeypatch.setitem(conversation._TEMPLATE_OF, SerializeType.ROCKETMQ.value, small.binary_template_of)
    conversation.forget_kinds()
    for n in range(200):  # 200 distinct headers just under the limit: 700 KB of keys
        ext = {"topic": f"T{n}", "pad": "x" * (KEPT_HEADER_MAX - 600)}
        for serialize_type in (SerializeType.JSON, SerializeType.ROCKETMQ):
            frame = RemotingCommand.request(105, ext, opaque=n + 1, serialize_type=serialize_type).encode()
            commands = conversation_of(only(reassemble(handshake() + client_stream(frame)))).commands
            assert [(c.command.ext, c.opaque) for c in commands] == [(ext, n + 1)]
        for kinds in conversation._KINDS.values():
            assert 0 < sum(map(len, kinds)) <= small.max_bytes
    conversation.forget_kinds()


@pytest.mark.parametrize("short", [b"", b"a", b"ab", b"abc"])
def test_a_last_frame_shorter_than_its_header_word_is_undecodable_not_the_end_of_the_report(short: bytes) -> None:
    """A frame announcing fewer than 4 bytes (no room for its header-length word) as a stream's last:
    the header words were read for every frame at once, 4 bytes at each start, and reading past the
    stream's end raised IndexError in the decoding task, which stopped the whole report (Spark's
    traceback, exit 1). It is the codec's undecodable frame, as Java closes the channel for it."""
    frame = len(short).to_bytes(4, "big") + short
    conversation = conversation_of(only(reassemble(handshake() + client_stream(route_query(1), frame))))
    assert [c.command.opaque for c in conversation.commands] == [1]
    assert conversation.undecodable == frame
