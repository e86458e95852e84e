"""RouteInfoManager: the five tables a NameServer keeps, rebuilt from broker registrations.

Same tables and rules as Java's RouteInfoManager (4.9.8, and 5.3.3 where the profile says so).
Channels are opaque hashable ids handed out by the server, so connection loss is one call.
Synchronous and single-threaded: the reactor serialises all calls, which replaces Java's lock.

A registration is worked out first (state/registration.py: decoded and compared in steps, as a
``RegistrationPlan``) and applied here in one place, ``apply_registration``: the only method in
which a registration changes the tables.

The manager keeps no answers.  Every public method that changes the tables is one *change*
(``_one_change``): while it runs, what it touches is collected; once the tables are complete
again, in this order, it counts the change (``generation``: snapshots and plans compare it),
publishes one ``RouteChange`` to its subscriber (``subscribe``: the topics whose routes changed,
the broker groups whose members or flags changed, or everything), then hands its route events
to the listener in the order they happened, each departure with the topics it took away
(``Departure``).  Nobody hears of a change half made, nothing is muted, and what each observer
does is proportional to what changed: a batch of departures is one change, one scan of
topicQueueTable, one publication.  Whoever caches answers (answer_cache.py) subscribes while it
holds some; a heartbeat that changes nothing publishes nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, Concatenate, ParamSpec, TypeVar

from ..bodies.register import TablePieces, TopicConfig
from ..bodies.route import (
    FLAG_UNIT,
    FLAG_UNIT_SUB,
    MASTER_ID,
    PERM_READ,
    PERM_WRITE,
    BrokerData,
    DataVersion,
    QueueData,
)
from ..remoting.fastjson import java_hash_order
from .config import NamesrvConfig
from .registration import Channel as Channel  # re-exported: the server's connection ids
from .registration import RegisterRequest as RegisterRequest  # re-exported: registering in one go
from .registration import (
    RegistrationMemo,
    RegistrationPlan,
    absent_topics,
    changed_configs,
    plan_of,
)

DEFAULT_BROKER_CHANNEL_EXPIRED_TIME = 120_000  # ms
SYNC_BROKER_MEMBER_GROUP_PREFIX = "rmq_sys_SYNC_BROKER_MEMBER_"

LiveKey = Hashable  # brokerAddr (4.9.8) or (clusterName, brokerAddr) (5.3.3)
EventListener = Callable[[str, dict[str, Any]], None]
Notifier = Callable[[str, dict[str, str]], None]
#: what a cached answer shows: a topic's route, or broker tables (the cluster info)
TOPIC, BROKER = "topic", "broker"


@dataclass(slots=True)
class RouteChange:
    """What one change did to the tables, published once they are complete again: the topics
    whose route answers changed, the broker groups whose addresses, zone, flags or filter
    servers changed (so every route naming them, and the cluster info), or everything (tables
    replaced).  Insertion-ordered sets, so a subscriber's work follows the change's size."""

    topics: dict[str, None] = field(default_factory=dict)
    brokers: dict[str | None, None] = field(default_factory=dict)
    everything: bool = False

    def __bool__(self) -> bool:
        return bool(self.topics or self.brokers or self.everything)


@dataclass(slots=True)
class Departure:
    """A route event as it happened (``kind``, ``info``), and, for a broker whose leaving
    emptied its group, the topics that left topicQueueTable with it (no group serves them now)."""

    kind: str
    info: dict[str, Any]
    lost_topics: list[str] = field(default_factory=list)


ChangeListener = Callable[[RouteChange], None]
#: hears each departure that took topics away: (kind, info, the topics), after the change
LostListener = Callable[[str, dict[str, Any], list[str]], None]


class _Pending:
    """The change being made: what it touched so far (``collect``: topic by topic, only when
    someone subscribes) and its events, published by ``_one_change`` when it ends."""

    __slots__ = ("change", "collect", "dirty", "events")

    def __init__(self, collect: bool) -> None:
        self.change = RouteChange()
        self.collect = collect
        self.dirty = False
        self.events: list[Departure] = []


P = ParamSpec("P")
R = TypeVar("R")


def _one_change(method: Callable[Concatenate[RouteInfoManager, P], R]) -> Callable[Concatenate[RouteInfoManager, P], R]:
    """The method is one change of the tables: published when it ends (a call from inside another
    change is part of that one)."""
    @functools.wraps(method)
    def change(self: RouteInfoManager, /, *args: P.args, **kwargs: P.kwargs) -> R:
        if self._pending is not None:
            return method(self, *args, **kwargs)
        pending = self._pending = _Pending(self.on_change is not None)
        try:
            return method(self, *args, **kwargs)
        finally:
            self._pending = None
            self._publish(pending)
    return change


@dataclass(slots=True)
class BrokerLiveInfo:
    lastUpdateTimestamp: int
    heartbeatTimeoutMillis: int
    dataVersion: DataVersion
    channel: Channel | None
    haServerAddr: str | None
    #: the table last applied in full from this broker (see registration_memo)
    memo: RegistrationMemo | None = None
    topicCount: int = 0
    #: MQVersion ordinal of the broker's last registration (status page only)
    version: int | None = None
    #: loaded from a route snapshot and not registered since (state/snapshot.py)
    restored: bool = False


@dataclass(slots=True)
class RegisterBrokerResult:
    haServerAddr: str | None = None
    masterAddr: str | None = None


@dataclass(slots=True)
class RouteData:
    """pickupTopicRouteData's result, before encoding."""

    queueDatas: list[QueueData]
    brokerDatas: list[BrokerData]
    filterServerTable: dict[str, list[str]] = field(default_factory=dict)
    topicQueueMappingByBroker: dict[str, Any] | None = None


class RouteInfoManager:
    def __init__(self, config: NamesrvConfig, clock: Callable[[], float], *, listener: EventListener | None = None,
                 notifier: Notifier | None = None, on_lost: LostListener | None = None) -> None:
        self.config = config
        self.profile = config.profile
        self._clock = clock
        self._listener = listener or (lambda kind, info: None)
        self._notifier = notifier or (lambda addr, header: None)
        self.topicQueueTable: dict[str, dict[str, QueueData]] = {}
        self.brokerAddrTable: dict[str, BrokerData] = {}
        self.clusterAddrTable: dict[str, dict[str, None]] = {}  # an insertion-ordered set
        self.brokerLiveTable: dict[LiveKey, BrokerLiveInfo] = {}
        self.filterServerTable: dict[LiveKey, list[str]] = {}
        self.topicQueueMappingInfoTable: dict[str, dict[str, Any]] = {}
        self.generation = 0
        #: the one subscriber to changes (the answer cache, while it holds answers); None: nobody.
        #: Set through subscribe/unsubscribe.
        self.on_change: ChangeListener | None = None
        #: hears the topics each departure took away (lost_topics.py), after the change
        self.on_lost = on_lost
        self._pending: _Pending | None = None

    # -- switches, read from the running configuration (UPDATE_NAMESRV_CONFIG changes them) ---
    @property
    def delete_topic_with_registration(self) -> bool:
        return bool(self.config["deleteTopicWithBrokerRegistration"])

    @property
    def support_acting_master(self) -> bool:
        return bool(self.config["supportActingMaster"])

    @property
    def notify_min_broker_id_changed(self) -> bool:
        return bool(self.config["notifyMinBrokerIdChanged"])

    # -- change publication -----------------------------------------------------------------
    def subscribe(self, listener: ChangeListener) -> None:
        """``listener(kind, name)`` hears every change from now on (one subscriber: the answer cache)."""
        self.on_change = listener

    def unsubscribe(self, listener: ChangeListener) -> None:
        if self.on_change == listener:
            self.on_change = None

    def _publish(self, pending: _Pending) -> None:
        """A change is complete: count it, publish what it did, then its events in order."""
        if pending.dirty:
            self.generation += 1
            subscriber = self.on_change
            if subscriber is not None:
                change = pending.change if pending.collect else RouteChange(everything=True)
                if change:
                    subscriber(change)
        for event in pending.events:  # the lost topics first: a listener may change the tables again
            if event.lost_topics and self.on_lost is not None:
                self.on_lost(event.kind, event.info, event.lost_topics)
            self._listener(event.kind, event.info)

    def _topic_changed(self, topic: str) -> None:
        """Inside a change: anything a route answer for ``topic`` shows changed (per topic)."""
        pending: _Pending = self._pending  # type: ignore[assignment]
        pending.dirty = True
        if pending.collect:
            pending.change.topics[topic] = None

    def _topics_changed(self, topics: list[str]) -> None:
        """``_topic_changed`` for each of ``topics``, in one call (a batch of departures may
        touch every topic held)."""
        if topics:
            pending: _Pending = self._pending  # type: ignore[assignment]
            pending.dirty = True
            if pending.collect:
                pending.change.topics.update(dict.fromkeys(topics))

    def _broker_changed(self, broker_name: str | None) -> None:
        """Inside a change: a group's addresses, zone, flags or queue permissions changed, so
        every route naming it is stale, and so is the cluster info."""
        pending: _Pending = self._pending  # type: ignore[assignment]
        pending.dirty = True
        pending.change.brokers[broker_name] = None

    def _everything_changed(self) -> None:
        pending: _Pending = self._pending  # type: ignore[assignment]
        pending.dirty = True
        pending.change.everything = True

    @_one_change
    def topic_changed(self, topic: str) -> None:
        """Anything a route answer for ``topic`` shows changed (a change of its own)."""
        self._topic_changed(topic)

    @_one_change
    def broker_changed(self, broker_name: str | None) -> None:
        """A group changed (a change of its own)."""
        self._broker_changed(broker_name)

    @_one_change
    def routes_changed(self) -> None:
        """Everything may have changed (tables replaced, filter servers dropped)."""
        self._everything_changed()

    def _forget_tables(self) -> None:
        """Queue data was changed by hand (wipe, add, delete, 217): the next registration must
        be applied in full again, as Java re-applies it."""
        for live in self.brokerLiveTable.values():
            live.memo = None

    def registration_memo(self, cluster: str | None, addr: str | None, broker_name: str | None,
                          broker_id: int, enable_acting_master: bool | None) -> RegistrationMemo | None:
        """The one check of what a registration may skip: the memo of the table this broker's
        queues hold now, when registering the same table again cannot change anything (same id
        slot, so not a first registration; same acting-master flag; nothing changed its queue data
        since), else None."""
        live = self.brokerLiveTable.get(self.live_key(cluster, addr))
        broker = self.brokerAddrTable.get(broker_name)  # type: ignore[arg-type]
        if live is None or live.memo is None or broker is None or broker.brokerAddrs.get(broker_id) != addr:
            return None
        if self.profile.acting_master_rules and broker.enableActingMaster != bool(enable_acting_master):
            return None
        return live.memo

    def reusable_pieces(self, memo: RegistrationMemo | None) -> TablePieces | None:
        """The memo's pieces when a piece sent again need not be decoded: not with
        deleteTopicWithBrokerRegistration, which needs every name."""
        return None if memo is None or self.delete_topic_with_registration else memo.pieces

    # -- helpers ----------------------------------------------------------------------------
    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    def live_key(self, cluster: str | None, addr: str | None) -> LiveKey:
        return (cluster, addr) if self.profile.live_key_includes_cluster else addr

    @staticmethod
    def _addr_of(key: LiveKey) -> str:
        return key[1] if isinstance(key, tuple) else key  # type: ignore[return-value]

    def _same_version(self, a: DataVersion | None, b: DataVersion | None) -> bool:
        if a is None or b is None:
            return False
        same = a.timestamp == b.timestamp and a.counter == b.counter
        return same and (not self.profile.data_version_includes_state or a.stateVersion == b.stateVersion)

    def _emit(self, kind: str, **info: Any) -> Departure:
        """Inside a change: an event, handed to the listener once the change is complete."""
        event = Departure(kind, info)
        self._pending.events.append(event)  # type: ignore[union-attr]
        return event

    # -- registration -----------------------------------------------------------------------
    @property
    def removes_absent_topics(self) -> bool:
        """A registration removes the broker's topics its table lacks (5.3.3's
        deleteTopicWithBrokerRegistration): its plan lists them."""
        return self.profile.prime_slave_applies_topics and self.delete_topic_with_registration

    @_one_change
    def register_broker(self, req: RegisterRequest) -> RegisterBrokerResult | None:
        """Java's registerBroker in one go: a plan with nothing compared yet, applied (the
        comparison is then made while it applies)."""
        return self.apply_registration(plan_of(req, self.generation))

    @_one_change
    def apply_registration(self, plan: RegistrationPlan) -> RegisterBrokerResult | None:
        """Java's registerBroker, applying a plan (state/registration.py): the one place a
        registration changes the tables. None means 5.3.3's refusal ("register broker failed").
        The plan's comparison holds if nothing changed since it was made (its generation); else it
        is made again here, where what follows changes no queue data before _apply_topics."""
        p = self.profile
        req = plan.request
        fresh = plan.generation == self.generation
        names = self.clusterAddrTable.setdefault(req.clusterName, {})
        if req.brokerName not in names:
            names[req.brokerName] = None
            self._broker_changed(req.brokerName)
        broker = self.brokerAddrTable.get(req.brokerName)
        register_first = broker is None
        if broker is None:
            broker = self.brokerAddrTable[req.brokerName] = BrokerData(req.clusterName, req.brokerName, {})
            self._broker_changed(req.brokerName)
        if p.acting_master_rules and (broker.enableActingMaster, broker.zoneName) != (
                bool(req.enableActingMaster), req.zoneName):
            broker.enableActingMaster = bool(req.enableActingMaster)
            broker.zoneName = req.zoneName
            self._broker_changed(req.brokerName)
        addrs = broker.brokerAddrs
        prev_min_id = min(addrs) if addrs else 0
        # a slave switching to master: one address, one id
        for broker_id in [i for i, a in addrs.items() if a == req.brokerAddr and i != req.brokerId]:
            del addrs[broker_id]
            self._broker_changed(req.brokerName)
        if p.acting_master_rules and self._older_state_wins(req, addrs.get(req.brokerId)):
            self.brokerLiveTable.pop(self.live_key(req.clusterName, req.brokerAddr), None)
            return RegisterBrokerResult()
        key = self.live_key(req.clusterName, req.brokerAddr)
        previous = self.brokerLiveTable.get(key)
        unchanged = req.body.tableUnchanged and previous is not None
        topic_count = previous.topicCount if unchanged else plan.topicCount  # type: ignore[union-attr]
        if (p.refuse_first_single_topic_registration and req.brokerId not in addrs
                and topic_count == 1):
            self._emit("refused", broker=req.brokerName, addr=req.brokerAddr,
                       reason="first registration carries a single topic")
            return None
        old_addr = addrs.get(req.brokerId)
        if old_addr != req.brokerAddr:
            addrs[req.brokerId] = req.brokerAddr
            self._broker_changed(req.brokerName)
        # a broker restored from a snapshot applies its whole table once, as a new one does
        register_first = register_first or not old_addr or (previous is not None and previous.restored)
        if unchanged:
            memo = previous.memo  # type: ignore[union-attr]
        else:
            holds_table = self._apply_topics(plan, broker, register_first, fresh)
            memo = plan.memo if holds_table else None
        self.brokerLiveTable[key] = BrokerLiveInfo(
            self.now_ms(),
            DEFAULT_BROKER_CHANNEL_EXPIRED_TIME if req.heartbeatTimeoutMillis is None else req.heartbeatTimeoutMillis,
            req.body.dataVersion, req.channel, req.haServerAddr, memo, topic_count, req.version)
        if previous is None:
            self._emit("registered", cluster=req.clusterName, broker=req.brokerName, id=req.brokerId,
                       addr=req.brokerAddr, topics=topic_count)
        elif previous.restored:
            self._emit("confirmed", cluster=req.clusterName, broker=req.brokerName, id=req.brokerId,
                       addr=req.brokerAddr, topics=topic_count)
        elif not self._same_version(previous.dataVersion, req.body.dataVersion):
            self._emit("changed", cluster=req.clusterName, broker=req.brokerName, id=req.brokerId,
                       addr=req.brokerAddr, topics=topic_count)
        servers = self.filterServerTable.get(key, []) if unchanged else list(req.body.filterServerList)
        if servers != self.filterServerTable.get(key, []):
            if servers:
                self.filterServerTable[key] = servers
            else:
                del self.filterServerTable[key]
            self._broker_changed(req.brokerName)
        result = RegisterBrokerResult()
        if req.brokerId != MASTER_ID:
            master_addr = addrs.get(MASTER_ID)
            master = self.brokerLiveTable.get(self.live_key(req.clusterName, master_addr)) if master_addr else None
            if master is not None:
                result.haServerAddr, result.masterAddr = master.haServerAddr, master_addr
        if p.acting_master_rules and req.brokerId < prev_min_id and self.notify_min_broker_id_changed:
            self._notify_min_broker_id(addrs, None, req.haServerAddr)
        return result

    def _older_state_wins(self, req: RegisterRequest, old_addr: str | None) -> bool:
        """5.3.3: another address already holds this id with a newer stateVersion."""
        if old_addr is None or old_addr == req.brokerAddr:
            return False
        old = self.brokerLiveTable.get(self.live_key(req.clusterName, old_addr))
        return old is not None and old.dataVersion.stateVersion > req.body.dataVersion.stateVersion

    def _apply_topics(self, plan: RegistrationPlan, broker: BrokerData, register_first: bool, fresh: bool) -> bool:
        """Java's topic application; True when the queues now hold this table as applying it
        whole leaves them (so the same table again changes nothing: the memo may be kept).
        That is so when every topic of it was (re)applied, and also when the dataVersion was
        the same and no topic of it differs from its queue data: a 5.x broker's periodic
        registration after its incremental one (registerIncrementBrokerData: the new topic
        alone, the new dataVersion) is such a table, every 30 s until the next version.
        ``fresh``: the plan's comparison still holds."""
        req = plan.request
        changes = plan.changes if fresh else None
        is_master = req.brokerId == MASTER_ID
        is_prime_slave = (self.profile.prime_slave_applies_topics and req.enableActingMaster is not None
                          and not is_master and req.brokerId == min(broker.brokerAddrs))
        if not (is_master or is_prime_slave):
            return False
        table = req.body.topicConfigTable
        changed = not self._same_version(self.query_broker_topic_config(req.clusterName, req.brokerAddr),
                                         req.body.dataVersion)
        if not self.profile.prime_slave_applies_topics:  # 4.9.8: all topics or none
            differing = self._changed_configs(req.brokerName, table) if changes is None else changes
            if changed or register_first:
                for config in differing:
                    self._create_and_update_queue_data(req.brokerName, config)
            return changed or register_first or not differing
        mappings = req.body.topicQueueMappingInfoMap
        if self.delete_topic_with_registration and not mappings:
            removals = plan.removals if fresh and plan.removals is not None else absent_topics(
                self.topicQueueTable, req.brokerName, table)
            for topic in removals:
                self._remove_queue_data(topic, req.brokerName)
        read_only = is_prime_slave and broker.enableActingMaster
        configs: Iterable[TopicConfig] = table.values() if read_only else (
            self._changed_configs(req.brokerName, table) if changes is None else changes)
        kept = False  # a config of the table left as its queue data was: Java's same-version rule
        for config in configs:
            known = self.topicQueueTable.get(config.topicName)
            if register_first or changed or not known or req.brokerName not in known:
                perm = config.perm
                if read_only:
                    perm &= ~PERM_WRITE
                self._create_and_update_queue_data(req.brokerName, config, perm)
            else:
                kept = True
        if changed or register_first:
            for topic, info in mappings.items():
                self.topicQueueMappingInfoTable.setdefault(topic, {})[str(info.get("bname"))] = info
                self._topic_changed(topic)
            return True
        # the same dataVersion: the table is held whole if no config of it was kept as it was (only
        # those differing are looked at, except by a read-only prime slave, which then keeps no
        # memo) and it has no mapping info (applied only with a new dataVersion)
        return not kept and not mappings

    def _changed_configs(self, broker_name: str, table: dict[str, TopicConfig]) -> list[TopicConfig]:
        """The comparison a plan would have made (registration.changed_configs), made now."""
        return changed_configs(self.topicQueueTable, broker_name, table.values())

    def _create_and_update_queue_data(self, broker_name: str, config: TopicConfig, perm: int | None = None) -> None:
        perm = config.perm if perm is None else perm
        queues = self.topicQueueTable.get(config.topicName)
        if queues is None:
            queues = self.topicQueueTable[config.topicName] = {}
        else:
            old = queues.get(broker_name)
            if (old is not None and old.readQueueNums == config.readQueueNums and old.perm == perm
                    and old.writeQueueNums == config.writeQueueNums and old.topicSysFlag == config.topicSysFlag):
                return
        queues[broker_name] = QueueData(broker_name, config.readQueueNums, config.writeQueueNums, perm,
                                        config.topicSysFlag)
        self._topic_changed(config.topicName)

    def _remove_queue_data(self, topic: str, broker_name: str) -> None:
        queues = self.topicQueueTable.get(topic)
        if queues is not None and broker_name in queues:
            del queues[broker_name]
            if not queues:
                del self.topicQueueTable[topic]
            self._topic_changed(topic)

    @_one_change
    def register_topic(self, topic: str | None, queue_datas: list[QueueData]) -> None:
        """REGISTER_TOPIC_IN_NAMESRV: stops at the first unknown broker, like Java (partial)."""
        if not queue_datas or topic is None:
            return
        self._forget_tables()
        existing = self.topicQueueTable.get(topic)
        queues = existing if existing is not None else {}
        for queue in queue_datas:
            if queue.brokerName not in self.brokerAddrTable:
                return
            queues[queue.brokerName] = queue
            self._topic_changed(topic)
        if existing is None:
            self.topicQueueTable[topic] = queues

    # -- liveness ---------------------------------------------------------------------------
    def query_broker_topic_config(self, cluster: str | None, addr: str | None) -> DataVersion | None:
        live = self.brokerLiveTable.get(self.live_key(cluster, addr))
        return live.dataVersion if live else None

    def is_broker_topic_config_changed(self, cluster: str | None, addr: str | None,
                                       version: DataVersion | None) -> bool:
        return not self._same_version(self.query_broker_topic_config(cluster, addr), version)

    def update_broker_info_update_timestamp(self, cluster: str | None, addr: str | None) -> None:
        live = self.brokerLiveTable.get(self.live_key(cluster, addr))
        if live is not None:
            live.lastUpdateTimestamp = self.now_ms()

    @_one_change
    def scan_not_active_broker(self) -> list[Channel]:
        """Remove brokers whose heartbeat is older than their timeout; returns their channels,
        which the caller closes."""
        now = self.now_ms()
        expired = [(key, live) for key, live in self.brokerLiveTable.items()
                   if live.lastUpdateTimestamp + live.heartbeatTimeoutMillis < now]
        self._destroy_all([(key, expiry_reason(now - live.lastUpdateTimestamp, live.heartbeatTimeoutMillis))
                           for key, live in expired])
        return [live.channel for _, live in expired if live.channel is not None]

    def on_channel_destroy(self, channel: Channel, reason: str = "connection closed") -> None:
        """The connection a broker registered over is gone: the broker goes with it."""
        self.on_channels_destroy({channel: reason})

    @_one_change
    def on_channels_destroy(self, closed: dict[Channel, str]) -> None:
        """Connections lost together (a rack's network), each with its reason, in the order they
        closed: the same events and tables as one on_channel_destroy per channel, but the groups
        they empty leave topicQueueTable in one scan instead of one scan each."""
        by_channel: dict[Channel, list[LiveKey]] = {}
        for key, live in self.brokerLiveTable.items():
            if live.channel in closed:
                by_channel.setdefault(live.channel, []).append(key)
        self._destroy_all([(key, reason) for channel, reason in closed.items() for key in by_channel.get(channel, ())])

    def _destroy_all(self, doomed: list[tuple[LiveKey, str]]) -> None:
        """Destroy brokers, in order, inside one change: the groups they empty leave
        topicQueueTable in one scan, and each broker finds its groups through one index of
        brokerAddrTable by address (not a walk of every group per broker)."""
        if not doomed:
            return
        groups_of: dict[str, list[BrokerData]] = {}
        for broker in self.brokerAddrTable.values():
            for addr in set(broker.brokerAddrs.values()):
                groups_of.setdefault(addr, []).append(broker)
        emptied: dict[str, Departure | None] = {}
        for key, reason in doomed:
            self._destroy(key, reason, groups_of, emptied)
        self._remove_groups_queue_data(emptied)

    def _destroy(self, key: LiveKey, reason: str, groups_of: dict[str, list[BrokerData]],
                 emptied: dict[str, Departure | None]) -> None:
        addr = self._addr_of(key)
        cluster = key[0] if isinstance(key, tuple) else None
        self.brokerLiveTable.pop(key, None)
        self._drop_filter_servers(key)
        for broker in groups_of.get(addr, ()):  # in brokerAddrTable's order, as Java walks it
            if cluster is not None and broker.cluster != cluster:
                continue
            broker_id = next((i for i, a in broker.brokerAddrs.items() if a == addr), None)
            if broker_id is not None:
                kind = reason.partition(":")[0] if reason.startswith(("expired:", "idle:")) else "closed"
                event = self._emit(kind, cluster=broker.cluster, broker=broker.brokerName, id=broker_id, addr=addr,
                                   reason=reason)
                self._remove_member(broker.cluster, broker.brokerName, addr, broker_id, emptied=emptied,
                                    departure=event)
                return

    # -- unregistration ---------------------------------------------------------------------
    @_one_change
    def unregister_broker(self, cluster: str | None, addr: str | None, broker_name: str | None,
                          broker_id: int | None) -> None:
        key = self.live_key(cluster, addr)
        self.brokerLiveTable.pop(key, None)
        self._drop_filter_servers(key)
        broker = self.brokerAddrTable.get(broker_name) if broker_name is not None else None
        if broker is None:
            return
        if self.profile.unregister_by_address:
            removed_id = next((i for i, a in broker.brokerAddrs.items() if a == addr), None)
        else:
            removed_id = broker_id if broker_id in broker.brokerAddrs else None
        event = self._emit("unregistered", cluster=cluster, broker=broker_name, id=broker_id, addr=addr)
        removed_addr = addr if removed_id is None else broker.brokerAddrs.get(removed_id, addr)
        self._remove_member(cluster, broker.brokerName, removed_addr, removed_id, cluster_of_request=True,
                            departure=event)

    def _drop_filter_servers(self, key: LiveKey) -> None:
        """Routes list filter servers by address, whichever group holds it: drop them all."""
        if self.filterServerTable.pop(key, None) is not None:
            self._everything_changed()

    def _remove_member(self, cluster: str | None, broker_name: str, addr: str | None, broker_id: int | None,
                       cluster_of_request: bool = False, emptied: dict[str, Departure | None] | None = None,
                       departure: Departure | None = None) -> None:
        """Drop one address from a broker group; an emptied group leaves every table (its queue
        data later, with the other groups in ``emptied``, when the caller collects them), and
        the topics it leaves without a group are ``departure``'s lost topics."""
        broker = self.brokerAddrTable[broker_name]
        was_min = bool(broker.brokerAddrs) and broker_id == min(broker.brokerAddrs)
        self._broker_changed(broker_name)
        if broker_id is not None:
            broker.brokerAddrs.pop(broker_id, None)
        if broker.brokerAddrs:
            if self.profile.acting_master_rules:
                self._reduced_group(broker, addr, was_min)
            return
        del self.brokerAddrTable[broker_name]
        owner = cluster if cluster_of_request else broker.cluster
        names = None if owner is None else self.clusterAddrTable.get(owner)
        if owner is not None and names is not None and broker_name in names:
            del names[broker_name]
            if not names:
                del self.clusterAddrTable[owner]
        if emptied is None:
            self._remove_groups_queue_data({broker_name: departure})
        else:
            emptied.pop(broker_name, None)  # its last departure is the one that emptied it
            emptied[broker_name] = departure

    def _remove_groups_queue_data(self, emptied: dict[str, Departure | None]) -> None:
        """Emptied groups leave topicQueueTable: one scan, whatever their number (a table holds up
        to 100k topics; isdisjoint walks only each topic's few queues).  A topic no group serves
        any more leaves the table, a lost topic of the departure that emptied the last of its
        groups (``emptied`` is in departure order)."""
        if not emptied:
            return
        order = {name: index for index, name in enumerate(emptied)}
        last = order.__getitem__
        names = order.keys()
        table = self.topicQueueTable
        disjoint = names.isdisjoint
        touched = [t for t, queues in table.items() if not disjoint(queues)]
        for topic in touched:
            queues = table[topic]
            leaving = [name for name in queues if name in order]
            for broker_name in leaving:
                del queues[broker_name]
            if not queues:
                del table[topic]
                departure = emptied[leaving[0] if len(leaving) == 1 else max(leaving, key=last)]
                if departure is not None:
                    departure.lost_topics.append(topic)
        self._topics_changed(touched)

    def _reduced_group(self, broker: BrokerData, offline_addr: str | None, was_min: bool) -> None:
        """5.3.3 cleanTopicByUnRegisterRequests: a shrunken acting-master group without a master
        loses write perm, whichever member left; only the lowest id leaving is notified."""
        if not broker.enableActingMaster:
            return
        if min(broker.brokerAddrs) > 0:
            self._forget_tables()
            for queues in self.topicQueueTable.values():
                queue = queues.get(broker.brokerName)
                if queue is not None:
                    queue.perm &= ~PERM_WRITE
        if was_min and self.notify_min_broker_id_changed:
            self._notify_min_broker_id(broker.brokerAddrs, offline_addr, None)

    def _notify_min_broker_id(self, addrs: dict[int, str], offline_addr: str | None, ha_addr: str | None) -> None:
        """NOTIFY_MIN_BROKER_ID_CHANGE to the group (chooseBrokerAddrsToNotify)."""
        if not addrs:
            return
        min_id = min(addrs)
        header = {"minBrokerId": str(min_id), "minBrokerAddr": addrs[min_id]}
        if offline_addr is not None:
            header["offlineBrokerAddr"] = offline_addr
        if ha_addr is not None:
            header["haBrokerAddr"] = ha_addr
        if offline_addr is not None or len(addrs) == 1:
            targets = list(addrs.values())
        else:
            targets = [a for i, a in addrs.items() if i != min_id]
        for target in targets:
            self._notifier(target, header)

    # -- administration ---------------------------------------------------------------------
    @_one_change
    def wipe_write_perm_of_broker(self, broker_name: str | None) -> int:
        return self._operate_write_perm(broker_name, lambda perm: perm & ~PERM_WRITE)

    @_one_change
    def add_write_perm_of_broker(self, broker_name: str | None) -> int:
        return self._operate_write_perm(broker_name, lambda perm: PERM_READ | PERM_WRITE)

    def _operate_write_perm(self, broker_name: str | None, change: Callable[[int], int]) -> int:
        self._forget_tables()
        count = 0
        for queues in self.topicQueueTable.values():
            queue = queues.get(broker_name)  # type: ignore[arg-type]
            if queue is not None:
                queue.perm = change(queue.perm)
                count += 1
        self._broker_changed(broker_name)
        return count

    @_one_change
    def delete_topic(self, topic: str | None, cluster: str | None = None) -> None:
        self._forget_tables()
        if not cluster:
            if self.topicQueueTable.pop(topic, None) is not None:  # type: ignore[arg-type]
                self._topic_changed(topic)  # type: ignore[arg-type]
            return
        for broker_name in list(self.clusterAddrTable.get(cluster, ())):
            self._remove_queue_data(topic, broker_name)  # type: ignore[arg-type]

    # -- queries ----------------------------------------------------------------------------
    def pickup_topic_route_data(self, topic: str | None) -> RouteData | None:
        queues = self.topicQueueTable.get(topic) if topic is not None else None
        if not queues:
            return None
        names = java_hash_order(queues)
        brokers: list[BrokerData] = []
        filter_servers: dict[str, list[str]] = {}
        for name in names:
            broker = self.brokerAddrTable.get(name)
            if broker is None:
                continue
            clone = BrokerData(broker.cluster, broker.brokerName, dict(broker.brokerAddrs), broker.zoneName,
                               broker.enableActingMaster)
            brokers.append(clone)
            for addr in clone.brokerAddrs.values():
                servers = self.filterServerTable.get(self.live_key(clone.cluster, addr))
                if servers:
                    filter_servers[addr] = servers
        if not brokers:
            return None
        route = RouteData([queues[n] for n in names], brokers, filter_servers)
        if self.profile.v5_bodies:
            route.topicQueueMappingByBroker = self.topicQueueMappingInfoTable.get(topic)  # type: ignore[arg-type]
            if self.support_acting_master and not topic.startswith(SYNC_BROKER_MEMBER_GROUP_PREFIX):  # type: ignore[union-attr]
                self._apply_acting_master(route)
        return route

    @staticmethod
    def _apply_acting_master(route: RouteData) -> None:
        """supportActingMaster: a master-less group whose queues are read-only answers its
        lowest-id slave as id 0."""
        perms = {q.brokerName: q.perm for q in route.queueDatas}
        for broker in route.brokerDatas:
            addrs = broker.brokerAddrs
            if not addrs or MASTER_ID in addrs or not broker.enableActingMaster:
                continue
            if broker.brokerName in perms and not perms[broker.brokerName] & PERM_WRITE:
                addrs[MASTER_ID] = addrs.pop(min(addrs))

    def all_topics(self) -> list[str]:
        return list(self.topicQueueTable)

    def topics_by_cluster(self, cluster: str | None) -> list[str]:
        names = self.clusterAddrTable.get(cluster) if cluster is not None else None
        if not names:
            return []
        return [t for t, queues in self.topicQueueTable.items() if any(n in queues for n in names)]

    def system_topic_list(self) -> tuple[list[str], str | None]:
        """GET_SYSTEM_TOPIC_LIST_FROM_NS: cluster names and broker names (a set), plus one address."""
        topics = dict.fromkeys(self.clusterAddrTable)
        for names in self.clusterAddrTable.values():
            topics.update(names)
        addr = None
        for name in java_hash_order(self.brokerAddrTable):
            addrs = self.brokerAddrTable[name].brokerAddrs
            if addrs:
                addr = addrs[java_hash_order(addrs)[0]]
                break
        return list(topics), addr

    def unit_topics(self, test: Callable[[int], bool]) -> list[str]:
        """Topics whose first QueueData (Java's HashMap order) passes ``test`` on topicSysFlag."""
        result = []
        for topic, queues in self.topicQueueTable.items():
            if queues and test(queues[java_hash_order(queues)[0]].topicSysFlag):
                result.append(topic)
        return result

    def broker_member_group(self, broker_name: str | None) -> dict[int, str]:
        broker = self.brokerAddrTable.get(broker_name) if broker_name is not None else None
        return dict(broker.brokerAddrs) if broker else {}


def expiry_reason(silent_ms: int, timeout_ms: int) -> str:
    return f"expired: no heartbeat for {silent_ms / 1000:g} s (timeout {timeout_ms / 1000:g} s)"


def has_unit_flag(flag: int) -> bool:
    return flag & FLAG_UNIT == FLAG_UNIT


def has_unit_sub_flag(flag: int) -> bool:
    return flag & FLAG_UNIT_SUB == FLAG_UNIT_SUB
