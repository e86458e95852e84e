"""RouteInfoManager: the five tables a NameServer keeps, rebuilt from broker registrations.

Same tables and rules as Java's RouteInfoManager (4.9.8, and 5.3.3 where the profile says so).
Channels are opaque hashable ids handed out by the server, so connection loss is one call.
Synchronous and single-threaded: the reactor serialises all calls, which replaces Java's lock.

A registration is worked out first (state/registration.py: decoded, compared and its entries
staged in steps, as a ``RegistrationPlan``) and applied here in one place, ``apply_registration``:
the only method in which a registration changes the tables.

The manager keeps no answers.  Every public method that changes the tables is one *change*
(``_one_change``): while it runs, what it touches is collected; once the tables are complete
again, in this order, it counts the change (``generation``: snapshots and plans compare it),
publishes one ``RouteChange`` to its subscriber (``subscribe``: the topics whose routes changed,
the broker groups whose members or flags changed or that left, or everything), then hands its
route events to the listener in the order they happened, each departure with the topics it took
away (``Departure``).  Nobody hears of a change half made, nothing is muted, and what each
observer does is proportional to what changed: a batch of departures is one change, one walk of
topicQueueTable, one publication.  Whoever caches answers (answer_cache.py) subscribes while it
holds some; a heartbeat that changes nothing publishes nothing.

A change of many topics is complete when it is committed, but written into topicQueueTable after,
a slice per step (state/settling.py: a registration's staged entries; the queues of groups that
left): lookups read the table through what is still to write (``pickup_topic_route_data``), so
they see every change whole, as under Java's write lock, and no step holds the reactor for as
long as the table is big.  Whoever walks the table (``topicQueueTable``) or changes it finishes
the writing first; ``settle_steps`` writes it in steps, and ``on_settle`` hears that there is
some to write.  Departures' events wait for it: their lost topics are found while writing.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Collection, Container, Hashable, Iterable, Mapping, Set
from dataclasses import dataclass, field
from itertools import repeat, starmap
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

import msgspec

from ..bodies.register import RegistrationRefused, TablePieces
from ..bodies.register_header import RegisterBrokerHeader
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
from ..remoting.fastjson import bucket_order, java_hash_order, java_spread, table_size
from ..steps import Steps
from .config import NamesrvConfig
from .queue_table import TopicQueueTable
from .registration import SYNC_BROKER_MEMBER_GROUP_PREFIX as SYNC_BROKER_MEMBER_GROUP_PREFIX  # re-exported
from .registration import Channel as Channel  # re-exported: the server's connection ids
from .registration import (
    Entries,
    Memos,
    QueueView,
    RegistrationPlan,
    Staged,
    Staging,
    TopicRules,
    memo_of,
    plan_of,
    stage_all,
    write_off_by_design,
)
from .registration import RegisterRequest as RegisterRequest  # re-exported: registering in one go
from .settling import LET_GO_PER_STEP, WRITE_PER_STEP, Departed, Layer, PermChanged, todo_of, write_staged
from .settling import Staged as StagedEntries

#: RouteInfoManager.DEFAULT_BROKER_CHANNEL_EXPIRED_TIME (ms, 4.9.8 and 5.3.3): a broker silent this long
#: expires unless it set its own heartbeatTimeoutMillis (the controller's is 10 s: controller/codes.py)
DEFAULT_BROKER_CHANNEL_EXPIRED_TIME = 120_000
#: a change that writes at most a step's worth of entries writes them at once, not in steps
WRITE_AT_ONCE = WRITE_PER_STEP
#: route events handed to their listeners in one step when more wait (``_hand_over``): each is a
#: log line, counters and the page's events, some tens of microseconds; a departure that took
#: topics away is the last of its step (the lost topics' keeper looks at up to a thousand of them)
EVENTS_PER_STEP = 32
#: bodies a broker's memos remember (one per piece of a table sent in pieces: 5.x sends pieces of
#: splitRegistrationSize topics, 800 by default); beyond, the oldest are forgotten
MAX_MEMOS = 4096

LiveKey = Hashable  # brokerAddr (4.9.8) or (clusterName, brokerAddr) (5.3.3)
EventListener = Callable[[str, dict[str, Any]], None]
Notifier = Callable[[str, dict[str, str]], None]
#: what a cached answer shows: a topic's route, or broker tables (the cluster info)
TOPIC, BROKER = "topic", "broker"


class RouteChange(msgspec.Struct):
    """What one change did to the tables, published once they are complete again: the topics
    whose route answers changed, the broker groups whose addresses, zone, flags or filter
    servers changed (so every route naming them, and the cluster info), those that left
    (``left``: also every route naming them; their topics may have left the table), or
    everything (tables replaced).  Insertion-ordered, so a subscriber's work follows the
    change's size; ``topics`` may be a registration's staged entries' keys (handed over, not
    copied: a big table's are by the hundred thousand)."""

    topics: Set[str] = frozenset()
    brokers: dict[str | None, None] = msgspec.field(default_factory=dict)
    left: dict[str, None] = msgspec.field(default_factory=dict)
    everything: bool = False

    def __bool__(self) -> bool:
        return bool(self.topics or self.brokers or self.left or self.everything)


class Departure(msgspec.Struct):
    """A route event as it happened (``kind``, ``info``), and, for a broker whose leaving
    emptied its group, the topics that left topicQueueTable with it (no group serves them now)."""

    kind: str
    info: dict[str, Any]
    lost_topics: list[str] = msgspec.field(default_factory=list)


def _one_step(events: list[Departure]) -> bool:
    """Whether ``events`` are no more than one step of handing over (``_hand_over_step``)."""
    if len(events) <= 1:  # a registration's one event (or none): nothing to count
        return True
    return len(events) <= EVENTS_PER_STEP and sum(bool(event.lost_topics) for event in events) <= 1


def _lost_with(topic: str, departure: Departure | None) -> None:
    """A Departed layer found a topic no group serves any more: the departure's lost topic."""
    if departure is not None:
        departure.lost_topics.append(topic)


@dataclass(frozen=True, slots=True)
class SystemTopicListShown:
    """What GET_SYSTEM_TOPIC_LIST_FROM_NS's answer was made of (``system_topic_list_shown``): the
    cluster names, each group of brokerAddrTable with whether it had an address, and the group
    whose address it shows (None: none had one)."""

    clusters: frozenset[str]
    groups: dict[str, bool]
    first: str | None


@dataclass(frozen=True, slots=True)
class _LayeredView:
    get: Callable[[str], Mapping[str, QueueData] | None]

    def __contains__(self, topic: object) -> bool:
        return isinstance(topic, str) and self.get(topic) is not None


ChangeListener = Callable[[RouteChange], None]
#: whether a subscriber holds anything a change could make stale now
Holds = Callable[[], bool]


def _always() -> bool:
    return True

#: hears each departure that took topics away: (kind, info, the topics), after the change
LostListener = Callable[[str, dict[str, Any], list[str]], None]


class _Pending:
    """The change being made: what it touched so far (``collect``: topic by topic, only when
    someone subscribes), the entries a registration staged and the groups that emptied (both
    committed through a Settling when it ends), and its events, published by ``_one_change``."""

    __slots__ = ("collect", "dirty", "topics", "brokers", "everything", "staged", "staged_group", "staged_entries",
                 "emptied", "events", "earlier", "perm")

    def __init__(self, collect: bool) -> None:
        self.collect = collect
        self.dirty = False
        self.topics: dict[str, None] = {}
        self.brokers: dict[str | None, None] = {}
        self.everything = False
        self.staged: Staged | None = None
        self.staged_group = ""  # the broker group whose entries are staged
        self.staged_entries: Entries | None = None  # the table's entries of the staged topics, if known
        #: groups that lost their last member, in departure order, with the departure that emptied each
        self.emptied: dict[str, Departure | None] = {}
        self.events: list[Departure] = []
        #: events of earlier changes whose layers were written during this one: handed over first
        self.earlier: list[Departure] = []
        #: groups whose queue permission changed on every topic holding them, each with the change,
        #: whether it took the write bit off (wipe), and the topics the wipe's sealed count took at the
        #: commit (the walk counts the others): committed as PermChanged layers, in order
        self.perm: list[tuple[str, Callable[[int], int], bool, frozenset[str]]] = []

    def change(self) -> RouteChange:
        if not self.collect:
            return RouteChange(everything=True)
        topics: Set[str] = self.topics.keys()
        if self.staged:
            topics = self.staged.keys() if not self.topics else dict.fromkeys([*self.topics, *self.staged]).keys()
        return RouteChange(topics, self.brokers, dict.fromkeys(self.emptied), self.everything)


P = ParamSpec("P")
R = TypeVar("R")


def _one_change(method: Callable[Concatenate[RouteInfoManager, P], R]) -> Callable[Concatenate[RouteInfoManager, P], R]:
    """The method is one change of the tables, published when it ends (a call from inside another
    change is part of that one)."""
    @functools.wraps(method)
    def change(self: RouteInfoManager, /, *args: P.args, **kwargs: P.kwargs) -> R:
        if self._pending is not None:
            return method(self, *args, **kwargs)
        pending = self._pending = _Pending(self._collects())
        try:
            return method(self, *args, **kwargs)
        finally:
            self._pending = None
            self._publish(pending)
    return change


class BrokerLiveInfo(msgspec.Struct):
    """A registered broker's entry in brokerLiveTable.  Like the other values each registration
    makes here (RouteChange, Departure, RegisterBrokerResult; registration.RegisterRequest and
    RegistrationPlan), a msgspec Struct: made in C, where a dataclass's generated ``__init__`` ran a
    line of Python a field (five of them a first registration)."""

    lastUpdateTimestamp: int
    heartbeatTimeoutMillis: int
    dataVersion: DataVersion
    channel: Channel | None
    haServerAddr: str | None
    #: the bodies this broker sent whose topics are held as they say (see registration_memo)
    memos: Memos | None = None
    topicCount: int = 0
    #: MQVersion ordinal of the broker's last registration (status page only)
    version: int | None = None
    #: loaded from a route snapshot and not registered since (state/snapshot.py)
    restored: bool = False
    #: the digest of the registration last applied in full (RegisterRequest.digest): the same one
    #: again on ``channel`` renews the broker (``renew``); None: the next is applied in full
    digest: bytes | None = None


#: the six tables, in RouteInfoManager's order: topicQueueTable, brokerAddrTable, clusterAddrTable,
#: brokerLiveTable, filterServerTable, topicQueueMappingInfoTable (``restore``)
RouteTables = tuple[dict[str, dict[str, QueueData]], dict[str, BrokerData], dict[str, dict[str, None]],
                    dict[LiveKey, BrokerLiveInfo], dict[LiveKey, list[str | None]], dict[str, dict[str, Any]]]


class RegisterBrokerResult(msgspec.Struct):
    haServerAddr: str | None = None
    masterAddr: str | None = None

    @property
    def shown(self) -> tuple[str | None, str | None]:
        """(haServerAddr, masterAddr) as a renewal keeps them (``Renewable.shown``): a master's,
        neither, is one tuple for all."""
        if self.haServerAddr is None and self.masterAddr is None:
            return NOTHING_SHOWN
        return self.haServerAddr, self.masterAddr


#: a result showing no address (a master's): the one tuple every master's renewal keeps
NOTHING_SHOWN: tuple[str | None, str | None] = (None, None)


class Renewable(msgspec.Struct, frozen=True, gc=False):
    """A registration ``renew`` may renew again: what it is asked with (the header's names,
    brokerId, acting-master flag and zone; the digest of the registration applied in full) and
    what the answer showed (``shown``: the result's haServerAddr and masterAddr).  The answer
    cache keeps one per broker connection, to renew the broker from the same registration's
    bytes without decoding it (AnswerCache.renewal_from_memory: ``renew_again``)."""

    names: tuple[str, str, str]
    broker_id: int
    acting: bool | None
    zone: str | None
    digest: bytes
    shown: tuple[str | None, str | None]


@dataclass(slots=True)
class RouteData:
    """pickupTopicRouteData's result, before encoding."""

    queueDatas: list[QueueData]
    brokerDatas: list[BrokerData]
    filterServerTable: dict[str, list[str | None]] = field(default_factory=dict)
    topicQueueMappingByBroker: dict[str, Any] | None = None


#: the most filterServerList entries a registration may hold (brokers since 4.x send an empty list)
FILTER_SERVERS_MAX = 8
#: the tables' counting limits (state/config.py) in the order ``_hold`` takes their counts, each with
#: what it counts, and the reason a refusal of each is counted under
_LIMITS = (("maxBrokerGroups", "broker groups"), ("maxBrokers", "brokers"), ("maxBrokersPerGroup", "members"),
           ("maxTopicsPerBroker", "topics"), ("maxTopicQueueEntries", "topic-queue entries"))
LIMIT_REASONS = {"maxBrokerGroups": "max_broker_groups", "maxBrokers": "max_brokers",
                 "maxBrokersPerGroup": "max_brokers_per_group", "maxTopicsPerBroker": "max_topics_per_broker",
                 "maxTopicQueueEntries": "max_topic_queue_entries"}


def mapping_entries(info: dict[str, Any] | None) -> int:
    """What one static topic's mapping (a TopicQueueMappingInfo) counts against maxTopicQueueEntries:
    one, and one per queue its currIdMap maps, so that no mapping holds more than it counts."""
    if info is None:
        return 0
    ids = info.get("currIdMap")
    return 1 + (len(ids) if isinstance(ids, dict) else 0)


class RouteInfoManager:
    """The tables, and who hears of their changes: subscribers (``subscribe``: each complete
    change, in the order they subscribed), listeners (``listen``: its route events) and the lost
    topics' keeper (``listen_lost``).  The composition root (service.py) wires them once, in a
    stated order; nothing subscribes itself, and a second subscriber never replaces the first."""

    def __init__(self, config: NamesrvConfig, clock: Callable[[], float], *,
                 notifier: Notifier | None = None) -> None:
        self.config = config
        self.profile = config.profile
        self._clock = clock
        self._notifier = notifier or (lambda addr, header: None)
        self._table = TopicQueueTable()  # topicQueueTable, as written so far
        self.brokerAddrTable: dict[str, BrokerData] = {}
        self.clusterAddrTable: dict[str, dict[str, None]] = {}  # an insertion-ordered set
        self.brokerLiveTable: dict[LiveKey, BrokerLiveInfo] = {}
        self.filterServerTable: dict[LiveKey, list[str | None]] = {}
        self.topicQueueMappingInfoTable: dict[str, dict[str, Any]] = {}
        #: what the limits count, kept as the tables change (``_count_queue``, ``recount``): the
        #: topics holding each broker group's queues, all of topicQueueTable's (topic, group)
        #: entries, and topicQueueMappingInfoTable's
        self.topicsOfGroup: dict[str, int] = {}
        #: what outages.py reads per group, kept alike (``_count_writes``): the group's entries with
        #: the write bit, and those without it on a topic that lacks it by design
        #: (registration.write_off_by_design: not counted among the group's topics); a group with
        #: none is not in it.  A /metrics scrape reads them, and walks no table (it walked
        #: topicQueueTable after each change: 0.5 s at 20,000 groups, 3 s at 8 M entries)
        self.writableOfGroup: dict[str, int] = {}
        self.sealedOfGroup: dict[str, int] = {}
        self.queueEntries = 0
        self.mappingEntries = 0
        #: each broker group name's Java hash, spread (``group_order``): a route lookup orders its
        #: groups as Java's HashMap does, and hashing a name of 512 characters is 34 us: at 20,000
        #: groups, 0.7 s of every lookup not kept (after a change, or filtered by zone)
        self._group_spreads: dict[str, int] = {}
        self.generation = 0
        #: who hears each complete change, in this order, and whether each holds anything a change
        #: could make stale (subscribe)
        self._subscribers: list[tuple[ChangeListener, Holds]] = []
        #: who hears each route event once its change is complete, in this order (listen)
        self._listeners: list[EventListener] = []
        #: who hears the topics each departure took away (lost_topics.py), before the listeners (listen_lost)
        self._lost_listeners: list[LostListener] = []
        #: hears that a committed change is still to be written into topicQueueTable (the
        #: service then runs settle_steps); None: it is written when someone next needs the table
        self.on_settle: Callable[[], None] | None = None
        self._pending: _Pending | None = None
        #: committed changes still to write into topicQueueTable, oldest first (state/settling.py)
        self._layers: deque[Layer] = deque()
        #: what changes leave behind and nothing else holds, emptied a slice per step
        #: (``settle_steps``): the departures' lost topics once heard (a million names freed at once
        #: held a turn for 50 ms or more), a big registration's decoded table once applied
        self._leftovers: deque[list[str] | dict[str, Any]] = deque()
        #: route events still to hand over, oldest first: a mass disconnect's thousands of them
        #: are heard EVENTS_PER_STEP a step (``settle_steps``), not all in the turn that ended it
        self._handing: deque[Departure] = deque()
        #: entries a change writes at once rather than as a layer, when nothing waits before it
        self.write_at_once = WRITE_AT_ONCE

    # -- topicQueueTable, and what is still to be written into it --------------------------------
    @property
    def topicQueueTable(self) -> TopicQueueTable:
        """topicQueueTable with every committed change written in: whoever walks it or edits it in place."""
        self.settle_now()
        return self._table

    @topicQueueTable.setter
    def topicQueueTable(self, table: Mapping[str, dict[str, QueueData]]) -> None:
        self.settle_now()
        self._table = table if isinstance(table, TopicQueueTable) else TopicQueueTable(table)

    def queues_of(self, topic: str) -> Mapping[str, QueueData] | None:
        """A topic's queues as of the last change (through what is still to be written), without
        writing anything: what a lookup reads."""
        queues: Mapping[str, QueueData] | None = self._table.get(topic)
        for layer in self._layers:
            queues = layer.over(topic, queues)
        return queues

    def queue_view(self) -> QueueView:
        """topicQueueTable as of the last change, to look topics up in (``get``) without writing
        anything: the table itself when nothing is left to write."""
        return self._table if not self._layers else _LayeredView(self.queues_of)

    def routed_topics(self) -> Container[str]:
        """The topics topicQueueTable holds as of the last change, to ask ``in`` of without writing
        anything (a scrape's lost topics: one look-up each, through what is still to be written)."""
        return cast(Container[str], self.queue_view())  # the table, or a _LayeredView: both answer ``in``

    @property
    def topics_written(self) -> int:
        """Topics in topicQueueTable as written so far: what a scrape or the status page counts
        without writing what is pending in one turn (a big change counts as its steps write it)."""
        return len(self._table)

    def topics_naming(self, groups: Collection[str | None], topics: Iterable[str]) -> list[str]:
        """Of ``topics``, those whose queues name one of ``groups``, groups that left included
        until their queues are written out (the answer cache's walk of what it keeps, when groups
        change or leave)."""
        names, table = set(groups), self._table
        staged = [layer for layer in self._layers if not isinstance(layer, Departed)]

        def held(topic: str) -> Mapping[str, QueueData]:
            queues: Mapping[str, QueueData] | None = table.get(topic)
            for layer in staged:
                queues = layer.over(topic, queues)
            return queues or {}
        return [topic for topic in topics if not names.isdisjoint(held(topic))]

    @property
    def settling(self) -> int:
        """Entries still to write into topicQueueTable, or to walk to find them (0: none)."""
        return sum(map(len, self._layers))

    def settle_steps(self) -> Steps[None]:
        """Hand the route events that wait over, EVENTS_PER_STEP a step; write what is committed
        into topicQueueTable, a slice per step; then let go of what the departures took away, a
        slice per step."""
        while self._handing or self._layers or self._leftovers:
            if self._handing:
                self._hand_over_step()
            elif self._layers:
                if not self._layers[0].step():
                    self._written()
            else:
                self._let_go_step()
            yield

    def _let_go_step(self) -> None:
        """Empty the oldest leftovers by a slice: what it held is freed now, a slice at a time."""
        leftovers = self._leftovers[0]
        if isinstance(leftovers, list):
            del leftovers[-LET_GO_PER_STEP:]
        else:
            # an entry is a few objects; popped in C (a Python loop was a third of it)
            deque(starmap(leftovers.popitem, repeat((), min(LET_GO_PER_STEP // 4, len(leftovers)))), maxlen=0)
        if not leftovers:
            self._leftovers.popleft()

    def _let_go(self, leftovers: list[str] | dict[str, Any]) -> None:
        """Nothing needs ``leftovers`` any more: when many and the service runs steps, they are
        emptied in steps (settle_steps), else they go when the last reference does."""
        if len(leftovers) > LET_GO_PER_STEP and self.on_settle is not None:
            self._leftovers.append(leftovers)

    def settle_now(self) -> None:
        """Write what is committed into topicQueueTable, at once."""
        while self._layers:
            self._layers[0].finish()
            self._written()
        self._leftovers.clear()

    def _written(self) -> None:
        """The oldest layer is in the table: its events are heard (after those of the change under
        way, if any, is published)."""
        layer = self._layers.popleft()
        if self._pending is not None:
            self._pending.earlier += layer.events
        else:
            self._hand_over(layer.events)

    # -- switches, read from the running configuration (UPDATE_NAMESRV_CONFIG changes them) ---
    @property
    def delete_topic_with_registration(self) -> bool:
        return bool(self.config.values["deleteTopicWithBrokerRegistration"])  # (read by every registration)

    @property
    def support_acting_master(self) -> bool:
        return bool(self.config["supportActingMaster"])

    @property
    def notify_min_broker_id_changed(self) -> bool:
        return bool(self.config["notifyMinBrokerIdChanged"])

    # -- change publication -----------------------------------------------------------------
    def subscribe(self, changed: ChangeListener, holds: Holds = _always) -> None:
        """``changed(change)`` hears every complete change from now on, after those who subscribed
        before it (the answer cache first: service.py).  ``holds()`` says whether it holds anything
        a change could make stale now: while no subscriber does, a change is not collected topic
        by topic and is published as ``everything`` (a first registration of many topics on a
        fresh server collects nothing per topic).  Subscribing the same ``changed`` again changes nothing."""
        if all(subscribed != changed for subscribed, _ in self._subscribers):
            self._subscribers.append((changed, holds))

    def unsubscribe(self, changed: ChangeListener) -> None:
        self._subscribers = [(c, h) for c, h in self._subscribers if c != changed]

    @property
    def subscribers(self) -> list[ChangeListener]:
        """Who hears each change, in the order they hear it."""
        return [changed for changed, _ in self._subscribers]

    def listen(self, heard: EventListener) -> None:
        """``heard(kind, info)`` hears every route event from now on, once its change is complete,
        after those who listened before it (service.py: the log, the metrics, the page's events)."""
        self._listeners.append(heard)

    def listen_lost(self, departed: LostListener) -> None:
        """``departed(kind, info, topics)`` hears each departure that took topics away (no group
        serves them now), once the change is complete and before the event's listeners; ``topics``
        is the listener's to read during the call (a long list is emptied in steps afterwards)."""
        self._lost_listeners.append(departed)

    def _collects(self) -> bool:
        """Whether a change starting now is collected topic by topic: someone holds something."""
        for _, holds in self._subscribers:  # (a loop: no generator resumed per subscriber, every change)
            if holds():
                return True
        return False

    def _publish(self, pending: _Pending) -> None:
        """A change is complete: commit its many entries as a layer (what lookups read from now
        on), or write them in at once when they are few and nothing is before them (a first
        registration's: no layer made, queued and taken off), count it, publish what it did to
        every subscriber in order, write a layer in at once when it is small and nothing is before
        it, then hand over the events in order: now, or once the layers before them are written (a
        departure's, once its lost topics are found)."""
        for group, new_perm, wipe, counted in pending.perm:  # made before what the change staged or emptied
            if group in pending.emptied:
                continue  # it left later in the change: its queues go whole (Departed)
            perm_layer = PermChanged(self._table, group, new_perm,
                                     functools.partial(self._wiped, group, counted) if wipe else None)
            if not self._layers and len(perm_layer) <= self.write_at_once:
                perm_layer.finish()  # few, none before: at once
            else:
                self._layers.append(perm_layer)
        waiting = bool(self._layers)  # changes before this one still to write: its events wait for them
        layer: Layer | None = None
        if pending.staged:
            if not waiting and len(pending.staged) <= self.write_at_once:  # few, none before: in at once, no layer
                write_staged(self._table, pending.staged_group, todo_of(pending.staged, pending.staged_entries))
            else:
                layer = StagedEntries(self._table, pending.staged_group, pending.staged, pending.staged_entries)
        elif pending.emptied:
            last = self._layers[-1] if self._layers else None
            if isinstance(last, Departed) and not last.started:  # one walk for both
                last.join(pending.emptied, pending.events)
                pending.events = []
            else:
                layer = Departed(self._table, pending.emptied, _lost_with)
            for pending_layer in self._layers:  # its walk finds a group that left: nothing to count
                if isinstance(pending_layer, PermChanged) and pending_layer.group in pending.emptied:
                    pending_layer.flipped = None
        if layer is not None:
            self._layers.append(layer)
        if pending.dirty:
            self.generation += 1
            if self._subscribers:
                change = pending.change()
                if change:
                    for changed, _ in self._subscribers:
                        changed(change)  # the tables complete, through the layers
        if layer is not None and not waiting and self._layers and self._layers[-1] is layer and (
                len(layer) <= self.write_at_once):
            layer.finish()  # few: at once
            self._layers.pop()
        events = pending.earlier
        if self._layers and (waiting or self._layers[-1] is layer and isinstance(layer, Departed)):
            self._layers[-1].events += pending.events
        else:
            events = events + pending.events
        self._hand_over(events)
        if (self._layers or self._leftovers or self._handing) and self.on_settle is not None:
            self.on_settle()

    def _hand_over(self, events: list[Departure]) -> None:
        """Route events to their listeners, in order: now when they are few and none wait before
        them (or the service runs no steps), else in the steps that follow (``settle_steps``), so
        no turn hears more than a step's share of a mass disconnect's thousands."""
        if self.on_settle is None or not self._handing and _one_step(events):
            for event in events:
                self._hear(event)
            return
        self._handing.extend(events)
        self.on_settle()

    def _hand_over_step(self) -> None:
        """The events that wait, oldest first, up to EVENTS_PER_STEP and the first departure that
        took topics away."""
        handing = self._handing
        for _ in range(EVENTS_PER_STEP):
            if not handing:
                return
            event = handing.popleft()
            self._hear(event)
            if event.lost_topics:
                return

    def _hear(self, event: Departure) -> None:
        """One route event to its listeners; its many lost topics are let go of afterwards in
        steps, when the service runs them (``on_settle``)."""
        if event.lost_topics:  # the lost topics first: a listener may change the tables again
            for departed in self._lost_listeners:
                departed(event.kind, event.info, event.lost_topics)
            self._let_go(event.lost_topics)
        for heard in self._listeners:
            heard(event.kind, event.info)

    def _topic_changed(self, topic: str) -> None:
        """Inside a change: anything a route answer for ``topic`` shows changed (per topic)."""
        pending: _Pending = self._pending  # type: ignore[assignment]
        pending.dirty = True
        if pending.collect:
            pending.topics[topic] = None

    def _write(self, group: str, staged: Staged, entries: Entries | None = None) -> None:
        """Inside a change: a registration's staged entries of ``group``, written when the change
        commits (published with it: the topics are the entries' keys); ``entries``: the table's
        entry of each staged topic as it was staged (registration.Entries), if known."""
        if staged:
            pending: _Pending = self._pending  # type: ignore[assignment]
            assert pending.staged is None, "one registration per change"
            pending.dirty = True
            pending.staged, pending.staged_group, pending.staged_entries = staged, group, entries

    def _broker_changed(self, broker_name: str | None) -> None:
        """Inside a change: a group's addresses, zone, flags or queue permissions changed, so
        every route naming it is stale, and so is the cluster info."""
        pending: _Pending = self._pending  # type: ignore[assignment]
        pending.dirty = True
        pending.brokers[broker_name] = None

    def _everything_changed(self) -> None:
        pending: _Pending = self._pending  # type: ignore[assignment]
        pending.dirty = True
        pending.everything = True

    @_one_change
    def restore(self, tables: RouteTables) -> None:
        """The six tables replaced at once by ones read back (state/snapshot.py, before listening):
        one change, of everything.  Held to the limits a registration is held to (``_check_tables``:
        a snapshot written under larger ones, or crafted): RegistrationRefused, the tables as they were."""
        before = (self._table, self.brokerAddrTable, self.clusterAddrTable, self.brokerLiveTable,
                  self.filterServerTable, self.topicQueueMappingInfoTable)
        (self.topicQueueTable, self.brokerAddrTable, self.clusterAddrTable, self.brokerLiveTable,
         self.filterServerTable, self.topicQueueMappingInfoTable) = tables
        self.recount()
        try:
            self._check_tables()
        except RegistrationRefused:
            (self.topicQueueTable, self.brokerAddrTable, self.clusterAddrTable, self.brokerLiveTable,
             self.filterServerTable, self.topicQueueMappingInfoTable) = before
            self.recount()
            raise
        self._everything_changed()

    def _forget_tables(self) -> None:
        """Queue data was changed by hand (wipe, add, delete, 217): the next registration must
        be applied in full again, as Java re-applies it."""
        for live in self.brokerLiveTable.values():
            live.memos = live.digest = None

    def registration_memo(self, cluster: str | None, addr: str | None, broker_name: str | None,
                          broker_id: int, enable_acting_master: bool | None) -> Memos | None:
        """The one check of what a registration may skip: the memos of the bodies whose topics
        this broker's queues hold as they say, when registering one of them again cannot change
        anything (same id slot, so not a first registration; same acting-master flag; nothing
        changed its queue data since), else None."""
        live = self.brokerLiveTable.get(self.live_key(cluster, addr))
        broker = self.brokerAddrTable.get(broker_name)  # type: ignore[arg-type]
        if live is None or live.memos is None or broker is None or broker.brokerAddrs.get(broker_id) != addr:
            return None
        if self.profile.acting_master_rules and broker.enableActingMaster != bool(enable_acting_master):
            return None
        return live.memos

    def reusable_pieces(self, memos: Memos | None) -> TablePieces | None:
        """How the broker's one table was cut, when a piece of it sent again need not be decoded:
        not with deleteTopicWithBrokerRegistration, which needs every name, nor for a table sent
        in pieces (which piece a frame is, is not known before it is decoded)."""
        if memos is None or len(memos) != 1 or self.delete_topic_with_registration:
            return None
        return memos[0].pieces

    def _memos_after(self, previous: BrokerLiveInfo | None, plan: RegistrationPlan, complete: bool,
                     overwrites: bool) -> Memos | None:
        """The broker's memos once its registration applied: the body's own when the table is
        held as it says (``complete``), the others' while they still hold: not when it changed
        queue data the group held (``overwrites``: a topic of another piece may be among them),
        nor when each registration removes what its body lacks (deleteTopicWithBrokerRegistration)."""
        kept: Memos | None = None if overwrites or previous is None else previous.memos
        memo = plan.memo if complete else None
        if memo is None:
            return kept
        if not kept or self.removes_absent_topics:  # (a first registration: none kept, no switch read)
            return (memo,)
        others = tuple(held for held in kept if held.digest != memo.digest)
        return (*others[len(others) - MAX_MEMOS + 1:], memo) if len(others) >= MAX_MEMOS else (*others, memo)

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

    def topic_rules(self, req: RegisterRequest) -> TopicRules:
        """How the registration applies its table (registration.TopicRules), from the tables as
        they are before it changes them: a master, or 5.x's prime slave (the lowest id once the
        request's is in); every topic on a first registration (a new id slot, or a broker restored
        from a snapshot) or a new dataVersion; read-only for a prime slave of an acting-master
        group (the group's flag as the request sets it in 5.x)."""
        p = self.profile
        broker = self.brokerAddrTable.get(req.brokerName)
        addrs = broker.brokerAddrs if broker is not None else {}
        previous = self.brokerLiveTable.get(self.live_key(req.clusterName, req.brokerAddr))
        is_master = req.brokerId == MASTER_ID
        # its own address's other ids go; looked at only for a 5.x slave (every registration comes here twice)
        is_prime_slave = (p.prime_slave_applies_topics and req.enableActingMaster is not None and not is_master
                          and req.brokerId <= min([i for i, a in addrs.items() if a != req.brokerAddr],
                                                  default=req.brokerId))
        if not (is_master or is_prime_slave):
            return TopicRules(applies=False)
        register_first = not addrs.get(req.brokerId) or (previous is not None and previous.restored)
        changed = previous is None or not self._same_version(previous.dataVersion, req.body.dataVersion)
        if p.acting_master_rules:
            acting = bool(req.enableActingMaster)
        else:
            acting = broker is not None and broker.enableActingMaster
        return TopicRules(True, every_topic=changed or register_first, all_or_none=not p.prime_slave_applies_topics,
                          read_only=is_prime_slave and acting,
                          remove_absent=self.removes_absent_topics and not req.body.topicQueueMappingInfoMap,
                          cluster=req.clusterName if broker is None else broker.cluster)

    @_one_change
    def apply_registration(self, plan: RegistrationPlan, just_made: bool = False) -> RegisterBrokerResult | None:
        """Java's registerBroker, applying a plan (state/registration.py): the one place a
        registration changes the tables. None means 5.3.3's refusal ("register broker failed").
        The plan's staged entries hold if nothing changed since it was made (its generation) and
        the rules it assumed are still the rules; else they are worked out again here, where what
        follows changes no queue data before _apply_topics.  ``just_made``: the caller made the
        plan right before, nothing run between (processor.register_fused): the rules it worked out
        are the tables' now, not worked out a second time."""
        p = self.profile
        req = plan.request
        rules = plan.rules if just_made and plan.rules is not None else self.topic_rules(req)  # before anything changes
        fresh = plan.generation == self.generation and plan.rules == rules
        staging = self._staging(plan, rules, fresh)
        key = self.live_key(req.clusterName, req.brokerAddr)
        self._check_limits(req, staging, key)
        names = self.clusterAddrTable.setdefault(req.clusterName, {})
        group_changed = req.brokerName not in names  # (marked once below: a new group changes all three)
        if group_changed:
            names[req.brokerName] = None
        broker = self.brokerAddrTable.get(req.brokerName)
        if broker is None:
            broker = self.brokerAddrTable[req.brokerName] = BrokerData(req.clusterName, req.brokerName, {})
            group_changed = True
        if p.acting_master_rules and (broker.enableActingMaster, broker.zoneName) != (
                bool(req.enableActingMaster), req.zoneName):
            broker.enableActingMaster = bool(req.enableActingMaster)
            broker.zoneName = req.zoneName
            group_changed = True
        if group_changed:
            self._broker_changed(req.brokerName)
        addrs = broker.brokerAddrs
        prev_min_id = min(addrs) if addrs else 0
        # a slave switching to master: one address, one id
        swapped = [i for i, a in addrs.items() if a == req.brokerAddr and i != req.brokerId]
        for broker_id in swapped:
            del addrs[broker_id]
            self._broker_changed(req.brokerName)
        holder = self._newer_holder(req, addrs.get(req.brokerId)) if p.acting_master_rules else None
        if holder is not None:
            self.brokerLiveTable.pop(key, None)
            # Java warns ("Registering Broker conflicts with the existed one, just ignore."): a broker
            # shut out of its own id (by a peer that registered it first with a bigger stateVersion)
            # must be seen, not only answered an empty result
            self._emit("refused", cluster=req.clusterName, broker=req.brokerName, id=req.brokerId,
                       addr=req.brokerAddr, reason=f"its id is held by {addrs[req.brokerId]}, whose stateVersion "
                       f"{holder.dataVersion.stateVersion} is newer than its {req.body.dataVersion.stateVersion}: "
                       "ignored, as Java ignores it")
            return RegisterBrokerResult()
        previous = self.brokerLiveTable.get(key)
        unchanged = req.body.tableUnchanged and previous is not None
        memos = previous.memos if previous is not None else None
        held = memo_of(memos, req.body.tableDigest) if memos is not None else None
        topic_count = plan.topicCount if not unchanged else (
            held.topicCount if held is not None else previous.topicCount)  # type: ignore[union-attr]
        if (p.refuse_first_single_topic_registration and req.brokerId not in addrs
                and topic_count == 1):
            self._emit("refused", broker=req.brokerName, addr=req.brokerAddr,
                       reason="first registration carries a single topic")
            return None
        if addrs.get(req.brokerId) != req.brokerAddr:
            addrs[req.brokerId] = req.brokerAddr
            self._broker_changed(req.brokerName)
        if staging is not None:
            memos = self._apply_topics(plan, staging, previous)
            self._let_go(req.body.topicConfigTable)  # applied: its topics' configs are needed no more
        elif not unchanged:
            memos = None  # its table does not apply: nothing of it is held
        self.brokerLiveTable[key] = BrokerLiveInfo(
            self.now_ms(),
            DEFAULT_BROKER_CHANNEL_EXPIRED_TIME if req.heartbeatTimeoutMillis is None else req.heartbeatTimeoutMillis,
            req.body.dataVersion, req.channel, req.haServerAddr, memos, topic_count, req.version, digest=req.digest)
        if previous is None:
            self._emit("registered", cluster=req.clusterName, broker=req.brokerName, id=req.brokerId,
                       addr=req.brokerAddr, topics=topic_count)
        elif previous.restored:
            self._emit("confirmed", cluster=req.clusterName, broker=req.brokerName, id=req.brokerId,
                       addr=req.brokerAddr, topics=topic_count)
        elif swapped or not self._same_version(previous.dataVersion, req.body.dataVersion):
            # a new data version, or a new id (a slave made master by a controller, its table the
            # same): the remembered topology must hear the id it now serves as
            self._emit("changed", cluster=req.clusterName, broker=req.brokerName, id=req.brokerId,
                       addr=req.brokerAddr, topics=topic_count)
        servers = self.filterServerTable.get(key, []) if unchanged else list(req.body.filterServerList)
        if servers != self.filterServerTable.get(key, []):
            if servers:
                self.filterServerTable[key] = servers
            else:
                del self.filterServerTable[key]
            self._broker_changed(req.brokerName)
        if p.acting_master_rules and req.brokerId < prev_min_id and self.notify_min_broker_id_changed:
            self._notify_min_broker_id(addrs, None, req.haServerAddr)
        return self._result(req.clusterName, req.brokerId, addrs)

    def _result(self, cluster: str, broker_id: int, addrs: dict[int, str]) -> RegisterBrokerResult:
        """What a registration answers: a slave, its group's master's address and HA address
        while the master is registered (they change as the master comes and goes)."""
        result = RegisterBrokerResult()
        if broker_id != MASTER_ID:
            master_addr = addrs.get(MASTER_ID)
            master = self.brokerLiveTable.get(self.live_key(cluster, master_addr)) if master_addr else None
            if master is not None:
                result.haServerAddr, result.masterAddr = master.haServerAddr, master_addr
        return result

    def renew_registration(self, header: RegisterBrokerHeader, channel: Channel | None,
                           digest: bytes | None) -> RegisterBrokerResult | None:
        """``renew`` for a REGISTER_BROKER as its header reads (the server's handler and the
        capture's replay both ask so): None, to apply it in full, where its names or brokerId are
        missing or its digest unknown (a body not captured)."""
        names = header.names  # a property: worked out once
        if digest is None or names is None or header.brokerId is None:
            return None
        return self.renew(names, header.brokerId, header.enableActingMaster, header.zoneName, channel, digest)

    def renew(self, names: tuple[str, str, str], broker_id: int, acting: bool | None, zone: str | None,
              channel: Channel | None, digest: bytes) -> RegisterBrokerResult | None:
        """A registration that is, byte for byte but its opaque, the one this broker had applied
        in full last (``digest``: RegisterRequest.digest), on the same connection: what applying
        it again would do, without decoding or comparing its table.  Applied again, it would
        change nothing but the broker's lastUpdateTimestamp (Java's registerBroker with an
        unchanged dataVersion does the same), as long as what its registration read is as it
        was: its live entry (not expired, not replaced, not restored), its id slot and cluster,
        its group's acting-master flag and zone (5.x: another member's registration sets them),
        its queue data not changed by hand (``_forget_tables``), the configuration's revision
        (in the digest), and a 5.x slave not now its group's prime slave (a master that left
        makes it apply its table).  Then it is renewed, and answered as a registration is
        (``_result``: the master's addresses as they are now); else None: apply it in full."""
        cluster, addr, name = names
        live = self.brokerLiveTable.get(self.live_key(cluster, addr))
        if live is None or live.digest != digest or live.channel != channel:
            return None
        broker = self.brokerAddrTable.get(name)
        if broker is None or broker.brokerAddrs.get(broker_id) != addr or name not in self.clusterAddrTable.get(
                cluster, ()):
            return None
        p = self.profile
        if p.acting_master_rules and (broker.enableActingMaster != bool(acting) or broker.zoneName != zone):
            return None
        if p.prime_slave_applies_topics and broker_id != MASTER_ID and acting is not None and broker_id <= min(
                (i for i, a in broker.brokerAddrs.items() if a != addr), default=broker_id):
            return None  # a prime slave: its table applies (topic_rules)
        live.lastUpdateTimestamp = self.now_ms()
        return self._result(cluster, broker_id, broker.brokerAddrs)

    def renew_again(self, kept: Renewable, channel: Channel | None) -> bool:
        """``renew`` for a registration kept as ``kept`` and sent again on ``channel``: whether the
        broker was renewed and its answer shows what it showed then (else apply it in full)."""
        result = self.renew(kept.names, kept.broker_id, kept.acting, kept.zone, channel, kept.digest)
        return result is not None and result.shown == kept.shown

    def _staging(self, plan: RegistrationPlan, rules: TopicRules, fresh: bool) -> Staging | None:
        """What the registration writes into topicQueueTable, before anything changes: the plan's
        staged entries while they hold (``fresh``), else worked out again here in one go (with
        deleteTopicWithBrokerRegistration, from the table with everything written in); None
        when its table does not apply (not a master or 5.x's prime slave, or sent unchanged)."""
        req = plan.request
        if not rules.applies or (req.body.tableUnchanged
                                 and self.live_key(req.clusterName, req.brokerAddr) in self.brokerLiveTable):
            return None
        if fresh and plan.staging is not None:
            return plan.staging  # (its rules are these: ``fresh``)
        if rules.remove_absent:
            self.settle_now()  # the topics it lacks are looked for in the table itself
        return stage_all(req, self.queue_view(), self._table, rules,
                         joins=req.brokerName not in self.topicsOfGroup)

    def _check_limits(self, req: RegisterRequest, staging: Staging | None, key: LiveKey) -> None:
        """Raise RegistrationRefused, before anything changes, when the registration would pass a
        limit of the tables: maxBrokerGroups (brokerAddrTable), maxBrokers (brokerLiveTable),
        maxBrokersPerGroup (a group's addresses: each registration of a member walks them),
        maxTopicsPerBroker (the topics holding this group's queues) or maxTopicQueueEntries
        (topicQueueTable's (topic, group) entries with topicQueueMappingInfoTable's), and the names'
        lengths (maxNameLength).  What its table adds and removes is counted as it was staged:
        constant time here, and only the staged topics' names are looked at; ``key``: the broker's in
        brokerLiveTable (``live_key``, worked out once by the caller)."""
        config = self.config.values  # the running values as the dict they are (no call a read)
        longest = config["maxNameLength"]
        # measured in C, named in Python only when one is over (as _check_tables does)
        if max(map(len, (req.clusterName or "", req.brokerName or "", req.brokerAddr or "", req.haServerAddr or "",
                         req.zoneName or ""))) > longest:
            self._check_names((("clusterName", req.clusterName), ("brokerName", req.brokerName),
                               ("brokerAddr", req.brokerAddr), ("haServerAddr", req.haServerAddr),
                               ("zoneName", req.zoneName)), longest)
        servers = req.body.filterServerList
        if servers:  # (none from brokers since 4.x)
            self._check_filter_servers(servers, longest)
        name = req.brokerName
        # what the tables would hold that this registration adds to (0: adds none, so passes none)
        groups = len(self.brokerAddrTable) + 1 if name not in self.brokerAddrTable else 0
        brokers = len(self.brokerLiveTable) + 1 if key not in self.brokerLiveTable else 0
        broker = self.brokerAddrTable.get(name)
        members = broker.brokerAddrs if broker is not None else {}
        member = len(members) + 1 if req.brokerId not in members and req.brokerAddr not in members.values() else 0
        topics = entries = 0
        if staging is not None:
            mappings = req.body.topicQueueMappingInfoMap
            if staging.longest > longest:  # measured as they were staged, in steps
                self._check_names((("topic", topic) for topic in staging.staged), longest)
            if mappings:  # (5.x's static topics only)
                self._check_names((("static topic mapping", text) for info in mappings.values()
                                   for text in (info.get("topic"), info.get("bname"), info.get("scope"))), longest)
            added = staging.added - staging.removed
            topics = self.topicsOfGroup.get(name, 0) + added if added > 0 else 0
            new_mappings = self._new_mappings(req, staging.rules) if mappings else 0
            if added + new_mappings > 0:
                entries = self.queueEntries + self.mappingEntries + added + new_mappings
        self._hold(name, groups, brokers, member, topics, entries)

    def _hold(self, group: str | None, groups: int = 0, brokers: int = 0, members: int = 0, topics: int = 0,
              entries: int = 0) -> None:
        """The rule of the tables' limits, stated once: RegistrationRefused for the first count
        over its limit: the broker groups, brokers and topic-queue entries the tables would hold, the
        members and topics broker ``group`` would (0: not counted).  One call for all of them (a
        registration makes it once), the counts compared in one expression: a loop over the limits
        was about 4,000 instructions a registration; it runs only to name the limit passed."""
        config = self.config.values
        if (groups <= config["maxBrokerGroups"] and brokers <= config["maxBrokers"]
                and members <= config["maxBrokersPerGroup"] and topics <= config["maxTopicsPerBroker"]
                and entries <= config["maxTopicQueueEntries"]):
            return
        for (key, what), count in zip(_LIMITS, (groups, brokers, members, topics, entries), strict=True):
            if count > config[key]:
                holder = f"broker group {group}" if what in ("members", "topics") else "the route tables"
                raise RegistrationRefused(LIMIT_REASONS[key], f"{holder} would hold {count} {what}, over {key} "
                                          f"({config[key]})")

    def _check_tables(self) -> None:
        """RegistrationRefused when the tables as they are (restored from a snapshot, counted:
        ``recount``) pass a limit a registration is held to (``_check_limits``): the same rules
        (``_hold``, ``_check_names``, ``_check_filter_servers``), applied to every group, broker,
        name and count at once."""
        longest = self.config.values["maxNameLength"]
        self._hold(None, groups=len(self.brokerAddrTable), brokers=len(self.brokerLiveTable),
                   entries=self.queueEntries + self.mappingEntries)
        for name, broker in self.brokerAddrTable.items():
            self._hold(name, members=len(broker.brokerAddrs))
            self._check_names((("brokerName", name), ("clusterName", broker.cluster), ("zoneName", broker.zoneName),
                               *(("brokerAddr", addr) for addr in broker.brokerAddrs.values())), longest)
        for name, count in self.topicsOfGroup.items():  # the queue data's group names too
            self._hold(name, topics=count)
            self._check_names((("brokerName", name),), longest)
        self._check_names((("clusterName", text) for cluster, names in self.clusterAddrTable.items()
                           for text in (cluster, *names)), longest)
        for key, live in self.brokerLiveTable.items():
            self._check_names((("brokerAddr", self._addr_of(key)), ("haServerAddr", live.haServerAddr)), longest)
        for servers in self.filterServerTable.values():
            self._check_filter_servers(servers, longest)
        table = self._table
        if max(map(len, table), default=0) > longest:  # measured in C, named in Python only when one is over
            self._check_names((("topic", topic) for topic in table), longest)
        self._check_names((("static topic mapping", text) for topic, held in self.topicQueueMappingInfoTable.items()
                           for info in held.values()
                           for text in (topic, info.get("topic"), info.get("bname"), info.get("scope"))), longest)

    def _check_filter_servers(self, servers: list[str | None], longest: int) -> None:
        """RegistrationRefused when a broker lists more filter servers than a registration may, or
        one's address passes maxNameLength."""
        if len(servers) > FILTER_SERVERS_MAX:
            raise RegistrationRefused("filter_servers", f"its filterServerList lists {len(servers)} servers, over the "
                                      f"{FILTER_SERVERS_MAX} a registration may list (brokers since 4.x send none)")
        self._check_names((("filterServerList", server) for server in servers), longest)

    def _new_mappings(self, req: RegisterRequest, rules: TopicRules) -> int:
        """The entries 5.x's static-topic mappings of the registration add to
        topicQueueMappingInfoTable (``mapping_entries``: what each one holds, less what it replaces)."""
        mappings = req.body.topicQueueMappingInfoMap
        if not mappings or not rules.every_topic or rules.all_or_none:
            return 0
        held = self.topicQueueMappingInfoTable
        return sum(mapping_entries(info) - mapping_entries(held.get(topic, {}).get(str(info.get("bname"))))
                   for topic, info in mappings.items())

    @staticmethod
    def _check_names(names: Iterable[tuple[str, str | None]], longest: int) -> None:
        """RegistrationRefused (``max_name_length``) for the first name longer than ``longest``."""
        for what, name in names:
            if name is not None and len(name) > longest:
                raise RegistrationRefused("max_name_length", f"its {what} of {len(name)} characters is over "
                                          f"maxNameLength ({longest})")

    def _newer_holder(self, req: RegisterRequest, old_addr: str | None) -> BrokerLiveInfo | None:
        """5.3.3: the live broker at another address holding this id with a newer stateVersion,
        which keeps it (the registration is ignored)."""
        if old_addr is None or old_addr == req.brokerAddr:
            return None
        old = self.brokerLiveTable.get(self.live_key(req.clusterName, old_addr))
        return old if old is not None and old.dataVersion.stateVersion > req.body.dataVersion.stateVersion else None

    def _apply_topics(self, plan: RegistrationPlan, staging: Staging,
                      previous: BrokerLiveInfo | None) -> Memos | None:
        """Java's topic application under the staging's rules: its entries written as the change
        commits (and counted now), then 5.x's queue mappings; the broker's memos afterwards."""
        req, rules = plan.request, staging.rules
        self._write(req.brokerName, staging.staged, staging.entries)
        if staging.added != staging.removed:
            self._count_queue(req.brokerName, staging.added - staging.removed)
        if staging.writable:
            self._count_in(self.writableOfGroup, req.brokerName, staging.writable)
        if staging.sealed:
            self._count_in(self.sealedOfGroup, req.brokerName, staging.sealed)
        if rules.every_topic and not rules.all_or_none:
            for topic, info in req.body.topicQueueMappingInfoMap.items():
                held = self.topicQueueMappingInfoTable.setdefault(topic, {})
                bname = str(info.get("bname"))
                self.mappingEntries += mapping_entries(info) - mapping_entries(held.get(bname))
                held[bname] = info
                self._topic_changed(topic)
        return self._memos_after(previous, plan, staging.complete, staging.overwrites)

    def _count_queue(self, broker_name: str, change: int) -> None:
        """topicQueueTable gained (1) or lost (-1) an entry of ``broker_name``'s queues."""
        count = self.topicsOfGroup.get(broker_name, 0) + change
        if count:
            self.topicsOfGroup[broker_name] = count
        else:
            del self.topicsOfGroup[broker_name]
        self.queueEntries += change

    def _count_writes(self, topic: str, broker_name: str, queue: QueueData, change: int) -> None:
        """topicQueueTable gained (1) or lost (-1) ``broker_name``'s ``queue`` on ``topic``: the
        write bit's counts."""
        if queue.perm & PERM_WRITE:
            self._count_in(self.writableOfGroup, broker_name, change)
        elif self._sealed_by_design(topic, broker_name):
            self._count_in(self.sealedOfGroup, broker_name, change)

    def _sealed_by_design(self, topic: str, broker_name: str) -> bool:
        """Whether the group's queues on ``topic`` lack the write bit by design (named after its cluster
        as brokerAddrTable holds it, if it holds the group)."""
        broker = self.brokerAddrTable.get(broker_name)
        return write_off_by_design(topic, None if broker is None else broker.cluster, broker_name)

    @staticmethod
    def _count_in(counts: dict[str, int], broker_name: str, change: int) -> None:
        """A group's count changed by ``change``; a group counting none leaves ``counts``."""
        count = counts.get(broker_name, 0) + change
        if count:
            counts[broker_name] = count
        else:
            del counts[broker_name]

    def recount(self) -> None:
        """Count what the limits count, and the write bit's counts, from the tables as they are
        (tables replaced: a snapshot)."""
        self.topicsOfGroup, self.writableOfGroup, self.sealedOfGroup = {}, {}, {}
        for topic, queues in self.topicQueueTable.items():
            for name, queue in queues.items():
                self.topicsOfGroup[name] = self.topicsOfGroup.get(name, 0) + 1
                self._count_writes(topic, name, queue, 1)
        self.queueEntries = sum(self.topicsOfGroup.values())
        self.mappingEntries = sum(mapping_entries(info) for held in self.topicQueueMappingInfoTable.values()
                                  for info in held.values())

    def _remove_queue_data(self, topic: str, broker_name: str) -> None:
        self.settle_now()
        queues = self._table.get(topic)
        if queues is not None and broker_name in queues:
            self._count_writes(topic, broker_name, queues.pop(broker_name), -1)
            self._count_queue(broker_name, -1)
            if not queues:
                del self._table[topic]
            self._topic_changed(topic)

    @_one_change
    def register_topic(self, topic: str | None, queue_datas: list[QueueData]) -> None:
        """REGISTER_TOPIC_IN_NAMESRV: stops at the first unknown broker, like Java (partial: a
        topic new to the table gets none of its queues then).  Under the tables' limits as a
        registration is (RegistrationRefused before anything changes): maxNameLength,
        maxTopicsPerBroker and maxTopicQueueEntries (before, this code added entries past them)."""
        if not queue_datas or topic is None:
            return
        self._check_register_topic(topic, queue_datas)
        self._forget_tables()
        self.settle_now()
        existing = self._table.get(topic)
        queues = existing if existing is not None else {}
        for queue in queue_datas:
            if queue.brokerName not in self.brokerAddrTable:
                return
            if existing is not None:
                held = queues.get(queue.brokerName)
                if held is None:
                    self._count_queue(queue.brokerName, 1)
                else:
                    self._count_writes(topic, queue.brokerName, held, -1)
                self._count_writes(topic, queue.brokerName, queue, 1)
            queues[queue.brokerName] = queue
            self._topic_changed(topic)
        if existing is None:
            self._table[topic] = queues
            for name, queue in queues.items():
                self._count_queue(name, 1)
                self._count_writes(topic, name, queue, 1)

    def check_register_topic_count(self, count: int) -> None:
        """REGISTER_TOPIC_IN_NAMESRV's queueDatas counted before any is read: a body uses at most every
        broker group registered once and then the unknown one where register_topic stops (as Java's
        registerTopic stops); more entries name a group twice or come after that.  Java reads them all,
        and so did this server, a Python step or two an entry in the reactor: one unsigned request (5.x,
        without ACL) of 190,000 entries in 16 MiB was 380,090 Python calls, every other peer waiting.
        Refused whole (``max_broker_groups``)."""
        groups = len(self.brokerAddrTable)
        if count > groups + 1:
            raise RegistrationRefused("max_broker_groups", f"its {count} queueDatas are more than the {groups} "
                                                           "broker groups registered and one")

    def _check_register_topic(self, topic: str, queue_datas: list[QueueData]) -> None:
        config = self.config
        self._check_names([("topic", topic)] + [("brokerName", queue.brokerName) for queue in queue_datas],
                          config["maxNameLength"])
        held = self.topicQueueTable.get(topic, {})
        new: set[str] = set()
        for queue in queue_datas:
            if queue.brokerName not in self.brokerAddrTable:
                break  # where register_topic stops
            if queue.brokerName not in held:
                new.add(queue.brokerName)
        for name in sorted(new):
            self._hold(name, topics=self.topicsOfGroup.get(name, 0) + 1)
        self._hold(None, entries=self.queueEntries + self.mappingEntries + len(new))

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
        they empty leave topicQueueTable in one walk instead of one walk each."""
        by_channel: dict[Channel, list[LiveKey]] = {}
        for key, live in self.brokerLiveTable.items():
            if live.channel in closed:
                by_channel.setdefault(live.channel, []).append(key)
        self._destroy_all([(key, reason) for channel, reason in closed.items() for key in by_channel.get(channel, ())])

    def _destroy_all(self, doomed: list[tuple[LiveKey, str]]) -> None:
        """Destroy brokers, in order, inside one change: the groups they empty leave
        topicQueueTable together when it commits (one walk), and each broker finds its groups
        through one index of brokerAddrTable by address (not a walk of every group per broker)."""
        if not doomed:
            return
        groups_of: dict[str, list[BrokerData]] = {}
        for broker in self.brokerAddrTable.values():
            for addr in set(broker.brokerAddrs.values()):
                groups_of.setdefault(addr, []).append(broker)
        for key, reason in doomed:
            self._destroy(key, reason, groups_of)

    def _destroy(self, key: LiveKey, reason: str, groups_of: dict[str, list[BrokerData]]) -> None:
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
                self._remove_member(broker.cluster, broker.brokerName, addr, broker_id, departure=event)
                return

    # -- unregistration ---------------------------------------------------------------------
    @_one_change
    def unregister_broker(self, cluster: str | None, addr: str | None, broker_name: str | None,
                          broker_id: int | None) -> None:
        key = self.live_key(cluster, addr)
        live = self.brokerLiveTable.pop(key, None)
        self._drop_filter_servers(key)
        broker = self.brokerAddrTable.get(broker_name) if broker_name is not None else None
        if broker is None:
            return
        if self.profile.unregister_by_address:
            removed_id = next((i for i, a in broker.brokerAddrs.items() if a == addr), None)
        else:
            removed_id = broker_id if broker_id in broker.brokerAddrs else None
        if removed_id is None and live is None:
            # nothing of this broker was registered (Java logs "Failed" twice): the group 5.3.3 left empty
            # when it refused the broker's first registration goes, as in Java, but no broker departed
            self._remove_member(cluster, broker.brokerName, addr, None, cluster_of_request=True)
            return
        event = self._emit("unregistered", cluster=cluster, broker=broker_name, id=broker_id, addr=addr)
        removed_addr = addr if removed_id is None else broker.brokerAddrs.get(removed_id, addr)
        self._remove_member(cluster, broker.brokerName, removed_addr, removed_id, cluster_of_request=True,
                            departure=event)

    def _drop_filter_servers(self, key: LiveKey) -> None:
        """Routes list filter servers by address, whichever group holds it: drop them all."""
        if self.filterServerTable.pop(key, None) is not None:
            self._everything_changed()

    def _remove_member(self, cluster: str | None, broker_name: str, addr: str | None, broker_id: int | None,
                       cluster_of_request: bool = False, departure: Departure | None = None) -> None:
        """Drop one address from a broker group; an emptied group leaves every table (its queue
        data when the change commits, with every group the change empties: state/settling.py's
        Departed), and the topics it leaves without a group are ``departure``'s lost topics."""
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
        emptied = self._pending.emptied  # type: ignore[union-attr]
        emptied.pop(broker_name, None)  # its last departure is the one that emptied it
        emptied[broker_name] = departure
        self.queueEntries -= self.topicsOfGroup.pop(broker_name, 0)  # its entries leave with the change
        self.writableOfGroup.pop(broker_name, None)
        self.sealedOfGroup.pop(broker_name, None)

    def _reduced_group(self, broker: BrokerData, offline_addr: str | None, was_min: bool) -> None:
        """5.3.3 cleanTopicByUnRegisterRequests: a shrunken acting-master group without a master
        loses write perm, whichever member left; only the lowest id leaving is notified."""
        if not broker.enableActingMaster:
            return
        if min(broker.brokerAddrs) > 0:
            self._forget_tables()
            self._perm_changed(broker.brokerName, lambda perm: perm & ~PERM_WRITE, wipe=True)
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
        return self._operate_write_perm(broker_name, lambda perm: perm & ~PERM_WRITE, wipe=True)

    @_one_change
    def add_write_perm_of_broker(self, broker_name: str | None) -> int:
        return self._operate_write_perm(broker_name, lambda perm: PERM_READ | PERM_WRITE, wipe=False)

    def _operate_write_perm(self, broker_name: str | None, change: Callable[[int], int], wipe: bool) -> int:
        """Java's answer (how many topics hold the group's queues) is topicsOfGroup's count; the
        change itself is a PermChanged layer, written in slices (state/settling.py): any peer may
        send it (no ACL), and a walk of a million topics in one turn held every lookup; a group
        no topic holds is not walked for.  The write-bit counts are set now, as every entry of the
        group will have the bit (add) or lack it (wipe); the entries a wipe seals on a topic
        without the bit by design are counted as the walk meets them (``_wiped``)."""
        self._forget_tables()
        self._broker_changed(broker_name)
        return self._perm_changed(broker_name, change, wipe)

    def _perm_changed(self, broker_name: str | None, change: Callable[[int], int], wipe: bool) -> int:
        """Inside a change: every topic's queue data of the group with ``change(perm)``, committed
        as a PermChanged layer; how many topics hold the group (none: nothing to walk for).

        The write-bit counts are what lookups read from the commit on, not once the walk is done
        (outages.py reads them at any scrape, and a wipe of a million topics is walked over many
        turns): a wipe seals at once the group's own topics that lack the write bit by design
        (``_named_by_design``: its member-sync topic, the topics named after it and its cluster,
        looked up through the layers still to write), the walk counting only any other it meets;
        an add gives every entry the bit, so a wipe's walk still under way counts nothing more."""
        count = self.topicsOfGroup.get(broker_name, 0)  # type: ignore[arg-type]
        if not count:
            return 0
        name: str = broker_name  # type: ignore[assignment]
        counted: frozenset[str] = frozenset()
        if wipe:
            self.writableOfGroup.pop(name, None)
            counted = self._named_by_design(name)
            earlier = [made for group, made, _, _ in self._pending.perm if group == name]  # type: ignore[union-attr]
            sealing = 0
            for topic in counted:
                queue = (self.queues_of(topic) or {}).get(name)
                if queue is not None:
                    perm = queue.perm
                    for made in earlier:  # this change's own, not yet a layer (a scan's members, one by one)
                        perm = made(perm)
                    sealing += bool(perm & PERM_WRITE)
            if sealing:
                self._count_in(self.sealedOfGroup, name, sealing)
        else:
            self.writableOfGroup[name] = count
            self.sealedOfGroup.pop(name, None)
            for layer in self._layers:  # a wipe's walk under way: what it seals, this gives the bit back
                if isinstance(layer, PermChanged) and layer.group == name:
                    layer.flipped = None
        self._pending.perm.append((name, change, wipe, counted))  # type: ignore[union-attr]
        return count

    def _named_by_design(self, group: str) -> frozenset[str]:
        """The topics named after ``group`` (its member-sync topic, its own name, its cluster's) whose
        queues may lack the write bit by design (registration.write_off_by_design)."""
        broker = self.brokerAddrTable.get(group)
        named = {SYNC_BROKER_MEMBER_GROUP_PREFIX + group, group}
        if broker is not None and broker.cluster is not None:
            named.add(broker.cluster)
        return frozenset(topic for topic in named if self._sealed_by_design(topic, group))

    def _wiped(self, group: str, counted: frozenset[str], topic: str, old: QueueData, new: QueueData) -> None:
        """The walk of a wipe took the write bit off ``old``: sealed by design, it now counts so
        (unless the wipe counted its topic at the commit: ``counted``)."""
        if (old.perm & PERM_WRITE and not new.perm & PERM_WRITE and topic not in counted
                and self._sealed_by_design(topic, group)):
            self._count_in(self.sealedOfGroup, group, 1)

    @_one_change
    def delete_topic(self, topic: str | None, cluster: str | None = None) -> None:
        self._forget_tables()
        self.settle_now()
        if not cluster:
            queues = self._table.pop(topic, None)  # type: ignore[arg-type]
            if queues is not None:
                for name, queue in queues.items():
                    self._count_queue(name, -1)
                    self._count_writes(topic, name, queue, -1)  # type: ignore[arg-type]
                self._topic_changed(topic)  # type: ignore[arg-type]
            return
        for broker_name in list(self.clusterAddrTable.get(cluster, ())):
            self._remove_queue_data(topic, broker_name)  # type: ignore[arg-type]

    # -- queries ----------------------------------------------------------------------------
    def pickup_topic_route_data(self, topic: str | None) -> RouteData | None:
        queues = self.queues_of(topic) if topic is not None else None
        if not queues:
            return None
        names = self.group_order(queues)
        brokers = self.route_brokers(topic, queues, names)  # type: ignore[arg-type]
        filter_servers: dict[str, list[str | None]] = {}
        if self.filterServerTable:  # (a look-up an address only when any broker has filter servers)
            for clone in brokers:
                for addr in clone.brokerAddrs.values():
                    servers = self.filterServerTable.get(self.live_key(clone.cluster, addr))
                    if servers:
                        filter_servers[addr] = servers
        if not brokers:
            return None
        route = RouteData([queues[n] for n in names], brokers, filter_servers)
        if self.profile.v5_bodies:
            route.topicQueueMappingByBroker = self.topicQueueMappingInfoTable.get(topic)  # type: ignore[arg-type]
        return route

    def route_brokers(self, topic: str, queues: Mapping[str, QueueData], names: Iterable[str]) -> list[BrokerData]:
        """The BrokerData a route of ``topic`` shows for ``names`` (of its groups, in order): a copy of
        each one brokerAddrTable holds, as Java's pickup copies, an acting master answered as id 0
        (``_apply_acting_master``); what a lookup filtered by zone patches its kept route with, a
        group at a time (zone_routes.py), as the whole route is picked up here."""
        table = self.brokerAddrTable
        brokers = [BrokerData(broker.cluster, broker.brokerName, dict(broker.brokerAddrs), broker.zoneName,
                              broker.enableActingMaster) for name in names if (broker := table.get(name)) is not None]
        if (self.profile.acting_master_routes and self.support_acting_master
                and not topic.startswith(SYNC_BROKER_MEMBER_GROUP_PREFIX)):
            self._apply_acting_master(brokers, queues)
        return brokers

    def group_order(self, names: Iterable[str]) -> list[str]:
        """``java_hash_order(names)`` for broker group names, each one's hash remembered (bounded by
        the groups the tables hold: past twice that, and 1,024 more, they start over)."""
        names = list(names)
        spreads = self._group_spreads
        if len(spreads) > 2 * len(self.brokerAddrTable) + 1024:
            spreads.clear()
        for name in [name for name in names if name not in spreads]:
            spreads[name] = java_spread(name)
        return [names[i] for i in bucket_order(list(map(spreads.__getitem__, names)), table_size(len(names)) - 1)]

    @staticmethod
    def _apply_acting_master(brokers: list[BrokerData], queues: Mapping[str, QueueData]) -> None:
        """supportActingMaster: a master-less group whose queues are read-only answers its
        lowest-id slave as id 0 (a QueueData is held under its own brokerName)."""
        for broker in brokers:
            addrs = broker.brokerAddrs
            if not addrs or MASTER_ID in addrs or not broker.enableActingMaster:
                continue
            queue = queues.get(broker.brokerName)
            if queue is not None and not queue.perm & PERM_WRITE:
                addrs[MASTER_ID] = addrs.pop(min(addrs))

    def all_topics(self) -> list[str]:
        return list(self.topicQueueTable)

    def topics_by_cluster(self, cluster: str | None, among: list[str] | None = None) -> list[str]:
        """GET_TOPICS_BY_CLUSTER's topics: of ``among`` (``all_topics()`` as taken in the reactor's
        thread; None: all of them, now), those a broker group of ``cluster`` serves.  Given
        ``among``, it reads the tables one look-up at a time and writes nothing: a thread may run
        it while the reactor's thread changes them (apart.py; each look-up is whole under the GIL)."""
        held = self.clusterAddrTable.get(cluster) if cluster is not None else None
        if not held:
            return []
        names = tuple(held)
        table, topics = self._listed(among)
        return [topic for topic in topics if (queues := table.get(topic)) and any(name in queues for name in names)]

    def system_topic_list(self) -> tuple[list[str], str | None]:
        """GET_SYSTEM_TOPIC_LIST_FROM_NS: cluster names and broker names (a set), plus one address."""
        topics, addr, _ = self.system_topic_list_shown()
        return topics, addr

    def system_topic_list_shown(self) -> tuple[list[str], str | None, SystemTopicListShown]:
        """``system_topic_list`` and what it was made of (Java's getSystemTopicList, 4.9.8 and 5.3.3
        alike): every cluster name and every group name in clusterAddrTable, and the first address
        of the first group, in brokerAddrTable's order, that has one."""
        table = self.brokerAddrTable
        topics = dict.fromkeys(self.clusterAddrTable)
        for names in self.clusterAddrTable.values():
            topics.update(names)
        addr = first = None
        for name in self.group_order(table):
            addrs = table[name].brokerAddrs
            if addrs:
                addr, first = addrs[java_hash_order(addrs)[0]], name
                break
        shown = SystemTopicListShown(frozenset(self.clusterAddrTable),
                                     {name: bool(broker.brokerAddrs) for name, broker in table.items()}, first)
        return list(topics), addr, shown

    def system_topic_list_changed(self, shown: SystemTopicListShown, groups: Iterable[str | None]) -> bool:
        """Whether a change of ``groups`` (a RouteChange's, left ones included) changed what
        ``system_topic_list`` shows, in a look at each and one at the cluster names: a group's
        entry or leaving changes the group names and brokerAddrTable's order (a group in
        brokerAddrTable is in its cluster's names, and a name joins a cluster only by a
        registration, which puts its group in brokerAddrTable: its presence says its membership),
        a group getting or losing its addresses which group shows one, and the shown group's
        addresses the address.  A change of a group's topics, zone or flags shows nowhere here."""
        if self.clusterAddrTable.keys() != shown.clusters:
            return True
        table, had = self.brokerAddrTable, shown.groups
        for name in groups:
            if name == shown.first or name is None:
                return True
            broker = table.get(name)
            if had.get(name) != (None if broker is None else bool(broker.brokerAddrs)):
                return True
        return False

    def unit_topics(self, test: Callable[[int], bool], among: list[str] | None = None) -> list[str]:
        """Topics whose first QueueData (Java's HashMap order) passes ``test`` on topicSysFlag: of
        ``among`` as ``topics_by_cluster`` reads it (a thread may run it), else of all, now."""
        table, topics = self._listed(among)
        result = []
        for topic in topics:
            queues = table.get(topic)
            first = queues.get(java_hash_order(queues)[0]) if queues else None
            if first is not None and test(first.topicSysFlag):
                result.append(topic)
        return result

    def _listed(self, among: list[str] | None) -> tuple[TopicQueueTable, list[str]]:
        """The table and the topics a topic list reads: ``among`` in the table as it stands (nothing
        settled: a thread may read it), or, given None, every topic of the table settled now."""
        if among is None:
            table = self.topicQueueTable
            return table, list(table)
        return self._table, among

    def broker_member_group(self, broker_name: str | None) -> dict[int, str]:
        broker = self.brokerAddrTable.get(broker_name) if broker_name is not None else None
        return dict(broker.brokerAddrs) if broker else {}


def expiry_reason(silent_ms: int, timeout_ms: int) -> str:
    return f"expired: no heartbeat for {silent_ms / 1000:g} s (timeout {timeout_ms / 1000:g} s)"


def has_unit_flag(flag: int) -> bool:
    return flag & FLAG_UNIT == FLAG_UNIT


def has_unit_sub_flag(flag: int) -> bool:
    return flag & FLAG_UNIT_SUB == FLAG_UNIT_SUB
