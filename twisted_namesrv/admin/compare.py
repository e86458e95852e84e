"""``compare NS1 NS2 ...``: do several NameServers hold the same routes?

Each server is read the way a client reads it: cluster info (106), the topic list (206) and
every topic's route (105, standard JSON); optionally each broker address's data version
(322).  Each snapshot is flattened into paths such as
``("topic", "T", "route", "queue", "broker-a", "perm") -> 6``; container paths hold PRESENT.
A path is compared among the servers that hold all of its containers, so a missing topic is
one difference, not one per queue field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..remoting import RequestCode, ResponseCode
from .client import NamesrvClient, ResponseError, json_body

PRESENT = "present"
MISSING = None  # the value a server lacks
NO_ROUTE = "TOPIC_NOT_EXIST"
#: never equal to a broker's real DataVersion, so 4.x does not count the query as a heartbeat
PROBE_VERSION = b'{"counter":0,"timestamp":0}'
QUEUE_FIELDS = ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag")
Path = tuple[Any, ...]


@dataclass
class Difference:
    path: Path
    values: dict[str, Any]  # server address -> value, MISSING where absent

    def describe(self) -> str:
        groups: dict[Any, list[str]] = {}
        for addr, value in self.values.items():
            groups.setdefault(value, []).append(addr)
        shown = "; ".join(f"{'missing' if value is MISSING else value} on {', '.join(addrs)}"
                          for value, addrs in groups.items())
        return f"{' '.join(str(part) for part in self.path)}: {shown}"


def snapshot(client: NamesrvClient, data_versions: bool = False) -> dict[Path, Any]:
    """One NameServer's routes, flattened."""
    info = json_body(client.addr, client.call_ok(RequestCode.GET_BROKER_CLUSTER_INFO))
    topics = json_body(client.addr, client.call_ok(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
    paths: dict[Path, Any] = {}
    for cluster, names in (info.get("clusterAddrTable") or {}).items():
        paths[("cluster", cluster)] = PRESENT
        paths.update({("cluster", cluster, "broker", name): PRESENT for name in names or []})
    for name, broker in (info.get("brokerAddrTable") or {}).items():
        paths[("broker", name)] = PRESENT
        paths.update(_broker_paths(("broker", name), broker))
        if data_versions:
            paths.update(_data_versions(client, name, broker))
    for topic in topics.get("topicList") or []:
        paths[("topic", topic)] = PRESENT
        paths.update(_route_paths(client, topic))
    return paths


def _broker_paths(prefix: Path, broker: dict[str, Any]) -> dict[Path, Any]:
    paths: dict[Path, Any] = {prefix + ("cluster",): broker.get("cluster")}
    for name in ("zoneName", "enableActingMaster"):
        if name in broker:
            paths[prefix + (name,)] = broker[name]
    for bid, addr in (broker.get("brokerAddrs") or {}).items():
        paths[prefix + ("id", int(bid))] = addr
    return paths


def _data_versions(client: NamesrvClient, name: str, broker: dict[str, Any]) -> dict[Path, Any]:
    paths: dict[Path, Any] = {}
    for bid, addr in (broker.get("brokerAddrs") or {}).items():
        ext = {"brokerName": name, "brokerAddr": addr, "clusterName": broker.get("cluster") or "", "brokerId": bid}
        answer = client.call_ok(RequestCode.QUERY_DATA_VERSION, ext, PROBE_VERSION)
        version = json_body(client.addr, answer) if answer.body else None
        paths[("broker", name, "dataVersion", int(bid))] = (
            "unknown" if version is None else f"timestamp={version.get('timestamp')} counter={version.get('counter')}")
    return paths


def _route_paths(client: NamesrvClient, topic: str) -> dict[Path, Any]:
    ext = {"topic": topic, "acceptStandardJsonOnly": "true"}
    answer = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext)
    prefix: Path = ("topic", topic, "route")
    if answer.code == ResponseCode.TOPIC_NOT_EXIST:
        return {prefix: NO_ROUTE}
    if answer.code != ResponseCode.SUCCESS:
        raise ResponseError(client.addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, answer)
    route = json_body(client.addr, answer)
    paths: dict[Path, Any] = {prefix: PRESENT}
    for queue in route.get("queueDatas") or []:
        queue_prefix = prefix + ("queue", str(queue.get("brokerName")))
        paths[queue_prefix] = PRESENT
        paths.update({queue_prefix + (name,): queue.get(name) for name in QUEUE_FIELDS})
    for broker in route.get("brokerDatas") or []:
        broker_prefix = prefix + ("broker", str(broker.get("brokerName")))
        paths[broker_prefix] = PRESENT
        paths.update(_broker_paths(broker_prefix, broker))
    if route.get("orderTopicConf") is not None:
        paths[prefix + ("orderTopicConf",)] = route["orderTopicConf"]
    for addr, servers in (route.get("filterServerTable") or {}).items():
        paths[prefix + ("filterServer", addr)] = ",".join(sorted(servers or []))
    if route.get("topicQueueMappingByBroker"):
        paths[prefix + ("topicQueueMappingByBroker",)] = json.dumps(route["topicQueueMappingByBroker"],
                                                                   sort_keys=True)
    return paths


def _path_key(path: Path) -> tuple[tuple[bool, Any], ...]:
    return tuple((isinstance(part, str), part) for part in path)


def differences(snapshots: dict[str, dict[Path, Any]]) -> list[Difference]:
    """Every path whose value is not the same on all servers that hold its containers."""
    union: set[Path] = set().union(*snapshots.values())
    found = []
    for path in sorted(union, key=_path_key):
        containers = [path[:i] for i in range(1, len(path)) if path[:i] in union]
        eligible = [addr for addr, paths in snapshots.items()
                    if all(paths.get(container) == PRESENT for container in containers)]
        values = {addr: snapshots[addr].get(path, MISSING) for addr in eligible}
        if len(values) > 1 and len(set(values.values())) > 1:
            found.append(Difference(path, values))
    return found


def summary(paths: dict[Path, Any]) -> tuple[int, int]:
    """(brokers, topics) of one snapshot."""
    return (sum(1 for p in paths if len(p) == 2 and p[0] == "broker"),
            sum(1 for p in paths if len(p) == 2 and p[0] == "topic"))
