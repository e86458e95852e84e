"""RegisterBrokerHeader against Java's reading of RegisterBrokerRequestHeader (4.9.8 and 5.3.3:
RemotingCommand.decodeCommandCustomHeader parses Integer/Long/boolean fields with
Integer.parseInt / Long.parseLong / Boolean.parseBoolean, logs and skips a field that throws, so
the field keeps its default: bodyCrc32 0, i.e. no check; brokerId null). The expected values
below are what Java 17's parse methods gave for the same strings; the server and the capture
decoder both read the header through this one class, so a case here failing means both diverge."""

from __future__ import annotations

import pytest

from twisted_namesrv.bodies.register_header import ZONE_NAME, RegisterBrokerHeader

NAMES = {"clusterName": "DefaultCluster", "brokerAddr": "127.0.0.1:10911", "brokerName": "broker-a"}


def header(**fields: str | None) -> RegisterBrokerHeader:
    ext: dict[str, str | None] = dict(NAMES)
    ext.update(fields)
    return RegisterBrokerHeader.from_ext({k: v for k, v in ext.items() if v is not None})


@pytest.mark.parametrize("sent, checked, declared", [
    (None, 0, None),                           # absent: the default 0, no check
    ("0", 0, 0),                               # 0: no check
    ("123456", 123456, 123456),                # a masked CRC32 (< 2**31): checked
    ("2147483647", 2147483647, 2147483647),    # Integer.MAX_VALUE: still an int
    ("2147483648", 0, 2147483648),             # an unmasked CRC: parseInt throws, no check
    ("4294967295", 0, 4294967295),
    ("-5", -5, -5),                            # parseInt takes a sign; no masked CRC equals it
    ("+7", 7, 7),
    ("abc", 0, None),                          # not a number: no check
    (" 12", 0, None),                          # parseInt takes no space
    ("1_2", 0, None),                          # nor Python's digit separator
    ("", 0, None),
    ("\u0661\u0662", 12, 12),                  # Arabic-Indic digits: Character.digit takes them
    ("\uff15", 5, 5),                          # a fullwidth 5
])
def test_body_crc32(sent: str | None, checked: int, declared: int | None) -> None:
    read = header(bodyCrc32=sent)
    assert (read.bodyCrc32, read.bodyCrc32Declared) == (checked, declared)


@pytest.mark.parametrize("sent, broker_id", [
    (None, None),                              # absent (Java: CFNotNull, the handler refuses it)
    ("0", 0), ("1", 1), ("007", 7), ("+3", 3), ("-1", -1),
    ("9223372036854775807", 9223372036854775807),      # Long.MAX_VALUE
    ("-9223372036854775808", -9223372036854775808),    # Long.MIN_VALUE
    ("9223372036854775808", None),             # out of a long's range: parseLong throws
    ("2147483648", 2147483648),                # a long, not an int
    ("1.0", None), ("0x10", None), (" 1", None), ("1 ", None), ("1_0", None), ("", None), ("one", None),
    ("\u0665", 5),                             # Character.digit takes other scripts' digits
])
def test_broker_id_is_a_java_long(sent: str | None, broker_id: int | None) -> None:
    read = header(brokerId=sent)
    assert read.brokerId == broker_id
    assert read.brokerIdText == sent  # what was sent stays, for the handler's own message


@pytest.mark.parametrize("sent, compressed", [
    (None, False), ("true", True), ("TRUE", True), ("tRuE", True), ("false", False),
    ("1", False), ("yes", False), (" true", False), ("true ", False), ("", False),
])
def test_compressed_is_boolean_parse_boolean(sent: str | None, compressed: bool) -> None:
    assert header(compressed=sent).compressed is compressed


@pytest.mark.parametrize("sent, acting", [(None, None), ("true", True), ("False", False), ("1", False)])
def test_enable_acting_master_is_a_nullable_boolean(sent: str | None, acting: bool | None) -> None:
    read = header(enableActingMaster=sent)
    assert (read.enableActingMaster, read.enableActingMasterText) == (acting, sent)


def test_zone_name_comes_from_the_ext_fields_key() -> None:
    assert header(**{ZONE_NAME: "zone-1"}).zoneName == "zone-1"
    assert header().zoneName is None
    assert header(zoneName="zone-1").zoneName is None  # Java reads MixAll.ZONE_NAME, "__ZONE_NAME"


def test_names_when_all_three_were_sent() -> None:
    read = header(haServerAddr="127.0.0.1:10912")
    assert read.names == ("DefaultCluster", "127.0.0.1:10911", "broker-a")
    assert read.missing is None
    assert read.haServerAddr == "127.0.0.1:10912"
    assert header(clusterName="").names == ("", "127.0.0.1:10911", "broker-a")  # CFNotNull checks null only


@pytest.mark.parametrize("absent", ["clusterName", "brokerAddr", "brokerName"])
def test_a_missing_name_is_named(absent: str) -> None:
    read = RegisterBrokerHeader.from_ext({k: v for k, v in NAMES.items() if k != absent})
    assert read.names is None
    assert read.missing == absent
    assert getattr(read, absent) is None


def test_missing_names_one_field_in_a_fixed_order() -> None:
    assert RegisterBrokerHeader.from_ext({}).missing == "clusterName"
    assert RegisterBrokerHeader.from_ext({"clusterName": "c"}).missing == "brokerAddr"
