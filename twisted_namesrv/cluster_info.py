"""GET_BROKER_CLUSTER_INFO's body kept in pieces, so that a change of one broker group re-encodes
that group's entry, not the table.

The body (bodies/route.py: ``cluster_info_bean``) names every group and every cluster: at 20,000
groups, encoding it was about 2 million Python calls, all on the reactor's one thread, and any peer
that may register can unregister a group, register it again and ask, over and over (issue 47: a
pause bounded by a constant, not by the table).  Java builds it per request under a read lock;
here it is joined per request of pieces encoded once: each group's ``"name":{BrokerData}`` entry
(dropped when the tables publish that group changed or left: ``forget``), each cluster's
``"name":[members]`` entry (checked against the cluster's members as they are now, so it needs no
publication of its own), and each name's JSON string and Java hash.  Joining them orders the pieces
as the general path orders the beans (``bucket_order``, the order ``java_hash_order`` gives), that
order kept from ask to ask and a changed key moved in it (``_Order``), and joins them: C-level work
over the table, no Python step per group; what is encoded anew is what changed.  The bytes are the
general path's (tests/test_cluster_info.py compares them after random
changes); the AnswerCache owns one and keeps the joined body until the next change, as before.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping
from itertools import filterfalse

from .bodies.route import BrokerData
from .remoting import fastjson
from .remoting.fastjson import bucket_order, java_spread, table_size

#: the names remembered (JSON string, hash) beyond twice those the tables hold, past which they start over
SPARE_NAMES = 1024
#: keys gone or come since the order was last kept, past which it is worked out again whole (each one kept
#: in place is a search and a move of the order's list, C-level; past this many one sort costs less)
MOVES_MAX = 64
#: a cluster of this many members or more keeps its members' order (an _Order: three lists and a set)
KEPT_MEMBERS_MIN = 256


class ClusterInfoPieces:
    """The kept pieces of one server's cluster info (module docstring); ``encoded`` counts the
    entries encoded since it was made (what a change costs, read by the tests)."""

    def __init__(self) -> None:
        #: the BrokerData shape the broker entries were encoded in (5.x's or 4.x's)
        self._v5: bool | None = None
        #: each group's entry, ``"name":{...}``, by name (the one piece a change must reach: while
        #: none is kept, the tables need not collect changes for it, AnswerCache.holds)
        self.brokers: dict[str, bytes] = {}
        #: each cluster's entry, ``"name":[...]``, by name, and the members it shows, in their order
        self._clusters: dict[str, bytes] = {}
        self._shown: dict[str, tuple[str, ...]] = {}
        #: each name's (Java spread hash, JSON string): groups, clusters and members
        self._names: dict[str, tuple[int, bytes]] = {}
        #: the groups' and the clusters' iteration order, kept from one ask to the next (_Order)
        self._broker_order = _Order()
        self._cluster_order = _Order()
        self._member_orders: dict[str, _Order] = {}
        self.encoded = 0

    def forget(self, brokers: Iterable[str | None]) -> None:
        """These groups changed or left: their entries go (the clusters' are checked when joined)."""
        for name in brokers:
            if name is not None:
                self.brokers.pop(name, None)

    def clear(self) -> None:
        self.brokers.clear()
        self._clusters.clear()
        self._shown.clear()
        self._names.clear()
        self._broker_order = _Order()
        self._cluster_order = _Order()
        self._member_orders.clear()

    def body(self, broker_addr_table: Mapping[str, BrokerData], cluster_addr_table: Mapping[str, Mapping[str, None]],
             v5: bool, concurrent: bool) -> bytes:
        """The cluster info of these tables, byte for byte ``cluster_info_bean``'s, fastjson-encoded."""
        if v5 != self._v5:
            self.clear()
            self._v5 = v5
        self._prune(broker_addr_table, cluster_addr_table)
        names = self._names
        brokers = self.brokers
        for name in broker_addr_table.keys() - brokers.keys():  # (C-level: no step a group kept)
            brokers[name] = b"%s:%s" % (self._name(name), fastjson.dumps_bytes(broker_addr_table[name].bean(v5)))
            self.encoded += 1
        clusters, shown = self._clusters, self._shown
        now = dict(zip(cluster_addr_table, map(tuple, cluster_addr_table.values()), strict=True))
        for cluster, members in now.items() - shown.items():  # (C-level: no call per cluster unchanged)
            clusters[cluster] = self._cluster_entry(cluster, members)
            shown[cluster] = members
            self.encoded += 1
        broker_keys = self._broker_order.of(list(broker_addr_table), names,
                                            table_size(len(broker_addr_table), 128, concurrent))
        cluster_keys = self._cluster_order.of(list(now), names, table_size(len(now), 32, concurrent))
        return b'{"brokerAddrTable":{%s},"clusterAddrTable":{%s}}' % (
            b",".join(map(brokers.__getitem__, broker_keys)), b",".join(map(clusters.__getitem__, cluster_keys)))

    def _cluster_entry(self, cluster: str, members: tuple[str, ...]) -> bytes:
        """``"cluster":["member",...]``, the members as a default-sized HashSet iterates them; a big
        cluster's order kept (_Order: a group's cycle in one cluster of 20,000 ordered them all)."""
        names = self._names
        for member in [member for member in members if member not in names]:
            self._name(member)
        if len(members) < KEPT_MEMBERS_MIN:
            self._member_orders.pop(cluster, None)
            ordered = [members[i] for i in bucket_order([names[member][0] for member in members],
                                                        table_size(len(members)) - 1)]
        else:
            ordered = self._member_orders.setdefault(cluster, _Order()).of(list(members), names,
                                                                           table_size(len(members)))
        return b"%s:[%s]" % (self._name(cluster), b",".join([names[member][1] for member in ordered]))

    def _name(self, name: str) -> bytes:
        """The name's JSON string, remembered with its hash (the orders read it)."""
        kept = self._names.get(name)
        if kept is None:
            kept = self._names[name] = java_spread(name), fastjson.dumps_bytes(name)
        return kept[1]

    def _prune(self, broker_addr_table: Mapping[str, BrokerData],
               cluster_addr_table: Mapping[str, Mapping[str, None]]) -> None:
        """Let go of what the tables no longer hold, when it is more than they do (a group that left
        is forgotten by its change; a cluster, or a name, only here)."""
        if len(self._clusters) > len(cluster_addr_table):
            for cluster in [c for c in self._clusters if c not in cluster_addr_table]:
                del self._clusters[cluster], self._shown[cluster]
                self._member_orders.pop(cluster, None)
        if len(self.brokers) > len(broker_addr_table):
            for name in [n for n in self.brokers if n not in broker_addr_table]:
                del self.brokers[name]
        held = len(broker_addr_table) + len(cluster_addr_table)  # the members counted only when it may matter:
        if len(self._names) > 2 * held + SPARE_NAMES:  # the count walks every cluster's set (cache misses a set)
            held += sum(map(len, cluster_addr_table.values()))
        if len(self._names) > 2 * held + SPARE_NAMES:
            self._names.clear()
            self.clear()  # (the entries' names are read from _names when ordered)


class _Order:
    """The keys of a table as a Java hash table iterates them (fastjson.bucket_order's rule: by bucket, then by
    when each came in), kept from one ask to the next: a change of a few keys (a group that left, one
    that came, one that left and came back, which goes to the end of its bucket) moves those keys in
    the kept order, where working the order out again was Python work a key (at 20,000 clusters about
    half the ask after a cycle of one group).  A new table size, or more than MOVES_MAX keys gone or
    come, works it out whole; so does a table whose keys are not the kept ones less those gone, then
    those come (a Python dict's order: what came goes last)."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.key_set: set[str] = set()
        self.table = 0
        #: the keys in iteration order, and each one's bucket beside it (for bisect)
        self.ordered: list[str] = []
        self.buckets: list[int] = []

    def of(self, keys: list[str], names: Mapping[str, tuple[int, bytes]], table: int) -> list[str]:
        if keys == self.keys and table == self.table:
            return self.ordered
        if table != self.table or not self._moved(keys, names, table):
            positions = bucket_order([names[key][0] for key in keys], table - 1)
            self.ordered = [keys[i] for i in positions]
            self.buckets = [names[key][0] & (table - 1) for key in self.ordered]
            self.key_set, self.table = set(keys), table
        self.keys = keys
        return self.ordered

    def _moved(self, keys: list[str], names: Mapping[str, tuple[int, bytes]], table: int) -> bool:
        """Move the keys gone, come and come back (gone and come again since the last ask: last in a
        dict's order now) in the kept order; False (nothing moved) when they are more than MOVES_MAX
        or the table is not the kept one changed so.  The keys come back are the shortest tail of
        ``keys`` that, taken with those gone, leaves the kept keys in their order: each tail tried is
        one C-level comparison of the lists, the attack's cycle (one group gone and come back) one."""
        now = set(keys)
        gone, came = self.key_set - now, now - self.key_set
        if len(gone) + len(came) > MOVES_MAX:
            return False
        for tail in range(len(came), min(len(keys), MOVES_MAX - len(gone)) + 1):
            moved = set(keys[len(keys) - tail:])
            if not came <= moved:
                continue
            if keys[:len(keys) - tail] == list(filterfalse((gone | moved).__contains__, self.keys)):
                break
        else:
            return False
        ordered, buckets, mask = self.ordered, self.buckets, table - 1
        for key in gone | (moved - came):
            at = ordered.index(key)
            del ordered[at], buckets[at]
        for key in keys[len(keys) - tail:]:
            bucket = names[key][0] & mask
            at = bisect_right(buckets, bucket)
            ordered.insert(at, key)
            buckets.insert(at, bucket)
        self.key_set = now
        return True
