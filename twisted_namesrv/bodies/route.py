"""Route structures (QueueData, BrokerData, TopicRouteData, ClusterInfo, TopicList, KVTable,
DataVersion) and their fastjson bean shapes.

``*_bean`` functions return dicts with keys in fastjson's SortField order, ready for
``fastjson.dumps``.  ``v5`` selects the 5.x shapes (extra BrokerData/DataVersion fields).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

import msgspec

from ..remoting import fastjson
from ..remoting.fastjson import ORDER_PIECE, bucket_order, java_hash_map, java_hash_order, java_spread, table_size
from ..remoting.values import parse_java_integer

PERM_READ = 1 << 2
PERM_WRITE = 1 << 1
FLAG_UNIT = 1 << 0
FLAG_UNIT_SUB = 1 << 1
MASTER_ID = 0


class QueueData(msgspec.Struct, gc=False, frozen=True):
    """One broker group's queues of a topic (topicQueueTable's values). A msgspec Struct with
    gc=False: it holds no cycles, so the collector never visits one, and a dict of them (a topic's
    entry) is not tracked either: a table of a million topics costs a full collection nothing.
    Frozen: one is shared by every topic a registration gives the same queues (a group's topics
    mostly have the same numbers), so a change of one topic's replaces it (``with_perm``)."""

    brokerName: str
    readQueueNums: int
    writeQueueNums: int
    perm: int
    topicSysFlag: int = 0

    def bean(self) -> dict[str, Any]:
        return {"brokerName": self.brokerName, "perm": self.perm, "readQueueNums": self.readQueueNums,
                "topicSysFlag": self.topicSysFlag, "writeQueueNums": self.writeQueueNums}

    def with_perm(self, perm: int) -> QueueData:
        return msgspec.structs.replace(self, perm=perm)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> QueueData:
        reads, writes, perm, flag = fastjson.java_numbers((obj.get("readQueueNums", 0), obj.get("writeQueueNums", 0),
                                                           obj.get("perm", 0), obj.get("topicSysFlag", 0)))
        return cls(str(obj["brokerName"]), reads, writes, perm, flag)


@dataclass(slots=True)
class BrokerData:
    cluster: str
    brokerName: str
    brokerAddrs: dict[int, str] = field(default_factory=dict)
    zoneName: str | None = None
    enableActingMaster: bool = False

    def bean(self, v5: bool) -> dict[str, Any]:
        bean: dict[str, Any] = {"brokerAddrs": java_hash_map(self.brokerAddrs), "brokerName": self.brokerName,
                                "cluster": self.cluster}
        if v5:
            bean["enableActingMaster"] = self.enableActingMaster
            bean["zoneName"] = self.zoneName
        return bean


def in_zone(broker: BrokerData, zone: str) -> bool:
    """ZoneRouteRPCHook's rule (5.x, a lookup with ``__ZONE_MODE=true``): a route filtered by
    ``zone`` keeps a group without a master, or one in that zone (either letter case); the queues
    and filter servers of the groups it keeps.  The one statement of it: the whole route's filter
    (processor.filter_by_zone) and the kept one patched a group at a time (zone_routes.py)."""
    return MASTER_ID not in broker.brokerAddrs or (broker.zoneName or "").lower() == zone.lower()


#: the ints java_numbers answers with themselves in a long field (DataVersion.from_json takes them so),
#: compared as two bounds: a range's ``in`` of an int that far from 0 is big-int arithmetic (about
#: 0.8k instructions a value, three values a DataVersion, two read a registration)
_LONG_MIN, _LONG_MAX = fastjson.JAVA_LONG
#: a DataVersion's field as a typed decoding reads it: an int within Java's long, as ``from_json`` takes it
JavaLong = Annotated[int, msgspec.Meta(ge=_LONG_MIN, le=_LONG_MAX)]


class DataVersion(msgspec.Struct, gc=False):
    """A broker's dataVersion (and 5.x's mappingDataVersion).  A msgspec Struct, made in C: a
    registration makes three (its split's, its body's, the absent mapping's), and each broker's
    live entry keeps one (gc=False: no cycles through it, the collector never visits one)."""

    #: (a typed decoding refuses a number past Java's long, a bool, a string or a float: the body's
    #: lenient decoding then reads it, through ``from_json``: bodies/register.py's _decode_typed)
    timestamp: JavaLong = 0
    counter: JavaLong = 0
    stateVersion: JavaLong = 0

    def bean(self, v5: bool) -> dict[str, Any]:
        if v5:
            return {"counter": self.counter, "stateVersion": self.stateVersion, "timestamp": self.timestamp}
        return {"counter": self.counter, "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, obj: dict[str, Any] | None) -> DataVersion:
        if not obj:  # (a 4.9.8 body's absent mappingDataVersion, every registration: no numbers to read)
            return cls()
        timestamp, counter, state = obj.get("timestamp", 0), obj.get("counter", 0), obj.get("stateVersion", 0)
        if (type(timestamp) is int and type(counter) is int and type(state) is int
                and _LONG_MIN <= timestamp <= _LONG_MAX and _LONG_MIN <= counter <= _LONG_MAX
                and _LONG_MIN <= state <= _LONG_MAX):
            # java_numbers' answer (fastjson.JAVA_LONG_INTS), without its call, map and min and max
            # (about 6k instructions, twice a registration: its split's and its body's)
            return cls(timestamp, counter, state)
        return cls(*fastjson.java_numbers((timestamp, counter, state), fastjson.JAVA_LONG))


def topic_route_bean(queue_datas: Iterable[QueueData], broker_datas: Iterable[BrokerData],
                     filter_server_table: dict[str, list[str | None]], order_topic_conf: str | None,
                     queue_mapping_by_broker: dict[str, Any] | None, v5: bool) -> dict[str, Any]:
    return {
        "brokerDatas": [b.bean(v5) for b in broker_datas],
        "filterServerTable": java_hash_map(filter_server_table),
        "orderTopicConf": order_topic_conf,
        "queueDatas": [q.bean() for q in queue_datas],
        "topicQueueMappingByBroker": queue_mapping_by_broker if v5 else None,
    }


def java_table_order(keys: Iterable[Any], initial: int, concurrent: bool) -> list[Any]:
    """Iteration order of one of RouteInfoManager's own tables: HashMap(initial) in 4.9.8,
    ConcurrentHashMap(initial) in 5.x (``concurrent``: Profile.concurrent_tables)."""
    keys = list(keys)
    return java_hash_order(keys, table_size(len(keys), initial, concurrent=concurrent))


def cluster_info_bean(broker_addr_table: dict[str, BrokerData], cluster_addr_table: Mapping[str, Iterable[str]],
                      v5: bool, concurrent: bool) -> dict[str, Any]:
    """ClusterInfo: ``v5`` the 5.x BrokerData shape, ``concurrent`` the tables' iteration order."""
    brokers = java_table_order(broker_addr_table, 128, concurrent)
    clusters = java_table_order(cluster_addr_table, 32, concurrent)
    return {
        "brokerAddrTable": {name: broker_addr_table[name].bean(v5) for name in brokers},
        "clusterAddrTable": {c: java_hash_order(cluster_addr_table[c]) for c in clusters},
    }


def topic_list_order(topics: list[str], concurrent: bool) -> list[str]:
    """``topics`` (in topicQueueTable's insertion order) as TopicList's set iterates them: first in
    the order of topicQueueTable itself (``java_table_order(topics, 1024, concurrent)``), then of the
    set they are added to in that order; each name hashed once, ordered in pieces (``bucket_order``)."""
    spreads = [java_spread(topic) for topic in topics]
    first = bucket_order(spreads, table_size(len(topics), 1024, concurrent) - 1)
    second = bucket_order([spreads[i] for i in first], table_size(len(first), None, concurrent) - 1)
    return [topics[first[j]] for j in second]


def topic_list_body(topics: list[str], broker_addr: str | None, concurrent: bool) -> bytes:
    """TopicList (``brokerAddr``, ``topicList``: a HashSet in 4.9.8, a ConcurrentHashMap key set in
    5.x, ``concurrent``, filled in topicQueueTable's order) as fastjson writes it, encoded in pieces:
    a thread building the list of a million topics never holds the interpreter for long (apart.py)."""
    head = fastjson.dumps_bytes({"brokerAddr": broker_addr, "topicList": []})
    assert head.endswith(b'"topicList":[]}'), head  # the last key: fastjson writes them sorted
    ordered = topic_list_order(topics, concurrent)
    pieces = [fastjson.dumps_bytes(ordered[at:at + ORDER_PIECE])[1:-1] for at in range(0, len(ordered), ORDER_PIECE)]
    return head[:-2] + b",".join(pieces) + b"]}"


def kv_table_bean(table: dict[str, str]) -> dict[str, Any]:
    return {"table": java_hash_map(table)}


def int_keys(mapping: dict[str, Any]) -> dict[Any, Any]:
    """Map keys back to ints where Java's map is keyed by Long/Integer (brokerAddrs, currIdMap),
    so fastjson's plain mode writes them bare again: a key Long.parseLong reads (values.py; ``²``,
    which str.isdigit takes and int() refuses, or ``𝟏``, which Java reads as two surrogates, stay
    strings, as no Java map holds them)."""
    return {k if not isinstance(k, str) or (number := parse_java_integer(k)) is None else number: v
            for k, v in mapping.items()}


#: TopicQueueMappingInfo's fields and the JSON types fastjson reads into them; any other field is dropped,
#: as Java's bean drops it (kept, a field of 100 MB rode along in the tables for good)
MAPPING_INFO_FIELDS: dict[str, tuple[type, ...]] = {
    "bname": (str,), "currIdMap": (dict,), "dirty": (bool,), "epoch": (int,), "scope": (str,), "topic": (str,),
    "totalQueues": (int,)}
#: the Java ranges of its numbers: totalQueues an int, epoch a long (currIdMap's ids are ints)
MAPPING_INFO_RANGES = {"epoch": fastjson.JAVA_LONG, "totalQueues": fastjson.JAVA_INT}


def queue_mapping_info(obj: Any) -> dict[str, Any]:
    """A TopicQueueMappingInfo as Java's bean holds it: its fields only, in bean order, currIdMap
    keyed and valued by int (logical queue id -> physical one); ValueError for what fastjson could
    not read into the bean (a field of another type, a currIdMap value that is no integer)."""
    if not isinstance(obj, dict):
        raise ValueError(f"a TopicQueueMappingInfo is a JSON object, not {type(obj).__name__}")
    info: dict[str, Any] = {}
    for name, types in MAPPING_INFO_FIELDS.items():
        value = obj.get(name)
        if value is None:
            if name in obj:
                info[name] = None
            continue
        if not isinstance(value, types) or (types == (int,) and isinstance(value, bool)):
            raise ValueError(f"TopicQueueMappingInfo.{name} is {type(value).__name__}")
        if name in MAPPING_INFO_RANGES:
            fastjson.java_numbers((value,), MAPPING_INFO_RANGES[name])
        info[name] = value
    if "currIdMap" in info and info["currIdMap"] is not None:
        ids = int_keys(info["currIdMap"])
        if not all(isinstance(k, int) and isinstance(v, int) and not isinstance(v, bool) for k, v in ids.items()):
            raise ValueError("TopicQueueMappingInfo.currIdMap maps queue ids to queue ids (integers)")
        fastjson.java_numbers((*ids, *ids.values()))
        info["currIdMap"] = ids
    return info
