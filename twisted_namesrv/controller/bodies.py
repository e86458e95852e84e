"""The controller's headers and bodies as Java 5.3.3 writes them.

Headers: a response header's non-null fields become extFields (``makeCustomHeaderToNet``),
whose HashMap order fastjson keeps; ``ext_of`` builds them in that order.  Bodies: fastjson
beans (alphabetical properties), Set<Long> and Map<Long, String> in HashSet/HashMap order, map
keys unquoted (``RemotingSerializable.encode``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..remoting import fastjson


def java_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def ext_of(fields: Mapping[str, object]) -> dict[str, str | None]:
    """A custom header's extFields: the non-null fields, as strings, in Java HashMap order."""
    present: dict[str, str | None] = {name: java_value(value) for name, value in fields.items() if value is not None}
    return fastjson.java_hash_map(present)


def long_set(ids: Iterable[int]) -> list[int]:
    """A HashSet<Long> as Java iterates it."""
    return list(fastjson.java_hash_order(sorted(set(ids))))


def sync_state_set_body(ids: Iterable[int], epoch: int) -> bytes:
    """SyncStateSet.encode()."""
    return fastjson.dumps_bytes({"syncStateSet": long_set(ids), "syncStateSetEpoch": epoch})


def broker_member_group_bean(cluster: str, broker_name: str, addrs: Mapping[int, str]) -> dict[str, Any]:
    return {"brokerAddrs": fastjson.java_hash_map(dict(addrs)), "brokerName": broker_name, "cluster": cluster}


def elect_master_body(ids: Iterable[int], member_group: dict[str, Any] | None) -> bytes:
    """ElectMasterResponseBody.encode(): brokerMemberGroup (when known), syncStateSet."""
    bean: dict[str, Any] = {}
    if member_group is not None:
        bean["brokerMemberGroup"] = member_group
    bean["syncStateSet"] = long_set(ids)
    return fastjson.dumps_bytes(bean)


@dataclass(frozen=True, slots=True)
class ReplicaIdentity:
    brokerName: str
    brokerId: int
    brokerAddress: str | None
    alive: bool

    def bean(self) -> dict[str, Any]:
        return {"alive": self.alive, "brokerAddress": self.brokerAddress, "brokerId": self.brokerId,
                "brokerName": self.brokerName}


@dataclass(frozen=True, slots=True)
class ReplicasInfo:
    """BrokerReplicasInfo.ReplicasInfo: one broker group as getSyncStateSet shows it."""

    masterBrokerId: int | None
    masterAddress: str | None
    masterEpoch: int
    syncStateSetEpoch: int
    inSyncReplicas: tuple[ReplicaIdentity, ...]
    notInSyncReplicas: tuple[ReplicaIdentity, ...]

    def bean(self) -> dict[str, Any]:
        return {"inSyncReplicas": [r.bean() for r in self.inSyncReplicas], "masterAddress": self.masterAddress,
                "masterBrokerId": self.masterBrokerId, "masterEpoch": self.masterEpoch,
                "notInSyncReplicas": [r.bean() for r in self.notInSyncReplicas],
                "syncStateSetEpoch": self.syncStateSetEpoch}


def broker_replicas_info_body(table: Mapping[str, ReplicasInfo]) -> bytes:
    """BrokerReplicasInfo.encode(): {"replicasInfoTable": {brokerName: ReplicasInfo}}."""
    return fastjson.dumps_bytes({"replicasInfoTable": {name: info.bean() for name, info in
                                                       fastjson.java_hash_map(dict(table)).items()}})


def parse_sync_state_set(body: bytes | None) -> tuple[frozenset[int], int]:
    """A SyncStateSet body (1001's): the ids and the epoch; ValueError names what is wrong."""
    if not body:
        raise ValueError("the body (a SyncStateSet) is missing")
    data = fastjson.loads(bytes(body))
    if not isinstance(data, dict):
        raise ValueError("the body is not a SyncStateSet object")
    ids = data.get("syncStateSet")
    epoch = data.get("syncStateSetEpoch", 0)
    if ids is None:
        ids = []
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise ValueError("syncStateSet is not a list of broker ids")
    if not isinstance(epoch, int) or isinstance(epoch, bool):
        raise ValueError("syncStateSetEpoch is not a number")
    return frozenset(ids), epoch


def _id_list(value: object, what: str) -> frozenset[int]:
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise ValueError(f"{what} is not a list of broker ids")
    return frozenset(value)


def _object(body: bytes | None, what: str) -> dict[str, Any]:
    if not body:
        raise ValueError(f"the body ({what}) is missing")
    data = fastjson.loads(bytes(body))
    if not isinstance(data, dict):
        raise ValueError(f"the body is not a {what} object")
    return data


def parse_elect_master_body(body: bytes | None) -> tuple[frozenset[int], dict[int, str]]:
    """An ElectMasterResponseBody (elect_master_body's): the syncStateSet and the group's
    brokerId -> address (empty without brokerMemberGroup); ValueError names what is wrong."""
    data = _object(body, "ElectMasterResponseBody")
    ids = _id_list(data.get("syncStateSet"), "syncStateSet")
    group = data.get("brokerMemberGroup") or {}
    addrs = group.get("brokerAddrs") if isinstance(group, dict) else None
    if not isinstance(group, dict) or not isinstance(addrs or {}, dict):
        raise ValueError("brokerMemberGroup is not a BrokerMemberGroup")
    try:
        members = {int(k): str(v) for k, v in (addrs or {}).items()}
    except ValueError:
        raise ValueError("brokerMemberGroup.brokerAddrs has a key that is not a broker id") from None
    return ids, members


def _replica(bean: object) -> ReplicaIdentity:
    if not isinstance(bean, dict) or not isinstance(bean.get("brokerId"), int):
        raise ValueError("a replica is not a ReplicaIdentity")
    return ReplicaIdentity(str(bean.get("brokerName")), bean["brokerId"], bean.get("brokerAddress"),
                           bean.get("alive") is True)


def parse_broker_replicas_info(body: bytes | None) -> dict[str, ReplicasInfo]:
    """A BrokerReplicasInfo (broker_replicas_info_body's, GET_SYNC_STATE_DATA's answer): brokerName ->
    ReplicasInfo; ValueError names what is wrong."""
    table = _object(body, "BrokerReplicasInfo").get("replicasInfoTable") or {}
    if not isinstance(table, dict):
        raise ValueError("replicasInfoTable is not an object")
    found = {}
    for name, info in table.items():
        if not isinstance(info, dict):
            raise ValueError(f"the ReplicasInfo of {name!r} is not an object")
        numbers = [info.get(k) for k in ("masterBrokerId", "masterEpoch", "syncStateSetEpoch")]
        if not all(n is None or (isinstance(n, int) and not isinstance(n, bool)) for n in numbers):
            raise ValueError(f"the ReplicasInfo of {name!r} has a number that is not one")
        replicas = [info.get(k) or [] for k in ("inSyncReplicas", "notInSyncReplicas")]
        if not all(isinstance(r, list) for r in replicas):
            raise ValueError(f"the replicas of {name!r} are not lists")
        found[str(name)] = ReplicasInfo(numbers[0], info.get("masterAddress"), numbers[1] or 0, numbers[2] or 0,
                                        tuple(map(_replica, replicas[0])), tuple(map(_replica, replicas[1])))
    return found
