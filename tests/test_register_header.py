"""REGISTER_BROKER's header as Java reads it (bodies/register_header.py), in a table: the CRC field,
long and bool parsing, the compressed flag, the zone name, fields missing or of the wrong type.

Each case is also sent to the server (the processor's REGISTER_BROKER) and given to the capture
decoder (spark_analysis's registration row and replayed routes) with the server's answer: the two
must take the same decisions (CRC checked or not, refused or not, which brokerId, compressed or
not), so a reader that stops going through RegisterBrokerHeader, or reads a field its own way,
fails here."""

from __future__ import annotations

from typing import Any

import pytest

from spark_analysis.analysis.replay import replay_server
from spark_analysis.capture.conversation import CapturedCommand
from spark_analysis.decode.rows import REQUEST, RESPONSE, _BodyCache, registration_event, registration_row
from spark_analysis.decode.schema import EVENT_ROWS, REGISTRATION_ROWS
from spark_analysis.model.sessions import Sessions
from tests.test_processor import MASTER, Namesrv
from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body
from twisted_namesrv.bodies.register_header import ZONE_NAME, RegisterBrokerHeader
from twisted_namesrv.bodies.route import DataVersion
from twisted_namesrv.remoting import RemotingCommand, RequestCode, ResponseCode
from twisted_namesrv.remoting.crc import crc32_masked

RIGHT = "<the body's masked CRC>"
WRONG = "<a CRC the body does not have>"
BASE = {"clusterName": "c1", "brokerAddr": MASTER, "brokerName": "broker-a", "brokerId": "0",
        "haServerAddr": "10.0.0.1:10912", "compressed": "false", "bodyCrc32": RIGHT}

#: (case, header fields changed (None: removed), what RegisterBrokerHeader reads, whether the server refuses it)
CASES: list[tuple[str, dict[str, str | None], dict[str, Any], str | None]] = [
    ("as a broker sends it", {}, {"brokerId": 0, "compressed": False, "zoneName": None,
                                  "enableActingMaster": None}, None),
    ("CRC wrong: checked, refused", {"bodyCrc32": WRONG}, {}, "crc32 not match"),
    ("CRC absent: no check", {"bodyCrc32": None}, {"bodyCrc32": 0, "bodyCrc32Declared": None}, None),
    ("CRC 0: no check", {"bodyCrc32": "0"}, {"bodyCrc32": 0, "bodyCrc32Declared": 0}, None),
    ("CRC unmasked, past a Java int: parseInt fails, no check", {"bodyCrc32": "3000000000"},
     {"bodyCrc32": 0, "bodyCrc32Declared": 3000000000}, None),
    ("CRC not a number: no check", {"bodyCrc32": "abc"}, {"bodyCrc32": 0, "bodyCrc32Declared": None}, None),
    ("CRC negative and wrong: checked, refused", {"bodyCrc32": "-5"}, {"bodyCrc32": -5}, "crc32 not match"),
    ("CRC with a plus sign: Java's parseInt takes it", {"bodyCrc32": "+" + RIGHT}, {}, None),
    ("brokerId of a slave", {"brokerId": "1"}, {"brokerId": 1, "brokerIdText": "1"}, None),
    ("brokerId with a space: parseLong fails", {"brokerId": " 1"}, {"brokerId": None, "brokerIdText": " 1"},
     "brokerId"),
    ("brokerId with an underscore (Python's int takes it, Java's does not)", {"brokerId": "1_0"},
     {"brokerId": None}, "brokerId"),
    ("brokerId past a long", {"brokerId": str(1 << 63)}, {"brokerId": None}, "brokerId"),
    ("brokerId missing", {"brokerId": None}, {"brokerId": None, "brokerIdText": None}, "brokerId"),
    ("compressed, any case", {"compressed": "TRUE"}, {"compressed": True}, None),
    ("compressed 'yes' is false to parseBoolean", {"compressed": "yes"}, {"compressed": False}, None),
    ("compressed missing is false", {"compressed": None}, {"compressed": False}, None),
    ("zone name", {ZONE_NAME: "zone-1"}, {"zoneName": "zone-1"}, None),
    ("acting master, any case", {"enableActingMaster": "True"},
     {"enableActingMaster": True, "enableActingMasterText": "True"}, None),
    ("acting master '1' is false", {"enableActingMaster": "1"}, {"enableActingMaster": False}, None),
    ("brokerName missing", {"brokerName": None}, {"names": None, "missing": "brokerName"},
     "header field brokerName is missing"),
    ("clusterName missing", {"clusterName": None}, {"names": None, "missing": "clusterName"},
     "header field clusterName is missing"),
]
IDS = [case[0] for case in CASES]


def body_of(compressed: bool) -> bytes:
    # two topics: a first registration of one is refused (routes.py: a broker's start-up table has several)
    table = RegisterBrokerBody(DataVersion(1, 1), {t: TopicConfig(t, 8, 8, 6) for t in ("T1", "T2")}, [])
    return encode_register_body(table, compressed, True)


def header_fields(changes: dict[str, str | None], body: bytes) -> dict[str, str | None]:
    """BASE with ``changes``; RIGHT and WRONG in a CRC field become the body's CRC, or another."""
    ext = {**BASE, **changes}
    crc = ext.get("bodyCrc32")
    if crc is not None and RIGHT in crc:
        ext["bodyCrc32"] = crc.replace(RIGHT, str(crc32_masked(body)))
    elif crc == WRONG:
        ext["bodyCrc32"] = str(crc32_masked(body) ^ 1)
    return {key: value for key, value in ext.items() if value is not None}


def compressed_as_read(changes: dict[str, str | None]) -> bool:
    value = {**BASE, **changes}.get("compressed")
    return value is not None and value.lower() == "true"


@pytest.mark.parametrize(("case", "changes", "expected", "refused"), CASES, ids=IDS)
def test_header_rules(case: str, changes: dict[str, str | None], expected: dict[str, Any], refused: str | None
                      ) -> None:
    body = body_of(compressed_as_read(changes))
    header = RegisterBrokerHeader.from_ext(header_fields(changes, body))
    for name, value in expected.items():
        assert getattr(header, name) == value, name
    if RIGHT in str(changes.get("bodyCrc32", RIGHT)):
        assert header.bodyCrc32 == crc32_masked(body)


@pytest.mark.parametrize(("case", "changes", "expected", "refused"), CASES, ids=IDS)
def test_the_server_and_the_capture_decoder_read_it_alike(
        tmp_path, case: str, changes: dict[str, str | None], expected: dict[str, Any], refused: str | None) -> None:
    compressed = compressed_as_read(changes)
    body = body_of(compressed)
    ext = header_fields(changes, body)
    ns = Namesrv(tmp_path, "5.3.3")
    answer = ns.call(RequestCode.REGISTER_BROKER, ext, body)
    request = RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, opaque=7, version=ns.client_version)
    bodies = _BodyCache()
    captured = CapturedCommand.decoded(1.0, REQUEST, request, b"")
    registration = registration_row("conn", captured, CapturedCommand.decoded(1.0, RESPONSE, answer, b""), bodies,
                                    "127.0.0.1:9876")
    row = dict(zip(REGISTRATION_ROWS.names, registration, strict=True))
    event = dict(zip(EVENT_ROWS.names, registration_event(captured, registration, bodies.last, bodies.last_body,
                                                          "10.0.0.1:50000", "127.0.0.1:9876"), strict=True))
    replayed = replay_server("127.0.0.1:9876", [event], Sessions((0.0,)), None, lambda t: 10.0).stays

    if refused is None:
        assert answer.code == ResponseCode.SUCCESS, answer.remark
    else:
        assert answer.code == ResponseCode.SYSTEM_ERROR and refused in (answer.remark or "")
    # the CRC: the decoder says it failed exactly where the server refused for it, and skips it where the server
    # does (a CRC the server skips and a wrong one are told apart by the unmasked case, which the server accepts)
    assert (row["crc_ok"] is False) == (refused == "crc32 not match")
    assert (row["crc_ok"] is None) == (RegisterBrokerHeader.from_ext(ext).bodyCrc32 == 0)
    # the body: decoded as the server decoded it (compressed or not)
    assert row["compressed"] is compressed and row["topic_count"] == 2
    # brokerId, names and zone: what the server stored is what the decoder's row and replayed routes say
    stored = ns.state.routes.brokerAddrTable.get("broker-a")
    if stored is None:
        assert refused is not None
        assert [stay.end for stay in replayed] == ["refused"]  # the replay applies no registration the server refused
    else:
        assert stored.brokerAddrs == {row["broker_id"]: row["broker_addr"]}
        assert (stored.cluster, stored.brokerName) == (row["cluster"], row["broker_name"])
        assert stored.zoneName == ext.get(ZONE_NAME)
        held = sum(1 for queues in ns.state.routes.topicQueueTable.values() if "broker-a" in queues)
        (stay,) = replayed
        # what the replay holds for the group is what the server holds; a slave's table is not applied: none told
        assert stay.topics == ([(1.0, held)] if row["broker_id"] == 0 else [])
        assert held == (2 if row["broker_id"] == 0 else 0)


def test_a_header_is_frozen_compared_by_its_fields_pickled_and_nothing_to_the_collector():
    """Every registration reads one (a msgspec Struct, made in C); the capture decoder shares one
    among requests alike and Spark pickles it; it holds only text, numbers and flags, so the
    collector need not track the thousands a storm makes."""
    import gc
    import pickle

    ext = {"clusterName": "c", "brokerAddr": "h:1", "brokerName": "b", "brokerId": "0", "bodyCrc32": "7"}
    header = RegisterBrokerHeader.from_ext(ext)
    again = RegisterBrokerHeader.from_ext(dict(ext))
    assert header == again and hash(header) == hash(again)
    assert pickle.loads(pickle.dumps(header)) == header and header.names == ("c", "h:1", "b")
    with pytest.raises(AttributeError):
        header.brokerId = 1  # type: ignore[misc]
    assert not gc.is_tracked(header)
