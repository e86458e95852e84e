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
