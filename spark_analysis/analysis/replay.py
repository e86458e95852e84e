"""The NameServer's own state machine as the judge: each session of a server endpoint replayed
through the server's RouteInfoManager and its housekeeping, with the capture's clock.

Registrations (each read by the server's RegisterBrokerHeader, its body by the server's decoder,
applied whole: the topics of its table too), heartbeats (QUERY_DATA_VERSION, BROKER_HEARTBEAT),
UNREGISTER_BROKER, DELETE_TOPIC_IN_NAMESRV, WIPE/ADD_WRITE_PERM_OF_BROKER and the closes of the
connections brokers registered over are applied in capture order, and the expiry scan runs at the
server's own interval (NamesrvConfig.scan_interval_s) in between; a channel silent past the
server's serverChannelMaxIdleTimeSeconds is closed as its idle handler closes it. The generation's
rules are those compat.profile_for_version gives for the brokers' MQVersion.

What the replay then says is what the report says: each broker's stay (from an accepted
registration to its end), how it ended (unregistered; its connection closed by the broker; expired
by the NameServer after N s of silence, which a close by the server of a broker silent past the
idle time is; its server went away; alive at the end), with the packets as evidence; the topics the
server held for its group over the stay (its broker name's queues in topicQueueTable, the routes
through it: a deletion, a later registration or a restart shows; a split registration's bodies add
up, as the server applies them; a slave's own table is applied only where the generation makes it
the group's prime slave), and the topics that left; the route lookups answered TOPIC_NOT_EXIST
that its tables explain (the topic's last broker left, it was deleted, or the server came back
empty after a restart); and the
stories a session's stays tell together: a fail-over, a broker moved or re-numbered.

Pure Python: the liveness tasks run it per server endpoint (spark/liveness_stage.py).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from typing import Any

from spark_analysis.decode.rows import CAPTURE_MISSED, CONNECTION_CLOSED, broker_header, is_cut_broker_addr
from spark_analysis.model.endpoints import EndpointStory, Outage
from spark_analysis.model.sessions import Sessions, iso_time
from twisted_namesrv.bodies.register import (
    RegisterBodyError,
    RegisterBrokerBody,
    RegistrationRefused,
    decode_register_body,
)
from twisted_namesrv.bodies.register_header import RegisterBrokerHeader
from twisted_namesrv.bodies.route import MASTER_ID
from twisted_namesrv.compat import JAVA_4_9_8, Profile, profile_for_version
from twisted_namesrv.remoting import RequestCode
from twisted_namesrv.state.config import NamesrvConfig
from twisted_namesrv.state.registration import memo_of, registration_digest, request_of
from twisted_namesrv.state.routes import LIMIT_REASONS, RouteChange, RouteInfoManager
from twisted_namesrv.steps import run_steps

ALIVE, UNREGISTERED, CLOSED, EXPIRED, SERVER_STOPPED, REFUSED = (
    "alive", "unregistered", "connection_closed", "expired", "server_stopped", "refused")
#: why a route was gone when a lookup found none (Lookup.cause's ``kind``): a broker's stay ended
#: (how: ``end``), the topic was deleted, the server came back without it after a restart; or that
#: it was not made yet: a broker registered it later in the session (a producer's send made it, the
#: broker's autoCreateTopicEnable, after its lookup failed)
DEPARTED, DELETED, RESTARTED, MADE_LATER = "departed", "deleted", "restarted", "made_later"
_HEARTBEATS = (RequestCode.QUERY_DATA_VERSION, RequestCode.BROKER_HEARTBEAT)
#: our server's limits on what its tables hold (state/config.py: maxNameLength and the counts),
#: lifted in the replay: they guard our server, and the server captured may have none (a Java
#: NameServer takes a broker named in 3,000 characters and answers SUCCESS) or other settings. Its
#: answers say what it refused (an answered refusal is not ``alive``: a refused stay); what it took,
#: its tables held, and so do the replay's (under our limits it was a refused stay with no broker id)
UNLIMITED_TABLES = {key: 2**31 - 1 for key in (*LIMIT_REASONS, "maxNameLength")}
#: the server's idle handler fires on the last byte, the replay counts from the last heartbeat:
#: a close by the server this close to the idle time is that close
_IDLE_SLACK_S = 1.0
_since = itemgetter(0)  # of a topic's timeline entry
_heard = attrgetter("heard")


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
    #: (when, how many) the server held for it, at each change over the stay (the module's docstring)
    topics: list[tuple[float, int]] = field(default_factory=list)
    #: where that count went down: t, from, to, ``removed`` (the topics that left, when known) and
    #: ``had_at`` (when the table that still had them was last seen)
    topic_drops: list[dict[str, Any]] = field(default_factory=list)
    table_known: bool = False  # a registration of its with a decodable table was applied
    names: frozenset[str] | None = None  # the topics of the last count
    #: the end of the latest stretch of its connection whose bytes the capture missed, while it was open
    #: (CAPTURE_MISSED): the server may have heard it until then; the replay expires it from then on only
    held_until: float = 0.0
    #: of an expiry of a broker named by its connection (a snap length cut its address): the brokers,
    #: named so too, whose first registration came over another connection within its silence, each
    #: (name, when): any of them may be this broker back from another connection (a host whose IP
    #: changed, a NAT mapping that timed out), whose registration renewed it at the NameServer, so
    #: that the close ending this stay removed nothing (_may_be_back)
    maybe_back_as: list[tuple[str, float]] = field(default_factory=list)

    @property
    def broker_id(self) -> int | None:
        return self.ids[-1][0] if self.ids else None

    @property
    def heard(self) -> float:
        """The latest the server may have heard it: its last captured sign of life, or the end of bytes
        of its connection the capture missed after it."""
        return max(self.last_alive, self.held_until)

    def finish(self, end: str, t: float, silence: float | None = None) -> None:
        self.end, self.ended_at, self.silence_s = end, t, silence

    def held(self, t: float, count: int, removed: list[str] | None = None, had_at: float | None = None) -> None:
        """The server holds ``count`` topics for it from ``t`` on (a drop says what left, if known)."""
        if self.topics and self.topics[-1][1] == count:
            return
        if self.topics and count < self.topics[-1][1]:
            self.topic_drops.append({"t": t, "from": self.topics[-1][1], "to": count, "removed": removed,
                                     "had_at": self.topics[-1][0] if had_at is None else had_at})
        self.topics.append((t, count))


@dataclass
class Lookup:
    """Route lookups of one topic by one client answered TOPIC_NOT_EXIST, and what the replay says
    made them fail: ``cause`` None (the capture shows no cause: the topic was unknown there), or
    (kind, the stay that left, the deletion event, the outage the server came back from)."""

    topic: str | None
    client: str | None
    count: int
    first: float
    last: float
    cause: tuple[str, Any] | None


@dataclass
class SessionRoutes:
    """What one session's replay knows of its routes over time, which is all that judging its
    failed lookups needs (``judge_lookups``): plain data, so that lookups decoded apart from the
    replay are judged by the same rule where they arrive (spark/liveness_stage.py)."""

    start: float
    end: float  # where the replay ran to: a lookup of the session after it would have moved it
    stopped: bool  # the session ended with its server going away (``end`` is then not the data's)
    #: topic -> (from when, held in topicQueueTable, why it last left: an index into ``causes``)
    timeline: dict[str, list[tuple[float, bool, int | None]]]
    #: (kind, what tells it): DEPARTED with the stay's end, address, name and time (None: not
    #: known), DELETED with the deletion's time, client and topic
    causes: list[tuple[str, dict[str, Any] | None]]
    first_held: dict[str, float]  # topic -> when it first came into the tables
    ever_held: frozenset[str]  # the topics the session's tables ever held
    back_from: Outage | None  # the restart the session came back from


@dataclass
class Replay:
    """What a server endpoint's replay found: its stays, its session-level stories, its failed
    lookups, and its sessions' routes over time (to judge lookups that did not come with the events)."""

    stays: list[Stay] = field(default_factory=list)
    stories: list[dict[str, Any]] = field(default_factory=list)
    lookups: list[Lookup] = field(default_factory=list)
    routes: list[SessionRoutes] = field(default_factory=list)


class Bodies:
    """The registration bodies of one server's events, by digest: kept from the event that carried
    one (the first time its connection sent it), decoded once by the server's decoder."""

    def __init__(self) -> None:
        self._raw: dict[bytes, bytes] = {}
        #: the header of each extFields dict, by identity: a broker's registrations share one
        #: (decode.rows._kind_broker), which the events hold while the replay runs
        self._headers: dict[int, RegisterBrokerHeader] = {}
        self._decoded: dict[tuple[bytes, bool, int], RegisterBrokerBody | None] = {}
        #: the digest of each extFields dict's last body (by identity, as ``_headers``), kept by the
        #: body's key: a 4.x broker sends the same body until its topics change (a 5.x body differs in
        #: its mappingDataVersion stamp every time, so it is hashed again; the digest leaves it out)
        self._digests: dict[int, tuple[bytes, int, int, bytes]] = {}
        self._unchanged: dict[tuple[bytes, bool, int, bytes], RegisterBrokerBody] = {}

    def keep(self, event: dict[str, Any]) -> None:
        if event["body"] is not None and event["body_key"] is not None:
            self._raw.setdefault(event["body_key"], event["body"])

    def header(self, event: dict[str, Any]) -> RegisterBrokerHeader:
        """A registration's header as the server reads it (decode.rows.broker_header), looked up
        by its fields' identity first: a distinct dict of the same fields is read by value."""
        ext = event["ext"]
        if ext is None:
            return broker_header({})
        found = self._headers.get(id(ext))
        if found is None:
            found = self._headers[id(ext)] = broker_header(ext)
        return found

    def digest(self, event: dict[str, Any], revision: int) -> bytes | None:
        """What tells the registration from another as the server's handler reads it
        (state/registration.registration_digest); None where its body was not captured (what it
        was is unknown: never renewed)."""
        ext, key, version = event["ext"], event["body_key"], event["version"] or 0
        if ext is None:
            return None
        last = self._digests.get(id(ext))  # only ever of a body kept (a key that is None never matches)
        if last is not None and last[0] == key and last[1] == version and last[2] == revision:
            return last[3]
        raw = self.raw(event)
        if raw is None:
            return None
        digest = run_steps(registration_digest(revision, version, ext, raw))
        self._digests[id(ext)] = (key, version, revision, digest)
        return digest

    def raw(self, event: dict[str, Any]) -> bytes | None:
        return self._raw.get(event["body_key"]) if event["body_key"] is not None else None

    def unchanged(self, event: dict[str, Any], header: RegisterBrokerHeader, digest: bytes) -> RegisterBrokerBody:
        """The body as the server's decoder reads it when ``digest`` is a table its broker's queues
        hold (one of its memos): only its dataVersion (decoded once per body: the same bytes, the
        same answer)."""
        key = (event["body_key"], header.compressed, event["version"], digest)
        found = self._unchanged.get(key)
        if found is None:
            found = self._unchanged[key] = decode_register_body(self.raw(event), header.compressed, event["version"],
                                                                known_digests=(digest,))
        return found

    def decoded(self, event: dict[str, Any], header: RegisterBrokerHeader) -> RegisterBrokerBody | None:
        """The whole table, or None where it is undecodable or was not captured."""
        key = (event["body_key"], header.compressed, event["version"])
        if key not in self._decoded:
            raw = self.raw(event)
            try:
                self._decoded[key] = None if raw is None else decode_register_body(
                    raw, header.compressed, event["version"])
            except RegisterBodyError:
                self._decoded[key] = None
        return self._decoded[key]


#: scans in a row that can remove nothing run one by one up to this many (an hour of 5 s ticks), and are
#: passed over past it (_SessionReplay._pass_idle_ticks)
IDLE_TICKS = 720


def replay_server(server: str, events: list[dict[str, Any]], sessions: Sessions, story: EndpointStory | None,
                  session_end: Callable[[float], float]) -> Replay:
    """Replay one endpoint's events (EVENT_ROWS as dicts), a fresh NameServer per session.
    ``session_end(t)``: the end of the capture period holding ``t``."""
    # bytes the capture missed before a request are before it, at the time of its first chunk captured too
    events.sort(key=lambda e: (e["t"], e["code"] == CONNECTION_CLOSED, e["code"] != CAPTURE_MISSED))
    by_session: dict[float, list[dict[str, Any]]] = {}
    bodies = Bodies()
    for event in events:
        if event["body"] is not None:
            bodies.keep(event)
    for start, first, after in sessions.runs_of(server, [event["t"] for event in events]):
        by_session.setdefault(start, []).extend(events[first:after])
    replay = Replay()
    for start, found in sorted(by_session.items()):
        outage = _outage_ending(story, start, session_end(found[-1]["t"]))
        end = outage.down if outage is not None else session_end(found[-1]["t"])
        session = _SessionReplay(server, sessions.name(server, start), start, found, story, bodies)
        session.run(end, stopped=outage is not None)
        for index, stay in enumerate(session.stays):
            stay.back = next((later.registered for later in session.stays[index + 1:]
                              if later.broker_addr == stay.broker_addr and later.end != REFUSED), None)
            stay.maybe_back_as = _may_be_back(stay, session.stays)
        replay.stays += session.stays
        replay.stories += session.stories + stories_of(session.stays)
        replay.routes.append(session.routes(end, outage is not None, back_from(story, start)))
    asked = [event for event in events if event["code"] == RequestCode.GET_ROUTEINFO_BY_TOPIC]
    replay.lookups = judge_lookups(server, asked, replay.routes, sessions, story)
    return replay


def _may_be_back(stay: Stay, stays: list[Stay]) -> list[tuple[str, float]]:
    """Of an expired stay whose address a snap length cut (named by its connection), the stays named
    so too whose first registration came within its silence (its last sign of life to the close or
    scan that ended it), a brokerId known on both sides alike: each may be this broker registering
    again over another connection. The NameServer keys a broker by its brokerAddr, not by its
    connection: a registration of the same address over a new connection renews it, and the idle
    close of the old connection then removes nothing. A broker whose host changed its IP (v4 at
    `-s 96`, broker-b: its connection silent from 10:07:37, back over a connection from its new
    address at 10:08:37, the old one closed idle at 10:09:37) was told "expired" though the Java
    NameServer's log has no expiry: with the addresses cut, which connection registers which broker
    cannot be told. A stay whose address was captured is judged by it."""
    if stay.end != EXPIRED or stay.ended_at is None or not is_cut_broker_addr(stay.broker_addr):
        return []
    ended = stay.ended_at

    def may_be(other: Stay) -> bool:
        same_id = None in (stay.broker_id, other.broker_id) or other.broker_id == stay.broker_id
        return (other is not stay and other.end != REFUSED and is_cut_broker_addr(other.broker_addr)
                and stay.last_alive < other.registered < ended and same_id)

    return [(other.broker_addr, other.registered) for other in stays if may_be(other)]


def _outage_ending(story: EndpointStory | None, start: float, period_end: float) -> Outage | None:
    """The endpoint's going that ends a session starting at ``start``: its first outage from then
    on, within the capture period the session's events end in (``period_end``). One after it is
    another period's: the first was any outage after ``start``, so a session cut by files of a
    rotated set missing (v5-zring-gz: a -z gzip ring that wrapped) ended its stays 'server_stopped' by a
    restart in the files after the gap, told across what was not captured: they are alive where its
    capture ended (broker_alive_before_missing)."""
    if story is None:
        return None
    return next((o for o in story.outages if start - 1.0 <= o.down <= period_end + 1.0), None)


def back_from(story: EndpointStory | None, start: float) -> Outage | None:
    """The restart a session starting at ``start`` came back from, if its endpoint's story tells one."""
    return None if story is None else next(
        (o for o in story.outages if o.up is not None and abs(o.up - start) <= 1.0), None)


def judge_lookups(server: str, asked: list[dict[str, Any]], routes: list[SessionRoutes], sessions: Sessions,
                  story: EndpointStory | None) -> list[Lookup]:
    """Each lookup answered TOPIC_NOT_EXIST (EVENT_ROWS as dicts, in time order), judged against
    its session's routes over time: why the topic had no route at its time, if the replay knows:
    none while the tables held it, else why it last left. What the tables held at a time is what
    the run left them after every event captured by then, those of the lookup's own time too, and
    the idle closes and scans due by then (each at its own time). A lookup with no cause of its own
    is tied to the restart its session came back from when an earlier session held the topic: the
    server came back empty and had no route for it yet (the cause carries when its route came back,
    if it did); else, where the session's tables first held the topic after its last failed lookup,
    to that (MADE_LATER: a topic made on first use, its broker's registration carrying it after the
    producer's lookup failed, whether or not a later lookup of it was captured). Lookups change
    nothing in the tables, so they are judged after the replay, here or on the driver, from the
    same routes; one per topic, client and cause, in order of first."""
    by_start = {found.start: found for found in routes}
    judged: list[Lookup] = []
    for start, first, after in sessions.runs_of(server, [event["t"] for event in asked]):
        found = by_start.get(start)
        held_before = frozenset().union(*(earlier.ever_held for earlier in routes if earlier.start < start))
        restart = found.back_from if found is not None else back_from(story, start)
        failed: dict[tuple[Any, Any, Any], Lookup] = {}
        for event in asked[first:after]:
            topic, t = event["topic"], event["t"]
            line = found.timeline.get(topic, []) if found is not None else []
            at = bisect.bisect_right(line, t, key=_since) - 1
            index = None if at < 0 or line[at][1] else line[at][2]
            key = (topic, event["client"], index)
            lookup = failed.get(key)
            if lookup is None:
                cause = None if index is None or found is None else found.causes[index]
                failed[key] = Lookup(topic, event["client"], 1, t, t, cause)
            else:
                lookup.count += 1
                lookup.last = t
        for lookup in failed.values():
            topic = lookup.topic or ""
            if lookup.cause is None and restart is not None and topic in held_before:
                lookup.cause = (RESTARTED, (restart, None if found is None else found.first_held.get(topic)))
            made = None if found is None else found.first_held.get(topic)
            if lookup.cause is None and made is not None and made > lookup.last:
                lookup.cause = (MADE_LATER, made)
        judged += failed.values()
    return judged


class _SessionReplay:
    def __init__(self, server: str, session: str, start: float, events: list[dict[str, Any]],
                 story: EndpointStory | None, bodies: Bodies) -> None:
        self.server, self.session, self.events, self.story, self.bodies = server, session, events, story, bodies
        versions = {e["version"] for e in events
                    if e["code"] == RequestCode.REGISTER_BROKER and e["version"] is not None}
        self.profile: Profile = max(map(profile_for_version, versions), key=lambda p: p.mq_version, default=JAVA_4_9_8)
        self.config = NamesrvConfig({"compatVersion": self.profile.name, **UNLIMITED_TABLES})
        self.idle_s = float(self.config["serverChannelMaxIdleTimeSeconds"])
        self.start = self.now = start
        self.scan_every = self.config.scan_interval_s
        self.next_scan = start + self.scan_every
        self.manager = RouteInfoManager(self.config, lambda: self.now)
        self.manager.listen_lost(self._lost)
        self.manager.subscribe(self._changed)
        self.open: dict[str, Stay] = {}
        self.latest: dict[str, Stay] = {}  # broker address -> its latest stay
        self.stays: list[Stay] = []
        self.stories: list[dict[str, Any]] = []
        self.gone: dict[str, tuple[str, Any]] = {}  # topic -> why it left the tables (its latest leaving)
        self.ever_held: dict[str, float] = {}  # topic -> when it was last seen held
        self.first_held: dict[str, float] = {}  # topic -> when it first came into the tables
        #: topic -> (from when, held in topicQueueTable, why it last left) at each change of either
        self._timeline: dict[str, list[tuple[float, bool, tuple[str, Any] | None]]] = {}
        self._uncounted = False  # a stay opened or changed its id since the last count
        #: at most the earliest ``heard`` of the open stays (it only grows, and a stay opens at its
        #: latest), so the idle close looks at them only when one may be silent past the idle time
        self._idle_from = start
        #: the groups holding each topic, and each group's topics, as of the last change heard
        #: (kept from the changes the manager publishes: the work follows what changed)
        self._groups_of: dict[str, frozenset[str]] = {}
        self._topics_of: dict[str, set[str]] = {}
        self._changed_groups: set[str] = set()  # whose topics changed since the last count
        self._held: dict[str, frozenset[str]] = {}  # each group's topics at the last count
        #: (since, until, broker address) of each stretch of a broker's connection the capture missed
        #: (CAPTURE_MISSED), by since: held from since on (scan_until)
        self._missed = sorted((e["missed_since"], e["t"], e["broker_addr"]) for e in events
                              if e["code"] == CAPTURE_MISSED)
        self._next_missed = 0

    def run(self, end: float, stopped: bool) -> None:
        for event in self.events:
            t = event["t"]
            if event["code"] == RequestCode.GET_ROUTEINFO_BY_TOPIC:
                continue  # judged against the routes at its time, after the run (judge_lookups)
            if t >= self.next_scan or t - self._idle_from > self.idle_s or self._holds_due(t):
                # else scan_until has nothing to do
                self.scan_until(t)
            self.now = t
            self.apply(event)
            if self._changed_groups or self._uncounted:  # else note_topics has nothing to note
                self.note_topics(t)
        self.scan_until(end)
        self.note_topics(end)
        for stay in list(self.open.values()):
            if stopped:
                stay.finish(SERVER_STOPPED, end)
            self.open.pop(stay.broker_addr)

    # -- what the tables hold ---------------------------------------------------------------------
    def _changed(self, change: RouteChange) -> None:
        """The manager changed its tables: the topics that came in, and which groups' topics
        changed. A change of a topic's queues is a change of that topic, except that a group
        leaving is told as the group (``left``: its topics may have left): the routes' rule."""
        table = self.manager.topicQueueTable
        if change.everything:
            for topics in self._topics_of.values():
                topics.clear()
            self._changed_groups.update(self._topics_of)
            self._groups_of = {}
        touched = [topic for name in change.left for topic in self._topics_of.get(name, ())]
        for topic in table if change.everything else [*change.topics, *touched]:
            queues = table.get(topic)
            self._mark(topic, queues is not None)
            if queues is not None:
                self.first_held.setdefault(topic, self.now)
            groups = frozenset(queues or ())
            before = self._groups_of.get(topic, frozenset())
            if groups == before:
                continue
            for name in before - groups:
                self._topics_of[name].discard(topic)
            for name in groups - before:
                self._topics_of.setdefault(name, set()).add(topic)
            self._changed_groups.update(before ^ groups)
            if groups:
                self._groups_of[topic] = groups
            else:
                del self._groups_of[topic]

    def _mark(self, topic: str, held: bool) -> None:
        """The topic's state from now on, for the lookups judged after the run: held or not, and
        why it last left (an entry only where either changed)."""
        line = self._timeline.setdefault(topic, [])
        state = (self.now, held, self.gone.get(topic))
        if not line or line[-1][1:] != state[1:]:
            line.append(state)

    def _lost(self, kind: str, info: dict[str, Any], topics: list[str]) -> None:
        """A departure took these topics out of the tables (no group serves them any more)."""
        stay = self.latest.get(str(info.get("addr")))
        for topic in topics:
            self.gone[topic] = (DEPARTED, stay)
            self._mark(topic, False)
            self.ever_held[topic] = self.now

    def note_topics(self, t: float) -> None:
        """Each open stay's count of its group's topics in the server's tables: a master's once a
        table of its was applied, a slave's once its group holds any (the server applies a slave's
        table only where it is the group's prime slave)."""
        if not self._changed_groups and not self._uncounted:
            return  # no group's topics changed, and every open stay was counted since
        self._uncounted = False
        for name in self._changed_groups:
            topics = self._topics_of.get(name)
            if topics:
                self._held[name] = frozenset(topics)
            else:
                self._held.pop(name, None)
        self._changed_groups.clear()
        for stay in self.open.values():
            if stay.broker_name is None or (stay.broker_id == MASTER_ID and not stay.table_known):
                continue
            now = self._held.get(stay.broker_name)
            if now is None and stay.names is None:
                continue  # nothing held for its group yet
            now = now or frozenset()
            if now is not stay.names:
                dropped = stay.names is not None and len(now) < len(stay.names)
                stay.held(t, len(now), sorted(stay.names - now) if dropped else None)  # type: ignore[operator]
                stay.names = now

    # -- housekeeping -----------------------------------------------------------------------------
    def scan_until(self, t: float) -> None:
        """The server's idle close (a channel silent serverChannelMaxIdleTimeSeconds is closed:
        Netty's idle handler) and its housekeeping scan at each tick, up to ``t``, in time order:
        a broker whose own heartbeat timeout is shorter than the idle time is the scan's before
        the idle close's, however long the capture holds no broker event (a close due at a tick
        goes first)."""
        while True:
            close = self._idle_due(t)
            if self._holds_due(min(t, self.next_scan, t if close is None else close[0])):
                self._hold()
            elif self.next_scan <= t and (close is None or self.next_scan < close[0]):
                if not self._pass_idle_ticks(t):  # else what is due first is found again
                    self._scan()
            elif close is not None:
                when, stay = close
                self.now = when
                self.manager.on_channel_destroy(stay.broker_addr, f"idle: silent {self.idle_s:g} s")
                self.open.pop(stay.broker_addr)
                stay.finish(EXPIRED, when, self.idle_s)
            else:
                return

    def _idle_due(self, t: float) -> tuple[float, Stay] | None:
        """(when, stay) of the open stay silent longest, where by ``t`` it was silent past the idle time."""
        if t - self._idle_from <= self.idle_s:  # no open stay can have been silent that long
            return None
        stay = min(self.open.values(), key=_heard, default=None)
        if stay is None or t - stay.heard <= self.idle_s:
            self._idle_from = t if stay is None else stay.heard
            return None
        return stay.heard + self.idle_s, stay

    def _holds_due(self, t: float) -> bool:
        """Whether a stretch of a broker's connection the capture missed begins by ``t``."""
        return self._next_missed < len(self._missed) and self._missed[self._next_missed][0] <= t

    def _hold(self) -> None:
        """The next stretch the capture missed of a broker's connection (CAPTURE_MISSED), at its start:
        the broker sent bytes in it, what they were is unknown (a heartbeat among them or not), so an
        expiry or an idle close due within it is not in evidence and is not told. The broker is held
        in the server's tables as heard at most at the stretch's end (the first chunk captured after
        it), and expires from there if nothing else is heard. A stay already ended is left so."""
        since, until, addr = self._missed[self._next_missed]
        self._next_missed += 1
        stay = self.open.get(addr)
        if stay is None or until <= stay.heard:
            return
        stay.held_until = until
        now, self.now = self.now, until  # the server's clock at the latest it may have heard it
        self.manager.update_broker_info_update_timestamp(stay.cluster, addr)
        self.now = max(now, since)

    def _pass_idle_ticks(self, t: float) -> bool:
        """Past the scans due by ``t`` that can remove nothing, when they are more than IDLE_TICKS:
        none can before a live broker's heartbeat and timeout have passed (scan_not_active_broker's
        rule), and no broker comes in within scan_until (its holds and closes only end or renew
        stays). A silence of years (a capture's clock stepped forward, a packet dated far ahead)
        was a scan at every tick of it. Shorter runs of ticks are scanned one by one, as ever.
        Whether it passed over any."""
        table = self.manager.brokerLiveTable
        due = min((live.lastUpdateTimestamp + live.heartbeatTimeoutMillis for live in table.values()),
                  default=None)
        until = t if due is None else min(t, due / 1000)
        idle = int((until - self.next_scan) // self.scan_every) - 1  # the tick before the last, still scanned
        if idle <= IDLE_TICKS:
            return False
        self.next_scan += idle * self.scan_every
        return True

    def _scan(self) -> None:
        """The housekeeping scan of the next tick."""
        self.now = self.next_scan
        live = list(self.manager.brokerLiveTable.values())  # the timeouts, of those the scan may remove
        expired = self.manager.scan_not_active_broker()
        timeouts = {info.channel: info.heartbeatTimeoutMillis / 1000 for info in live} if expired else {}
        for channel in expired:
            scanned = self.open.get(str(channel))
            if scanned is not None:  # the moment the timeout passed, not the tick that saw it
                del self.open[scanned.broker_addr]
                timeout = timeouts.get(channel, self.idle_s)
                scanned.finish(EXPIRED, scanned.heard + timeout, timeout)
        self.next_scan += self.scan_every

    # -- the requests -----------------------------------------------------------------------------
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
        elif code == CAPTURE_MISSED:
            self.missed(event)
        elif event["response_code"] in (0, None):
            self.administer(event)

    def register(self, event: dict[str, Any]) -> None:
        addr, t = event["broker_addr"], event["t"]
        stay = self.open.get(addr)
        if not event["alive"]:  # refused: the server's tables stay as they are
            self._refused(event, stay)
            return
        header = self.bodies.header(event)  # read once per distinct header, as the decoder reads it
        digest = self.bodies.digest(event, self.config.revision)
        table = None  # the whole table, read where the registration applies in full or opens a count
        if self.manager.renew_registration(header, addr, digest) is None:  # the server's rule, as its handler asks
            table = self.bodies.decoded(event, header)
            try:
                self.manager.register_broker(self._request(event, header, table, digest))
            except RegistrationRefused:  # past a limit no setting lifts (filterServerList's length): the
                self._refused(event, stay)  # server's own refusal (it answers 1 or closes); it stopped the report
                return
        elif stay is None or not stay.table_known:
            table = self.bodies.decoded(event, header)
        if stay is None:
            stay = self.open[addr] = Stay(self.server, self.session, event["cluster"], event["broker_name"], addr, t)
            self.stays.append(stay)
            self.latest[addr] = stay
        if not stay.ids or stay.ids[-1][0] != event["broker_id"]:
            stay.ids.append((event["broker_id"], t))
            self._uncounted = True
        stay.cluster, stay.broker_name = event["cluster"] or stay.cluster, event["broker_name"] or stay.broker_name
        stay.events.append(event)
        stay.last_alive = t
        if table is not None and not stay.table_known:
            stay.table_known = self._uncounted = True

    def _refused(self, event: dict[str, Any], stay: Stay | None) -> None:
        """A registration the server's tables did not take: its stay (a new one, ended as refused, when
        the broker is not registered) keeps the event; the tables stay as they are."""
        if stay is None:
            addr, t = event["broker_addr"], event["t"]
            stay = Stay(self.server, self.session, event["cluster"], event["broker_name"], addr, t, [], [], t,
                        REFUSED, t)
            self.stays.append(stay)
        stay.events.append(event)

    def _request(self, event: dict[str, Any], header: RegisterBrokerHeader, table: RegisterBrokerBody | None,
                 digest: bytes | None) -> Any:
        """The registration as the server's handler makes it: the broker's table whole, unless the
        table is the one its queues hold already (the server's memo: the decoder then reads only
        the dataVersion), or none (no body captured, or undecodable: liveness only)."""
        names = (event["cluster"] or "", event["broker_addr"], event["broker_name"] or "")
        broker_id = event["broker_id"] if event["broker_id"] is not None else MASTER_ID
        body = table or RegisterBrokerBody()
        memos = self.manager.registration_memo(*names, broker_id, bool(header.enableActingMaster))
        if table is not None and memos is not None and memo_of(memos, table.tableDigest) is not None:
            body = self.bodies.unchanged(event, header, table.tableDigest)  # type: ignore[arg-type]
        return request_of(header, (names[0], names[1], names[2]), broker_id, body, event["broker_addr"],
                          event["version"] or 0, self.profile.per_broker_heartbeat_timeout, digest)

    def missed(self, event: dict[str, Any]) -> None:
        """Bytes the broker sent over its connection that the capture missed (CAPTURE_MISSED): what
        they were is unknown (a registration, a refused one, a lookup), so the server's tables are
        left as the captured requests made them; the stay keeps the event, and its silences are
        told as the capture's where such bytes fall in them (liveness)."""
        stay = self.open.get(event["broker_addr"])
        if stay is not None:
            stay.events.append(event)

    def closed(self, event: dict[str, Any]) -> None:
        addr, t, how = event["broker_addr"], event["t"], str(event["closed"])
        stay = self.open.pop(addr, None)
        self.manager.on_channel_destroy(addr)
        if stay is None:  # the idle close the replay already applied: its packet is the evidence
            expired = next((s for s in reversed(self.stays) if s.broker_addr == addr), None)
            if expired is not None and expired.end == EXPIRED and abs((expired.ended_at or 0.0) - t) <= (
                    self.scan_every):
                expired.events.append(event)
                expired.closed, expired.ended_at = how, t
                expired.silence_s = t - expired.last_alive
            return
        stay.events.append(event)
        stay.closed = how
        silence = t - stay.last_alive
        if how.endswith("from server") and self.story is not None and self.story.went_away(t):
            stay.finish(SERVER_STOPPED, t)
        elif how.endswith("from server") and silence >= self.idle_s - _IDLE_SLACK_S:
            stay.finish(EXPIRED, t, silence)
        else:
            stay.finish(CLOSED, t)

    def administer(self, event: dict[str, Any]) -> None:
        """Applied as the server applies them; a write-permission change says how many topics the
        replay's tables changed and, when captured, how many the server answered it changed."""
        code, t = event["code"], event["t"]
        common = {"t": iso_time(t), "server": self.server, "session": self.session, "cluster": event["cluster"],
                  "client": event["client"]}
        if code == RequestCode.DELETE_TOPIC_IN_NAMESRV:
            topic = event["topic"]
            held = topic in self.manager.topicQueueTable
            self.manager.delete_topic(topic, event["cluster"])
            if held and topic not in self.manager.topicQueueTable:
                self.gone[topic] = (DELETED, event)
                self._mark(topic, False)
                self.ever_held[topic] = t
            self.stories.append({"kind": "topic_deleted", "topic": topic, **common})
        elif code in (RequestCode.WIPE_WRITE_PERM_OF_BROKER, RequestCode.ADD_WRITE_PERM_OF_BROKER):
            wipe = code == RequestCode.WIPE_WRITE_PERM_OF_BROKER
            change = self.manager.wipe_write_perm_of_broker if wipe else self.manager.add_write_perm_of_broker
            count = change(event["broker_name"])
            self.stories.append({"kind": "write_perm_wiped" if wipe else "write_perm_added",
                                 "broker_name": event["broker_name"], "topics": count,
                                 "topics_answered": event["topic_count"], **common})

    def routes(self, end: float, stopped: bool, restart: Outage | None) -> SessionRoutes:
        """The session's routes over time, its causes as what tells them (read now: an expired
        stay's end is moved to its connection's close after the scan that expired it)."""
        for topic in self.manager.topicQueueTable:
            self.ever_held[topic] = self.now
        indexes: dict[int, int] = {}
        causes: list[tuple[str, dict[str, Any] | None]] = []
        timeline: dict[str, list[tuple[float, bool, int | None]]] = {}
        for topic, line in self._timeline.items():
            entries = []
            for since, held, cause in line:
                index = None
                if cause is not None:
                    index = indexes.get(id(cause[1]))
                    if index is None:
                        index = indexes[id(cause[1])] = len(causes)
                        causes.append((cause[0], _told(*cause)))
                entries.append((since, held, index))
            timeline[topic] = entries
        return SessionRoutes(self.start, end, stopped, timeline, causes,
                             dict(self.first_held), frozenset(self.ever_held), restart)


def _told(kind: str, what: Any) -> dict[str, Any] | None:
    """What a lookup's story tells of a cause (lookup_stories): a stay's end, a deletion."""
    if what is None:
        return None
    if kind == DEPARTED:
        return {"end": what.end, "broker_addr": what.broker_addr, "broker_name": what.broker_name,
                "ended_at": what.ended_at}
    return {"t": what["t"], "client": what["client"], "topic": what["topic"]}


def lookup_stories(lookups: list[Lookup], server: str) -> list[dict[str, Any]]:
    """The failed lookups as stories (JSON-like, for the driver): per topic, client and cause,
    the cause told as the finding that tells it names it (findings.py ties them together)."""
    told = []
    for lookup in lookups:
        story: dict[str, Any] = {"kind": "lookup_failed", "server": server, "topic": lookup.topic,
                                 "client": lookup.client, "count": lookup.count, "first": iso_time(lookup.first),
                                 "last": iso_time(lookup.last), "cause": None}
        if lookup.cause is not None:
            kind, what = lookup.cause
            if kind == DEPARTED and what is not None:
                story["cause"] = {"kind": DEPARTED, "end": what["end"], "broker_addr": what["broker_addr"],
                                  "broker_name": what["broker_name"], "t": iso_time(what["ended_at"] or lookup.first)}
            elif kind == DELETED:
                story["cause"] = {"kind": DELETED, "t": iso_time(what["t"]), "client": what["client"],
                                  "topic": what["topic"]}
            elif kind == RESTARTED:
                outage, came = what
                story["cause"] = {"kind": RESTARTED, "t": iso_time(outage.down), "up": iso_time(outage.up),
                                  "route_back": None if came is None else iso_time(came)}
            elif kind == MADE_LATER:
                story["cause"] = {"kind": MADE_LATER, "t": iso_time(what)}
        told.append(story)
    return told


def stories_of(stays: list[Stay]) -> list[dict[str, Any]]:
    """What one session's stays tell together, per broker group (cluster, broker name): a fail-over
    (the master lost, a slave of the group made master, the old master back as a slave) as one
    story; an address new to the group taking the id another address left (a move); an address
    registering with another brokerId (re-numbered), unless a fail-over tells it. Stays whose broker
    name a snap length cut belong to no group anyone can tell: they tell nothing together, but each
    connection's own brokerId changes where the cut kept the id (a slave an operator promoted on the
    same connection: 1 -> 0)."""
    groups: dict[tuple[str | None, str | None], list[Stay]] = {}
    unnamed: dict[str, list[Stay]] = {}
    for stay in stays:
        if stay.end != REFUSED and stay.broker_name is not None:
            groups.setdefault((stay.cluster, stay.broker_name), []).append(stay)
        elif stay.end != REFUSED:
            unnamed.setdefault(stay.broker_addr, []).append(stay)
    told: list[dict[str, Any]] = []
    for (cluster, name), members in groups.items():
        members.sort(key=lambda s: s.registered)
        folded: set[tuple[str, float]] = set()  # (address, t) of id changes a fail-over tells
        told += _failovers(cluster, name, members, folded)
        told += _moves(cluster, name, members)
        told += _renumbers(cluster, name, members, folded)
    for members in unnamed.values():
        if any(broker_id is None for stay in members for broker_id, _ in stay.ids):
            continue  # an id the cut left out is no change of it
        told += _renumbers(members[0].cluster, None, sorted(members, key=lambda s: s.registered), set())
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
        if after != MASTER_ID or before == MASTER_ID:
            continue  # a promotion: a slave of the group made master
        lost = [s for s in members if s.broker_addr != addr and s.ids and any(i == MASTER_ID for i, _ in s.ids)
                and s.ended_at is not None and s.ended_at <= t]
        if not lost:
            continue
        old = max(lost, key=lambda s: s.ended_at or 0.0)
        back = next(((s.broker_addr, since) for s in members if s.broker_addr == old.broker_addr
                     for i, since in s.ids if since > (old.ended_at or 0.0) and i not in (None, MASTER_ID)), None)
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
    """Addresses new to the group taking the id another left; a stay whose address a snap length cut
    (named by its connection: each reconnection another name) is no address to move from or to."""
    found = []
    seen: set[str] = set()
    members = [stay for stay in members if not is_cut_broker_addr(stay.broker_addr)]
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
