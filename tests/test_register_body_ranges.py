"""A registration's numbers in Java's ranges: a TopicConfig's readQueueNums, writeQueueNums, perm and
topicSysFlag are Java ints, a DataVersion's timestamp and counter longs; fastjson refuses a value
past them, and so does the NameServer here, in every form of body.  Before, a 4,000-digit perm was
kept and served in the topic's route (as a string in standard JSON): every Java client failed to
parse that route (TopicRouteData's QueueData.perm is an int), so one unsigned registration naming a
real topic took it away from every producer and consumer."""

from __future__ import annotations

import json

import pytest

from tests.test_processor import Namesrv
from twisted_namesrv.bodies.register import (
    RegisterBodyError,
    RegisterBrokerBody,
    TopicConfig,
    decode_register_body,
    encode_register_body,
)
from twisted_namesrv.bodies.route import DataVersion
from twisted_namesrv.remoting import RequestCode, ResponseCode
from twisted_namesrv.remoting.codes import V4_9_8, V5_3_3

INT_FIELDS = ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag")
OUT_OF_INT = (2**31, -(2**31) - 1, 10**4000)


def body_with(field: str, value: int, compressed: bool, v5: bool) -> bytes:
    config = TopicConfig("T")
    setattr(config, field, value)
    body = RegisterBrokerBody(DataVersion(1, 1), {"T": config, "U": TopicConfig("U")})
    return encode_register_body(body, compressed, v5)


@pytest.mark.parametrize("value", OUT_OF_INT, ids=["2^31", "-2^31-1", "4000 digits"])
@pytest.mark.parametrize("field", INT_FIELDS)
@pytest.mark.parametrize(("compressed", "v5"), [(False, True), (False, False), (True, False), (True, True)])
def test_a_topic_s_int_past_java_s_range_is_refused_in_every_form(field, value, compressed, v5):
    body = body_with(field, value, compressed, v5)
    if field == "topicSysFlag" and compressed:
        return  # the compressed forms carry no topicSysFlag
    with pytest.raises(RegisterBodyError):
        decode_register_body(body, compressed, V5_3_3 if v5 else V4_9_8)


@pytest.mark.parametrize("value", [2**31 - 1, -(2**31), 0, -1])
def test_java_s_own_extremes_are_taken(value):
    body = body_with("perm", value, False, True)
    assert decode_register_body(body, False, V5_3_3).topicConfigTable["T"].perm == value


@pytest.mark.parametrize("text", ["9" * 4000, "-9223372036854775809", "9223372036854775808", "1e999"])
def test_a_data_version_past_a_long_is_refused(text):
    version = b'{"counter":' + text.encode() + b',"timestamp":1}'
    wrapper = b'{"topicConfigTable":{},"dataVersion":' + version + b"}"
    body = b'{"topicConfigSerializeWrapper":' + wrapper + b',"filterServerList":[]}'
    with pytest.raises(RegisterBodyError):
        decode_register_body(body, False, V5_3_3)


def test_the_route_of_a_real_topic_stays_readable(tmp_path):
    ns = Namesrv(tmp_path)
    ext = {"brokerName": "real", "brokerAddr": "10.0.0.1:10911", "clusterName": "c", "brokerId": "0",
           "haServerAddr": "10.0.0.1:10912", "compressed": "false"}
    assert ns.call(RequestCode.REGISTER_BROKER, ext, body_with("perm", 6, False, True)).code == 0
    evil = dict(ext, brokerName="evil", brokerAddr="10.6.6.6:10911")
    answer = ns.call(RequestCode.REGISTER_BROKER, evil, body_with("perm", 10**4000, False, True))
    assert answer.code == ResponseCode.SYSTEM_ERROR
    route = ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
    assert route.code == 0 and b"evil" not in route.body and b"9999" not in route.body


@pytest.mark.parametrize("field", INT_FIELDS)
def test_register_topic_in_namesrv_refuses_a_queue_number_past_an_int(tmp_path, field):
    """REGISTER_TOPIC_IN_NAMESRV (217, any peer's without ACL) adds queues to a route as a broker's
    registration does: its QueueData's ints are Java's too."""
    ns = Namesrv(tmp_path)
    queue = {"brokerName": "evil", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicSysFlag": 0}
    body = json.dumps({"queueDatas": [dict(queue, **{field: 10**4000})]}).encode()
    answer = ns.call(RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "T"}, body)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}).code == ResponseCode.TOPIC_NOT_EXIST


@pytest.mark.parametrize(("name", "value"), [("totalQueues", 2**31), ("epoch", 2**63), ("currIdMap", {"0": 2**31}),
                                             ("currIdMap", {str(2**31): 0}), ("currIdMap", {"\U0001d7ce": 0})])
def test_a_static_topic_s_mapping_past_java_s_types_is_refused(name, value):
    """TopicQueueMappingInfo: totalQueues an int, epoch a long, currIdMap ints to ints; the mappings
    are served in routes (topicQueueMappingByBroker) and kept for good.  A key that is a digit beyond
    U+FFFF is no Integer to fastjson (two surrogates to Integer.parseInt): it was read as 0 here."""
    info = {"topic": "T", "scope": "s", "totalQueues": 1, "bname": "b", "epoch": 1, "dirty": False,
            "currIdMap": {"0": 0}}
    info[name] = value
    body = json.dumps({"topicConfigSerializeWrapper": {
        "topicConfigTable": {"T": {"topicName": "T"}, "U": {"topicName": "U"}},
        "dataVersion": {"counter": 1, "timestamp": 1}, "topicQueueMappingInfoMap": {"T": info}},
        "filterServerList": []}).encode()
    with pytest.raises(RegisterBodyError):
        decode_register_body(body, False, V5_3_3)


@pytest.mark.parametrize("version", [{"counter": "5", "timestamp": 1}, {"counter": 1.0}, {"timestamp": True},
                                     {"counter": 2**63}, {"counter": -(2**63) - 1}, {"counter": None}, [], "", {},
                                     None, {"timestamp": 2**63 - 1, "counter": -(2**63), "stateVersion": 3, "x": 1}])
def test_a_bodys_versions_read_as_from_json_reads_them_typed_or_not(version) -> None:
    """The typed decoding reads a body's dataVersion and mappingDataVersion straight into DataVersion
    (a flat object of ints in a long's range); any other is read by ``DataVersion.from_json``, as every
    one was before: the same versions, or the same refusal, and the topics decoded all the same."""
    wrapper = {"dataVersion": version, "mappingDataVersion": version,
               "topicConfigTable": {"A": {"topicName": "A", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6}}}
    body = json.dumps({"filterServerList": [], "topicConfigSerializeWrapper": wrapper}).encode()
    try:
        expected = DataVersion.from_json(version)  # type: ignore[arg-type]
    except (AttributeError, TypeError, ValueError, OverflowError):
        with pytest.raises(RegisterBodyError):
            decode_register_body(body, False, V4_9_8)
        return
    decoded = decode_register_body(body, False, V4_9_8)
    assert (decoded.dataVersion, decoded.mappingDataVersion) == (expected, expected)
    assert type(decoded.dataVersion) is DataVersion and list(decoded.topicConfigTable) == ["A"]


FLAT_TEXTS = [b'{"counter":1,"timestamp":2}', b'{"timestamp":2,"counter":1,"stateVersion":3}', b"{}",
              b'{"counter":1,"counter":2}', b'{"counter":true}', b'{"counter":1.0}', b'{"x":1}', b'{"counter":"1"}',
              b'{"counter":9223372036854775808}', b'{1:2}', b'[]', b'{"counter":-9223372036854775809}',
              b'{"counter":%d}' % 10**30, b'{"counter":NaN}', b'{"counter":',
              b'{"counter":9223372036854775807,"timestamp":-9223372036854775808}']


@pytest.mark.parametrize("text", FLAT_TEXTS)
def test_a_flat_data_version_read_typed_is_read_as_before(text: bytes) -> None:
    """A body's split reads its dataVersion typed (``_flat_version``, ``_is_flat``): the same
    flatness and the same DataVersion (or the same refusal) as the dict read and checked before."""
    from twisted_namesrv.bodies import register

    fields = register._flat_data_version(text)
    assert register._is_flat(text) == (fields is not None)
    if fields is None:
        assert register._flat_version(text) is None
        return
    try:
        expected = DataVersion.from_json(fields)
    except ValueError:
        with pytest.raises(ValueError):
            register._flat_version(text)
        return
    assert register._flat_version(text) == expected
