"""ControllerManager: the controller's state behind its log, elections and notifications.

Requests that read or change the state run one at a time, in arrival order (Java's
EventScheduler): the handler's supplier reads the state and returns a ControllerResult; its
events are appended to the log, and only once ``append`` has fired are they applied and the
answer sent.  Only the leader with its log replayed (``ready``) answers them; the others answer
CONTROLLER_NOT_LEADER (2007).

Brokers that go (their controller connection closes, their heartbeats stop) are reported by the
service; if one was its group's master, an election is triggered at once, and the new master
and every alive member of the group are told (NOTIFY_BROKER_ROLE_CHANGED) when
``notifyBrokerRoleChanged`` is on.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from twisted.internet import defer
from twisted.logger import Logger

from ..refusals import Refusals
from ..remoting import RemotingCommand
from ..remoting.codes import V5_3_3
from . import bodies
from .codes import ControllerRequestCode, ControllerResponseCode
from .config import ControllerConfig, ControllerPeer
from .elect import DefaultElectPolicy
from .events import ReplicasSnapshotEvent, decode_event, encode_event
from .heartbeat import BrokerHeartbeatManager
from .log import ControllerLog, Leadership, NotLeader
from .metrics import ControllerMetrics
from .replicas import ControllerResult, ReplicasInfoManager, RoleChange

log = Logger()

NOT_LEADER_REMARK = "The controller is not in leader state"
COMPACT_AFTER = 10_000
TRIGGERS = {"broker": "the broker asked (CONTROLLER_ELECT_MASTER)", "admin": "an admin asked (reElectMaster)",
            "controller": "the master became inactive"}


def not_leader() -> ControllerResult:
    return ControllerResult(None, ControllerResponseCode.CONTROLLER_NOT_LEADER, NOT_LEADER_REMARK)


class ControllerManager:
    def __init__(self, config: ControllerConfig, store: ControllerLog, leadership: Leadership,
                 clock: Callable[[], float], *, group: str = "", self_id: str = "", address: str = "",
                 peers: list[ControllerPeer] | None = None, notifier: Callable[[str, bytes], None] | None = None,
                 close_channel: Callable[[Hashable], None] | None = None,
                 metrics: ControllerMetrics | None = None, refusals: Refusals | None = None,
                 steady: Callable[[], float] | None = None) -> None:
        """``clock``: the wall clock (election records); ``steady``: the brokers' heartbeats and the
        start's grace, which no step of the wall clock may move (clocks.py; default ``clock``): a
        step forward past the 10 s heartbeat timeout made every broker inactive at once."""
        self.config = config
        self.store = store
        self.leadership = leadership
        self.clock = clock
        self.steady = steady or clock
        self.group, self.self_id, self.address = group, self_id, address
        self.peers = peers or []
        self.notifier = notifier or (lambda address, frame: None)
        self.close_channel = close_channel or (lambda channel: None)
        self.metrics = metrics or ControllerMetrics()
        #: the listener's refusals, logged and counted (refusals.py): a blocked UPDATE_CONTROLLER_CONFIG
        self.refusals = refusals or Refusals()
        self.heartbeats = BrokerHeartbeatManager(lambda: int(self.steady() * 1000))
        self.policy = DefaultElectPolicy(self.heartbeats.is_broker_active, self.heartbeats.get_broker_live_info)
        self.replicas = self._fresh_replicas()
        self.ready = False  # leader, log replayed
        #: when this controller last became ready: the inactive-master scan waits one interval from here
        self.ready_since: float | None = None
        self.events_applied = 0
        #: broker name -> the last election: when, trigger, candidates, result, why (status page, API)
        self.elections: dict[str, dict[str, Any]] = {}
        #: what a request's turn records once its events are durable (an election's record and count)
        self._on_commit: list[Callable[[], None]] = []
        self._serial = defer.DeferredLock()
        #: at start, a file log of more events than this is rewritten as one snapshot of the state
        self.compact_after = COMPACT_AFTER
        self._notify_opaque = 0

    def _fresh_replicas(self) -> ReplicasInfoManager:
        return ReplicasInfoManager(lambda: bool(self.config["enableElectUncleanMaster"]))

    def alive(self, cluster_name: str, broker_name: str, broker_id: int) -> bool:
        return self.heartbeats.is_broker_active(cluster_name, broker_name, broker_id)

    # -- leadership -----------------------------------------------------------------------------

    def start(self) -> defer.Deferred[None]:
        """Replay the log if leader (errbacks when the store cannot be read), and follow changes."""
        self.leadership.subscribe(self._leadership_changed)
        if self.leadership.is_leader:
            return self._become_leader()
        return defer.succeed(None)

    def _leadership_changed(self, is_leader: bool, leader_address: str | None) -> None:
        self.metrics.role_changes += 1
        if is_leader:  # a new leadership (or term): what the store holds now is the truth
            log.info("controller {id} is the leader now: replaying the log", id=self.self_id or self.address)
            self._become_leader().addErrback(
                lambda failure: log.error("replay failed: {why}", why=failure.getErrorMessage()))
        elif not is_leader:
            if self.ready:
                log.info("controller {id} is no longer the leader (leader: {leader})", id=self.self_id or self.address,
                         leader=leader_address)
            self.ready = False

    def _become_leader(self) -> defer.Deferred[None]:
        return self._serial.run(self._replay)

    @defer.inlineCallbacks
    def _replay(self) -> Any:
        entries = yield self.store.replay()
        replicas = self._fresh_replicas()
        for entry in entries:
            replicas.apply_event(decode_event(entry))
        self.replicas, self.events_applied = replicas, len(entries)
        self.ready = self.leadership.is_leader
        self.ready_since = self.steady() if self.ready else None
        log.info("controller state replayed: {events} events, {groups} broker groups", events=len(entries),
                 groups=len(replicas.replica_info_table))
        self._compact_if_long(len(entries))

    def _compact_if_long(self, records: int) -> None:
        """A file log of more than compact_after records is rewritten as one snapshot of the state:
        at start, and after the turn that took it past (any peer -- a standalone controller has no
        ACL -- can force elections, each an event: once the log was compacted only at start, two
        fake brokers made it grow 12 KB/s for as long as the process ran).  Between turns: no
        append is under way.  A compaction that fails leaves the log as it was."""
        compact = getattr(self.store, "compact", None)  # the file log's; etcd keeps its own history
        if compact is None or records <= self.compact_after:
            return
        try:
            compact(encode_event(ReplicasSnapshotEvent(self.replicas.snapshot())))
        except Exception as exc:  # noqa: BLE001 -- the log is as it was (or says why not): the turn stands
            log.warn("controller log not compacted: {why}", why=str(exc))
        else:
            log.info("controller log compacted: {events} events into one snapshot", events=records)

    # -- requests through the log -------------------------------------------------------------

    def submit(self, supplier: Callable[[], ControllerResult | None],
               write: bool = True) -> defer.Deferred[ControllerResult | None]:
        """Run ``supplier`` at its turn; its events durable and applied before the result fires."""
        if not self.ready:
            return defer.succeed(not_leader())
        return self._serial.run(self._run, supplier, write)

    @defer.inlineCallbacks
    def _run(self, supplier: Callable[[], ControllerResult | None], write: bool) -> Any:
        if not self.ready:
            return not_leader()
        self._on_commit = []
        result = supplier()
        on_commit, self._on_commit = self._on_commit, []
        if result is None or not write or not result.events:
            for record in on_commit:
                record()
            return result
        try:
            yield self.store.append([encode_event(e) for e in result.events])
        except NotLeader as exc:
            self.metrics.log_append_total["failed"] += 1
            self.metrics.log_append_failures["NotLeader"] += 1
            self.ready = False
            log.warn("events not written, not the leader any more (leader: {leader})", leader=exc.leader_address)
            return not_leader()
        except Exception as exc:  # nothing applied: the answer is an error and the state is as it was
            self.metrics.log_append_total["failed"] += 1
            self.metrics.log_append_failures[getattr(exc, "errno_name", type(exc).__name__)] += 1
            raise
        self.metrics.log_append_total["success"] += 1
        for event in result.events:
            self.replicas.apply_event(event)
        for record in on_commit:  # an election the log refused did not happen: not shown, not counted
            record()
        self.events_applied += len(result.events)
        self._compact_if_long(getattr(self.store, "records", 0))
        return result

    # -- elections -------------------------------------------------------------------------------

    def elect_master(self, cluster_name: str, broker_name: str, broker_id: int | None, designate: bool,
                     trigger: str) -> defer.Deferred[ControllerResult | None]:
        def supplier() -> ControllerResult:
            return self._elect(cluster_name, broker_name, broker_id, designate, trigger)

        d = self.submit(supplier)
        d.addCallback(self._notify_if_elected)
        return d

    def _elect(self, cluster_name: str, broker_name: str, broker_id: int | None, designate: bool,
               trigger: str) -> ControllerResult:
        before = self.replicas.sync_state_set_info_table.get(broker_name)
        old_master = before.master_broker_id if before else None
        self.policy.last.candidates, self.policy.last.why = [], "first election: the broker that asked"
        result = self.replicas.elect_master(broker_name, broker_id, designate, self.policy)
        self._on_commit.append(lambda: self.metrics.election(cluster_name, broker_name, result.code))
        if result.code == ControllerResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED:
            return result
        chosen = result.role_change.master_broker_id if result.role_change else None
        record = {"time": self.clock(), "trigger": trigger, "oldMaster": old_master,
                  "candidates": list(self.policy.last.candidates), "newMaster": chosen, "code": int(result.code),
                  "why": self.policy.last.why if result.code in (0, 2011) else (result.remark or "")}
        self._on_commit.append(lambda: self.elections.__setitem__(broker_name, record))
        log.info("election in broker group {group} ({trigger}): old master {old}, candidates {candidates} -> {outcome} "
                 "({why}; code {code})", group=broker_name, trigger=TRIGGERS.get(trigger, trigger), old=old_master,
                 candidates=record["candidates"],
                 outcome=f"new master {chosen}" if chosen is not None else "no new master", why=record["why"],
                 code=result.code)
        return result

    def _notify_if_elected(self, result: ControllerResult | None) -> ControllerResult | None:
        if (result is not None and result.code == ControllerResponseCode.SUCCESS and result.role_change
                and self.config["notifyBrokerRoleChanged"]):
            self.notify_broker_role_changed(result.role_change)
        return result

    def notify_broker_role_changed(self, change: RoleChange) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED (oneway) to every alive member of the group."""
        header = {"masterAddress": change.master_address, "masterEpoch": change.master_epoch,
                  "syncStateSetEpoch": change.sync_state_set_epoch, "masterBrokerId": change.master_broker_id}
        body = bodies.sync_state_set_body(change.sync_state_set, change.sync_state_set_epoch)
        for broker_id, address in change.member_addrs.items():
            if address and self.alive(change.cluster_name, change.broker_name, broker_id):
                self._notify_opaque += 1
                request = RemotingCommand.request(ControllerRequestCode.NOTIFY_BROKER_ROLE_CHANGED,
                                                  bodies.ext_of(header), body, opaque=self._notify_opaque,
                                                  version=V5_3_3, oneway=True)
                log.info("notify broker {addr} that group {group}'s master is {master} ({master_addr}), epoch {epoch}",
                         addr=address, group=change.broker_name, master=change.master_broker_id,
                         master_addr=change.master_address, epoch=change.master_epoch)
                self.notifier(address, request.encode())

    @defer.inlineCallbacks
    def trigger_elect_master(self, broker_name: str, inactive_id: int | None = None) -> Any:
        """The controller's own election (Java's triggerElectMaster), retried up to
        electMasterMaxRetryCount times; with ``inactive_id`` only while that broker is still the
        master when its turn comes; 0 times elects nothing (Java's loop), the failover an operator's."""
        for attempt in range(int(self.config["electMasterMaxRetryCount"])):
            # Java checks "was it the master?" once, then retries the election as such
            def supplier(check: int | None = inactive_id if attempt == 0 else None) -> ControllerResult | None:
                if check is not None:
                    info = self.replicas.sync_state_set_info_table.get(broker_name)
                    if info is None or info.master_broker_id != check:
                        return None  # not the master (any more): nothing to elect
                cluster = self.replicas.replica_info_table[broker_name].cluster_name \
                    if broker_name in self.replicas.replica_info_table else ""
                return self._elect(cluster, broker_name, None, False, "controller")

            try:
                result = yield self.submit(supplier)
            except Exception as exc:
                log.warn("elect-master for broker group {group} failed: {why}", group=broker_name, why=str(exc))
                continue
            if result is None:
                return None
            self._notify_if_elected(result)
            if result.code in (ControllerResponseCode.SUCCESS, ControllerResponseCode.CONTROLLER_NOT_LEADER):
                return result
        return None

    def on_broker_inactive(self, cluster_name: str | None, broker_name: str, broker_id: int | None) -> None:
        log.info("broker inactive: cluster {cluster}, group {group}, id {id}", cluster=cluster_name, group=broker_name,
                 id=broker_id)
        if not self.ready:
            return
        self.trigger_elect_master(broker_name, broker_id).addErrback(
            lambda failure: log.error("election for {group} failed: {why}", group=broker_name,
                                      why=failure.getErrorMessage()))

    def log_new_broker(self, cluster_name: str, broker_name: str, broker_id: int, address: str) -> None:
        log.info("new broker registered: cluster {cluster}, group {group}, id {id}, {addr}", cluster=cluster_name,
                 group=broker_name, id=broker_id, addr=address)

    # -- liveness ----------------------------------------------------------------------------------

    def on_channel_close(self, channel: Hashable) -> None:
        """BrokerHousekeepingService: the broker whose heartbeats came over it is inactive now."""
        identity = self.heartbeats.on_broker_channel_close(channel)
        if identity is not None:
            self.on_broker_inactive(identity.cluster_name, identity.broker_name, identity.broker_id)

    def scan_not_active_broker(self) -> None:
        for identity, info in self.heartbeats.scan_not_active_broker():
            log.warn("broker {addr} (group {group}, id {id}) sent no heartbeat for {ms} ms: inactive",
                     addr=info.broker_addr, group=identity.broker_name, id=identity.broker_id,
                     ms=info.heartbeat_timeout_millis)
            if info.channel is not None:
                self.close_channel(info.channel)
            self.on_broker_inactive(identity.cluster_name, identity.broker_name, identity.broker_id)

    def scan_inactive_master(self) -> None:
        """Groups whose master is gone while a member is alive: elect (a missed trigger's backstop).
        Not within one scanInactiveMasterInterval of becoming leader (``in_first_heartbeat_grace``)."""
        if not self.ready or self.in_first_heartbeat_grace():
            return
        for name in self.replicas.scan_need_reelect_broker_sets(self.alive):
            self.on_broker_inactive(None, name, None)

    def in_first_heartbeat_grace(self) -> bool:
        """A new leader knows no heartbeat (they are not in the log): the first broker of a group to
        beat again would find its master "inactive" and be elected in its place.  Java's
        DLedgerController starts this scan one scanInactiveMasterInterval after it leads; so does this
        manager, by its own clock, whatever runs the scan."""
        grace = float(self.config["scanInactiveMasterInterval"]) / 1000
        return self.ready_since is None or self.steady() - self.ready_since < grace

    # -- metadata ---------------------------------------------------------------------------------

    def metadata(self) -> dict[str, object]:
        """GetMetaDataResponseHeader's fields (1005): answered by leader and followers alike."""
        leader_address = self.address if self.leadership.is_leader else self.leadership.leader_address
        leader_id = next((p.peer_id for p in self.peers if p.address == leader_address), None)
        if self.leadership.is_leader and not leader_id:
            leader_id = self.self_id or None
        peers = "".join(f"{p.peer_id}:{p.address};" for p in self.peers)
        return {"group": self.group or None, "controllerLeaderId": leader_id,
                "controllerLeaderAddress": leader_address, "isLeader": self.ready, "peers": peers}

