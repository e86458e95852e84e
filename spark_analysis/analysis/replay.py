"""The NameServer's own state machine as the judge: each session of a server endpoint replayed
through the server's RouteInfoManager and its housekeeping, with the capture's clock.

Registrations, heartbeats (QUERY_DATA_VERSION, BROKER_HEARTBEAT), UNREGISTER_BROKER,
DELETE_TOPIC_IN_NAMESRV, WIPE/ADD_WRITE_PERM_OF_BROKER and the closes of the connections brokers
registered over are applied in capture order, and the expiry scan runs at the server's own interval
(scanNotActiveBroker: 10 s in 4.9.8, 5 s in 5.x) in between. What the replay then says is what the
report says: each broker's stay (from an accepted registration to its end), how it ended
(unregistered; its connection closed by the broker; expired by the NameServer after N s of
silence, which a close by the server of a broker silent past the expiry is: the NameServer's idle
close; its server went away; alive at the end), with the packets as evidence; and the stories a
session's stays tell together: a fail-over, a broker moved or re-numbered.

Pure Python: the liveness tasks run it per server endpoint (spark/liveness_stage.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from spark_analysis.decode.rows import CONNECTION_CLOSED
from spark_analysis.model.endpoints import EndpointStory
from spark_analysis.model.periods import EXPIRY_SECONDS
from spark_analysis.model.sessions import Sessions, iso_time
from twisted_namesrv.bodies.register import RegisterBrokerBody
from twisted_namesrv.remoting import RequestCode
from twisted_namesrv.remoting.codes import V4_9_8, V5_0_0, version_ordinal
from twisted_namesrv.state.config import NamesrvConfig
from twisted_namesrv.state.routes import RegisterRequest, RouteInfoManager

#: how often each generation's NameServer scans for brokers silent past their timeout
SCAN_S = {"4.9.8": 10.0, "5.3.3": 5.0}
#: a close by the server of a broker silent this long is the NameServer's idle close: an expiry
IDLE_CLOSE_S = EXPIRY_SECONDS - 1.0
ALIVE, UNREGISTERED, CLOSED, EXPIRED, SERVER_STOPPED, REFUSED = (
    "alive", "unregistered", "connection_closed", "expired", "server_stopped", "refused")
_HEARTBEATS = (RequestCode.QUERY_DATA_VERSION, RequestCode.BROKER_HEARTBEAT)


@dataclass
class Stay:
    """One broker's stay at one session of a NameServer: from an accepted registration to its end."""

    server: str
    session: str
    cluster: str | None
    broker_name: str | None
    broker_addr: str
    registered: float
    ids: list[tuple[int | None, float]] = field(default_factory=list)  # (brokerId, from)
    events: list[dict[str, Any]] = field(default_factory=list)
    last_alive: float = 0.0
    end: str = ALIVE
    ended_at: float | None = None
    silence_s: float | None = None
    closed: str | None = None  # how its connection closed (fin/rst from client/server), when it did
    back: float | None = None  # when the same address registered again in the session, after this stay

    @property
    def broker_id(self) -> int | None:
        return self.ids[-1][0] if self.ids else None

    def finish(self, end: str, t: float, silence: float | None = None) -> None:
        self.end, self.ended_at, self.silence_s = end, t, silence


@dataclass
class Replay:
    """What a server endpoint's replay found: its stays and its session-level stories."""

    stays: list[Stay] = field(default_factory=list)
    stories: list[dict[str, Any]] = field(default_factory=list)


def generation(version_name: str | None) -> str:
    """The NameServer generation whose rules apply to a broker speaking this version."""
    try:
        return "5.3.3" if version_ordinal(version_name or "") >= V5_0_0 else "4.9.8"
    except (KeyError, ValueError):
        return "4.9.8"


def replay_server(server: str, events: list[dict[str, Any]], sessions: Sessions, story: EndpointStory | None,
                  session_end: Callable[[float], float]) -> Replay:
    """Replay one endpoint's events (EVENT_ROWS as dicts), a fresh NameServer per session.
    ``session_end(t)``: the end of the capture period holding ``t``."""
    events.sort(key=lambda e: (e["t"], e["code"] == CONNECTION_CLOSED))
    by_session: dict[float, list[dict[str, Any]]] = {}
    for event in events:
        by_session.setdefault(sessions.start_of(server, event["t"]), []).append(event)
    replay = Replay()
    for start, found in sorted(by_session.items()):
        outage = None
        if story is not None:
            outage = next((o for o in story.outages if o.down >= start - 1.0), None)
        end = outage.down if outage is not None else session_end(found[-1]["t"])
        session = _SessionReplay(server, sessions.name(server, start), start, found, story)
        session.run(end, stopped=outage is not None)
        for index, stay in enumerate(session.stays):
            stay.back = next((later.registered for later in session.stays[index + 1:]
                              if later.broker_addr == stay.broker_addr and later.end != REFUSED), None)
        replay.stays += session.stays
        replay.stories += session.stories + stories_of(session.stays)
    return replay


class _SessionReplay:
    def __init__(self, server: str, session: str, start: float, events: list[dict[str, Any]],
                 story: EndpointStory | None) -> None:
        self.server, self.session, self.events, self.story = server, session, events, story
        gen = max((generation(e["version_name"]) for e in events if e["version_name"]), default="4.9.8")
        self.version = V5_0_0 if gen == "5.3.3" else V4_9_8
        self.now = start
        self.scan_every = SCAN_S[gen]
        self.next_scan = start + self.scan_every
        self.manager = RouteInfoManager(NamesrvConfig({"compatVersion": gen}), lambda: self.now)
        self.open: dict[str, Stay] = {}
        self.stays: list[Stay] = []
        self.stories: list[dict[str, Any]] = []

    def run(self, end: float, stopped: bool) -> None:
        for event in self.events:
            self.scan_until(event["t"])
            self.now = event["t"]
            self.apply(event)
        self.scan_until(end)
        for stay in list(self.open.values()):
            if stopped:
                stay.finish(SERVER_STOPPED, end)
            self.open.pop(stay.broker_addr)

    def scan_until(self, t: float) -> None:
        """The server's idle close (a channel silent EXPIRY_SECONDS is closed: Netty's idle
        handler, serverChannelMaxIdleTimeSeconds) and its housekeeping scan at each tick, up to ``t``."""
        for stay in [s for s in self.open.values() if t - s.last_alive > EXPIRY_SECONDS]:
            self.now = stay.last_alive + EXPIRY_SECONDS
            self.manager.on_channel_destroy(stay.broker_addr, f"idle: silent {EXPIRY_SECONDS} s")
            self.open.pop(stay.broker_addr)
            stay.finish(EXPIRED, self.now, float(EXPIRY_SECONDS))
        while self.next_scan <= t:
            self.now = self.next_scan
            for channel in self.manager.scan_not_active_broker():
                scanned = self.open.get(str(channel))
                if scanned is not None:  # the moment the timeout passed, not the tick that saw it
                    del self.open[scanned.broker_addr]
                    scanned.finish(EXPIRED, scanned.last_alive + EXPIRY_SECONDS, float(EXPIRY_SECONDS))
            self.next_scan += self.scan_every

    def apply(self, event: dict[str, Any]) -> None:
        code, addr, t = event["code"], event["broker_addr"], event["t"]
        if code == RequestCode.REGISTER_BROKER:
            self.register(event)
        elif code in _HEARTBEATS and addr in self.open:
            self.manager.update_broker_info_update_timestamp(event["cluster"], addr)
            self.open[addr].events.append(event)
            if event["alive"]:
                self.open[addr].last_alive = t
        elif code in _HEARTBEATS and addr is not None and not any(s.broker_addr == addr for s in self.stays):
            # an address that never registered here: the server ignores it (addresses_never_registered)
            self.stays.append(Stay(self.server, self.session, event["cluster"], event["broker_name"], addr, t, [],
                                   [event], t, REFUSED, t))
        elif code == RequestCode.UNREGISTER_BROKER:
            self.manager.unregister_broker(event["cluster"], addr, event["broker_name"], event["broker_id"])
            stay = self.open.pop(addr, None)
            if stay is not None:
                stay.events.append(event)
                stay.finish(UNREGISTERED, t)
        elif code == CONNECTION_CLOSED:
            self.closed(event)
        elif event["response_code"] in (0, None):
            self.administer(event)

    def register(self, event: dict[str, Any]) -> None:
        addr, t = event["broker_addr"], event["t"]
        stay = self.open.get(addr)
        if not event["alive"]:  # refused: the server's tables stay as they are
            if stay is None:
                stay = Stay(self.server, self.session, event["cluster"], event["broker_name"], addr, t, [], [], t,
                            REFUSED, t)
                self.stays.append(stay)
            stay.events.append(event)
            return
        self.manager.register_broker(RegisterRequest(
            clusterName=event["cluster"] or "", brokerAddr=addr, brokerName=event["broker_name"] or "",
            brokerId=event["broker_id"] if event["broker_id"] is not None else 0, haServerAddr=None,
            body=RegisterBrokerBody(), channel=addr, version=self.version))
        if stay is None:
            stay = self.open[addr] = Stay(self.server, self.session, event["cluster"], event["broker_name"], addr, t)
            self.stays.append(stay)
        if not stay.ids or stay.ids[-1][0] != event["broker_id"]:
            stay.ids.append((event["broker_id"], t))
        stay.cluster, stay.broker_name = event["cluster"] or stay.cluster, event["broker_name"] or stay.broker_name
        stay.events.append(event)
        stay.last_alive = t

    def closed(self, event: dict[str, Any]) -> None:
        addr, t, how = event["broker_addr"], event["t"], str(event["closed"])
        stay = self.open.pop(addr, None)
        self.manager.on_channel_destroy(addr)
        if stay is None:  # the idle close the replay already applied: its packet is the evidence
            expired = next((s for s in reversed(self.stays) if s.broker_addr == addr), None)
            if expired is not None and expired.end == EXPIRED and abs((expired.ended_at or 0.0) - t) <= SCAN_S["5.3.3"]:
                expired.events.append(event)
                expired.closed, expired.ended_at = how, t
                expired.silence_s = t - expired.last_alive
            return
        stay.events.append(event)
        stay.closed = how
        silence = t - stay.last_alive
        if how.endswith("from server") and self.story is not None and self.story.went_away(t):
            stay.finish(SERVER_STOPPED, t)
        elif how.endswith("from server") and silence >= IDLE_CLOSE_S:
            stay.finish(EXPIRED, t, silence)
        else:
            stay.finish(CLOSED, t)

    def administer(self, event: dict[str, Any]) -> None:
        """Applied as the server applies them; the stories say no topic counts: brokers are replayed
        without the topics of their bodies, so the replay's tables cannot tell who held a topic."""
        code, t = event["code"], event["t"]
        common = {"t": iso_time(t), "server": self.server, "session": self.session, "cluster": event["cluster"]}
        if code == RequestCode.DELETE_TOPIC_IN_NAMESRV:
            self.manager.delete_topic(event["topic"], event["cluster"])
            self.stories.append({"kind": "topic_deleted", "topic": event["topic"], **common})
        elif code == RequestCode.WIPE_WRITE_PERM_OF_BROKER:
            self.manager.wipe_write_perm_of_broker(event["broker_name"])
            self.stories.append({"kind": "write_perm_wiped", "broker_name": event["broker_name"], **common})
        elif code == RequestCode.ADD_WRITE_PERM_OF_BROKER:
            self.manager.add_write_perm_of_broker(event["broker_name"])
            self.stories.append({"kind": "write_perm_added", "broker_name": event["broker_name"], **common})


def stories_of(stays: list[Stay]) -> list[dict[str, Any]]:
    """What one session's stays tell together, per broker group (cluster, broker name): a fail-over
    (the master lost, a slave of the group made master, the old master back as a slave) as one
    story; an address new to the group taking the id another address left (a move); an address
    registering with another brokerId (re-numbered), unless a fail-over tells it."""
    groups: dict[tuple[str | None, str | None], list[Stay]] = {}
    for stay in stays:
        if stay.end != REFUSED:
            groups.setdefault((stay.cluster, stay.broker_name), []).append(stay)
    told: list[dict[str, Any]] = []
    for (cluster, name), members in groups.items():
        members.sort(key=lambda s: s.registered)
        folded: set[tuple[str, float]] = set()  # (address, t) of id changes a fail-over tells
        told += _failovers(cluster, name, members, folded)
        told += _moves(cluster, name, members)
        told += _renumbers(cluster, name, members, folded)
    return told


def _id_changes(members: list[Stay]) -> list[tuple[str, int | None, int | None, float]]:
    """(address, id before, id after, when) for every address, across its stays in the session."""
    changes = []
    last: dict[str, int | None] = {}
    for stay in sorted(members, key=lambda s: s.registered):
        for broker_id, since in stay.ids:
            before = last.get(stay.broker_addr, broker_id)
            if before != broker_id:
                changes.append((stay.broker_addr, before, broker_id, since))
            last[stay.broker_addr] = broker_id
    return sorted(changes, key=lambda c: c[3])


def _failovers(cluster: str | None, name: str | None, members: list[Stay], folded: set[tuple[str, float]]
               ) -> list[dict[str, Any]]:
    found = []
    for addr, before, after, t in _id_changes(members):
        if after != 0 or before == 0:
            continue  # a promotion: a slave of the group made master
        lost = [s for s in members if s.broker_addr != addr and s.ids and any(i == 0 for i, _ in s.ids)
                and s.ended_at is not None and s.ended_at <= t]
        if not lost:
            continue
        old = max(lost, key=lambda s: s.ended_at or 0.0)
        back = next(((s.broker_addr, since) for s in members if s.broker_addr == old.broker_addr
                     for i, since in s.ids if since > (old.ended_at or 0.0) and i not in (None, 0)), None)
        folded.add((addr, t))
        if back is not None:
            folded.add(back)
        lost_at = old.ended_at or t
        found.append({"kind": "failover", "server": old.server, "session": old.session, "cluster": cluster,
                      "broker_name": name, "t": iso_time(lost_at), "broker_addr": old.broker_addr,
                      "old_master": old.broker_addr, "how_lost": old.end, "new_master": addr,
                      "new_master_at": iso_time(t), "no_master_s": round(t - lost_at, 3),
                      "old_master_back_as_slave_at": None if back is None else iso_time(back[1])})
    return found


def _moves(cluster: str | None, name: str | None, members: list[Stay]) -> list[dict[str, Any]]:
    found = []
    seen: set[str] = set()
    for stay in members:
        first_id = stay.ids[0][0] if stay.ids else None
        if stay.broker_addr not in seen:
            left = [s for s in members if s.broker_addr != stay.broker_addr and s.broker_id == first_id
                    and s.ended_at is not None and s.ended_at <= stay.registered
                    and not any(o.broker_addr == s.broker_addr and o.registered > s.registered for o in members)]
            if left and seen:
                old = max(left, key=lambda s: s.ended_at or 0.0)
                found.append({"kind": "broker_address_change", "server": stay.server, "session": stay.session,
                              "cluster": cluster, "broker_name": name, "broker_id": first_id,
                              "from": old.broker_addr, "to": stay.broker_addr, "t": iso_time(stay.registered),
                              "left": old.end, "left_at": iso_time(old.ended_at or stay.registered)})
        seen.add(stay.broker_addr)
    return found


def _renumbers(cluster: str | None, name: str | None, members: list[Stay], folded: set[tuple[str, float]]
               ) -> list[dict[str, Any]]:
    found = []
    for addr, before, after, t in _id_changes(members):
        if (addr, t) in folded:
            continue
        previous = [s for s in members if s.broker_addr == addr and s.registered < t]
        how = previous[-1].end if previous and previous[-1].ended_at is not None else None
        found.append({"kind": "broker_id_change", "server": members[0].server, "session": members[0].session,
                      "cluster": cluster, "broker_name": name, "broker_addr": addr, "id_from": before,
                      "id_to": after, "t": iso_time(t), "after": how})
    return found
