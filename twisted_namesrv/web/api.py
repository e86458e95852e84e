"""The JSON behind the status page (``/api/...``): plain dicts built from the state on request.

Times are epoch milliseconds with the server's ``now_ms`` beside them, so a page computes
heartbeat ages against the server's clock, not the browser's.  Brokers that left in the last
``departures.DEPARTED_KEEP_SECONDS`` stay listed, not live, with why and when they went; broker groups
the NameServer has seen (state/topology.py) stay listed as *absent* - expected but gone - until
they register again or an operator retires them.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Callable
from typing import Any

from twisted.internet import defer

from .. import __version__
from ..bodies.route import MASTER_ID
from ..context import NamesrvState
from ..departures import DEPARTED_KEEP_SECONDS
from ..events import RouteEvent
from ..flapping import Flap
from ..metrics import Metrics
from ..observations import Observations
from ..outages import GroupHealth, HealthWatch, is_crash
from ..processor import encode_route
from ..remoting import fastjson
from ..remoting.codes import version_name
from ..server import RemotingFactory
from ..state.costly import Costly
from ..state.kv import NAMESPACE_ORDER_TOPIC_CONFIG
from ..state.topology import KnownGroup

TOPIC_SEARCH_LIMIT = 200
#: the most topics a search answers, whatever its ``limit``: each is looked up and encoded in the
#: reactor's thread, and ``limit=999999999999`` at 200,000 topics held it 924 ms (an 11.6 MB
#: answer; 2 ms at 1,000), every lookup waiting
TOPIC_SEARCH_MAX = 1000


class StatusApi:
    def __init__(self, state: NamesrvState, factory: RemotingFactory, seen: Observations, health: HealthWatch) -> None:
        self.state = state
        self.factory = factory
        self.seen = seen
        self.health = health
        self._clusters_json = Costly(lambda: json.dumps(self.clusters()).encode(), health.keep_timers)

    @property
    def metrics(self) -> Metrics:
        return self.seen.metrics

    def now_ms(self) -> int:
        return int(self.state.clock() * 1000)

    def overview(self) -> dict[str, Any]:
        state, routes = self.state, self.state.routes
        health = self.health.health()
        # the outage counts: a group or cluster stopped cleanly (or rejoining after a restart) is said apart, as
        # the page and the alert rules say it, not counted as an outage
        return {"now_ms": self.now_ms(),
                "broker_groups_without_master": len(health.masterless_outages),
                "clusters_without_writable_queues": len(health.clusters_not_writable_outages),
                "broker_groups_stopped_cleanly": len(health.stopped_cleanly),
                "clusters_stopped_cleanly": len(health.clusters_unregistered),
                "started_ms": int(state.started_at * 1000), "compat": state.profile.name,
                "version": version_name(state.profile.mq_version), "connections": len(self.factory.connections),
                "address": state.listen_address or f"{state.config['bindAddress']}:{state.config['listenPort']}",
                "namesrv_version": __version__,
                "brokers_restored": sum(live.restored for live in routes.brokerLiveTable.values()),
                "clusters": len(routes.clusterAddrTable), "broker_groups": len(routes.brokerAddrTable),
                "brokers_live": len(routes.brokerLiveTable), "brokers_departed": len(self.seen.departed.brokers()),
                "broker_groups_known": health.known, "broker_groups_back": health.back,
                "broker_groups_absent": len(health.absent),
                "broker_groups_rejoining": len(health.rejoining), "rejoin_seconds_left": round(health.rejoin_left, 3),
                "topology_problem": state.topology.load_problem,
                "topics": routes.topics_written,
                "kv_entries": state.kv.entries()}

    def clusters_json(self) -> bytes:
        """``/api/clusters`` encoded, made again at most so often that it takes a fifth of the reactor
        (state/costly.py): at 20,000 groups (any peer registers them without ACL) each one took
        0.75-2.5 s of it, and the status page asks every 3 s."""
        return self._clusters_json.get()

    def clusters(self) -> dict[str, Any]:
        """clusterAddrTable -> brokerAddrTable -> brokerLiveTable, one entry per broker address,
        and the brokers that left lately (a group whose last member left is listed by them alone);
        ``outages`` first: groups without a live master, clusters no group of which takes writes
        (outages.py), crashes before clean stops."""
        routes, now = self.state.routes, self.now_ms()
        steady_now = routes.now_ms()  # the heartbeats' clock (clocks.py)
        health = self.health.health()
        departed: dict[tuple[str, str], list[RouteEvent]] = {}
        for event in self.seen.departed.brokers():
            cluster, name, _ = event.broker_key
            departed.setdefault((str(cluster), str(name)), []).append(event)
        absent = {(group.cluster, group.broker): group for group in health.absent}
        topology = self.state.topology
        rejoining_clusters = set(health.rejoining_clusters)
        clusters = []
        for cluster in sorted(set(routes.clusterAddrTable) | {c for c, _ in departed} | set(health.writable_groups)):
            groups = []
            names = routes.clusterAddrTable.get(cluster, {})
            for name in sorted(set(names) | {n for c, n in departed if c == cluster} |
                               {n for c, n in absent if c == cluster}):
                broker = routes.brokerAddrTable.get(name) if name in names else None
                group = health.group(name) if broker is not None else absent.get((cluster, name))
                addrs = broker.brokerAddrs if broker is not None else {}
                members = [self._member(cluster, broker_id, addr, now, steady_now, group)
                           for broker_id, addr in addrs.items()]
                members += [_departed_member(event) for event in departed.get((cluster, name), ())
                            if event.info["addr"] not in addrs.values()]
                known = topology.group(cluster, name) if topology is not None else None
                listed = {m["addr"] for m in members}
                members += [_expected_member(member.broker_id, member.addr, known) for member in
                            (known.members if known else ()) if member.addr not in listed
                            and member.broker_id not in addrs]
                if not members:
                    continue
                groups.append({"broker_name": name, "zone": broker.zoneName if broker else None,
                               "members": sorted(members, key=lambda m: (m["id"] is None, m["id"] or 0, m["addr"])),
                               "enable_acting_master": broker.enableActingMaster if broker else None,
                               "master_live": group.master_live if group else False,
                               "takes_writes": group.takes_writes if group else False,
                               "absent": _absence(group) if group is not None and group.absent else None,
                               "rejoining": group.rejoining if group is not None else False,
                               "queues": {"topics": group.topics if group else 0,
                                          "writable": group.writable_topics if group else 0}})
            clusters.append({"cluster": cluster, "broker_groups": groups,
                             "writable_broker_groups": health.writable_groups.get(cluster, 0),
                             "rejoining": cluster in rejoining_clusters})
        lost = [{"topic": t.topic, "cluster": t.cluster, "broker": t.broker, "addr": t.addr, "kind": t.kind,
                 "crash": is_crash(t.kind), "reason": t.reason, "ts_ms": _ms(t.ts)}
                for t in self.seen.lost.recent(routes.routed_topics())]
        outages = {"broker_groups_without_master": [{"cluster": g.cluster, "broker_name": g.broker,
                                                     "live_members": g.live_members, "master_addr": g.master_addr,
                                                     "absent": _absence(g) if g.absent else None,
                                                     "rejoining": g.rejoining,
                                                     "master_stopped_cleanly": g.master_stopped_cleanly}
                                                    for g in health.without_master],
                   "clusters_without_writable_queues": health.clusters_without_writable_queues,
                   "clusters_stopped_cleanly": health.clusters_stopped_cleanly,
                   # of those, the ones every broker of which unregistered (not a master restarting)
                   "clusters_unregistered": health.clusters_unregistered,
                   "broker_groups_absent": [{"cluster": g.cluster, "broker_name": g.broker, **_absence(g)}
                                            for g in health.absent],
                   # registering and leaving again and again without unregistering (flapping.py): amber, not an
                   # outage in itself; and by clean stops mostly (restarts on purpose): said, not amber
                   "brokers_flapping": [_flap(f) for f in self.seen.flaps.flapping()],
                   "brokers_restarting_cleanly": [_flap(f) for f in self.seen.flaps.restarting()],
                   # right after a restart: expected back, not yet outages (outages.py)
                   "rejoining": {"seconds_left": round(health.rejoin_left, 3),
                                 "broker_groups": [{"cluster": g.cluster, "broker_name": g.broker}
                                                   for g in health.rejoining],
                                 "clusters": health.rejoining_clusters}}
        return {"now_ms": now, "departed_keep_s": DEPARTED_KEEP_SECONDS, "outages": outages, "clusters": clusters,
                "lost_topics": lost}

    def _member(self, cluster: str, broker_id: int, addr: str, now: int, steady_now: int,
                group: GroupHealth | None) -> dict[str, Any]:
        """One registered address; ``writes``: whether producers can write to it - a live master of
        a group with writable queues, never a slave (clients send only to brokerId 0)."""
        routes = self.state.routes
        live = routes.brokerLiveTable.get(routes.live_key(cluster, addr))
        writes = broker_id == MASTER_ID and live is not None and group is not None and group.write_perm > 0
        member: dict[str, Any] = {"addr": addr, "id": broker_id, "role": _role(broker_id), "live": live is not None,
                                  "writes": writes, "perm": "read-write" if writes else "read-only"}
        if live is not None:
            member.update({
                "version": None if live.version is None else version_name(live.version),
                # stamped on the steady clock (clocks.py), shown on the wall clock
                "last_update_ms": live.lastUpdateTimestamp + now - steady_now,
                "heartbeat_timeout_ms": live.heartbeatTimeoutMillis,
                "expires_in_ms": live.lastUpdateTimestamp + live.heartbeatTimeoutMillis - steady_now,
                "topics": live.topicCount, "ha_server_addr": live.haServerAddr,
                "data_version": {"counter": live.dataVersion.counter, "timestamp": live.dataVersion.timestamp},
                "confirmed": live.channel is not None, "restored": live.restored})
        return member

    def topics(self, query: str = "", limit: int = TOPIC_SEARCH_LIMIT) -> defer.Deferred[dict[str, Any]]:
        """The topics whose names hold ``query`` (any case), how many, the first ``limit`` by name
        with their broker groups.  Searched in a thread (apart.py) among the names as they are when
        the search begins: at a million topics a search took a second, and the page searches as the
        operator types."""
        needle, routes, limit = query.lower(), self.state.routes, min(limit, TOPIC_SEARCH_MAX)

        def begin() -> Callable[[], tuple[int, list[str]]]:
            names = routes.all_topics()  # as they are when the search begins (apart.py)

            def search() -> tuple[int, list[str]]:
                found = [name for name in names if needle in name.lower()] if needle else names
                return len(found), heapq.nsmallest(limit, found)  # no sort of them all: it would hold the interpreter
            return search

        def document(result: tuple[int, list[str]]) -> dict[str, Any]:
            matches, first = result
            return {"query": query, "matches": matches,
                    "topics": [{"topic": t, "broker_names": sorted(routes.queues_of(t) or ())} for t in first]}
        return self.state.build_apart(("api/topics", needle, limit), begin).addCallback(document)

    def route(self, topic: str) -> dict[str, Any] | None:
        """The route a client gets for ``topic`` (TopicRouteData, as GET_ROUTEINFO_BY_TOPIC sends it)."""
        state = self.state
        order_conf = state.kv.get(NAMESPACE_ORDER_TOPIC_CONFIG, topic) if state.config["orderMessageEnable"] else None
        body = encode_route(state, topic, order_conf, True, None)
        return None if body is None else {"topic": topic, "route": fastjson.loads(body)}

    def kv(self) -> dict[str, Any]:
        table = self.state.kv.configTable
        return {"namespaces": {ns: dict(sorted(table[ns].items())) for ns in sorted(table)}}

    def events(self, since: int = 0) -> dict[str, Any]:
        """The last events after ``since``, oldest first; a broker's folded "changed" events come
        once, with ``count`` and the time of the first (``first_ts_ms``) and the last (``ts_ms``)."""
        return {"now_ms": self.now_ms(),
                "events": [{"seq": e.seq, "ts_ms": _ms(e.ts), "first_ts_ms": _ms(e.first_ts), "count": e.count,
                            "kind": e.kind, **e.info} for e in self.seen.events.recent if e.seq > since]}


def _role(broker_id: int | None) -> str:
    return "master" if broker_id == MASTER_ID else "slave"


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def _departed_member(event: RouteEvent) -> dict[str, Any]:
    """A broker no longer in brokerLiveTable: how (event kind) and why it left, and when."""
    info = event.info
    reason = info.get("reason") or ("the broker unregistered" if event.kind == "unregistered" else event.kind)
    return {"addr": info["addr"], "id": info.get("id"), "role": _role(info.get("id")), "live": False,
            "writes": False, "perm": "gone",
            "departed": {"kind": event.kind, "crash": is_crash(event.kind), "reason": reason, "ts_ms": _ms(event.ts)}}


def _flap(flap: Flap) -> dict[str, Any]:
    """A broker whose route events are summarised (flapping.py): who, since when, what it did since."""
    return {"cluster": flap.info.get("cluster"), "broker_name": flap.info.get("broker"), "id": flap.info.get("id"),
            "addr": flap.info.get("addr"), "since_ms": _ms(flap.since), "departures": flap.departures,
            "registrations": flap.registrations, "last": flap.last_kind}


def _absence(group: GroupHealth) -> dict[str, Any]:
    """Since when and how an absent group's last member left (None when before this memory knew)."""
    return {"since_ms": None if group.absent_since is None else _ms(group.absent_since), "how": group.absent_how,
            "crash": is_crash(group.absent_how or ""), "stopped_cleanly": group.stopped_cleanly,
            "rejoining": group.rejoining}


def _expected_member(broker_id: int, addr: str, known: KnownGroup | None) -> dict[str, Any]:
    """A member the topology remembers that is in the routes no more, and no longer listed as a
    recent departure: expected, absent."""
    return {"addr": addr, "id": broker_id, "role": _role(broker_id), "live": False, "writes": False,
            "perm": "absent", "expected": True,
            "left_ms": None if known is None or known.left is None else _ms(known.left)}
