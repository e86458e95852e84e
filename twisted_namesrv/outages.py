"""What an operator must see first: broker groups without a master and clusters nothing can be
written to.  Pure (reads RouteInfoManager's tables, no Twisted), computed in one place for the
status page, ``/api/clusters`` and ``/metrics`` alike.

A group *takes writes* when its master (brokerId 0, Java's MixAll.MASTER_ID) is live - registered
and in brokerLiveTable - and at least one of its queues has the write bit: producers send only to
masters (a slave's queues are read-only to clients whatever their perm says, and 5.x's acting
master answers a slave as id 0 only with its queues made read-only).  A cluster none of whose
groups takes writes refuses every send ("sent 0/2").  A system topic that takes no writes by
design (system_topics.write_off_by_design: every 5.x broker's rmq_sys_SYNC_BROKER_MEMBER_<name>,
perm 1) is not counted among a group's topics at all, so it never shows as a topic that lost its
write permission.
"""

from __future__ import annotations

from dataclasses import dataclass

from .bodies.route import MASTER_ID, PERM_WRITE, BrokerData
from .lost_topics import DEPARTURES
from .state.routes import RouteInfoManager
from .system_topics import write_off_by_design

#: departures that are crashes (the connection closed without unregistering, the heartbeat stopped,
#: the connection went idle): ranked above a clean stop (``unregistered``) in colour and order
CRASHES = DEPARTURES - {"unregistered"}


def is_crash(kind: str) -> bool:
    return kind in CRASHES


@dataclass(frozen=True, slots=True)
class GroupHealth:
    cluster: str
    broker: str
    #: brokerId 0's address, if the group has one registered
    master_addr: str | None
    master_live: bool
    live_members: int
    #: topics with a queue on this group, and how many of those queues carry the write bit
    topics: int
    write_perm: int

    @property
    def takes_writes(self) -> bool:
        return self.master_live and self.write_perm > 0

    @property
    def writable_topics(self) -> int:
        """Queues a producer can write to: none without a live master."""
        return self.write_perm if self.master_live else 0


@dataclass(frozen=True, slots=True)
class RouteHealth:
    groups: tuple[GroupHealth, ...]
    #: every cluster of clusterAddrTable -> how many of its groups take writes
    writable_groups: dict[str, int]

    @property
    def without_master(self) -> list[GroupHealth]:
        return [group for group in self.groups if not group.master_live]

    @property
    def clusters_without_writable_queues(self) -> list[str]:
        return [cluster for cluster, count in self.writable_groups.items() if count == 0]

    #: broker name -> its group (the page looks each group up)
    by_name: dict[str, GroupHealth]

    def group(self, name: str) -> GroupHealth | None:
        return self.by_name.get(name)


class HealthWatch:
    """RouteHealth on request; the per-group queue counts (a scan of topicQueueTable) are
    recomputed only when the routes changed (``generation``), liveness is read each time."""

    def __init__(self, routes: RouteInfoManager) -> None:
        self.routes = routes
        self._perms: tuple[int, dict[str, tuple[int, int]]] = (-1, {})

    def queue_perms(self) -> dict[str, tuple[int, int]]:
        """Broker name -> (topics it serves, how many with the write bit); a topic read-only by
        design (system_topics.write_off_by_design) is not counted."""
        routes = self.routes
        generation, table = self._perms
        if generation != routes.generation:
            counts: dict[str, list[int]] = {}
            brokers = routes.brokerAddrTable
            for topic, queues in routes.topicQueueTable.items():
                for name, queue in queues.items():
                    writable = bool(queue.perm & PERM_WRITE)
                    if not writable and _read_only_by_design(topic, name, brokers.get(name)):
                        continue
                    pair = counts.setdefault(name, [0, 0])
                    pair[0] += 1
                    pair[1] += writable
            table = {name: (pair[0], pair[1]) for name, pair in counts.items()}
            self._perms = (routes.generation, table)
        return table

    def health(self) -> RouteHealth:
        routes, perms = self.routes, self.queue_perms()
        live = routes.brokerLiveTable
        groups = []
        for name, broker in sorted(routes.brokerAddrTable.items(), key=lambda item: (str(item[1].cluster), item[0])):
            addrs = broker.brokerAddrs
            master = addrs.get(MASTER_ID)
            topics, write_perm = perms.get(name, (0, 0))
            groups.append(GroupHealth(
                str(broker.cluster), name, master,
                master is not None and routes.live_key(broker.cluster, master) in live,
                sum(routes.live_key(broker.cluster, addr) in live for addr in addrs.values()),
                topics, write_perm))
        writable = {cluster: 0 for cluster in sorted(routes.clusterAddrTable)}
        for group in groups:
            if group.takes_writes and group.broker in routes.clusterAddrTable.get(group.cluster, ()):
                writable[group.cluster] += 1
        return RouteHealth(tuple(groups), writable, {group.broker: group for group in groups})


def _read_only_by_design(topic: str, broker_name: str, broker: BrokerData | None) -> bool:
    clusters = () if broker is None else (broker.cluster,)
    return write_off_by_design(topic, clusters, (broker_name,))
