"""Malformed input against the real server over loopback (issue 5, item 2).

Every case runs against an in-process NameServer with a registered broker and a well-behaved
client (``scene.Scene``).  The server must answer the bad request with a clear error, or close
only that connection; it must never let an exception escape, the broker's and the good client's
connections stay open and keep getting correct answers, and a rejected request changes nothing:
cluster info (106), the routes, the topic list, the KV namespace and the configuration answer
exactly as before.
The cases this suite found failing were fixed; they stay here as regression tests.
"""

from __future__ import annotations

import json
import random
import struct
import zlib

import pytest
import pytest_twisted
from twisted.internet import reactor

from tests.hostile.scene import (
    BROKER,
    BROKER_ADDR,
    NAMESPACE,
    Scene,
    json_frame,
    next_opaque,
    patch,
    register_body,
    register_ext,
    register_request,
    request,
    sleep,
)
from twisted_namesrv import properties
from twisted_namesrv.processor import CODES
from twisted_namesrv.remoting import (
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from twisted_namesrv.remoting.crc import crc32_masked
from twisted_namesrv.remoting.frame import encode_frame
from twisted_namesrv.remoting.header import Header, encode_binary_header

MiB = 1024 * 1024


@pytest_twisted.async_yield_fixture
async def scene(tmp_path):
    stage = await Scene.start(tmp_path)
    try:
        yield stage
    finally:
        await stage.stop()


def route_header(topic: str = "T1", opaque: int | bytes | None = None) -> bytes:
    """A JSON route request header; ``opaque`` may be given as its digits."""
    opaque = next_opaque() if opaque is None else opaque
    digits = opaque if isinstance(opaque, bytes) else str(opaque).encode()
    return (b'{"code":105,"extFields":{"topic":"%s"},"flag":0,"language":"JAVA","opaque":%s,'
            b'"serializeTypeCurrentRPC":"JSON","version":479}' % (topic.encode(), digits))



# -- undecodable headers -----------------------------------------------------------------------

UNDECODABLE_JSON_HEADERS = [
    b"{not json",
    b"",
    b"[]",
    b"null",
    b'"a string"',
    b"{",
    b'{"code":105',
    b'{"code":105}trailing garbage',
    b'{"code":"abc"}',
    b'{"code":true}',
    b'{"code":NaN}',
    b'{"code":105,"extFields":[]}',
    b'{"code":105,"extFields":"topic"}',
    b'{"code":105,"language":99}',
    b"\x00" * 16,
    # these once raised OverflowError, TypeError or RecursionError out of the decoder (fixed in dc694d6)
    b'{"code":Infinity}',
    b'{"code":105,"opaque":1e999}',
    b'{"code":2147483648}',
    b'{"code":105,"language":[]}',
    b'{"code":105,"language":{}}',
    b'{"code":105,"extFields":{"a":' + b"[" * 5000 + b"]" * 5000 + b"}}",
    b"[" * 100_000,
]


@pytest.mark.parametrize("header", UNDECODABLE_JSON_HEADERS)
@pytest_twisted.ensureDeferred
async def test_undecodable_json_header_closes_only_that_connection(scene, header):
    client = await scene.send_expect_close(json_frame(header))
    assert client.data == b""
    await scene.assert_unchanged()


@pytest.mark.parametrize("header,topic", [
    (b'{"code":105,"remark":{"a":1.5},"opaque":5151}', "null"),  # fastjson: an object read into a String field
    (b'{"code":105,"extFields":{"topic":{"a":0.5}},"opaque":5151}', '{"a":0.5}'),
    (b'{"code":"105","extFields":{"topic":7},"opaque":"5151"}', "7"),
    (b'{"code":105,"extFields":{"topic":"\\u0000"},"opaque":5151,"other":[1,{"x":null}]}', "\x00"),
])
@pytest_twisted.ensureDeferred
async def test_odd_but_decodable_json_headers_are_answered(scene, header, topic):
    answer = await scene.send_expect_answer(json_frame(header), 5151)
    assert answer.code == ResponseCode.TOPIC_NOT_EXIST
    assert answer.remark.startswith(f"No topic route info in name server for the topic: {topic}")
    await scene.assert_unchanged()


# the template cache once converted 5000 opaque digits with int() (ValueError escaped; fixed in dc694d6)
@pytest_twisted.ensureDeferred
async def test_absurd_opaque_after_a_cached_header(scene):
    assert (await scene.send_expect_answer(json_frame(route_header(opaque=77)), 77)).code == ResponseCode.SUCCESS
    await scene.send_expect_close(json_frame(route_header(opaque=b"9" * 5000)))
    await scene.assert_unchanged()


# Found by the fuzz run: the cached decoding paths (header templates, route answers kept as bytes)
# must refuse an opaque beyond a Java int exactly as the full parse does (fastjson overflows and
# the channel is closed), whatever headers came before.
@pytest.mark.parametrize("code,digits", [
    (RequestCode.GET_KV_CONFIG, b"2147483648"),  # header templates
    (RequestCode.GET_KV_CONFIG, b"-2147483649"),
    (RequestCode.GET_ROUTEINFO_BY_TOPIC, b"2147483648"),  # route answers kept as bytes
])
@pytest_twisted.ensureDeferred
async def test_out_of_range_opaque_after_a_cached_header(scene, code, digits):
    head = (b'{"code":%d,"extFields":{"namespace":"NS","key":"k","topic":"T1"},"flag":0,"language":"JAVA","opaque":'
            % code)
    assert (await scene.send_expect_answer(json_frame(head + b'4646,"version":479}'), 4646)).code == 0
    assert (await scene.send_expect_answer(json_frame(head + b'4647,"version":479}'), 4647)).code == 0
    client = await scene.raw()
    client.transport.write(json_frame(head + digits + b',"version":479}'))
    await client.settled()
    assert client.data == b"", "answered a header whose opaque overflows a Java int"
    await client.closed
    await scene.assert_unchanged()


@pytest_twisted.ensureDeferred
async def test_a_good_frame_before_a_bad_one_in_the_same_write_is_answered(scene):
    good = request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"})
    client = await scene.send_expect_close(good.encode() + json_frame(b"{not json"))
    [answer] = client.answers()
    assert answer.opaque == good.opaque and answer.code == ResponseCode.SUCCESS
    assert answer.body == scene.expected.answers["route T1"][2]
    await scene.assert_unchanged()


# -- lengths -----------------------------------------------------------------------------------

def _header_length_beyond_frame() -> list[bytes]:
    header = route_header()
    frame = json_frame(header)
    return [
        patch(frame, 4, ">I", len(header) + 1),  # one byte more than the frame holds
        patch(frame, 4, ">I", 0x00FFFFFF),  # the largest 24-bit header length
        struct.pack(">iI", 4, 1),  # a 4-byte frame announcing a 1-byte header
    ]


@pytest.mark.parametrize("frame", _header_length_beyond_frame())
@pytest_twisted.ensureDeferred
async def test_header_length_beyond_the_frame(scene, frame):
    client = await scene.send_expect_close(frame)
    assert client.data == b""
    await scene.assert_unchanged()


@pytest.mark.parametrize("length,tail", [
    (-1, b""),
    (-(2 ** 31), b""),
    (16 * MiB - 3, b""),  # the whole frame (prefix included) is one byte over 16 MiB
    (2 ** 31 - 1, b""),
    (0, b""),
    (1, b"\x00"),
    (3, b"\x00\x00\x7b"),
])
@pytest_twisted.ensureDeferred
async def test_negative_or_absurd_frame_length(scene, length, tail):
    client = await scene.send_expect_close(struct.pack(">i", length) + tail)
    assert client.data == b""
    await scene.assert_unchanged()


@pytest.mark.parametrize("serialize_type", [2, 0x7F, 0x80, 0xFF])
@pytest_twisted.ensureDeferred
async def test_unknown_serialize_type(scene, serialize_type):
    header = route_header()
    await scene.send_expect_close(encode_frame(serialize_type, header, None))
    await scene.assert_unchanged()


# -- binary (ROCKETMQ) headers with inconsistent inner lengths ---------------------------------

def binary_route_header(topic: str = "T1") -> bytes:
    """code, language, version, opaque, flag (13 bytes); remark length at 13, remark "hi";
    extFields length at 19; then key length (2), "topic", value length (4), the topic."""
    return encode_binary_header(Header(code=RequestCode.GET_ROUTEINFO_BY_TOPIC, version=479, opaque=next_opaque(),
                                       remark="hi", ext_fields={"topic": topic}))


REMARK_LEN, EXT_LEN, KEY_LEN, VALUE_LEN = 13, 19, 23, 30


def _binary(header: bytes) -> bytes:
    return encode_frame(SerializeType.ROCKETMQ, header, None)


BINARY_BROKEN = {
    "remark length -1": lambda h: patch(h, REMARK_LEN, ">i", -1),
    "remark length -2^31": lambda h: patch(h, REMARK_LEN, ">i", -(2 ** 31)),
    "remark length beyond the header": lambda h: patch(h, REMARK_LEN, ">i", 2 ** 31 - 1),
    "remark length one too long": lambda h: patch(h, REMARK_LEN, ">i", 3),
    "extFields length shorter than its entries": lambda h: patch(h, EXT_LEN, ">i", 3),
    "key length beyond extFields": lambda h: patch(h, KEY_LEN, ">H", 0xFFFF),
    "header cut inside the fixed part": lambda h: h[:10],
    "empty header": lambda h: b"",
}
BINARY_BROKEN.update({
    # Java's mapDeserialize: NegativeArraySizeException / BufferUnderflowException, channel closed
    "value length -1": lambda h: patch(h, VALUE_LEN, ">i", -1),
    "value length beyond extFields": lambda h: patch(h, VALUE_LEN, ">i", 2 ** 31 - 1),
    "header cut inside extFields": lambda h: h[:-1],
})


@pytest.mark.parametrize("case", list(BINARY_BROKEN))
@pytest_twisted.ensureDeferred
async def test_binary_header_with_inconsistent_lengths(scene, case):
    broken = BINARY_BROKEN[case]
    client = await scene.raw()
    client.transport.write(_binary(broken(binary_route_header())))
    await client.settled()  # closed, or answered (then fail at once instead of waiting for a close)
    assert client.data == b"", f"answered instead of closing: {client.answers()}"
    await client.closed
    await scene.assert_unchanged()


@pytest.mark.parametrize("ext_length", [
    -1,  # Java (RocketMQSerializable: `if (extFieldsLength > 0)`) reads no extFields: the topic is null, 17
    2 ** 31 - 1,  # Java's `new byte[extFieldsLength]` / headerBuffer.get fail and the channel is closed
])
@pytest_twisted.ensureDeferred
async def test_binary_extfields_length_that_lies(scene, ext_length):
    client = await scene.raw()
    client.transport.write(_binary(patch(binary_route_header(), EXT_LEN, ">i", ext_length)))
    await client.settled()
    answers = client.answers()
    assert client.is_closed or answers[0].code != ResponseCode.SUCCESS, "answered with fields it should not have read"
    await scene.assert_unchanged()


# -- invalid UTF-8 ------------------------------------------------------------------------------

@pytest.mark.parametrize("frame", [
    json_frame(b'{"code":105,"extFields":{"topic":"T\xff1"},"opaque":1}'),
    json_frame(b'{"code":105,"extFields":{"topic":"\xc0\xaf"},"opaque":1}'),  # overlong '/'
    json_frame(b'{"code":105,"extFields":{"topic":"\xed\xa0\x80"},"opaque":1}'),  # an encoded surrogate
    json_frame(b'{"code":105,"remark":"\xfe\xff","opaque":1}'),
], ids=["json value", "json overlong", "json encoded surrogate", "json remark"])
@pytest_twisted.ensureDeferred
async def test_invalid_utf8_in_the_header(scene, frame):
    await scene.send_expect_close(frame)
    await scene.assert_unchanged()


@pytest.mark.parametrize("frame", [
    _binary(binary_route_header()[:REMARK_LEN + 4] + b"\xff\xfe" + binary_route_header()[REMARK_LEN + 6:]),
    _binary(binary_route_header("T\xe9")[:-2] + b"\xff\xff"),
], ids=["binary remark", "binary value"])
@pytest_twisted.ensureDeferred
async def test_invalid_utf8_in_a_binary_header_is_replaced_as_java_does(scene, frame):
    """RocketMQSerializable decodes with new String(bytes, UTF_8): U+FFFD, and answers."""
    client = await scene.raw()
    client.transport.write(frame)
    await client.settled()
    assert not client.is_closed and client.answers()
    await scene.assert_unchanged()


@pytest_twisted.ensureDeferred
async def test_invalid_utf8_in_bodies(scene):
    # read as Java's new String(body, UTF_8) reads it: U+FFFD U+FFFD true, which Boolean.parseBoolean
    # reads as false (the value it had): answered SUCCESS, as Java answers
    config = request(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=\xff\xfetrue\n")
    answer = await scene.send_expect_answer(config)
    assert answer.code == ResponseCode.SUCCESS
    body = b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T\xff":{}}}}'
    answer = await scene.send_expect_answer(register_request(body, name="broker-x", addr="127.0.0.1:20911"))
    assert answer.code == ResponseCode.SYSTEM_ERROR and answer.remark
    await scene.assert_unchanged()


@pytest_twisted.ensureDeferred
async def test_lone_surrogate_topic_is_answered(scene):
    header = b'{"code":105,"extFields":{"topic":"\\ud800"},"flag":0,"opaque":4242,"version":479}'
    answer = await scene.send_expect_answer(json_frame(header), 4242)
    assert answer.code == ResponseCode.TOPIC_NOT_EXIST
    await scene.assert_unchanged()


@pytest_twisted.ensureDeferred
async def test_lone_surrogate_kv_key_does_not_poison_the_kv_store(scene, tmp_path):
    header = (b'{"code":100,"extFields":{"namespace":"NS","key":"\\ud800","value":"x"},"flag":0,"opaque":4343,'
              b'"version":479}')
    await scene.send_expect_answer(json_frame(header), 4343)  # either answer is fine
    put = request(RequestCode.PUT_KV_CONFIG, {"namespace": "NS2", "key": "k2", "value": "v2"})
    assert (await scene.send_expect_answer(put)).code == ResponseCode.SUCCESS
    stored = json.loads((tmp_path / "kvConfig.json").read_text(encoding="utf-8", errors="replace"))
    assert stored["configTable"]["NS2"] == {"k2": "v2"}
    scene.assert_no_unhandled()


@pytest_twisted.ensureDeferred
async def test_lone_surrogate_order_topic_key_does_not_fail_broker_registrations(scene):
    header = (b'{"code":100,"extFields":{"namespace":"ORDER_TOPIC_CONFIG","key":"\\udfff","value":"broker-a:4"},'
              b'"flag":0,"opaque":4444,"version":479}')
    await scene.send_expect_answer(json_frame(header), 4444)  # either answer is fine
    answer = await scene.broker.call(register_request())
    assert (answer.code, answer.remark) == (ResponseCode.SUCCESS, None)
    scene.assert_no_unhandled()


@pytest_twisted.ensureDeferred
async def test_lone_surrogate_broker_name_does_not_break_cluster_info(scene):
    body = register_body(("TX1", "TX2"))
    ext = register_ext(body, name="SURROGATE", addr="127.0.0.1:20911")
    header = json.dumps({"code": 103, "extFields": ext, "flag": 0, "opaque": 4545, "version": 479}).encode()
    header = header.replace(b"SURROGATE", b"x\\udfff")
    client = await scene.connect()
    client.send(json_frame(header, body))
    await client.answer(4545)  # either answer is fine; the connection stays open, so would the broker
    answer = await scene.good.call(request(RequestCode.GET_BROKER_CLUSTER_INFO))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    scene.assert_no_unhandled()


# -- header fields: brokerId, bodyCrc32, required fields ------------------------------------------

@pytest.mark.parametrize("broker_id", [
    "abc", "", "1.5", "0x1", "NaN", "--1",
    # Python's int() takes these, Java's Long.parseLong does not (code 1 in Java; fixed here in dc694d6)
    "1_0", " 0", "0 ", "0\n", "99999999999999999999", "9223372036854775808",
])
@pytest_twisted.ensureDeferred
async def test_non_numeric_broker_id(scene, broker_id):
    answer = await scene.send_expect_answer(
        register_request(register_body(("TX1", "TX2")), name="broker-x", addr="127.0.0.1:20911", broker_id=broker_id))
    assert answer.code == ResponseCode.SYSTEM_ERROR and answer.remark
    await scene.assert_unchanged()


@pytest.mark.parametrize("crc", ["abc", "", "1.5", "99999999999"])
@pytest_twisted.ensureDeferred
async def test_non_numeric_body_crc_skips_the_check_as_java_does(scene, crc):
    """Java's Integer.parseInt fails, bodyCrc32 keeps its default 0 and the check is skipped, so
    the body decides: garbage is refused (nothing changes), a good body registers."""
    garbage = b"{this is not a body"
    bad = request(RequestCode.REGISTER_BROKER, register_ext(garbage, name="broker-x", addr="127.0.0.1:20911",
                                                            bodyCrc32=crc), garbage)
    answer = await scene.send_expect_answer(bad)
    assert answer.code == ResponseCode.SYSTEM_ERROR and answer.remark.startswith("Failed to decode RegisterBrokerBody")
    await scene.assert_unchanged()
    body = register_body(("TX1", "TX2"))
    good = request(RequestCode.REGISTER_BROKER, register_ext(body, name="broker-x", addr="127.0.0.1:20911",
                                                             bodyCrc32=crc), body)
    client = await scene.connect()
    assert (await client.call(good)).code == ResponseCode.SUCCESS
    route = await scene.good.call(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TX1"}))
    assert route.code == ResponseCode.SUCCESS
    scene.assert_no_unhandled()


@pytest.mark.parametrize("crc", ["1", "-5", "2147483647", "wrong body"])
@pytest_twisted.ensureDeferred
async def test_wrong_crc_is_refused(scene, crc):
    body = register_body(("TX1", "TX2"))
    value = str(crc32_masked(b"another body")) if crc == "wrong body" else crc
    command = request(RequestCode.REGISTER_BROKER,
                      register_ext(body, name="broker-x", addr="127.0.0.1:20911", bodyCrc32=value), body)
    answer = await scene.send_expect_answer(command)
    assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
    await scene.assert_unchanged()


# -- bodies --------------------------------------------------------------------------------------

NOT_REGISTER_BODIES = [
    b"not json",
    b"[]",
    b"{",
    b"null",
    b'{"topicConfigSerializeWrapper":5}',
    b'{"topicConfigSerializeWrapper":{"topicConfigTable":[1]}}',
    b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"TX1":5}}}',
    b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"TX1":{"readQueueNums":"x"}}}}',
    b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"TX1":{"readQueueNums":null}}}}',
    b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"TX1":{"readQueueNums":1e999}}}}',
    b'{"topicConfigSerializeWrapper":{"dataVersion":{"counter":"x"}}}',
    b'{"topicConfigSerializeWrapper":{"dataVersion":[1]}}',
    b'{"filterServerList":5}',
    b'{"topicConfigSerializeWrapper":' + b"[" * 3000 + b"]" * 3000 + b"}",
]


@pytest.mark.parametrize("body", NOT_REGISTER_BODIES)
@pytest_twisted.ensureDeferred
async def test_register_body_that_is_not_a_register_body(scene, body):
    answer = await scene.send_expect_answer(register_request(body, name="broker-x", addr="127.0.0.1:20911"))
    assert answer.code == ResponseCode.SYSTEM_ERROR and answer.remark
    await scene.assert_unchanged()


@pytest.mark.parametrize("code,ext,body", [
    (RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "T1"}, b"not json"),
    (RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "T1"}, b"[]"),
    (RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "T1"}, b'{"queueDatas":5}'),
    (RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "T1"}, b'{"queueDatas":[{}]}'),
    (RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "T1"}, b'{"queueDatas":[{"brokerName":"broker-a","perm":"x"}]}'),
    (RequestCode.QUERY_DATA_VERSION, {"clusterName": "c1", "brokerAddr": BROKER_ADDR, "brokerName": BROKER,
                                      "brokerId": "0"}, b"not json"),
    (RequestCode.QUERY_DATA_VERSION, {"clusterName": "c1", "brokerAddr": BROKER_ADDR, "brokerName": BROKER,
                                      "brokerId": "0"}, b'{"counter":"x"}'),
])
@pytest_twisted.ensureDeferred
async def test_other_bodies_that_are_not_json(scene, code, ext, body):
    answer = await scene.send_expect_answer(request(code, ext, body))
    assert answer.code == ResponseCode.SYSTEM_ERROR and answer.remark
    await scene.assert_unchanged()


@pytest_twisted.ensureDeferred
async def test_config_update_cannot_smuggle_blocked_keys_into_the_config_file(scene, tmp_path):
    body = b"productEnvName=x\\nlistenPort\\=1\\nkvConfigPath\\=/tmp/evil\n"
    await scene.send_expect_answer(request(RequestCode.UPDATE_NAMESRV_CONFIG, body=body))  # 0 or 16 are fine
    path = tmp_path / "namesrv.properties"
    stored = properties.load(path.read_text(encoding="utf-8")) if path.exists() else {}
    assert stored.get("listenPort", "0") == "0"
    assert stored.get("kvConfigPath", str(tmp_path / "kvConfig.json")) == str(tmp_path / "kvConfig.json")
    scene.assert_no_unhandled()


def _chunk(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


_DATA_VERSION = _chunk(b'{"counter":1,"timestamp":1}')
_FILTERS = _chunk(b"[]")


def _compressed_bodies() -> dict[str, bytes]:
    valid = register_body(("TX1", "TX2"), compressed=True)
    return {
        "not zlib": b"this is not a zlib stream",
        "zlib of nothing": zlib.compress(b""),
        "zlib of garbage": zlib.compress(b"garbage that is not the layout"),
        "truncated zlib": valid[:len(valid) // 2],
        "corrupted zlib": valid[:10] + bytes(b ^ 0x55 for b in valid[10:20]) + valid[20:],
        "dataVersion not JSON": zlib.compress(_chunk(b"{nope") + struct.pack(">i", 0) + _FILTERS),
        "negative chunk length": zlib.compress(struct.pack(">i", -5) + b"xxxx"),
        "chunk longer than the data": zlib.compress(struct.pack(">i", 1000) + b"{}"),
        "2^31-1 topics announced": zlib.compress(_DATA_VERSION + struct.pack(">i", 2 ** 31 - 1)),
        "topic line not UTF-8": zlib.compress(_DATA_VERSION + struct.pack(">i", 1) + _chunk(b"T\xff 1 1 6 SINGLE_TAG")
                                              + _FILTERS),
        "topic line of 3 tokens": zlib.compress(_DATA_VERSION + struct.pack(">i", 1) + _chunk(b"TX1 1 1") + _FILTERS),
        "topic queue numbers not numbers": zlib.compress(_DATA_VERSION + struct.pack(">i", 1)
                                                         + _chunk(b"TX1 x y 6 SINGLE_TAG") + _FILTERS),
        "filter servers not JSON": zlib.compress(_DATA_VERSION + struct.pack(">i", 0) + _chunk(b"[nope")),
        "mapping section cut": zlib.compress(_DATA_VERSION + struct.pack(">i", 0) + _FILTERS + struct.pack(">i", 3)),
    }


COMPRESSED = _compressed_bodies()


@pytest.mark.parametrize("case", list(COMPRESSED))
@pytest_twisted.ensureDeferred
async def test_compressed_body_that_does_not_inflate_to_a_register_body(scene, case):
    command = register_request(COMPRESSED[case], name="broker-x", addr="127.0.0.1:20911", compressed=True)
    answer = await scene.send_expect_answer(command)
    assert answer.code == ResponseCode.SYSTEM_ERROR and answer.remark
    await scene.assert_unchanged()


# -- missing required fields ----------------------------------------------------------------------

def _without(ext: dict[str, str], *names: str) -> dict[str, str]:
    return {k: v for k, v in ext.items() if k not in names}


_X_BODY = register_body(("T1", "TX1"))
_QUEUE_ON_BROKER_A = b'{"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":1,"writeQueueNums":1}]}'
_X_EXT = register_ext(_X_BODY, name="broker-x", addr="127.0.0.1:20911")


@pytest.mark.parametrize("code,ext,body,expected", [
    (RequestCode.REGISTER_BROKER, _without(_X_EXT, "brokerId"), _X_BODY, ResponseCode.SYSTEM_ERROR),
    (RequestCode.REGISTER_BROKER, None, _X_BODY, ResponseCode.SYSTEM_ERROR),
    (RequestCode.REGISTER_BROKER, {}, _X_BODY, ResponseCode.SYSTEM_ERROR),
    # Java 5.3.3 stores nothing for these (its ConcurrentHashMaps refuse the null key); a None key here
    # once broke cluster info and routes for every client
    (RequestCode.REGISTER_BROKER, _without(_X_EXT, "clusterName"), _X_BODY, ResponseCode.SYSTEM_ERROR),
    (RequestCode.REGISTER_BROKER, _without(_X_EXT, "brokerName"), _X_BODY, ResponseCode.SYSTEM_ERROR),
    (RequestCode.REGISTER_BROKER, _without(_X_EXT, "brokerAddr"), _X_BODY, ResponseCode.SYSTEM_ERROR),
    (RequestCode.PUT_KV_CONFIG, {"key": "k", "value": "evil"}, None, ResponseCode.SYSTEM_ERROR),
    (RequestCode.PUT_KV_CONFIG, {"namespace": NAMESPACE, "value": "evil"}, None, ResponseCode.SYSTEM_ERROR),
    (RequestCode.PUT_KV_CONFIG, None, None, ResponseCode.SYSTEM_ERROR),
    (RequestCode.GET_ROUTEINFO_BY_TOPIC, {}, None, ResponseCode.TOPIC_NOT_EXIST),  # as Java 4.9.8 answered it
    (RequestCode.GET_ROUTEINFO_BY_TOPIC, None, None, ResponseCode.TOPIC_NOT_EXIST),
    (RequestCode.DELETE_KV_CONFIG, {"namespace": NAMESPACE}, None, ResponseCode.SUCCESS),
    (RequestCode.DELETE_KV_CONFIG, {"key": "k"}, None, ResponseCode.SUCCESS),
    (RequestCode.UNREGISTER_BROKER, {}, None, None),
    (RequestCode.UNREGISTER_BROKER, {"brokerName": BROKER}, None, None),
    (RequestCode.WIPE_WRITE_PERM_OF_BROKER, {}, None, ResponseCode.SUCCESS),
    (RequestCode.ADD_WRITE_PERM_OF_BROKER, {}, None, ResponseCode.SUCCESS),
    (RequestCode.DELETE_TOPIC_IN_NAMESRV, {}, None, ResponseCode.SUCCESS),
    (RequestCode.DELETE_TOPIC_IN_NAMESRV, {"clusterName": "c1"}, None, ResponseCode.SUCCESS),
    (RequestCode.REGISTER_TOPIC_IN_NAMESRV, {}, b'{"queueDatas":[]}', ResponseCode.SUCCESS),
    # Java 5.3.3 stores nothing (containsKey(null) throws); a topic None here once broke 206/224 for everyone
    (RequestCode.REGISTER_TOPIC_IN_NAMESRV, {}, _QUEUE_ON_BROKER_A, None),
    (RequestCode.QUERY_DATA_VERSION, {}, b'{"counter":1,"timestamp":1}', None),
    # Java 5.3.3's live table key (BrokerAddrInfo) cannot hash a null: SYSTEM_ERROR, seen on the reference rig
    (RequestCode.BROKER_HEARTBEAT, {}, None, ResponseCode.SYSTEM_ERROR),
    (RequestCode.UPDATE_NAMESRV_CONFIG, None, None, ResponseCode.SUCCESS),
])
@pytest_twisted.ensureDeferred
async def test_missing_required_fields(scene, code, ext, body, expected):
    answer = await scene.send_expect_answer(request(code, ext, body))
    if expected is not None:
        assert answer.code == expected, answer.remark
    await scene.assert_unchanged()


# -- flags ---------------------------------------------------------------------------------------

ALL_CODES = sorted(set(CODES) | {0, 10, 34, 9999, -1, 2 ** 31 - 1})


@pytest.mark.parametrize("profile", ["5.3.3", "4.9.8"])
@pytest_twisted.ensureDeferred
async def test_oneway_flag_on_every_code_gets_no_answer(tmp_path, profile):
    scene = await Scene.start(tmp_path, compatVersion=profile)
    try:
        client = await scene.connect()
        for code in ALL_CODES:
            for serialize_type in (SerializeType.JSON, SerializeType.ROCKETMQ):
                if serialize_type == SerializeType.ROCKETMQ and not -(2 ** 15) <= code < 2 ** 15:
                    continue  # the binary header's code is an int16
                client.send(request(code, {}, oneway=True, serialize_type=serialize_type).encode())
        client.send(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}, oneway=True).encode())
        sentinel = request(RequestCode.GET_KV_CONFIG, {"namespace": NAMESPACE, "key": "k"})
        answer = await client.call(sentinel)
        assert answer.code == ResponseCode.SUCCESS
        assert client.received == {}, f"answers to oneway requests: {sorted(client.received)}"
        await scene.assert_unchanged()
    finally:
        await scene.stop()


def _state_changing_requests() -> list[RemotingCommand]:
    body = register_body(("T1", "TX1"))
    return [
        request(RequestCode.PUT_KV_CONFIG, {"namespace": NAMESPACE, "key": "k", "value": "evil"}),
        request(RequestCode.DELETE_KV_CONFIG, {"namespace": NAMESPACE, "key": "k"}),
        request(RequestCode.REGISTER_BROKER, register_ext(body, name="broker-x", addr="127.0.0.1:20911"), body),
        request(RequestCode.UNREGISTER_BROKER, {"clusterName": "c1", "brokerAddr": BROKER_ADDR, "brokerName": BROKER,
                                                "brokerId": "0"}),
        request(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": BROKER}),
        request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T1"}),
        request(RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "T3"},
                b'{"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":1,"writeQueueNums":1}]}'),
        request(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true\nenableAllTopicList=false\n"),
    ]


@pytest.mark.parametrize("flag", [RESPONSE_FLAG, RESPONSE_FLAG | ONEWAY_FLAG])
@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
@pytest_twisted.ensureDeferred
async def test_responses_sent_to_the_server_are_ignored(scene, flag, serialize_type):
    """Java's processResponseCommand finds no request with that opaque and drops it."""
    client = await scene.connect()
    for command in _state_changing_requests():
        command.header.flag = flag
        command.serialize_type = serialize_type
        client.send(command.encode())
    answer = await client.call(request(RequestCode.GET_KV_CONFIG, {"namespace": NAMESPACE, "key": "k"}))
    assert (answer.code, answer.ext.get("value")) == (ResponseCode.SUCCESS, "v")
    assert client.received == {}
    await scene.assert_unchanged()


# -- interleaved partial frames across many connections -----------------------------------------

@pytest_twisted.ensureDeferred
async def test_interleaved_partial_frames_across_many_connections(scene):
    """50 connections write their requests in random pieces, interleaved: good ones get exactly
    their answers; bad ones (a frame that is not JSON after good requests) get the answers to
    the good requests and are closed; stalled ones (half a frame, never finished) get nothing,
    stay open and hold nobody up."""
    rng = random.Random(5)
    expected_route = {t: scene.expected.answers[f"route {t}"] for t in ("T1", "T2")}
    plans = []
    for i in range(50):
        client = await scene.raw()
        kind = ("good", "good", "good", "bad", "stalled")[i % 5]
        asks = [request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": rng.choice(("T1", "T2"))},
                        serialize_type=rng.choice((SerializeType.JSON, SerializeType.ROCKETMQ)))
                for _ in range(rng.randint(1, 3))]
        data = b"".join(a.encode() for a in asks)
        if kind == "bad":
            data += json_frame(b"{not json") + asks[0].encode()
        elif kind == "stalled":
            first = asks[0].encode()
            data, asks = first[:len(first) // 2], []
        cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(3, 40))))
        pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        plans.append((client, asks, kind, pieces))
    pending = [(client, list(pieces)) for client, _, _, pieces in plans]
    while pending:
        rng.shuffle(pending)
        for client, pieces in pending[:8]:
            client.transport.write(pieces.pop(0))
        pending = [p for p in pending if p[1]]
        await sleep(0)
    for client, asks, kind, _ in plans:
        if kind == "stalled":
            continue
        deadline = reactor.seconds() + 5
        while not (client.is_closed if kind == "bad" else len(client.answers()) >= len(asks)):
            assert reactor.seconds() < deadline, "no answer or no close in time"
            await sleep(0.005)
        answers = client.answers()
        assert [a.opaque for a in answers] == [a.opaque for a in asks]
        for ask, answer in zip(asks, answers, strict=True):
            assert (answer.code, answer.remark, answer.body) == expected_route[ask.ext["topic"]]
        assert client.is_closed == (kind == "bad")
    for client, _, kind, _ in plans:
        if kind == "stalled":
            assert client.data == b"" and not client.is_closed
    await scene.assert_unchanged()
