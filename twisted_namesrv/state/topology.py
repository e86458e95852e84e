"""The broker topology this NameServer has seen: every cluster, broker group and member, kept
after they leave the route tables and across restarts, until an operator retires them.

Java's NameServer (and the route tables here) forget a broker group with its last member: when a
whole cluster stops cleanly (each broker unregisters), clusterAddrTable, brokerAddrTable and every
series and page row that read them go empty, and the outage is silent - nothing says a cluster
that served a minute ago is gone.  This owner remembers what registered, so the outage views
(outages.py: the page, ``/api``, ``/metrics``) keep a group that left as *expected but absent*:
its master not live, its cluster writing nothing.  A group leaves the memory only when an operator
retires it (``retire``: RETIRE_BROKER_GROUP, ``namesrv-admin retireBrokerGroup``), never by a timer.

It hears the route events (``heard``: registered, confirmed and changed name a member; a departure
marks when and how it left); ``seed`` adds the groups of routes restored from a snapshot.  Pure:
clock injected, no I/O; ``encode``/``decode`` are the file's format, which topology_store.py keeps
beside the KV store.  Bounded: at most GROUPS_LIMIT groups and MEMBERS_LIMIT members a group (a
group over it forgets its member seen longest ago; a new group past the limit is not remembered,
counted in ``refused``), so neither a hostile registration flood nor years of pod addresses grow it.

A group remembered is expected for good (an alert while it is absent, a series, a line of the
file), and any peer that may register (any peer without ACL) names groups: one connection
registering 10,000 groups and closing took the memory to its limit in 2 s, 10,000 critical
"absent" groups that stayed across restarts until retired one cluster at a time, and the
operator's real new groups were then not remembered.  So the groups one peer host brought in are
bounded too (GROUPS_PER_HOST: a host runs a few brokers, a node behind SNAT some tens): the
registration being applied names its peer (``origin``, set around RouteInfoManager's
apply_registration by the processor; loopback peers and routes restored from a snapshot or a file
count against none), and a new group past its host's bound is routed
as ever but not remembered, counted in ``refused`` and ``refused_hosts``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from ..bodies.route import MASTER_ID
from .alike import Alike
from .hosts import KeptHosts
from .store import DocumentError, document_items

#: route events that name a present member, and those after which it is gone (lost_topics.DEPARTURES)
PRESENT_EVENTS = frozenset({"registered", "confirmed", "changed"})
DEPARTURE_EVENTS = frozenset({"expired", "closed", "idle", "unregistered"})
#: real clusters run tens to a few thousand broker groups; a registration flood stops here
GROUPS_LIMIT = 10_000
#: new groups one peer host (``hosts.peer_group``: an IPv6 host's /64) may bring into the memory
#: since this start, those it brought and an operator retired given back
GROUPS_PER_HOST = 64
#: a host not worked out yet
_UNSEEN = object()
#: members remembered per group (ids; a slave that came back under a new id leaves its old one)
MEMBERS_LIMIT = 32
#: distinct member-id sets the groups share (Topology._alike_ids, alike.py); real groups have a handful
ALIKE_IDS = 256
FORMAT = 1


class TopologyFileError(DocumentError):
    """A topology file this server did not write (or a damaged one): the message says what is wrong."""


class Member(msgspec.Struct, array_like=True):
    """One broker id of a group as last registered: its address and when it was first seen there.
    Like KnownGroup, a msgspec Struct: made in C (a dataclass's generated ``__init__`` ran a line
    of Python a field, at each new member's registration); encoded as the file lists it,
    ``[broker_id, addr, since]`` (``encode_group``)."""

    broker_id: int
    addr: str
    since: float


#: how a group up when the NameServer stopped is absent after its restart: not registered since
RESTART = "not registered since the NameServer restarted"


class KnownGroup(msgspec.Struct):
    cluster: str
    broker: str
    since: float
    #: the member last registered under each broker id, oldest first: a tuple replaced on a change
    #: (a group has one to a few; a dict of one was 224 bytes, a tuple 48: 0.9 MB of 5,000 groups)
    members: tuple[Member, ...] = ()
    #: the last departure of a member: when and how (expired, closed, idle, unregistered); the group
    #: is absent when the routes hold none of its members, and then this says since when
    left: float | None = None
    how: str | None = None
    #: the member ids in the routes as the events tell it (registered, not departed since): saved, so a
    #: restart knows which groups were up when it went down (those /readyz waits for); frozen and
    #: replaced on a change, so alike ones are one set (``Topology._alike_ids``: a set of its own was
    #: 216 bytes a group, 1 MiB of 5,000 groups)
    up: frozenset[int] = frozenset()
    #: how its master (brokerId 0) last left, until a master registers again (None): a group whose
    #: master unregistered while a slave stays is masterless by a clean stop (a cluster stopped master
    #: first, or started slave first), not by a crash
    master_how: str | None = None
    #: when its master last left, while ``master_how`` says how (the alert's "stopped cleanly at T"): the
    #: master's own departure, where ``left`` is the group's last (a slave stopped after it, or stopped and
    #: started again while the master was down, moved ``left`` and the time the operator was told)
    master_left: float | None = None

    @property
    def key(self) -> tuple[str, str]:
        return self.cluster, self.broker

    def member(self, broker_id: int) -> Member | None:
        """The member last registered as ``broker_id``, if any."""
        return next((m for m in self.members if m.broker_id == broker_id), None)


class Topology:
    """Every (cluster, broker group) seen and not retired, with its members."""

    def __init__(self, clock: Callable[[], float], hosts: KeptHosts, groups_limit: int = GROUPS_LIMIT,
                 members_limit: int = MEMBERS_LIMIT, groups_per_host: int = GROUPS_PER_HOST) -> None:
        self.clock = clock
        #: the host each peer counts under: the server's one table (service.build), the page's events' too
        self.hosts = hosts
        self.groups_limit = groups_limit
        self.members_limit = members_limit
        self.groups_per_host = groups_per_host
        #: the peer (``host:port``) whose registration is being applied, set by the processor around
        #: apply_registration (an attribute, not a context manager: it is on every registration's
        #: path, and only a new group reads it); None: a new group counts against no host.  Set
        #: around unregister_broker too: the page's events count against that host (events.py)
        self.origin: str | None = None
        #: groups in the memory each host brought since this start, and which brought each
        self.brought: Counter[str] = Counter()
        self._brought_by: dict[tuple[str, str], str] = {}
        #: new groups not remembered because their host had brought GROUPS_PER_HOST, by host (the
        #: store's log line tells and clears it; ``refused`` counts them too)
        self.refused_hosts: Counter[str] = Counter()
        self.groups: dict[tuple[str, str], KnownGroup] = {}
        #: bumped by every change: the store writes when it moved
        self.version = 0
        #: new groups not remembered because GROUPS_LIMIT was reached
        self.refused = 0
        #: why the file was not loaded at start (the status page says so); None: loaded, or none there
        self.load_problem: str | None = None
        #: the groups that were up when the file was last written: expected back after a restart
        self.up_at_start: set[tuple[str, str]] = set()
        #: every group's ``up`` as one shared set per content: most groups' are alike ({0}, {0, 1})
        self._alike_ids: Alike[frozenset[int]] = Alike(ALIKE_IDS)
        #: each group's entry in the file, in the groups' order, written as the group changes
        #: (``_changed``): a write joins them (``encode``) rather than encoding thousands of groups
        #: in one reactor turn (5,000 groups took 20-80 ms of it, a lookup's wait, every 2 s while
        #: brokers registered); every change goes through a method here
        self.encoded: dict[tuple[str, str], bytes] = {}

    # -- what it hears ---------------------------------------------------------------------------
    def heard(self, kind: str, info: dict[str, Any]) -> None:
        """A route event (RouteInfoManager's listener): a member present, or one that left."""
        cluster, broker, addr, broker_id = info.get("cluster"), info.get("broker"), info.get("addr"), info.get("id")
        if not (isinstance(cluster, str) and isinstance(broker, str)):
            return
        if kind in PRESENT_EVENTS and isinstance(addr, str) and isinstance(broker_id, int):
            self.present(cluster, broker, broker_id, addr)
        elif kind in DEPARTURE_EVENTS:
            group = self.groups.get((cluster, broker))
            if group is not None:
                group.left, group.how = self.clock(), kind
                if broker_id == MASTER_ID:
                    group.master_how, group.master_left = kind, group.left
                if broker_id in group.up:
                    group.up = self._alike_ids(group.up - {broker_id})
                self._changed(group)

    def present(self, cluster: str, broker: str, broker_id: int, addr: str) -> None:
        """``addr`` serves ``broker`` of ``cluster`` as ``broker_id``; a change only when new."""
        key = (cluster, broker)
        group = self.groups.get(key)
        now = self.clock()
        if group is None:
            if len(self.groups) >= self.groups_limit:
                self.refused += 1
                return
            host: Any = None  # (a str or None, once not _UNSEEN)
            origin = self.origin
            if origin is not None:  # its host, kept by the address without its port (C-level: no call)
                host = self.hosts.peers.get(origin.rpartition(":")[0] or origin, _UNSEEN)
                if host is _UNSEEN:
                    host = self.hosts.peer(origin)
            if host is not None:
                if self.brought[host] >= self.groups_per_host:
                    self.refused += 1
                    self.refused_hosts[host] += 1
                    return
                self.brought[host] += 1
                self._brought_by[key] = host
            group = self.groups[key] = KnownGroup(cluster, broker, now)
        changed = broker_id not in group.up
        if changed:
            group.up = self._alike_ids(group.up | {broker_id})
            if broker_id == MASTER_ID:
                group.master_how = group.master_left = None
        members = group.members
        member = group.member(broker_id) if members else None
        if member is None or member.addr != addr:
            new = Member(broker_id, addr, now)
            # (a new group's first member: none to swap, no scan)
            group.members = self._placed(group, new, member is not None) if members else (new,)
            changed = True
        if changed:
            self._changed(group, key)

    def _placed(self, group: KnownGroup, new: Member, known_id: bool) -> tuple[Member, ...]:
        """``group``'s members with ``new``: in its id's place when ``known_id``, else the newest; the
        oldest beyond members_limit dropped.  A slave became master (a controller's election): the
        routes swap its id with no departure, as Java's do, so its old id is neither a member nor up
        any more (kept up, a group stopped cleanly after a fail-over was expected back after a
        restart, then an outage)."""
        swapped = {m.broker_id for m in group.members if m.addr == new.addr and m.broker_id != new.broker_id}
        if group.up & swapped:
            group.up = self._alike_ids(group.up - swapped)
        kept = [new if m.broker_id == new.broker_id else m for m in group.members if m.broker_id not in swapped]
        if not known_id:
            kept.append(new)
        while len(kept) > self.members_limit:
            kept.remove(min(kept, key=lambda m: m.since))
        return tuple(kept)

    def seed(self, members: Iterable[tuple[str, str, int, str]]) -> None:
        """(cluster, broker, id, address) of routes restored from a snapshot: known from now on."""
        for cluster, broker, broker_id, addr in members:
            self.present(cluster, broker, broker_id, addr)

    # -- what an operator does -------------------------------------------------------------------
    def retire(self, cluster: str, broker: str | None = None,
               broker_id: int | None = None) -> list[tuple[str, str, int | None]]:
        """Forget a cluster (``broker`` None), a group, or one member id of a group: what was
        forgotten, as (cluster, group, id or None for the whole group); nothing when none matched."""
        if broker is None:
            doomed = [key for key in self.groups if key[0] == cluster]
            for key in doomed:
                del self.groups[key]
            forgotten: list[tuple[str, str, int | None]] = [(c, b, None) for c, b in doomed]
        else:
            group = self.groups.get((cluster, broker))
            if group is None or (broker_id is not None and group.member(broker_id) is None):
                return []
            if broker_id is None:
                del self.groups[cluster, broker]
            else:
                group.members = tuple(m for m in group.members if m.broker_id != broker_id)
            forgotten = [(cluster, broker, broker_id)]
        for key in {(c, b) for c, b, _ in forgotten}:
            group = self.groups.get(key)
            if group is None:
                del self.encoded[key]
                host = self._brought_by.pop(key, None)
                if host is not None:  # a retired group gives its host's room back
                    self.brought[host] -= 1
            else:
                self.encoded[key] = encode_group(group)
        if forgotten:
            self.version += 1
        return forgotten

    def restore(self, groups: dict[tuple[str, str], KnownGroup]) -> None:
        """Replace the memory (an undone retirement)."""
        self.groups = groups
        self.encoded = {key: encode_group(group) for key, group in groups.items()}
        self.version += 1

    def _changed(self, group: KnownGroup, key: tuple[str, str] | None = None) -> None:
        """``group`` changed: its entry in the file is encoded again, and the store writes. ``key``:
        the one its entry in ``groups`` has (a new group's entry keeps it: one tuple for both
        tables, not one more a group, 64 bytes)."""
        self.encoded[(group.cluster, group.broker) if key is None else key] = encode_group(group)
        self.version += 1

    def load(self, groups: dict[tuple[str, str], KnownGroup]) -> None:
        """The memory of the last run, at start: every member is out of the routes now, and the
        groups that were up then are expected back (``up_at_start``): absent since this start, by
        ``RESTART`` (their last departure is older than their last registration, and did not cause it)."""
        self.up_at_start = {key for key, group in groups.items() if group.up}
        now = self.clock()
        for key, group in groups.items():
            if key in self.up_at_start:
                group.left, group.how = now, RESTART
            group.up = frozenset()
        self.restore(groups)

    def copy(self) -> dict[tuple[str, str], KnownGroup]:
        return {key: KnownGroup(g.cluster, g.broker, g.since,
                                tuple(Member(m.broker_id, m.addr, m.since) for m in g.members),
                                g.left, g.how, g.up, g.master_how, g.master_left)
                for key, g in self.groups.items()}

    # -- views -----------------------------------------------------------------------------------
    def clusters(self) -> list[str]:
        return sorted({cluster for cluster, _ in self.groups})

    def group(self, cluster: str, broker: str) -> KnownGroup | None:
        return self.groups.get((cluster, broker))


# -- the file -------------------------------------------------------------------------------------
class _Entry(msgspec.Struct, omit_defaults=True):
    """A group's entry in the file, its keys in the file's order: made in C and encoded by msgspec
    as it is (its members as their arrays: ``Member``), no dict of it built first; ``master_how``
    and ``master_left`` written only when set (every other entry as before them)."""

    cluster: str
    broker: str
    since: float
    left: float | None
    how: str | None
    members: list[Member]
    up: list[int]
    master_how: str | None = None
    master_left: float | None = None


def encode_group(g: KnownGroup) -> bytes:
    """One group's entry in the file (JSON, UTF-8), made at every registration that names a new
    member (5,000 at the curve's largest step): msgspec's, a tenth of json.dumps's CPU (a twentieth
    of the registration's); a name with a lone surrogate, which UTF-8 cannot carry, as json.dumps
    escapes it. Kept as the bytes the file holds: as text each was 16 bytes more for every group
    held, and the file was encoded once more at each write."""
    entry = _Entry(g.cluster, g.broker, g.since, g.left, g.how, list(g.members), sorted(g.up), g.master_how,
                   g.master_left)
    try:
        return _ENCODER.encode(entry)
    except UnicodeEncodeError:
        return json.dumps(msgspec.to_builtins(entry), separators=(",", ":")).encode()


_ENCODER = msgspec.json.Encoder()


def encode(topology: Topology) -> bytes:
    """The file: every group's entry as encoded when it last changed (``Topology.encoded``)."""
    return b'{"format":%d,"groups":[%b]}' % (FORMAT, b",".join(topology.encoded.values()))


def decode(data: bytes, groups_limit: int = GROUPS_LIMIT,
           members_limit: int = MEMBERS_LIMIT) -> dict[tuple[str, str], KnownGroup]:
    """The groups of a file ``encode`` wrote; anything else raises TopologyFileError naming what is
    wrong (a file over the limits too: this server never writes one)."""
    try:
        items = document_items(data, FORMAT, "groups", "a topology file")
    except DocumentError as exc:
        raise TopologyFileError(str(exc)) from None
    if len(items) > groups_limit:
        raise TopologyFileError(f"{len(items)} groups, over the limit of {groups_limit}")
    groups: dict[tuple[str, str], KnownGroup] = {}
    for number, item in enumerate(items):
        try:
            group = KnownGroup(_text(item["cluster"]), _text(item["broker"]), float(item["since"]),
                               left=None if item["left"] is None else float(item["left"]),
                               how=None if item["how"] is None else _text(item["how"]))
            if len(item["members"]) > members_limit:
                raise ValueError(f"{len(item['members'])} members, over the limit of {members_limit}")
            members = {int(broker_id): Member(int(broker_id), _text(addr), float(since))
                       for broker_id, addr, since in item["members"]}  # (an id twice: its last)
            group.members = tuple(members.values())
            group.up = frozenset(int(broker_id) for broker_id in item.get("up", ()))
            master_how = item.get("master_how")  # (a file of a version before it: none)
            group.master_how = None if master_how is None else _text(master_how)
            master_left = item.get("master_left")  # (a file of a version before it: none)
            group.master_left = None if master_left is None else float(master_left)
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise TopologyFileError(f"group {number}: {type(exc).__name__}: {exc}") from None
        groups[group.key] = group
    return groups


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not text")
    return value
