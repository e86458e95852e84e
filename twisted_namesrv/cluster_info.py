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
as the general path orders the beans (``bucket_order``, the order ``java_hash_order`` gives) and
joins them: C-level work over the table, no Python call per group; what is encoded anew is what
changed.  The bytes are the general path's (tests/test_cluster_info.py compares them after random
changes); the AnswerCache owns one and keeps the joined body until the next change, as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .bodies.route import BrokerData
from .remoting import fastjson
from .remoting.fastjson import bucket_order, java_spread, table_size

#: the names remembered (JSON string, hash) beyond twice those the tables hold, past which they start over
SPARE_NAMES = 1024


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

    def body(self, broker_addr_table: Mapping[str, BrokerData], cluster_addr_table: Mapping[str, Mapping[str, None]],
             v5: bool, concurrent: bool) -> bytes:
        """The cluster info of these tables, byte for byte ``cluster_info_bean``'s, fastjson-encoded."""
        if v5 != self._v5:
            self.clear()
            self._v5 = v5
        self._prune(broker_addr_table, cluster_addr_table)
        names = self._names
        brokers = self.brokers
        for name in [name for name in broker_addr_table if name not in brokers]:
            brokers[name] = b"%s:%s" % (self._name(name), fastjson.dumps_bytes(broker_addr_table[name].bean(v5)))
            self.encoded += 1
        clusters, shown = self._clusters, self._shown
        now = dict(zip(cluster_addr_table, map(tuple, cluster_addr_table.values()), strict=True))
        for cluster, members in now.items() - shown.items():  # (C-level: no call per cluster unchanged)
            clusters[cluster] = self._cluster_entry(cluster, members)
            shown[cluster] = members
            self.encoded += 1
        broker_entries = _ordered(list(broker_addr_table), names, brokers,
                                  table_size(len(broker_addr_table), 128, concurrent))
        cluster_entries = _ordered(list(now), names, clusters, table_size(len(now), 32, concurrent))
        return b'{"brokerAddrTable":{%s},"clusterAddrTable":{%s}}' % (b",".join(broker_entries),
                                                                      b",".join(cluster_entries))

    def _cluster_entry(self, cluster: str, members: tuple[str, ...]) -> bytes:
        """``"cluster":["member",...]``, the members as a default-sized HashSet iterates them."""
        names = self._names
        for member in [member for member in members if member not in names]:
            self._name(member)
        ordered = _ordered(list(members), names, {member: names[member][1] for member in members},
                           table_size(len(members)))
        return b"%s:[%s]" % (self._name(cluster), b",".join(ordered))

    def _name(self, name: str) -> bytes:
        """The name's JSON string, remembered with its hash (``_ordered`` reads it)."""
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
        if len(self.brokers) > len(broker_addr_table):
            for name in [n for n in self.brokers if n not in broker_addr_table]:
                del self.brokers[name]
        held = len(broker_addr_table) + len(cluster_addr_table) + sum(map(len, cluster_addr_table.values()))
        if len(self._names) > 2 * held + SPARE_NAMES:
            self._names.clear()
            self.clear()  # (the entries' names are read from _names when ordered)


def _ordered(keys: list[str], names: Mapping[str, tuple[int, bytes]], entries: Mapping[str, bytes],
             table: int) -> list[bytes]:
    """The entries of ``keys`` (in their insertion order) as a Java hash table of ``table`` buckets
    iterates them (fastjson.bucket_order, the codec's one rule of that order), from the remembered
    hashes: no hash worked out again, no call per key."""
    return [entries[keys[i]] for i in bucket_order([names[key][0] for key in keys], table - 1)]
