"""Route lookups filtered by zone (5.x's ``__ZONE_MODE=true`` with a ``__ZONE_NAME``, any client's
choice), kept per topic and zone and patched by the groups that changed since, so that the first
such lookup after a change costs the groups it changed, not the route.

A kept zone's body is dropped with its topic's others at any change of one of its groups (answer
cache), and the lookup after it picked the whole route up (a copy of each BrokerData, as Java's
pickup), filtered it and joined its pieces: about 8 us and 8 Python calls a group, 160 ms at 20,000
groups, after every change of any one of them.  Here each (topic, zone) keeps, by group, the pieces
its filtered route shows (none for a group the zone leaves out), the topic's queue map it was made
from and the groups' order; a lookup looks at each group's QueueData by identity (a change replaces
one: QueueData is frozen; one C-level pass, no Python call a group), takes the groups the tables
said changed (``changed``: the answer cache's RouteChange, addresses, zone, flags, leaving) and
patches those: their BrokerData picked up (RouteInfoManager.route_brokers, the pickup's own rule),
filtered (bodies.route.in_zone, ZoneRouteRPCHook's rule) and their pieces looked up
(RoutePieces.pieces_of); the groups' order is worked out again only when groups came or went.  The
body is the join of the kept pieces in order (C-level).  ``visits`` counts the groups patched (what
a lookup cost, read by the tests).

Not kept: a route with filter servers (any broker with filter servers: a table each lookup works
out whole, 4.x's legacy feature; the general path answers it).  Bounded as the route pieces are:
the groups held by all kept zones at most twice the tables' groups and ``SPARE_ENTRIES`` more,
past which they start over (``started_over``), costing the next lookup of each zone its walk; and
they go when the route pieces start over (they hold those pieces, which would outlive their bound).
A change's groups are told to each kept zone (``changed``): one look a kept zone, as the answer
cache's walk of its kept routes at each change of groups."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import compress
from operator import is_not

from .bodies.route import QueueData, in_zone
from .route_pieces import RoutePieces
from .state.routes import RouteInfoManager

#: the groups kept zones may hold beyond twice the tables' groups, past which they start over
SPARE_ENTRIES = 4096


class ZoneRoute:
    """One topic's route as one zone sees it, by group (module docstring)."""

    __slots__ = ("queues", "order", "brokers", "queue_pieces", "present", "dirty")

    def __init__(self) -> None:
        #: the topic's queue map the pieces were made from (a copy: the table's entry changes in place)
        self.queues: dict[str, QueueData] = {}
        #: its groups in the route's order (Java's HashMap order of the topic's queue map)
        self.order: list[str] = []
        #: each group's BrokerData and QueueData piece, absent for a group the zone leaves out
        self.brokers: dict[str, bytes] = {}
        self.queue_pieces: dict[str, bytes] = {}
        #: the groups brokerAddrTable holds (none: no route, as the pickup's None)
        self.present: set[str] = set()
        #: groups the tables said changed since the pieces were made
        self.dirty: set[str] = set()


class ZoneRoutes:
    """The kept zone routes of one server (module docstring); the AnswerCache owns one."""

    def __init__(self) -> None:
        #: each (topic, zone)'s (read as a dict, no method: the answer cache asks at every change)
        self.kept: dict[tuple[str, str], ZoneRoute] = {}
        #: the groups the kept zones hold (the bound)
        self.entries = 0
        #: groups patched since made (a test's count of what lookups cost)
        self.visits = 0
        #: the times they started over past the bound
        self.started_over = 0
        #: the route pieces' starts over when these were made: held here past one, the pieces would
        #: outlive the pieces' own bound, so these go with them
        self._pieces_started = 0

    def clear(self) -> None:
        self.kept.clear()
        self.entries = 0

    def changed(self, groups: Iterable[str | None]) -> None:
        """Groups whose addresses, zone or flags changed, or that left: each kept zone naming one
        patches it at its next lookup."""
        names = list(groups)
        for kept in self.kept.values():
            held = kept.queues
            kept.dirty.update(name for name in names if name is not None and name in held)

    def body(self, routes: RouteInfoManager, pieces: RoutePieces, topic: str, zone: str, order_conf: str | None,
             v5: bool) -> bytes | None:
        """The body of ``topic``'s route filtered by ``zone`` (None: no route), patched from what is
        kept; the caller answers a route with filter servers the general way (``keeps``)."""
        queues = routes.queues_of(topic)
        if not queues:
            return None
        if pieces.started_over != self._pieces_started:
            self.clear()
            self._pieces_started = pieces.started_over
        kept = self.kept.get((topic, zone))
        if kept is None:
            if self.entries + len(queues) > 2 * len(routes.brokerAddrTable) + SPARE_ENTRIES:
                self.clear()
                self.started_over += 1
            kept = self.kept[topic, zone] = ZoneRoute()
        self._patch(kept, routes, pieces, topic, zone, queues, v5)
        if not kept.present:
            return None
        mapping = routes.topicQueueMappingInfoTable.get(topic) if v5 else None
        order = kept.order
        return pieces.join(list(filter(None, map(kept.brokers.get, order))),
                           list(filter(None, map(kept.queue_pieces.get, order))), {}, order_conf, mapping, v5, False)

    @staticmethod
    def keeps(routes: RouteInfoManager) -> bool:
        """Whether a zone's lookup is answered here: not while any broker has filter servers."""
        return not routes.filterServerTable

    def _patch(self, kept: ZoneRoute, routes: RouteInfoManager, pieces: RoutePieces, topic: str, zone: str,
               queues: Mapping[str, QueueData], v5: bool) -> None:
        """The groups changed since ``kept`` was made (the tables said so, their QueueData replaced,
        come or gone) made again, and the order when groups came or went."""
        held = kept.queues
        changed = kept.dirty
        if list(held) != list(queues):  # groups came, went, or came back (Java's order keeps insertion's)
            changed.update(held.keys() ^ queues.keys())
            kept.order = routes.group_order(queues)
            self.entries += len(queues) - len(held)
        # a group's queues changed: its QueueData replaced (frozen), found by identity, C-level
        changed.update(compress(queues, map(is_not, queues.values(), map(held.get, queues))))
        if changed:
            for name in changed:
                kept.brokers.pop(name, None)
                kept.queue_pieces.pop(name, None)
                kept.present.discard(name)
            names = [name for name in changed if name in queues]
            brokers = routes.route_brokers(topic, queues, names)
            kept.present.update(broker.brokerName for broker in brokers)
            shown = [broker for broker in brokers if in_zone(broker, zone)]
            broker_pieces, queue_pieces = pieces.pieces_of(shown, [queues[b.brokerName] for b in shown], v5, False,
                                                           len(routes.brokerAddrTable))
            for broker, broker_piece, queue_piece in zip(shown, broker_pieces, queue_pieces, strict=True):
                kept.brokers[broker.brokerName] = broker_piece
                kept.queue_pieces[broker.brokerName] = queue_piece
            self.visits += len(names)
            kept.dirty = set()
            kept.queues = dict(queues)
