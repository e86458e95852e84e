"""RocketMQ's numeric vocabulary: request, response and language codes, and MQVersion ordinals.

Names are Java's own, so a reader of RequestCode.java or a pcap report sees the same words.
"""

from __future__ import annotations

from enum import IntEnum


class RequestCode(IntEnum):
    """Request codes a NameServer answers (4.9.8 and 5.3.3), the one it sends, and the
    broker-side codes that show up in captures of client traffic."""

    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_MAX_OFFSET = 30
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    GET_CONSUMER_LIST_BY_GROUP = 38
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    WIPE_WRITE_PERM_OF_BROKER = 205
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_TOPIC_IN_NAMESRV = 216
    REGISTER_TOPIC_IN_NAMESRV = 217
    GET_KVLIST_BY_NAMESPACE = 219
    GET_TOPICS_BY_CLUSTER = 224
    GET_SYSTEM_TOPIC_LIST_FROM_NS = 304
    SEND_MESSAGE_V2 = 310
    GET_UNIT_TOPIC_LIST = 311
    GET_HAS_UNIT_SUB_TOPIC_LIST = 312
    GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST = 313
    UPDATE_NAMESRV_CONFIG = 318
    GET_NAMESRV_CONFIG = 319
    QUERY_DATA_VERSION = 322
    ADD_WRITE_PERM_OF_BROKER = 327
    GET_BROKER_MEMBER_GROUP = 901
    BROKER_HEARTBEAT = 904
    NOTIFY_MIN_BROKER_ID_CHANGE = 905
    #: ours, not Java's: forget a broker group (or a cluster, or one member) the NameServer remembers
    #: (state/topology.py).  Java's request codes are 10-513, 901-908, 1001-1018, 2001-2004, 3001-3010
    #: and 200050-200151; ours start at 90001, far from each range and from their growth.
    RETIRE_BROKER_GROUP = 90001


class ResponseCode(IntEnum):
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    QUERY_NOT_FOUND = 22
    INVALID_PARAMETER = 29
    GO_AWAY = 1500


class LanguageCode(IntEnum):
    """Written by name in JSON headers and as one byte in ROCKETMQ headers."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13


class SerializeType(IntEnum):
    """The top byte of the frame's second int32."""

    JSON = 0
    ROCKETMQ = 1


#: ``SerializeType.JSON`` read once, for the paths that compare every frame's type with it: Python 3.11
#: reads an enum member through EnumType's ``__getattr__`` hook, about 1,000 instructions a read
#: (dispatch's and the answer cache's, once a first registration and once a heartbeat answered)
JSON_SERIALIZE = SerializeType.JSON


def code_name(code: int, response: bool = False) -> str:
    """Java constant name of a request or response code, or the number as text."""
    enum = ResponseCode if response else RequestCode
    try:
        return enum(code).name
    except ValueError:
        return str(code)


def _version_names() -> list[str]:
    """MQVersion.Version in declaration order: its ordinal is the `version` on the wire."""
    names = ["V3_0_0_SNAPSHOT", "V3_0_0_ALPHA1"]
    names += [f"V3_0_0_BETA{i}" for i in range(1, 6)]
    for i in range(6, 10):
        names += [f"V3_0_0_BETA{i}_SNAPSHOT", f"V3_0_0_BETA{i}"]
    names.append("V3_0_0_FINAL")
    releases = [(3, 0, c) for c in range(1, 16)]
    releases += [(3, b, c) for b in (1, 2) for c in range(10)]
    releases += [(3, b, c) for b in range(3, 10) for c in range(1, 10)]
    releases += [(a, b, c) for a in (4, 5) for b in range(10) for c in range(10)]
    for a, b, c in releases:
        names += [f"V{a}_{b}_{c}_SNAPSHOT", f"V{a}_{b}_{c}"]
    names.append("HIGHER_VERSION")
    return names


VERSION_NAMES: tuple[str, ...] = tuple(_version_names())
_VERSION_ORDINALS = {name: ordinal for ordinal, name in enumerate(VERSION_NAMES)}


def version_name(ordinal: int) -> str:
    """MQVersion.getVersionDesc: ordinals past the end read as HIGHER_VERSION."""
    if ordinal < 0:
        return str(ordinal)
    return VERSION_NAMES[min(ordinal, len(VERSION_NAMES) - 1)]


def version_ordinal(name: str) -> int:
    return _VERSION_ORDINALS[name]


V3_0_11 = version_ordinal("V3_0_11")
V4_9_4 = version_ordinal("V4_9_4")
V4_9_8 = version_ordinal("V4_9_8")
V5_0_0 = version_ordinal("V5_0_0")
V5_3_3 = version_ordinal("V5_3_3")
