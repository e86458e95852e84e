"""What an operator must see first: broker groups without a master and clusters nothing can be
written to.  Pure (reads RouteInfoManager's tables, no Twisted), computed in one place for the
status page, ``/api/clusters`` and ``/metrics`` alike.

A group *takes writes* when its master (brokerId 0, Java's MixAll.MASTER_ID) is live - registered
and in brokerLiveTable - and at least one of its queues has the write bit: producers send only to
masters (a slave's queues are read-only to clients whatever their perm says, and 5.x's acting
master answers a slave as id 0 only with its queues made read-only).  A cluster none of whose
groups takes writes refuses every send ("sent 0/2").  A system topic that takes no writes by
design (state/registration.py's write_off_by_design: every 5.x broker's rmq_sys_SYNC_BROKER_MEMBER_<name>,
perm 1) is not counted among a group's topics at all, so it never shows as a topic that lost its
write permission.

A group the topology remembers (state/topology.py) whose members all left the routes stays here,
*absent*: no live master, no live member, nothing writable, and its cluster with it.  So a whole
cluster stopped cleanly takes no writes, as after a crash, until it comes back or an operator retires
it; it is told apart (``stopped_cleanly``: its last members unregistered), so the page and the alert
rules say "stopped cleanly" as a warning where a crash pages.

Except right after a restart: a NameServer starts with empty routes (Java's does too) and brokers
register every 30 s, so for ``readinessBrokerWait`` ms (45 s, the wait ``/readyz`` gives them) a
group that was up when it went down and has no live master yet is *rejoining*, not an outage: the
page says "restarted N s ago, brokers re-registering", and the alert rules leave that
NameServer's view of the group out (another NameServer that knows better still alerts).  The
window is measured on the steady clock (clocks.py), so a wall clock stepped back at boot does not
stretch it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from .bodies.route import MASTER_ID
from .lost_topics import CLEAN_STOP, CRASHES
from .state.costly import Costly, KeepTimers
from .state.routes import RouteInfoManager
from .state.topology import KnownGroup, Topology


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
    #: live members that registered since this start (not only restored from a route snapshot)
    heartbeating: int = 0
    #: remembered (state/topology.py) but no member in the routes: since when and how its last left
    absent: bool = False
    absent_since: float | None = None
    absent_how: str | None = None
    #: up when this NameServer last saved its topology, no live master yet, and the restart's window
    #: for brokers to register again is not over: expected back, not (yet) an outage
    rejoining: bool = False
    #: how its master (brokerId 0) last left, while it has no live master (KnownGroup.master_how)
    master_how: str | None = None
    #: members the topology remembers (an id at its last address) that the routes do not hold: a slave
    #: killed while its master serves on (every member, for an absent group)
    members_absent: int = 0
    #: when its master last left (KnownGroup.master_left), while it has no live master: the master's own
    #: departure, whatever its slaves did since
    master_left: float | None = None

    @property
    def master_stopped_cleanly(self) -> bool:
        """No live master because the master unregistered (a clean stop) while a slave is up: a cluster
        stopped master first, or started again slave first, is masterless for the seconds between, on
        purpose.  An absent group is told by how its *last* member left (``stopped_cleanly``): a slave
        that crashed after its master's clean stop is a crash."""
        return not self.master_live and not self.absent and self.master_how == CLEAN_STOP

    @property
    def stopped_cleanly(self) -> bool:
        """Absent, its last member having unregistered: a clean stop, not a crash (how the *last*
        member left: a master that crashed before its slave was stopped is told by the crash's
        own departure, ``namesrv_brokers_departed``)."""
        return self.absent and self.absent_how == CLEAN_STOP

    @property
    def stopped_cleanly_at(self) -> float | None:
        """When the clean stop that left it without a live master was seen (wall clock, s): its last
        member's unregistration for a group stopped cleanly, its master's for one whose slave is up; None
        for any other group.  The operator's alert says "stopped cleanly at T by unregistration"."""
        if self.stopped_cleanly:
            return self.absent_since
        return self.master_left if self.master_stopped_cleanly else None

    @property
    def takes_writes(self) -> bool:
        return self.master_live and self.write_perm > 0

    @property
    def key(self) -> tuple[str, str]:
        return self.cluster, self.broker

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

    @property
    def masterless_outages(self) -> list[GroupHealth]:
        """Groups without a live master that are an outage: neither stopped cleanly (the group, or its
        master with a slave up: a shutdown on purpose) nor rejoining after this NameServer's restart."""
        return [group for group in self.without_master
                if not (group.rejoining or group.stopped_cleanly or group.master_stopped_cleanly)]

    @property
    def stopped_cleanly(self) -> list[GroupHealth]:
        """Groups without a live master because they (or their master) stopped cleanly."""
        return [group for group in self.groups if group.stopped_cleanly or group.master_stopped_cleanly]

    @property
    def clusters_not_writable_outages(self) -> list[str]:
        """Clusters nothing can be written to that are an outage: not stopped cleanly, not rejoining."""
        calm = set(self.clusters_stopped_cleanly) | set(self.rejoining_clusters)
        return [cluster for cluster in self.clusters_without_writable_queues if cluster not in calm]

    @property
    def clusters_stopped_cleanly(self) -> list[str]:
        """Clusters every known group of which stopped cleanly (a whole cluster shut down on
        purpose, as ``mqshutdown broker`` on each host does): nothing can be written to it, and
        nothing crashed.  A group whose master unregistered while a slave is still up counts: the
        same shutdown, master first (or the start again, slave first)."""
        clusters: dict[str, bool] = {}
        for group in self.groups:
            clean = group.stopped_cleanly or group.master_stopped_cleanly
            clusters[group.cluster] = clusters.get(group.cluster, True) and clean
        return sorted(cluster for cluster, stopped in clusters.items() if stopped)

    @property
    def clusters_unregistered(self) -> list[str]:
        """Clusters stopped cleanly every broker of which unregistered (every group absent), as
        NamesrvClusterStoppedCleanly and the page's "every broker unregistered" say.  One with a group
        whose slave is up is a master restarting, or the cluster being stopped master first (or started
        slave first): it takes no writes, on purpose, and that group's master is what to name."""
        slave_up = {group.cluster for group in self.groups if group.master_stopped_cleanly}
        return [cluster for cluster in self.clusters_stopped_cleanly if cluster not in slave_up]

    #: broker name -> its group (the page looks each group up)
    by_name: dict[str, GroupHealth]

    def group(self, name: str) -> GroupHealth | None:
        return self.by_name.get(name)

    @property
    def absent(self) -> list[GroupHealth]:
        """Groups remembered and not in the routes (expected but absent)."""
        return [group for group in self.groups if group.absent]

    @property
    def known(self) -> int:
        """Groups the topology remembers (or in the routes, where the memory is full)."""
        return len(self.groups)

    #: groups that were up when the remembered topology was last written (a restart expects them back)
    up_before: frozenset[tuple[str, str]] = frozenset()
    #: seconds left of the restart's window for brokers to register again (0: over, or no wait)
    rejoin_left: float = 0.0

    @property
    def rejoining(self) -> list[GroupHealth]:
        """Groups expected back from the restart, not yet an outage (``GroupHealth.rejoining``)."""
        return [group for group in self.groups if group.rejoining]

    @property
    def rejoining_clusters(self) -> list[str]:
        """Clusters with a group rejoining: one that takes no writes yet is not yet an outage."""
        return sorted({group.cluster for group in self.groups if group.rejoining})

    @property
    def not_back(self) -> list[GroupHealth]:
        """Groups up before the restart that are not routed again (neither registered nor restored), and
        not stopped cleanly since (``expected_back``)."""
        return [group for group in self.absent if expected_back(group, self.up_before)]

    @property
    def back(self) -> int:
        """Groups with a member that registered since this start: "N of M known broker groups back"."""
        return sum(group.heartbeating > 0 for group in self.groups)


class HealthWatch:
    """RouteHealth on request: the per-group queue counts are read from the routes, which keep
    them as the tables change (RouteInfoManager.writableOfGroup, sealedOfGroup: no walk of
    topicQueueTable here); liveness is read each time."""

    def __init__(self, routes: RouteInfoManager, topology: Topology, keep_timers: KeepTimers,
                 rejoin_left: Callable[[], float] = lambda: 0.0) -> None:
        self.routes = routes
        self.topology = topology
        #: seconds left of the restart's window for brokers to register again (steady clock)
        self.rejoin_left = rejoin_left
        #: what the kept values are timed by (the composition root's; /api's clusters are kept by them too)
        self.keep_timers = keep_timers
        #: made again at most so often that it takes a fifth of the reactor (state/costly.py): /readyz,
        #: public on every bind, asked in a loop at 20,000 groups held every request 0.13-0.6 s each time
        self.kept = Costly(self._health, keep_timers)

    def health(self) -> RouteHealth:
        """The groups' health, as of at most ``Costly``'s keep ago (now, for any cluster cheap to walk)."""
        return self.kept.get()

    def _health(self) -> RouteHealth:
        routes = self.routes
        live, topics_of, writable_of, sealed_of = (routes.brokerLiveTable, routes.topicsOfGroup,
                                                   routes.writableOfGroup, routes.sealedOfGroup)
        groups = []
        known_groups = self.topology.groups
        live_key = routes.live_key
        # one walk of each group's members, no call but the lookups: /metrics reads this in the
        # reactor's turn, at the limits' defaults 20,000 groups of 5
        for name, broker in routes.brokerAddrTable.items():
            addrs, cluster = broker.brokerAddrs, broker.cluster
            # its topics but those whose queues lack the write bit by design, and its writable ones
            topics, write_perm = topics_of.get(name, 0) - sealed_of.get(name, 0), writable_of.get(name, 0)
            master_live, alive, registered = False, 0, 0
            for broker_id, addr in addrs.items():
                member = live.get(live_key(cluster, addr))
                if member is not None:
                    alive += 1
                    registered += not member.restored
                    master_live = master_live or broker_id == MASTER_ID
            known = known_groups.get((str(cluster), name))
            groups.append(GroupHealth(str(cluster), name, addrs.get(MASTER_ID), master_live, alive, topics,
                                      write_perm, registered,
                                      master_how=None if master_live or known is None else known.master_how,
                                      master_left=None if master_live or known is None else _master_left(known),
                                      members_absent=0 if known is None else _members_absent(known, addrs)))
        present = {(group.cluster, group.broker) for group in groups}
        groups += [_absent(group) for key, group in known_groups.items() if key not in present]
        groups.sort(key=lambda group: (group.cluster, group.broker))
        writable = dict.fromkeys(sorted(routes.clusterAddrTable.keys() | {cluster for cluster, _ in known_groups}), 0)
        for group in groups:
            if group.takes_writes and group.broker in routes.clusterAddrTable.get(group.cluster, ()):
                writable[group.cluster] += 1
        up_before = frozenset(self.topology.up_at_start)
        left = max(0.0, self.rejoin_left()) if up_before else 0.0
        if left:
            groups = [replace(group, rejoining=True) if not group.master_live and expected_back(group, up_before)
                      else group
                      for group in groups]
        by_name = {group.broker: group for group in groups if group.absent}
        by_name.update((group.broker, group) for group in groups if not group.absent)
        return RouteHealth(tuple(groups), writable, by_name, up_before, left)


def expected_back(group: GroupHealth, up_before: frozenset[tuple[str, str]]) -> bool:
    """Whether a group is expected to register again after the restart: it was up when this NameServer
    went down, and it has not been stopped cleanly since (restored from the route snapshot, then
    unregistered within the window: it was "rejoining" and /readyz 503 until the window ended)."""
    return group.key in up_before and not (group.stopped_cleanly or group.master_stopped_cleanly)


def _absent(known: KnownGroup) -> GroupHealth:
    master = known.member(MASTER_ID)
    return GroupHealth(known.cluster, known.broker, master.addr if master else None, False, 0, 0, 0, 0,
                       True, known.left, known.how, master_how=known.master_how, members_absent=len(known.members))


def _master_left(known: KnownGroup) -> float | None:
    """When the group's master left: its own departure (a file of a version before it kept none: the
    group's last departure, as then)."""
    return known.left if known.master_left is None else known.master_left


def _members_absent(known: KnownGroup, addrs: dict[int, str]) -> int:
    """The remembered members of a routed group that its brokerAddrs does not hold at their address."""
    absent = 0
    for member in known.members:  # (a loop: a group has one to a few)
        if addrs.get(member.broker_id) != member.addr:
            absent += 1
    return absent
