"""Codec rules from PROTOCOL.md, one test each, with Java's verified bytes where they exist."""

from __future__ import annotations

import struct
import zlib

import crcmod.predefined
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twisted_namesrv.bodies.register import (
    RegisterBodyError,
    RegisterBrokerBody,
    TopicConfig,
    decode_register_body,
    encode_register_body,
)
from twisted_namesrv.bodies.route import DataVersion, topic_route_bean
from twisted_namesrv.remoting import (
    FrameDecoder,
    RemotingCommand,
    RemotingDecodeError,
    RequestCode,
    SerializeType,
    fastjson,
)
from twisted_namesrv.remoting.codes import V4_9_4, V4_9_8, V5_3_3, VERSION_NAMES, version_name
from twisted_namesrv.remoting.crc import crc32_masked, crc32_masked_steps
from twisted_namesrv.remoting.header import (
    KEPT_HEADER_MAX,
    Header,
    HeaderTemplates,
    decode_binary_header,
    decode_json_header,
    encode_binary_header,
    read_header_prefix,
)

decode_json = HeaderTemplates(16).decode_json

ROUTE_REQUEST_JSON = bytes.fromhex("0000008700000083") + (
    b'{"code":105,"extFields":{"topic":"TopicTest"},"flag":0,"language":"JAVA","opaque":7,'
    b'"serializeTypeCurrentRPC":"JSON","version":409}')
ROUTE_REQUEST_BINARY = bytes.fromhex(
    "0000002d010000290069000199000000070000000000000000000000140005746f70696300000009546f70696354657374")


def route_request(serialize_type: int = 0) -> RemotingCommand:
    return RemotingCommand.request(105, {"topic": "TopicTest"}, opaque=7, version=409, serialize_type=serialize_type)


def test_json_request_matches_java_bytes() -> None:
    assert route_request().encode() == ROUTE_REQUEST_JSON


def test_binary_request_matches_java_bytes() -> None:
    assert route_request(1).encode() == ROUTE_REQUEST_BINARY
    decoded = RemotingCommand.decode(ROUTE_REQUEST_BINARY[4:])
    assert (decoded.code, decoded.version, decoded.opaque, decoded.ext) == (105, 409, 7, {"topic": "TopicTest"})


def test_versions_match_mqversion_ordinals() -> None:
    assert len(VERSION_NAMES) == 613
    assert (V4_9_4, V4_9_8, V5_3_3) == (401, 409, 479)
    assert version_name(37) == "V3_0_11" and version_name(9999) == "HIGHER_VERSION"


def test_unknown_code_reply_matches_java() -> None:
    request = RemotingCommand.request(999, opaque=5)
    reply = RemotingCommand.response_to(request, 3, " request type 999 not supported")
    assert reply.encode()[8:] == (b'{"code":3,"flag":1,"language":"JAVA","opaque":5,"remark":" request type 999 '
                                  b'not supported","serializeTypeCurrentRPC":"JSON","version":0}')


class TestFastjson:
    def test_plain_mode_writes_bare_numeric_keys(self) -> None:
        assert fastjson.dumps({"brokerAddrs": {0: "a:1", 1: "b:2"}}) == '{"brokerAddrs":{0:"a:1",1:"b:2"}}'

    def test_standard_mode_quotes_sorts_and_escapes(self) -> None:
        text = fastjson.dumps({"b": {1: "x/é", 0: "y"}, "a": 2 ** 60}, standard=True)
        assert text == '{"a":"1152921504606846976","b":{"0":"y","1":"x\\/\\u00E9"}}'

    def test_plain_strings_escape_what_fastjson_escapes(self) -> None:
        """fastjson 1.2.69 and 1.2.83 (the whole BMP compared, each character in a string of a list,
        ``JSON.toJSONString``) escape DEL, C1, U+2028 and U+2029, which the json module wrote raw, and
        write C0 escapes in upper-case hex: 44 characters were answered in bytes no Java NameServer
        sends (a peer's topic or KV value holding one)."""
        java = [0x0B, 0x0E, 0x0F, *range(0x1A, 0x20), *range(0x7F, 0xA0), 0x2028, 0x2029]
        for code in java:
            char, escape = chr(code), f"\\u{code:04X}"
            assert fastjson.dumps([f"x{char}"]) == f'["x{escape}"]'
            assert fastjson.dumps({char: f"\u00e9{char}"}) == f'{{"{escape}":"\u00e9{escape}"}}'
        assert fastjson.dumps(["\x01\t\\u001f", 0]) == '["\\u0001\\t\\\\u001f",0]'  # a backslash's u stays
        assert fastjson.dumps(["plain", "\u00e9"]) == '["plain","\u00e9"]'

    def test_ext_fields_that_are_not_strings_read_as_java_reads_them(self) -> None:
        """RemotingCommand.extFields is a HashMap<String, String>: fastjson fills it with a number's
        own text and an object's JSON in a HashMap's order (4.9.8's and 5.3.3's RemotingSerializable
        printed the map below).  The parsed values wrote 1e3 as 1000.0, -0 as 0 and 1.50 as 1.5: a
        lookup of another topic than Java's."""
        header = (b'{"code":105,"extFields":{"topic":1e3,"a":-0,"b":1.50,"c":true,"d":{"zz":1,"a":2,"mm":3},'
                  b'"e":null,"f":"s"},"opaque":1}')
        assert RemotingCommand.decode(struct.pack(">I", len(header)) + header).ext == {
            "topic": "1E+3", "a": "-0", "b": "1.50", "c": "true", "d": '{"zz":1,"mm":3,"a":2}', "e": None, "f": "s"}

    @pytest.mark.parametrize("depth", [900, 995, 1000, 5000])
    def test_a_header_nested_deeper_than_python_reads_is_refused_or_read_never_raised(self, depth: int) -> None:
        """A value nested about as deep as Python recurses: the header decodes or is undecodable
        (RemotingDecodeError, the frame's refusal), and the capture's reader of a cut header's start
        takes what it can; neither raises anything else (RecursionError from the start's reader
        stopped a Spark task that met such a frame's first packet)."""
        nested = b"[" * depth + b"]" * depth
        header = b'{"code":105,"extFields":{"topic":' + nested + b'},"remark":' + nested + b',"opaque":1}'
        try:
            decoded = decode_json_header(header)
        except RemotingDecodeError:
            pass
        else:
            assert decoded.code == 105 and decoded.ext_fields is not None
        assert read_header_prefix(0, header).code == 105
        assert read_header_prefix(0, header[:-1]).code == 105

    def test_nulls_are_omitted(self) -> None:
        assert fastjson.dumps({"a": None, "b": {"c": None}, "d": [None]}) == '{"b":{},"d":[null]}'

    def test_lenient_reader_accepts_bare_keys_but_not_inside_strings(self) -> None:
        assert fastjson.loads(b'{0:"x",1:"{2:3}"}') == {"0": "x", "1": "{2:3}"}
        with pytest.raises(ValueError):
            fastjson.loads(b"{not json")

    @pytest.mark.parametrize("text", [b'{"a":1,"b":2,"a":3}', b'{"n":123456789012345678901234567890}', b'{"x":NaN}',
                                      b'{"s":"\\ud800"}', b'{"f":1e400,"g":-0.0}', b' {"e":"\xc3\xa9"} ', b"[1,{}]"])
    def test_reader_reads_standard_json_as_the_json_module(self, text: bytes) -> None:
        """The fast reader (msgspec) and what it hands back to the json module read alike: values,
        key order, what a repeated key keeps; a dict's order is a header's layout."""
        import json
        read, expected = fastjson.loads(text), json.loads(text)
        assert repr(read) == repr(expected) and repr(list(read)) == repr(list(expected))
        for bad in (b'{"a":"\x01"}', b'\xef\xbb\xbf{"a":1}', b'{"a":1}{"b":2}', b"\xff"):
            with pytest.raises(ValueError):
                fastjson.loads(bad)

    def test_java_hash_order_matches_verified_java_output(self) -> None:
        keys = ["topic", "lo", "ns", "acceptStandardJsonOnly"]
        assert fastjson.java_hash_order(keys) == ["lo", "ns", "topic", "acceptStandardJsonOnly"]
        assert fastjson.java_string_hash("TopicTest") == -1902610879

    @settings(max_examples=300, deadline=None)
    @given(st.text(alphabet=st.characters(max_codepoint=127), max_size=9000) | st.text(max_size=40))
    def test_java_string_hash_read_in_base_31_is_the_loop_over_its_units(self, text: str) -> None:
        """ASCII text is hashed by C (two numbers in base 31, 4,096 characters at a time): the same as
        String.hashCode's loop, at any length (past Python's 4,300 digits of one int() too)."""
        h = 0
        for unit in fastjson._utf16_units(text):
            h = (31 * h + unit) & 0xFFFFFFFF
        assert fastjson.java_string_hash(text) == (h - (1 << 32) if h & 0x80000000 else h)
        assert fastjson.java_string_hash("polygenelubricants") == -(1 << 31)

    def test_table_sizes_follow_java_constructors(self) -> None:
        assert fastjson.table_size(5, 128) == 128  # HashMap(128)
        assert fastjson.table_size(5, 128, concurrent=True) == 256  # ConcurrentHashMap(128)
        assert fastjson.table_size(13) == 32 and fastjson.table_size(12) == 16


class TestJsonHeader:
    def test_lenient_like_fastjson(self) -> None:
        header = decode_json(b'{"code":"105","language":"NODE_X","extFields":{"n":12,"b":true,"z":null}}')
        assert header.code == 105 and header.language is None
        assert header.ext_fields == {"n": "12", "b": "true", "z": None}

    def test_missing_language_is_java(self) -> None:
        assert decode_json(b'{"code":1}').language == "JAVA"

    @pytest.mark.parametrize("data", [b'{"code":1,"language":99}', b"[1]", b"{no", b'{"code":"x"}', b"\xff"])
    def test_what_java_refuses_raises(self, data: bytes) -> None:
        with pytest.raises(RemotingDecodeError):
            decode_json(data)

    def test_foreign_layout_reencodes_as_received(self) -> None:
        raw = b'{"code":105,"language":"JAVA","opaque":1,"flag":0,"version":121,"extFields":{"topic":"T"}}'
        frame = len(raw).to_bytes(4, "big") + raw
        command = RemotingCommand.decode(frame)
        assert command.encode()[4:] == frame


class TestHeaderTemplates:
    def test_a_clients_headers_differ_only_in_their_opaque(self) -> None:
        templates = HeaderTemplates(2)
        heads = [RemotingCommand.request(105, {"topic": topic}, opaque=opaque).encode()[8:]
                 for topic in ("A", "B", "C") for opaque in (1, 2)]
        decoded = [templates.decode_json(head) for head in heads]
        assert [(h.ext_fields["topic"], h.opaque) for h in decoded] == [
            (topic, opaque) for topic in ("A", "B", "C") for opaque in (1, 2)]
        assert len(templates) <= 2

    def test_a_brokers_registration_header_is_not_kept(self) -> None:
        """One per broker, every 30 s at most: 5,000 brokers' took megabytes to save a parse each."""
        templates = HeaderTemplates(16)
        ext = {"brokerName": "b", "brokerAddr": "10.0.0.1:10911", "clusterName": "c", "brokerId": "0"}
        for opaque in (1, 2):
            head = RemotingCommand.request(103, ext, opaque=opaque).encode()[8:]
            assert templates.decode_json(head).ext_fields == ext
        assert len(templates) == 0
        templates.decode_json(RemotingCommand.request(105, {"topic": "A"}, opaque=3).encode()[8:])
        assert len(templates) == 1

    def test_each_user_sizes_its_own(self) -> None:
        """The capture analysis keeps more templates than a server without changing the server's:
        each owner holds its own (a server's answer cache), no module one for all."""
        server = HeaderTemplates(4096)
        server.decode_json(b'{"code":1,"opaque":1}')
        mine = HeaderTemplates(1 << 16)
        frame = RemotingCommand.request(105, {"topic": "Mine"}, opaque=7).encode()[4:]
        assert RemotingCommand.decode(frame, mine).ext == {"topic": "Mine"}
        assert RemotingCommand.decode(frame).ext == {"topic": "Mine"}  # no templates: parsed in full
        assert (len(mine), len(server)) == (1, 1)

    def test_what_is_kept_is_bounded_in_bytes(self) -> None:
        """Any peer chooses a header's bytes: one over KEPT_HEADER_MAX is parsed and never kept, and
        each table's keys stay within ``max_bytes`` however many distinct headers come. Before,
        4,096 distinct route lookups padded to 60 KB were kept: a gigabyte, parsed."""
        templates = HeaderTemplates(4096)
        big = RemotingCommand.request(105, {"topic": "T", "pad": "x" * KEPT_HEADER_MAX}, opaque=1).encode()[8:]
        assert templates.decode_json(big).ext_fields["pad"] == "x" * KEPT_HEADER_MAX
        assert templates.template_of(big) is None and len(templates) == 0 and templates.kept_bytes() == 0
        binary = encode_binary_header(Header(code=105, opaque=1, ext_fields={"pad": "x" * KEPT_HEADER_MAX}))
        assert templates.binary_template_of(binary) is None and templates.kept_bytes() == 0
        for n in range(3000):  # 3,000 distinct headers just under the limit: 12 MB of keys
            pad = f"{n:05d}" + "x" * (KEPT_HEADER_MAX - 200)
            head = RemotingCommand.request(105, {"topic": f"T{n}", "pad": pad}, opaque=n + 1).encode()[8:]
            assert templates.decode_json(head).ext_fields["pad"] == pad
            assert templates.kept_bytes() <= 3 * templates.max_bytes
            templates.binary_template_of(encode_binary_header(Header(code=105, opaque=1, ext_fields={"pad": pad})))
        assert 0 < len(templates) and templates.max_bytes == 4096 * 512

    @pytest.mark.parametrize(("code", "field", "values"), [
        (105, "topic", ("TopicA", "Topic-019-17", "%RETRY%g", "TopicA")),
        (103, "bodyCrc32", ("1456383825", "1456383826", "7", "1456383825"))])
    def test_headers_alike_but_for_one_value_are_made_from_their_kin(
            self, monkeypatch: pytest.MonkeyPatch, code: int, field: str, values: tuple[str, ...]) -> None:
        """Headers alike but for the opaque and one value (a client's lookups of each topic; a
        broker's registrations once its topics changed, their bodyCrc32): one not met yet is made
        from its kin's template, not parsed, and reads as parsing it reads; a header escaping
        anything, naming the field twice or with a value not printable ASCII is parsed."""
        from twisted_namesrv.remoting import header as header_module

        parsed = []
        real = header_module._parse_json_header
        monkeypatch.setattr(header_module, "_parse_json_header", lambda data: parsed.append(data) or real(data))
        templates = HeaderTemplates(16, keep_registrations=True)
        ext = {"brokerAddr": "10.0.0.1:10911", "brokerName": "b", field: "", "clusterName": "c"}
        heads = [RemotingCommand.request(code, {**ext, field: value}, opaque=opaque).encode()[8:]
                 for opaque, value in enumerate(values)]
        for head in heads:
            assert templates.decode_json(head) == real(head)
            template, opaque = templates.template_of(head)  # type: ignore[misc]
            assert (template.ext_fields, opaque) == (real(head).ext_fields, real(head).opaque)
        assert parsed == heads[:1]
        others = [RemotingCommand.request(code, {**ext, field: "12", "remark": 'a "quoted" one'}).encode()[8:],
                  RemotingCommand.request(code, {**ext, field: "tópico"}).encode()[8:],
                  RemotingCommand.request(code, {**ext, field: "a\tb"}).encode()[8:],
                  RemotingCommand.request(code, {**ext, field: "12", "x": field}).encode()[8:]]
        parsed.clear()
        for head in others:
            assert templates.decode_json(head) == real(head)
        assert parsed == others

    def test_a_servers_registration_header_is_parsed_without_its_keys(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A server keeps no template of a broker's registration header, so it parses one at once:
        no template key (json_split) or kin key made to look for what is never there, the same
        header read as before; a capture's templates (keep_registrations) still make and keep them,
        and a header not beginning as Java writes a registration's goes the usual way."""
        from twisted_namesrv.remoting import header as header_module

        split: list[bytes] = []
        real = header_module.json_split
        monkeypatch.setattr(header_module, "json_split", lambda data, *a: split.append(data) or real(data, *a))
        ext = {"brokerName": "b", "brokerAddr": "10.0.0.1:10911", "clusterName": "c", "bodyCrc32": "7"}
        head = RemotingCommand.request(103, ext, opaque=5).encode()[8:]
        server, capture = HeaderTemplates(16), HeaderTemplates(16, keep_registrations=True)
        assert server.decode_json(head) == capture.decode_json(head) == header_module._parse_json_header(head)
        assert split == [head] and (len(server), len(capture)) == (0, 1)  # the capture's alone
        other = head.replace(b'{"code":103,', b'{"flag":0,"code":103,', 1)  # (not Java's order)
        assert server.decode_json(other) == header_module._parse_json_header(other) and split == [head, other]

    def test_binary_headers_alike_decode_once(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A binary header's template is its bytes around the opaque (bytes 5-8): headers alike but
        for the opaque are read once, each with its own opaque (a capture's binary clients and
        brokers repeat theirs)."""
        from twisted_namesrv.remoting import header as header_module

        reads = []
        real = header_module.decode_binary_header
        monkeypatch.setattr(header_module, "decode_binary_header", lambda data: reads.append(data) or real(data))
        templates = HeaderTemplates(16)
        heads = [RemotingCommand.request(105, {"topic": topic}, opaque=opaque, serialize_type=1).encode()[8:]
                 for topic in ("A", "B") for opaque in (1, -2, 3)]
        found = [templates.binary_template_of(head) for head in heads]
        assert [(template.ext_fields, opaque) for template, opaque in found] == [
            ({"topic": topic}, opaque) for topic in ("A", "B") for opaque in (1, -2, 3)]
        assert [decode_binary_header(head).opaque for head in heads] == [1, -2, 3] * 2
        assert len(reads) == 2
        with pytest.raises(RemotingDecodeError):  # too short to hold an opaque: refused as decoding refuses it
            templates.binary_template_of(heads[0][:7])


class TestJsonSplitAlike:
    """json_split_alike tells a JSON header alike a key met (but for its opaque) by comparing in place:
    always json_split's answer where it gives one, None where the header is another or json_split
    would refuse it."""

    KNOWN = b'{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque":7,"version":433}'

    def parts(self) -> tuple[bytes, bytes]:
        from twisted_namesrv.remoting.header import json_key_parts, json_split

        key = json_split(self.KNOWN)[0]  # type: ignore[index]
        front, back = json_key_parts(key)
        assert front.endswith(b'"opaque":') and front + back == key
        return front, back

    @pytest.mark.parametrize("digits", [b"0", b"7", b"-1", b"007", b"2147483647", b"-2147483648", b"12345678901"])
    def test_the_same_answer_as_json_split(self, digits: bytes) -> None:
        from twisted_namesrv.remoting.header import json_split, json_split_alike

        head = b"xx" + self.KNOWN.replace(b'"opaque":7', b'"opaque":' + digits) + b"yy"
        end = len(head) - 2
        split = json_split(head, 2, end)
        assert json_split_alike(head, 2, end, *self.parts()) == (None if split is None else split[1])

    @pytest.mark.parametrize("header", [
        b'{"code":105,"extFields":{"topic":"U"},"flag":0,"language":"JAVA","opaque":7,"version":433}',  # another
        b'{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque":+7,"version":433}',
        b'{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque": 7,"version":433}',
        b'{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque":1_0,"version":433}',
        b'{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque":-,"version":433}',
        b'{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque":,"version":433}',
        b'{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque":2147483648,"version":433}',
        b'{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque":123456789012,"version":433}',
        b'{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque":7,"version":4330}',
    ])
    def test_none_for_another_header_or_one_json_split_refuses(self, header: bytes) -> None:
        from twisted_namesrv.remoting.header import json_split, json_split_alike

        assert json_split_alike(header, 0, len(header), *self.parts()) is None
        split = json_split(header)
        assert split is None or split[0] != b"".join(self.parts())


class TestBinaryHeader:
    def test_empty_strings_read_as_null(self) -> None:
        command = RemotingCommand.request(105, {"k": "", "topic": "T"}, serialize_type=1)
        command.header.remark = ""
        decoded = decode_binary_header(command.encode()[8:])
        assert decoded.remark is None and decoded.ext_fields == {"k": None, "topic": "T"}  # Java: {k=null}

    @pytest.mark.parametrize("cut", [3, 12, 16, 20, 30])
    def test_truncated_or_inconsistent_lengths_raise(self, cut: int) -> None:
        header = ROUTE_REQUEST_BINARY[8:]
        with pytest.raises(RemotingDecodeError):
            decode_binary_header(header[:cut] + b"\x7f\xff\xff\xff" if cut == 20 else header[:cut])

    def test_unknown_type_byte_raises(self) -> None:
        with pytest.raises(RemotingDecodeError):
            RemotingCommand.decode(b"\x05\x00\x00\x00")


class TestFrameDecoder:
    def test_frames_split_and_joined_arbitrarily(self) -> None:
        stream = ROUTE_REQUEST_JSON * 3
        decoder = FrameDecoder()
        frames = [f for i in range(0, len(stream), 7) for f in decoder.feed(stream[i:i + 7])]
        assert frames == [ROUTE_REQUEST_JSON[4:]] * 3 and decoder.pending == b""

    def test_a_buffer_is_held_only_while_a_frame_is_not_whole(self) -> None:
        """One decoder a connection: none holds a buffer for reads of whole frames, one is made for
        a frame left over and let go once the frame is cut."""
        decoder = FrameDecoder()
        assert decoder.feed(ROUTE_REQUEST_JSON * 2) == [ROUTE_REQUEST_JSON[4:]] * 2
        assert decoder._buffer is None and decoder.empty and decoder.pending_memory == 0
        assert decoder.feed(ROUTE_REQUEST_JSON + ROUTE_REQUEST_JSON[:9]) == [ROUTE_REQUEST_JSON[4:]]
        assert decoder.pending == ROUTE_REQUEST_JSON[:9] and decoder.pending_memory > 0 and not decoder.empty
        assert decoder.feed(ROUTE_REQUEST_JSON[9:] + ROUTE_REQUEST_JSON[:3]) == [ROUTE_REQUEST_JSON[4:]]
        assert decoder.pending == ROUTE_REQUEST_JSON[:3]  # what is left of the read after the frame
        assert decoder.feed(ROUTE_REQUEST_JSON[3:]) == [ROUTE_REQUEST_JSON[4:]]
        assert decoder._buffer is None and decoder.pending == b""
        frame = (1 << 18).to_bytes(4, "big") + (2).to_bytes(4, "big") + b"{}" + bytes((1 << 18) - 6)
        assert decoder.feed(frame[:1 << 17]) == [] and decoder.pending == frame[:1 << 17]  # from ONE_COPY_FROM on
        assert decoder.feed(frame[1 << 17:]) == [frame[4:]] and decoder._buffer is None

    def test_too_long_is_refused_before_it_arrives(self) -> None:
        with pytest.raises(RemotingDecodeError):
            FrameDecoder().feed((32 * 1024 * 1024).to_bytes(4, "big"))
        FrameDecoder(64 * 1024 * 1024).feed((32 * 1024 * 1024).to_bytes(4, "big"))  # configurable higher

    def test_largest_legal_length_is_max_minus_prefix(self) -> None:
        FrameDecoder(1024).feed((1020).to_bytes(4, "big"))
        with pytest.raises(RemotingDecodeError):
            FrameDecoder(1024).feed((1021).to_bytes(4, "big"))

    def test_negative_length_refused(self) -> None:
        with pytest.raises(RemotingDecodeError):
            FrameDecoder().feed(b"\xff\xff\xff\xf0")

    def test_header_longer_than_frame_refused(self) -> None:
        with pytest.raises(RemotingDecodeError):
            RemotingCommand.decode(b"\x00\x00\x01\x00{}")

    def test_too_long_header_is_refused_once_its_word_arrives(self) -> None:
        header_length = len(ROUTE_REQUEST_JSON) - 8  # the route request has no body
        assert FrameDecoder(max_header_length=header_length).feed(ROUTE_REQUEST_JSON) == [ROUTE_REQUEST_JSON[4:]]
        decoder = FrameDecoder(max_header_length=header_length - 1)
        assert decoder.feed(ROUTE_REQUEST_JSON[:7]) == []  # the header word is not complete yet
        with pytest.raises(RemotingDecodeError) as refused:
            decoder.feed(ROUTE_REQUEST_JSON[7:8])
        assert refused.value.reason == "header_length"


class TestRegisterBody:
    VERIFIED_498 = bytes.fromhex(
        "78da63606050af564ace2fcd2b492d52b232d5512ac9cc4d2d2e49cc2d50b232343740805a0606064620960ac92fc84c0e01aa"
        "513001423385604f3f771fd7f8104777a02c53742c0080c71458")

    def body(self) -> RegisterBrokerBody:
        return RegisterBrokerBody(DataVersion(1700000000000, 5), {"TopicTest": TopicConfig("TopicTest", 4, 4, 6)})

    def test_compressed_498_matches_java_bytes(self) -> None:
        assert encode_register_body(self.body(), compressed=True, v5=False) == self.VERIFIED_498

    def test_compressed_5x_layout_is_read_in_any_mode(self) -> None:
        body = self.body()
        body.topicConfigTable["TopicTest"].attributes = {"message.type": "FIFO"}
        body.topicQueueMappingInfoMap = {"TopicTest": {"bname": "b", "currIdMap": {0: 0}, "topic": "TopicTest"}}
        decoded = decode_register_body(encode_register_body(body, True, v5=True), True, V4_9_8)
        assert decoded.topicConfigTable["TopicTest"].attributes == {"message.type": "FIFO"}
        assert decoded.topicQueueMappingInfoMap["TopicTest"]["currIdMap"] == {0: 0}

    def test_topic_line_with_trailing_space_like_java_split(self) -> None:
        assert TopicConfig.decode_text("T 1 2 6 SINGLE_TAG ").writeQueueNums == 2
        with pytest.raises(RegisterBodyError):
            TopicConfig.decode_text("T 1 2 6")

    def test_old_brokers_send_a_bare_wrapper(self) -> None:
        wrapper = b'{"dataVersion":{"counter":1,"timestamp":2},"topicConfigTable":{"T":{"topicName":"T"}}}'
        assert list(decode_register_body(wrapper, False, 36).topicConfigTable) == ["T"]

    def test_an_empty_topic_name_is_the_key_as_in_java(self) -> None:
        body = (b'{"topicConfigSerializeWrapper":{"dataVersion":{"counter":1,"timestamp":2},"topicConfigTable":'
                b'{"A":{"topicName":"A","perm":6},"B":{"topicName":"","perm":6}}},"filterServerList":[]}')
        table = decode_register_body(body, False, V4_9_8).topicConfigTable
        assert [config.topicName for config in table.values()] == ["A", "B"]

    #: Java 4.9.8's route answer (filterServerTable) after a registration listing each entry alone
    JAVA_FILTER_SERVERS = [(b"null", None), (b"1.50", "1.50"), (b"7", "7"), (b"-0", "-0"), (b"1E+3", "1E+3"),
                           (b"true", "true"), (b'{"b":1,"a":null,"c":[1,2]}', '{"b":1,"c":[1,2]}'),
                           (b'[3,"x"]', '[3,"x"]'), (b'"s"', "s"), (b"12345678901234567890", "12345678901234567890")]

    @pytest.mark.parametrize("lenient", [False, True])
    def test_filter_servers_that_are_not_strings_are_read_as_java_reads_them(self, lenient: bool) -> None:
        """fastjson fills RegisterBrokerBody's List<String> as a String field: a number's literal
        text, an object's JSON, null kept (``str()`` stored ``None`` and ``1.5``).  ``lenient``:
        a body only the general path reads (a string where a number belongs)."""
        listed = b",".join(raw for raw, _ in self.JAVA_FILTER_SERVERS)
        perm = b'"6"' if lenient else b"6"
        body = (b'{"topicConfigSerializeWrapper":{"dataVersion":{"counter":1,"timestamp":2},"topicConfigTable":'
                b'{"A":{"topicName":"A","perm":' + perm + b'}}},"filterServerList":[' + listed + b"]}")
        decoded = decode_register_body(body, False, V4_9_8)
        assert decoded.filterServerList == [java for _, java in self.JAVA_FILTER_SERVERS]
        route = fastjson.dumps_bytes(topic_route_bean((), (), {"127.0.0.1:11000": decoded.filterServerList[:1]},
                                                      None, None, False))
        assert b'"filterServerTable":{"127.0.0.1:11000":[null]}' in route  # Java's answer for [null]

    def test_zip_bomb_is_refused(self) -> None:
        bomb = zlib.compress(b"\0" * (8 * 1024 * 1024))
        with pytest.raises(RegisterBodyError):
            decode_register_body(bomb, True, V4_9_8, max_inflated=1024 * 1024)

    @pytest.mark.parametrize("data", [b"not zlib", zlib.compress(b"\x00\x00\x00\x05{}"), zlib.compress(b"")])
    def test_garbage_compressed_bodies_raise_register_body_error(self, data: bytes) -> None:
        with pytest.raises(RegisterBodyError):
            decode_register_body(data, True, V4_9_8)


def test_crc_is_masked_java_crc32() -> None:
    """crcmod's predefined crc-32 names java.util.zip.CRC32 (polynomial, reflection, final xor):
    the zlib CRC the server computes is that one, in one go and across steps."""
    java_crc32 = crcmod.predefined.mkPredefinedCrcFun("crc-32")
    data = bytes(range(256)) * 5000  # more than one step of crc32_masked_steps
    assert crc32_masked(data) == java_crc32(data) & 0x7FFFFFFF
    assert crc32_masked(b"hello") == java_crc32(b"hello") & 0x7FFFFFFF == 0x3610A686
    assert crc32_masked(None) == 0


def test_a_crc_takes_a_step_a_size_s_bytes_and_none_for_a_body_of_one_step() -> None:
    """crc32_masked_steps at the step size its caller gives (answer_cache's renewal: STEP_BYTES):
    a body of one step's bytes or fewer resumes no one (no yield), more takes a step each size's
    bytes; the value is crc32_masked's whatever the size."""
    data = bytes(range(256)) * 40

    def stepped(body: bytes, size: int) -> tuple[int, int]:
        steps, walk = 0, crc32_masked_steps(body, size)
        try:
            while True:
                next(walk)
                steps += 1
        except StopIteration as done:
            return done.value, steps

    assert stepped(data, len(data)) == (crc32_masked(data), 0)
    assert stepped(data, len(data) - 1) == (crc32_masked(data), 2)
    assert stepped(data, 1000) == (crc32_masked(data), 11)


texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)


@given(code=st.integers(-32768, 32767), opaque=st.integers(-2**31, 2**31 - 1), flag=st.integers(0, 3),
       remark=st.none() | texts, ext=st.none() | st.dictionaries(texts.filter(bool), texts.filter(bool), max_size=4),
       body=st.none() | st.binary(min_size=1, max_size=64), serialize_type=st.sampled_from([0, 1]))
def test_any_command_roundtrips(code, opaque, flag, remark, ext, body, serialize_type) -> None:
    command = RemotingCommand.request(code, ext, body, opaque=opaque, serialize_type=serialize_type)
    command.header.flag, command.header.remark = flag, remark
    frames = FrameDecoder().feed(command.encode())
    decoded = RemotingCommand.decode(frames[0])
    if serialize_type == 1:  # the binary header reads empty strings as null
        remark = remark or None
    assert (decoded.code, decoded.opaque, decoded.header.flag, decoded.remark, decoded.body) == (
        code, opaque, flag, remark, body)
    assert (decoded.header.ext_fields or None) == (ext or None)


def test_a_frames_code_is_peeked_without_decoding_its_header() -> None:
    """What the dispatcher schedules by (dispatch.py: a storm past a turn's share): a JSON header's
    first "code" near its start, a binary header's first two bytes, else None."""
    from twisted_namesrv.remoting.command import peek_code

    for serialize_type in (SerializeType.JSON, SerializeType.ROCKETMQ):
        request = RemotingCommand.request(RequestCode.REGISTER_BROKER, {"brokerName": "b"}, b"{}", opaque=7,
                                          version=409)
        request.serialize_type = serialize_type
        assert peek_code(request.encode()[4:]) == RequestCode.REGISTER_BROKER
    late = b'{"extFields":{"a":"' + b"x" * 80 + b'"},"code":103}'
    assert peek_code(len(late).to_bytes(4, "big") + late) is None  # not near the start: decoded as usual
    assert peek_code(b"") is None and peek_code((3).to_bytes(4, "big") + b"{}x") is None
