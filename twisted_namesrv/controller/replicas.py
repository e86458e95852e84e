"""ReplicasInfoManager: the controller's state machine, as Java's impl/manager/*.

Pure: no Twisted, no I/O, no clock.  Each request method reads the state and returns a
``ControllerResult`` (the response code, remark, header fields, body and the events the request
causes) without changing anything; ``apply_event`` is the one place the state changes.  Who is
alive is asked through ``BrokerValidPredicate`` (the heartbeat manager's ``is_broker_active``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..remoting.values import parse_java_integer
from . import bodies
from .codes import FIRST_BROKER_CONTROLLER_ID
from .codes import ControllerResponseCode as Code
from .events import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    EventMessage,
    ReplicasSnapshotEvent,
    UpdateBrokerAddressEvent,
)

#: (clusterName, brokerName, brokerId) -> alive
BrokerValidPredicate = Callable[[str, str, int], bool]
#: rocketmq_controller_election_total's election_result of an ElectMasterEvent (elected or not)
ELECTED, NOT_ELECTED = "new_master_elected", "no_master_elected"


@dataclass
class ControllerResult:
    """What a request answers: code, remark, its response header's fields (None: no custom
    header, so no extFields), body; and the events that must be durable before it is sent."""

    header: dict[str, object] | None = None
    code: int = Code.SUCCESS
    remark: str | None = None
    body: bytes | None = None
    events: list[EventMessage] = field(default_factory=list)
    #: a new master: whom to tell (NOTIFY_BROKER_ROLE_CHANGED) once the answer is durable
    role_change: RoleChange | None = None

    def fail(self, code: int, remark: str) -> ControllerResult:
        self.code, self.remark = code, remark
        return self


@dataclass(frozen=True)
class RoleChange:
    """RoleChangeNotifyEntry: a broker group's new master, for every alive member."""

    cluster_name: str
    broker_name: str
    master_broker_id: int
    master_address: str | None
    master_epoch: int
    sync_state_set_epoch: int
    sync_state_set: frozenset[int]
    member_addrs: dict[int, str]


class BrokerReplicaInfo:
    """One broker group's members: broker id -> (address, registerCheckCode), and the next id."""

    def __init__(self, cluster_name: str, broker_name: str) -> None:
        self.cluster_name = cluster_name
        self.broker_name = broker_name
        self.next_assign_broker_id = FIRST_BROKER_CONTROLLER_ID
        self.broker_id_info: dict[int, tuple[str, str]] = {}

    def add_broker(self, broker_id: int, address: str, register_check_code: str) -> None:
        self.broker_id_info[broker_id] = (address, register_check_code)
        self.next_assign_broker_id += 1  # as Java: counts additions, whatever id was added

    def remove_broker_id(self, broker_id: int) -> None:
        self.broker_id_info.pop(broker_id, None)

    def is_broker_exist(self, broker_id: int | None) -> bool:
        return broker_id in self.broker_id_info

    def all_brokers(self) -> set[int]:
        return set(self.broker_id_info)

    def broker_id_table(self) -> dict[int, str]:
        return {broker_id: pair[0] for broker_id, pair in self.broker_id_info.items()}

    def broker_address(self, broker_id: int | None) -> str | None:
        pair = self.broker_id_info.get(broker_id) if broker_id is not None else None
        return pair[0] if pair else None

    def register_check_code(self, broker_id: int) -> str | None:
        pair = self.broker_id_info.get(broker_id)
        return pair[1] if pair else None

    def update_broker_address(self, broker_id: int, address: str) -> None:
        pair = self.broker_id_info.get(broker_id)
        if pair is not None:
            self.broker_id_info[broker_id] = (address, pair[1])


class SyncStateInfo:
    """One broker group's master, its epoch, and the sync-state set with its epoch.  Epochs only
    grow: every master change and every set change adds one."""

    def __init__(self, cluster_name: str, broker_name: str) -> None:
        self.cluster_name = cluster_name
        self.broker_name = broker_name
        self.master_epoch = 0
        self.sync_state_set_epoch = 0
        self.sync_state_set: set[int] = set()
        self.master_broker_id: int | None = None

    def update_master_info(self, master_broker_id: int | None) -> None:
        self.master_broker_id = master_broker_id
        self.master_epoch += 1

    def update_sync_state_set_info(self, new_set: Iterable[int]) -> None:
        self.sync_state_set = set(new_set)
        self.sync_state_set_epoch += 1

    def is_first_time_for_elect(self) -> bool:
        return self.master_epoch == 0

    def remove_from_sync_state(self, broker_id: int) -> None:
        self.sync_state_set.discard(broker_id)


class ElectPolicy:
    """What ReplicasInfoManager asks of an election policy (elect.DefaultElectPolicy)."""

    def elect(self, cluster_name: str, broker_name: str, sync_state_brokers: set[int] | None,
              all_replica_brokers: set[int] | None, old_master: int | None,
              prefer_broker_id: int | None) -> int | None:
        raise NotImplementedError


#: what the controller's tables may hold, each entry written to its log for good (Java has no
#: bound): broker sets (as the NameServer's maxBrokerGroups), ids of one set (maxBrokersPerGroup), and
#: the characters of a name, address or register check code (maxNameLength).  Past one, APPLY_BROKER_ID
#: or REGISTER_BROKER is refused before an event is written (``limit_refusal``)
MAX_BROKER_SETS, MAX_BROKER_IDS, MAX_TEXT_LENGTH = 20_000, 64, 512


class ReplicasInfoManager:
    def __init__(self, enable_elect_unclean_master: Callable[[], bool] = lambda: False) -> None:
        self.enable_elect_unclean_master = enable_elect_unclean_master
        self.replica_info_table: dict[str, BrokerReplicaInfo] = {}
        self.sync_state_set_info_table: dict[str, SyncStateInfo] = {}
        #: ElectMasterEvents applied, by (cluster, broker name, ELECTED or NOT_ELECTED): what the log
        #: knows of the elections, so their count survives a restart (a group cleaned away keeps its
        #: count until the log is compacted)
        self.elections: Counter[tuple[str, str, str]] = Counter()

    def is_contains_broker(self, broker_name: str | None) -> bool:
        return broker_name in self.replica_info_table and broker_name in self.sync_state_set_info_table

    # -- requests: read the state, return the answer and its events --------------------------

    def alter_sync_state_set(self, broker_name: str, master_broker_id: int | None, master_epoch: int | None,
                             new_set: frozenset[int], set_epoch: int,
                             alive: BrokerValidPredicate) -> ControllerResult:
        result = ControllerResult({"newSyncStateSetEpoch": 0})
        if not self.is_contains_broker(broker_name):
            return result.fail(Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "Broker metadata is not existed")
        info = self.sync_state_set_info_table[broker_name]
        replicas = self.replica_info_table[broker_name]
        if info.sync_state_set == set(new_set):
            return result.fail(Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                               "The newSyncStateSet is equal with oldSyncStateSet, no needed to update syncStateSet")
        if info.master_broker_id is None or info.master_broker_id != master_broker_id:
            current, asked = _java(info.master_broker_id), _java(master_broker_id)
            return result.fail(Code.CONTROLLER_INVALID_MASTER, "Rejecting alter syncStateSet request because the "
                               f"current leader is:{{{current}}}, not {{{asked}}}")
        if master_epoch != info.master_epoch:
            return result.fail(Code.CONTROLLER_FENCED_MASTER_EPOCH, "Rejecting alter syncStateSet request because "
                               f"the current master epoch is:{{{info.master_epoch}}}, not {{{_java(master_epoch)}}}")
        if set_epoch != info.sync_state_set_epoch:
            return result.fail(Code.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH, "Rejecting alter syncStateSet request "
                               f"because the current syncStateSet epoch is:{{{info.sync_state_set_epoch}}}, "
                               f"not {{{set_epoch}}}")
        for replica in bodies.long_set(new_set):
            if not replicas.is_broker_exist(replica):
                return result.fail(Code.CONTROLLER_INVALID_REPLICAS, "Rejecting alter syncStateSet request because "
                                   f"the replicas {{{replica}}} don't exist")
            if not alive(replicas.cluster_name, replicas.broker_name, replica):
                return result.fail(Code.CONTROLLER_BROKER_NOT_ALIVE, "Rejecting alter syncStateSet request because "
                                   f"the replicas {{{replica}}} don't alive")
        if info.master_broker_id not in new_set:
            return result.fail(Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "Rejecting alter syncStateSet request "
                               f"because the newSyncStateSet don't contains origin leader {{{info.master_broker_id}}}")
        epoch = info.sync_state_set_epoch + 1
        result.header = {"newSyncStateSetEpoch": epoch}
        result.body = bodies.sync_state_set_body(new_set, epoch)
        result.events.append(AlterSyncStateSetEvent(broker_name, tuple(sorted(new_set))))
        return result

    def elect_master(self, broker_name: str, broker_id: int | None, designate_elect: bool,
                     policy: ElectPolicy) -> ControllerResult:
        """``broker_id`` None or -1: the controller triggered it (its master went)."""
        result = ControllerResult({})
        if not self.is_contains_broker(broker_name):
            return result.fail(Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, "Broker hasn't been registered")
        info = self.sync_state_set_info_table[broker_name]
        replicas = self.replica_info_table[broker_name]
        sync_state_set = set(info.sync_state_set)
        old_master = info.master_broker_id
        all_replicas = replicas.all_brokers() if self.enable_elect_unclean_master() else None
        new_master: int | None = broker_id if info.is_first_time_for_elect() else None
        if new_master is None or new_master == -1:
            prefer = broker_id if designate_elect else None
            new_master = policy.elect(replicas.cluster_name, replicas.broker_name, sync_state_set, all_replicas,
                                      old_master, prefer)
        if new_master is not None and new_master == old_master:
            result.header = {"masterBrokerId": old_master, "masterAddress": replicas.broker_address(old_master),
                             "masterEpoch": info.master_epoch, "syncStateSetEpoch": info.sync_state_set_epoch}
            result.body = bodies.elect_master_body(sync_state_set, None)
            return result.fail(Code.CONTROLLER_MASTER_STILL_EXIST, f"The old master {old_master} is still alive, "
                               f"not need to elect new master for broker {replicas.broker_name}")
        if new_master is not None:
            result.header = {"masterBrokerId": new_master, "masterAddress": replicas.broker_address(new_master),
                             "masterEpoch": info.master_epoch + 1, "syncStateSetEpoch": info.sync_state_set_epoch + 1}
            group = bodies.broker_member_group_bean(replicas.cluster_name, replicas.broker_name,
                                                    replicas.broker_id_table())
            result.body = bodies.elect_master_body({new_master}, group)
            result.events.append(ElectMasterEvent(broker_name, True, new_master))
            result.role_change = RoleChange(replicas.cluster_name, replicas.broker_name, new_master,
                                            replicas.broker_address(new_master), info.master_epoch + 1,
                                            info.sync_state_set_epoch + 1, frozenset({new_master}),
                                            replicas.broker_id_table())
            return result
        if broker_id is None or broker_id == -1:
            result.events.append(ElectMasterEvent(broker_name, False, None))
            return result.fail(Code.CONTROLLER_MASTER_NOT_AVAILABLE,
                               "Old master has down and failed to elect a new broker master")
        return result.fail(Code.CONTROLLER_ELECT_MASTER_FAILED, "Failed to elect a new master")

    def get_next_broker_id(self, cluster_name: str | None, broker_name: str | None) -> ControllerResult:
        replicas = self.replica_info_table.get(broker_name) if broker_name is not None else None
        next_id = FIRST_BROKER_CONTROLLER_ID if replicas is None else replicas.next_assign_broker_id
        return ControllerResult({"clusterName": cluster_name, "brokerName": broker_name, "nextBrokerId": next_id})

    def limit_refusal(self, cluster_name: str | None, broker_name: str | None, broker_id: int | None,
                      texts: Iterable[str | None]) -> tuple[str, str] | None:
        """(reason, why) when an APPLY_BROKER_ID or REGISTER_BROKER would pass a limit of the tables
        (MAX_BROKER_SETS, MAX_BROKER_IDS, MAX_TEXT_LENGTH), else None."""
        for text in (cluster_name, broker_name, *texts):
            if text is not None and len(text) > MAX_TEXT_LENGTH:
                return "max_name_length", f"a field of {len(text)} characters, over {MAX_TEXT_LENGTH}"
        replicas = self.replica_info_table.get(broker_name) if broker_name is not None else None
        if replicas is None:
            if len(self.replica_info_table) >= MAX_BROKER_SETS:
                return "max_broker_groups", (f"a new broker set, and {len(self.replica_info_table)} are "
                                             f"registered: at most {MAX_BROKER_SETS}")
        elif not replicas.is_broker_exist(broker_id) and len(replicas.all_brokers()) >= MAX_BROKER_IDS:
            return "max_brokers_per_group", (f"broker set {broker_name} holds {len(replicas.all_brokers())} "
                                             f"ids: at most {MAX_BROKER_IDS}")
        return None

    def apply_broker_id(self, cluster_name: str, broker_name: str, broker_id: int,
                        register_check_code: str) -> ControllerResult:
        result = ControllerResult({"clusterName": cluster_name, "brokerName": broker_name})
        address = register_check_code.split(";")[0]
        event = ApplyBrokerIdEvent(cluster_name, broker_name, address, broker_id, register_check_code)
        replicas = self.replica_info_table.get(broker_name)
        if replicas is None:
            if broker_id == FIRST_BROKER_CONTROLLER_ID:
                result.events.append(event)
                return result
            return result.fail(Code.CONTROLLER_BROKER_ID_INVALID, f"Broker-set: {broker_name} hasn't been "
                               f"registered in controller, but broker try to apply brokerId: {broker_id}")
        if not replicas.is_broker_exist(broker_id) or register_check_code == replicas.register_check_code(broker_id):
            result.events.append(event)
            return result
        return result.fail(Code.CONTROLLER_BROKER_ID_INVALID,
                           f"Fail to apply brokerId: {broker_id} in broker-set: {broker_name}")

    def register_broker(self, cluster_name: str | None, broker_name: str | None, broker_id: int | None,
                        broker_address: str, alive: BrokerValidPredicate) -> ControllerResult:
        result = ControllerResult({"clusterName": cluster_name, "brokerName": broker_name})
        if broker_name is None or not self.is_contains_broker(broker_name):
            return result.fail(Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                               f"Broker-set: {_java(broker_name)} hasn't been registered in controller")
        replicas = self.replica_info_table[broker_name]
        info = self.sync_state_set_info_table[broker_name]
        if broker_id is None or not replicas.is_broker_exist(broker_id):
            return result.fail(Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                               f"BrokerId: {_java(broker_id)} hasn't been registered in broker-set: {broker_name}")
        master = info.master_broker_id
        if master is not None and alive(str(cluster_name), broker_name, master):
            result.header = {**(result.header or {}), "masterBrokerId": master,
                             "masterAddress": replicas.broker_address(master), "masterEpoch": info.master_epoch,
                             "syncStateSetEpoch": info.sync_state_set_epoch}
        result.body = bodies.sync_state_set_body(info.sync_state_set, info.sync_state_set_epoch)
        if broker_address != replicas.broker_address(broker_id):
            result.events.append(UpdateBrokerAddressEvent(str(cluster_name), broker_name, broker_address, broker_id))
        return result

    def get_replica_info(self, broker_name: str | None) -> ControllerResult:
        if broker_name is None or not self.is_contains_broker(broker_name):
            return ControllerResult({}).fail(Code.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                                             "Broker metadata is not existed")
        info = self.sync_state_set_info_table[broker_name]
        replicas = self.replica_info_table[broker_name]
        master = info.master_broker_id
        return ControllerResult({"masterBrokerId": master, "masterAddress": replicas.broker_address(master),
                                 "masterEpoch": info.master_epoch},
                                body=bodies.sync_state_set_body(info.sync_state_set, info.sync_state_set_epoch))

    def replicas_info(self, broker_name: str, alive: BrokerValidPredicate) -> bodies.ReplicasInfo | None:
        """One group's ReplicasInfo (getSyncStateData, the status page), None when unknown."""
        if not self.is_contains_broker(broker_name):
            return None
        info = self.sync_state_set_info_table[broker_name]
        replicas = self.replica_info_table[broker_name]
        in_sync: list[bodies.ReplicaIdentity] = []
        not_in_sync: list[bodies.ReplicaIdentity] = []
        table = replicas.broker_id_table()
        for broker_id in bodies.long_set(table):  # a HashMap's order, as Java's forEach
            replica = bodies.ReplicaIdentity(broker_name, broker_id, table[broker_id],
                                             alive(replicas.cluster_name, broker_name, broker_id))
            (in_sync if broker_id in info.sync_state_set else not_in_sync).append(replica)
        master = info.master_broker_id
        return bodies.ReplicasInfo(master, replicas.broker_address(master), info.master_epoch,
                                   info.sync_state_set_epoch, tuple(in_sync), tuple(not_in_sync))

    def get_sync_state_data(self, broker_names: list[str], alive: BrokerValidPredicate) -> ControllerResult:
        table: dict[str, bodies.ReplicasInfo] = {}
        for name in dict.fromkeys(broker_names):  # each name once: Java's map keeps one entry a name
            info = self.replicas_info(name, alive)
            if info is not None:
                table[name] = info
        return ControllerResult(None, body=bodies.broker_replicas_info_body(table))

    def clean_broker_data(self, cluster_name: str | None, broker_name: str, ids_to_clean: str | None,
                          clean_living_broker: bool, alive: BrokerValidPredicate) -> ControllerResult:
        result = ControllerResult(None)
        id_set: tuple[int, ...] | None = None
        if not clean_living_broker:
            info = self.sync_state_set_info_table.get(broker_name)
            if not (ids_to_clean or "").strip() and info is not None and info.master_broker_id is not None:
                return result.fail(Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                                   f"Broker {broker_name} is still alive, clean up failure")
            if (ids_to_clean or "").strip():
                try:
                    id_set = tuple(sorted({_parse_long(part) for part in str(ids_to_clean).split(";")}))
                except ValueError as exc:
                    return result.fail(Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA, "Please set the option "
                                       f"<brokerControllerIdsToClean> according to the format, exception: {exc}")
                for broker_id in id_set:
                    if alive(str(cluster_name), broker_name, broker_id):
                        return result.fail(Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                                           f"Broker [{broker_name},  {broker_id}] is still alive, clean up failure")
        if self.is_contains_broker(broker_name):
            result.events.append(CleanBrokerDataEvent(broker_name, id_set))
            return result
        return result.fail(Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                           f"Broker {broker_name} is not existed,clean broker data failure.")

    def scan_need_reelect_broker_sets(self, alive: BrokerValidPredicate) -> list[str]:
        """Groups whose master is not alive while another member is: they need an election."""
        names = []
        for name, info in self.sync_state_set_info_table.items():
            master = info.master_broker_id
            if master is not None and not alive(info.cluster_name, name, master):
                ids = self.replica_info_table[name].broker_id_table()
                if any(alive(info.cluster_name, name, i) for i in ids):
                    names.append(name)
        return names

    # -- the one place the state changes ------------------------------------------------------

    def apply_event(self, event: EventMessage) -> None:
        if isinstance(event, AlterSyncStateSetEvent):
            if self.is_contains_broker(event.brokerName):
                self.sync_state_set_info_table[event.brokerName].update_sync_state_set_info(event.newSyncStateSet)
        elif isinstance(event, ApplyBrokerIdEvent):
            self._apply_broker_id(event)
        elif isinstance(event, ElectMasterEvent):
            if self.is_contains_broker(event.brokerName):
                info = self.sync_state_set_info_table[event.brokerName]
                master = event.newMasterBrokerId if event.newMasterElected else None
                elected = master is not None
                if master is not None:
                    info.update_master_info(master)
                    info.update_sync_state_set_info({master})
                else:
                    info.update_master_info(None)
                self.elections[info.cluster_name, event.brokerName, ELECTED if elected else NOT_ELECTED] += 1
        elif isinstance(event, CleanBrokerDataEvent):
            self._clean_broker_data(event)
        elif isinstance(event, UpdateBrokerAddressEvent):
            replicas = self.replica_info_table.get(event.brokerName)
            if replicas is not None:
                replicas.update_broker_address(event.brokerId, event.brokerAddress)
        elif isinstance(event, ReplicasSnapshotEvent):
            self.restore(event.groups)

    # -- the whole state as one record (log compaction) -----------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Both tables and the election counts, every field, as JSON-ready data; ``restore`` reads it
        back exactly (a snapshot written before the counts were kept restores none)."""
        groups: dict[str, Any] = {}
        counted: dict[str, list[list[Any]]] = {}
        for (cluster, name, result), count in sorted(self.elections.items()):
            counted.setdefault(name, []).append([cluster, result, count])
        for name in sorted(self.replica_info_table.keys() | self.sync_state_set_info_table.keys() | counted.keys()):
            replicas = self.replica_info_table.get(name)
            info = self.sync_state_set_info_table.get(name)
            groups[name] = {
                "replicas": None if replicas is None else {
                    "clusterName": replicas.cluster_name, "nextAssignBrokerId": replicas.next_assign_broker_id,
                    "brokers": [[i, a, c] for i, (a, c) in sorted(replicas.broker_id_info.items())]},
                "syncState": None if info is None else {
                    "clusterName": info.cluster_name, "masterBrokerId": info.master_broker_id,
                    "masterEpoch": info.master_epoch, "syncStateSet": sorted(info.sync_state_set),
                    "syncStateSetEpoch": info.sync_state_set_epoch},
                "elections": counted.get(name, [])}
        return groups

    def restore(self, groups: dict[str, Any]) -> None:
        self.replica_info_table.clear()
        self.sync_state_set_info_table.clear()
        self.elections.clear()
        for name, group in groups.items():
            for cluster, result, count in group.get("elections") or ():
                self.elections[str(cluster), name, str(result)] = int(count)
            if group.get("replicas") is not None:
                r = group["replicas"]
                replicas = BrokerReplicaInfo(r["clusterName"], name)
                replicas.broker_id_info = {int(i): (str(a), str(c)) for i, a, c in r["brokers"]}
                replicas.next_assign_broker_id = int(r["nextAssignBrokerId"])
                self.replica_info_table[name] = replicas
            if group.get("syncState") is not None:
                s = group["syncState"]
                info = SyncStateInfo(s["clusterName"], name)
                master = s["masterBrokerId"]
                info.master_broker_id = None if master is None else int(master)
                info.master_epoch, info.sync_state_set_epoch = int(s["masterEpoch"]), int(s["syncStateSetEpoch"])
                info.sync_state_set = {int(i) for i in s["syncStateSet"]}
                self.sync_state_set_info_table[name] = info

    def _apply_broker_id(self, event: ApplyBrokerIdEvent) -> None:
        if self.is_contains_broker(event.brokerName):
            replicas = self.replica_info_table[event.brokerName]
            if not replicas.is_broker_exist(event.newBrokerId):
                replicas.add_broker(event.newBrokerId, event.brokerAddress, event.registerCheckCode)
            return
        replicas = BrokerReplicaInfo(event.clusterName, event.brokerName)
        replicas.add_broker(event.newBrokerId, event.brokerAddress, event.registerCheckCode)
        self.replica_info_table[event.brokerName] = replicas
        self.sync_state_set_info_table[event.brokerName] = SyncStateInfo(event.clusterName, event.brokerName)

    def _clean_broker_data(self, event: CleanBrokerDataEvent) -> None:
        name = event.brokerName
        if not event.brokerIdSetToClean:
            self.replica_info_table.pop(name, None)
            self.sync_state_set_info_table.pop(name, None)
            return
        if not self.is_contains_broker(name):
            return
        replicas = self.replica_info_table[name]
        info = self.sync_state_set_info_table[name]
        for broker_id in event.brokerIdSetToClean:
            replicas.remove_broker_id(broker_id)
            info.remove_from_sync_state(broker_id)
        if not replicas.broker_id_info:
            del self.replica_info_table[name]
        if not info.sync_state_set:
            del self.sync_state_set_info_table[name]

    # -- views ------------------------------------------------------------------------------------

    def summary(self) -> dict[str, dict[str, Any]]:
        """Every group's state, for the status page and its API."""
        out: dict[str, dict[str, Any]] = {}
        for name, replicas in sorted(self.replica_info_table.items()):
            info = self.sync_state_set_info_table.get(name)
            out[name] = {
                "clusterName": replicas.cluster_name, "brokers": {str(k): v for k, v in
                                                                  sorted(replicas.broker_id_table().items())},
                "masterBrokerId": info.master_broker_id if info else None,
                "masterEpoch": info.master_epoch if info else None,
                "syncStateSet": sorted(info.sync_state_set) if info else [],
                "syncStateSetEpoch": info.sync_state_set_epoch if info else None,
            }
        return out


def _java(value: object) -> str:
    return "null" if value is None else str(value)


def _parse_long(text: str) -> int:
    number = parse_java_integer(text)
    if number is None:
        raise ValueError(f'java.lang.NumberFormatException: For input string: "{text}"')
    return number
