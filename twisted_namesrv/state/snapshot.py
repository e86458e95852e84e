"""Route snapshots for warm restarts: RouteInfoManager's tables as JSON and back.

Routes are soft state, rebuilt from heartbeats every 30 s; a restarted NameServer is empty
until then, and clients asking in that window get "No topic route info".  A snapshot closes
the window: brokers come back *unconfirmed* — stamped as heard from at load time, with no
connection — so each one expires after its own heartbeat timeout (120 s) unless it registers
again, and its first registration re-applies its whole topic table as a new broker's would.
What a snapshot cannot know: changes made while the server was down (a broker that died
then is served for up to one timeout, as if it had died just after the restart).
"""

from __future__ import annotations

from typing import Any

from ..bodies.route import BrokerData, DataVersion, QueueData, queue_mapping_info
from .routes import BrokerLiveInfo, RouteInfoManager, RouteTables

SNAPSHOT_FORMAT = 1


class SnapshotError(ValueError):
    """A snapshot that cannot be loaded; the routes are left empty."""


def export_routes(routes: RouteInfoManager) -> dict[str, Any]:
    """Every table, in its insertion order, as JSON-able values."""
    return {
        "format": SNAPSHOT_FORMAT,
        "profile": routes.profile.name,
        "topicQueueTable": {topic: [[q.brokerName, q.readQueueNums, q.writeQueueNums, q.perm, q.topicSysFlag]
                                    for q in queues.values()]
                            for topic, queues in routes.topicQueueTable.items()},
        "brokerAddrTable": {name: {"cluster": b.cluster, "brokerAddrs": [[i, a] for i, a in b.brokerAddrs.items()],
                                   "zoneName": b.zoneName, "enableActingMaster": b.enableActingMaster}
                            for name, b in routes.brokerAddrTable.items()},
        "clusterAddrTable": {cluster: list(names) for cluster, names in routes.clusterAddrTable.items()},
        "brokerLiveTable": [_live(key, live) for key, live in routes.brokerLiveTable.items()],
        "filterServerTable": [[*_key(key), servers] for key, servers in routes.filterServerTable.items()],
        "topicQueueMappingInfoTable": routes.topicQueueMappingInfoTable,
    }


def _key(key: Any) -> list[Any]:
    """[cluster, addr]; cluster is None where the live key is the address alone (4.9.8)."""
    return list(key) if isinstance(key, tuple) else [None, key]


def _live(key: Any, live: BrokerLiveInfo) -> dict[str, Any]:
    version = live.dataVersion
    return {"key": _key(key), "heartbeatTimeoutMillis": live.heartbeatTimeoutMillis,
            "dataVersion": [version.timestamp, version.counter, version.stateVersion],
            "haServerAddr": live.haServerAddr, "topicCount": live.topicCount, "version": live.version}


def import_routes(routes: RouteInfoManager, snapshot: dict[str, Any]) -> int:
    """Fill empty ``routes`` from a snapshot; returns the brokers restored, all unconfirmed.
    RegistrationRefused (nothing restored) when the tables would pass a limit a registration is
    held to (RouteInfoManager.restore): written under larger limits, or crafted."""
    if not isinstance(snapshot, dict) or snapshot.get("format") != SNAPSHOT_FORMAT:
        raise SnapshotError(f"not a route snapshot of format {SNAPSHOT_FORMAT}")
    if snapshot.get("profile") != routes.profile.name:
        raise SnapshotError(f"snapshot of a {snapshot.get('profile')} NameServer, this one emulates "
                            f"{routes.profile.name}")
    try:
        tables = _tables(routes, snapshot)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise SnapshotError(f"damaged route snapshot: {type(exc).__name__}: {exc}") from None
    routes.restore(tables)  # RegistrationRefused past a limit of the tables: nothing restored
    return len(routes.brokerLiveTable)


def _tables(routes: RouteInfoManager, snapshot: dict[str, Any]) -> RouteTables:
    """Everything converted before anything is replaced: a damaged file changes nothing."""
    now = routes.now_ms()
    live_key = routes.live_key
    shared: dict[tuple[str, int, int, int, int], QueueData] = {}

    def queue_data(fields: list[Any]) -> QueueData:
        """One QueueData for all the entries alike, as registrations share them (QueueData)."""
        numbers = (str(fields[0]), int(fields[1]), int(fields[2]), int(fields[3]), int(fields[4]))
        queue = shared.get(numbers)
        if queue is None:
            queue = shared[numbers] = QueueData(*numbers)
        return queue
    topics = {str(topic): {str(q[0]): queue_data(q) for q in queues}
              for topic, queues in snapshot["topicQueueTable"].items()}
    brokers = {str(name): BrokerData(str(b["cluster"]), str(name), {int(i): str(a) for i, a in b["brokerAddrs"]},
                                     _text(b["zoneName"]), bool(b["enableActingMaster"]))
               for name, b in snapshot["brokerAddrTable"].items()}
    clusters = {str(cluster): dict.fromkeys(map(str, names)) for cluster, names in snapshot["clusterAddrTable"].items()}
    live = {}
    for entry in snapshot["brokerLiveTable"]:
        cluster, addr = entry["key"]
        live[live_key(cluster, str(addr))] = BrokerLiveInfo(
            now, int(entry["heartbeatTimeoutMillis"]), DataVersion(*map(int, entry["dataVersion"])), None,
            _text(entry["haServerAddr"]), None, int(entry["topicCount"]), _number(entry["version"]), restored=True)
    filters = {live_key(cluster, str(addr)): [_text(s) for s in servers]  # a null kept, as Java reads it
               for cluster, addr, servers in snapshot["filterServerTable"]}
    mappings = {str(topic): {str(b): queue_mapping_info(info) for b, info in by_broker.items()}
                for topic, by_broker in snapshot["topicQueueMappingInfoTable"].items()}
    return topics, brokers, clusters, live, filters, mappings


def _text(value: Any) -> str | None:
    """An optional name (zoneName, haServerAddr) as a registration holds it: a string or None."""
    return None if value is None else str(value)


def _number(value: Any) -> int | None:
    """An optional number (the broker's MQVersion ordinal): an int or None."""
    return None if value is None else int(value)
