"""The status page's recent events: broker events and the audit trail, numbered in one sequence.

The one owner of ``/api/events``' list.  The composition root (service.py) hands it every route
event (``route_event``, a RouteInfoManager listener) and the audit trail its events
(``feed_event``); ``event_log.py`` writes it to the data directory and restores it at start
(``restore``).  A broker's repeated "changed" events (a new data version at each heartbeat) fold
into one, so they cannot push the departures out of the last RECENT_EVENTS.

One peer host (``hosts.peer_group``: an IPv6 host's /64) lists at most EVENTS_PER_HOST events a
minute here; the rest of its minute fold into one ``more`` event of that host, its ``count`` how many.
All hosts together list at most EVENTS_PER_MINUTE rows a minute (their ``more`` rows counted too);
the rest of the minute fold into one ``more`` event of ALL_HOSTS ("all hosts: N more").  Without
them one connection sending an audited request in a loop (3,000 a second) pushed every other event
out of the list within a tenth of a second, and ten hosts flooding together within a minute.  A
host is the peer whose request raised the event (an audited request, a registration, an
unregistration), for a broker that expired or closed its connection the host whose connection
registered it, else the address the broker wrote; the NameServer's own events (a start, a stall,
flapping) and those of a loopback peer (this machine's own tools and brokers) count against no host
and are always listed.

Each event is still counted where it is counted (the metrics, the audit trail); its log line is the
caller's, and ``route_event``/``feed_event`` say whether to write it: a listed event's always, a
folded event's (a host's past its rows, a broker's "changed" folded into the one before) while the
minute's folded lines are within LINES_FOLDED_PER_MINUTE.  Past them a peer making events as fast as
it can no longer writes a line each (3,000 lines a second filled a 128 MB log file every few minutes
and pushed every earlier line out of the rotation): those are counted in ``lines_not_logged``
(``namesrv_event_lines_not_logged_total``), the ``more`` row says how many of its own were not
logged, and the first line of the minute past the budget is told once (``told``: one warning).  A
line a remote peer's request writes of its own (Java's info line of each WIPE_WRITE_PERM_OF_BROKER,
ADD_WRITE_PERM_OF_BROKER and applied UPDATE_NAMESRV_CONFIG, which operators' scripts grep) is held
to the same budget (``request_line``): one rule (``_line``) for every peer line past the listed ones.

The budget is the server's, shared fairly: a host's first LINES_PER_HOST lines a minute may take the
whole LINES_FOLDED_PER_MINUTE, its further lines only all but LINES_KEPT_FOR_HOSTS of it.  Hosts
flooding together so spend at most the rest, and a quiet host's first lines of that minute are still
written from what is kept, until LINES_KEPT_FOR_HOSTS / LINES_PER_HOST hosts (50) have taken theirs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .lost_topics import DEPARTURES
from .state.hosts import KeptHosts

#: events kept for the page (and written by event_log.py)
RECENT_EVENTS = 200
#: events one peer host lists a minute; past them its minute is one ``more`` event.  A host of ten
#: brokers restarting lists all 20 of their departures and registrations; a host flooding takes
#: EVENTS_PER_HOST + 1 of the RECENT_EVENTS a minute, so the list still holds the last 9 minutes of the
#: others' events (lost_topics.KEEP_SECONDS: 10)
EVENTS_PER_HOST = 20
#: rows all hosts together list a minute (their ``more`` rows counted too); past them the minute's rest
#: is one ``more`` event of ALL_HOSTS: at most EVENTS_PER_MINUTE + 1 of the RECENT_EVENTS a minute come
#: from peers however many hosts send, so the list holds at least the last three minutes
EVENTS_PER_MINUTE = 60
ALL_HOSTS = "all hosts"
#: log lines of folded events written a minute, all hosts together; past them a folded event is counted
#: (``lines_not_logged``) and not logged.  A listed event is always logged: at most EVENTS_PER_MINUTE +
#: LINES_FOLDED_PER_MINUTE lines a minute come from peers' events (about 30 KB a second at most)
LINES_FOLDED_PER_MINUTE = 6_000
#: a host's lines a minute (past its listed events) that may take the whole LINES_FOLDED_PER_MINUTE; its
#: further lines stop LINES_KEPT_FOR_HOSTS short of it, kept for the other hosts' first lines
LINES_PER_HOST = 20
LINES_KEPT_FOR_HOSTS = 1_000
#: the minute events are counted over (wall-clock seconds; a clock stepped back starts anew)
HOST_WINDOW_SECONDS = 60.0
#: hosts counted in one minute; further hosts of that minute count as one, OTHER_HOSTS
HOSTS_COUNTED = 4096
OTHER_HOSTS = "other hosts"
#: the kind of a host's folded events
MORE = "more"
#: brokers whose registering host is held for their departure (past it the memory starts again: the
#: departures of those forgotten count against the address they wrote); maxBrokers is 100,000 by default
BROKERS_HELD = 1 << 17
#: the events whose peer's host a broker's departure counts against
HELD = frozenset({"registered", "confirmed"})
_UNSEEN = object()


@dataclass
class RouteEvent:
    """A broker registered, changed, expired, closed, went idle, unregistered or was refused (or
    an audited request).  ``count`` > 1: as many "changed" events of one broker (same topic count)
    since ``first_ts``."""

    seq: int
    ts: float
    kind: str
    info: dict[str, Any]
    count: int
    first_ts: float

    @property
    def broker_key(self) -> tuple[Any, Any, Any]:
        return broker_key(self.info)


def broker_key(info: dict[str, Any]) -> tuple[Any, Any, Any]:
    """What tells a route event's broker from another: its (cluster, name, address)."""
    return info.get("cluster"), info.get("broker"), info.get("addr")


class RecentEvents:
    """The last RECENT_EVENTS events, oldest first, and the sequence number of the last one."""

    def __init__(self, clock: Callable[[], float], hosts: KeptHosts,
                 told: Callable[[str, str], None] | None = None) -> None:
        self.clock = clock
        #: ``told(level, text)``: the line that says, once a minute, that the budget's lines are spent
        #: (service.said); None: not told
        self.told = told
        #: the host each peer and broker address counts under: the server's one table (service.build)
        self.hosts = hosts
        self.recent: deque[RouteEvent] = deque(maxlen=RECENT_EVENTS)
        #: events since start (and before it, once restored): the last one's ``seq``
        self.seen = 0
        #: the "changed" events in ``recent`` by their info (``_fold_key``), the oldest of alike
        #: ones: a new one finds the one it folds into without comparing it with every event kept
        #: (with thousands of brokers a registration's "changed" compared 200 infos, 11 us)
        self._changed: dict[frozenset[tuple[str, Any]], RouteEvent] = {}
        #: when this minute began, and the events each host listed in it, and each one's ``more``
        self._window = float("-inf")
        self._listed: dict[str, int] = {}
        self._more: dict[str, RouteEvent] = {}
        #: rows the hosts listed this minute (EVENTS_PER_MINUTE), and folded events' lines (LINES_FOLDED_PER_MINUTE)
        self._rows = 0
        self._folded_lines = 0
        #: each host's lines this minute past its listed events (LINES_PER_HOST), its peers' requests' own
        #: lines too; at most HOSTS_COUNTED hosts, the rest as OTHER_HOSTS
        self._lines: dict[str, int] = {}
        #: whether this minute's first line past the budget was told (``told``)
        self._told_past = False
        #: folded events whose log line was not written (namesrv_event_lines_not_logged_total)
        self.lines_not_logged = 0
        #: each broker (``broker_key``) registered this run -> the host of the connection that registered it
        #: (None: loopback), until it departs
        self._registered_by: dict[tuple[Any, Any, Any], str | None] = {}

    def route_event(self, kind: str, info: dict[str, Any], source: str | None = None) -> bool:
        """RouteInfoManager's listener: kept, a repeated "changed" folded into the one before, an
        event past its host's EVENTS_PER_HOST or all hosts' EVENTS_PER_MINUTE of the minute folded
        into a ``more`` event.  ``source``: the peer (``host:port``) whose request raised it; None:
        the broker's address.  Whether to write its log line: a folded event's only while the
        minute's folded lines are within LINES_FOLDED_PER_MINUTE."""
        self.seen += 1
        now = self.clock()
        event = RouteEvent(self.seen, now, kind, dict(info), 1, now)
        earlier = key = None
        if kind == "changed":
            key = _fold_key(event.info)
            if key is None:  # a value that cannot be a key: looked for among all
                earlier = next((e for e in self.recent if e.kind == kind and e.info == event.info), None)
            else:
                earlier = self._changed.pop(key, None)
                self._changed[key] = event
            if earlier is not None:
                self._drop(earlier)
                event.count, event.first_ts = earlier.count + 1, earlier.first_ts
        # the kept host of a peer read here, a call only when new: a first registration's path
        host: str | None | object = (self.hosts.peers.get(source.rpartition(":")[0] or source, _UNSEEN)
                                     if source is not None else _UNSEEN)
        if earlier is None:  # a new row: counted against its host
            if host is _UNSEEN or kind in DEPARTURES:
                host = self._host_of_route_event(kind, info, source)
            if source is not None and kind in HELD:  # the host its departure counts against (``_registered_by``)
                registered = self._registered_by
                if len(registered) >= BROKERS_HELD:
                    registered.clear()
                registered[info.get("cluster"), info.get("broker"), info.get("addr")] = host  # type: ignore[assignment]
            if isinstance(host, str):
                logged = self._folded(event, host)
                if logged is not None:
                    if kind == "changed" and key is not None and self._changed.get(key) is event:
                        del self._changed[key]
                    return logged
            self._append(event)
            return True
        # folded into the one before: no row more, but a line, held to the folded lines' budget when a
        # remote peer's (a broker whose data version changes at every registration, in a loop)
        self._append(event)
        if source is None:
            return True
        if host is _UNSEEN:
            host = self.hosts.peer(source)
        return host is None or self._line(host, now)  # type: ignore[arg-type]

    def feed_event(self, kind: str, info: dict[str, Any], source: str | None = None) -> bool:
        """An event that is no route event (an audited request, a restart): kept with the route
        events, numbered in the same sequence.  ``source``: the peer (``host:port``) whose request
        it is, held to its host's EVENTS_PER_HOST and all hosts' EVENTS_PER_MINUTE a minute; None:
        the NameServer's own.  Whether to write its log line, as ``route_event``."""
        self.seen += 1
        now = self.clock()
        event = RouteEvent(self.seen, now, kind, dict(info), 1, now)
        host = self.hosts.peer(source) if source is not None else None
        logged = None if host is None else self._folded(event, host)
        if logged is None:
            self._append(event)
            return True
        return logged

    def request_line(self, source: str) -> bool:
        """Whether to write a line a peer's request writes of its own (Java's info line of a write-permission
        change or an applied config update), beside its audit event: a loopback peer's always; a remote
        one's under the folded lines' budget (``_line``), past it counted in ``lines_not_logged``.
        ``source``: the peer, ``host:port``."""
        host = self.hosts.peer(source)
        return host is None or self._line(host, self.clock())

    def _host_of_route_event(self, kind: str, info: dict[str, Any], source: str | None) -> str | None:
        """The host a route event counts against: the peer whose request raised it; for a departure
        without one (expired, closed, idle), the host whose connection registered the broker (a peer
        registering fake brokers under addresses of its choosing is held to its own host's rate when
        they all go at once); else the address the broker wrote."""
        if kind in DEPARTURES:
            held = self._registered_by.pop(broker_key(info), _UNSEEN)
            if source is None and held is not _UNSEEN:
                return held  # type: ignore[return-value]
        if source is not None:
            return self.hosts.peer(source)
        addr = info.get("addr")
        return self.hosts.broker(addr) if isinstance(addr, str) else None

    def _folded(self, event: RouteEvent, host: str) -> bool | None:
        """None when ``event`` is listed (the caller appends it): within its host's EVENTS_PER_HOST and
        all hosts' EVENTS_PER_MINUTE this minute.  Else it is folded into its host's ``more`` event, or
        ALL_HOSTS' once the minute's rows are taken (made the newest, numbered anew, as a folded
        "changed" is: its count and kinds, and how many were not logged), and the answer is whether its
        log line is written (``_line``)."""
        now, origin = event.ts, host
        if not self._window <= now < self._window + HOST_WINDOW_SECONDS:  # a new minute (or the clock stepped back)
            self._new_minute(now)
        listed = self._listed.get(host)
        if listed is None and len(self._listed) >= HOSTS_COUNTED:
            host, listed = OTHER_HOSTS, self._listed.get(OTHER_HOSTS)
        listed = (listed or 0) + 1
        self._listed[host] = listed
        rows_left = self._rows < EVENTS_PER_MINUTE
        if listed <= EVENTS_PER_HOST and rows_left:
            self._rows += 1
            return None
        more = self._more.get(host) if listed > EVENTS_PER_HOST else None
        if more is None and listed > EVENTS_PER_HOST and rows_left:
            self._rows += 1  # the host's ``more`` row takes one
        elif more is None:  # within its own rows past all hosts', or its ``more`` row with no row left
            host = ALL_HOSTS
            more = self._more.get(host)
        logged = self._line(origin, now)  # its own host's share, whichever row it folds into
        kinds: dict[str, int] = {}
        count, not_logged = 1, 0 if logged else 1
        if more is not None:
            recent = self.recent
            if recent and recent[-1] is more:  # the newest, as in a flood (or a big cluster's start): no search
                recent.pop()
            else:
                self._drop(more)
            kinds = more.info["kinds"]
            count, not_logged = more.count + 1, more.info.get("not_logged", 0) + (0 if logged else 1)
        kinds[event.kind] = kinds.get(event.kind, 0) + 1
        said = (f"all hosts: {count} more events this minute, past the {EVENTS_PER_MINUTE} rows all hosts list "
                "a minute" if host == ALL_HOSTS else
                f"{count} more events from {host} this minute, past the {EVENTS_PER_HOST} a host lists a minute")
        info: dict[str, Any] = {
            "host": host, "kinds": kinds,
            "reason": f"{said}: not listed here (each one is counted, and logged while the minute's folded events "
                      f"are within {LINES_FOLDED_PER_MINUTE:,} lines" +
                      (f", {not_logged} of them not logged)" if not_logged else ")")}
        if not_logged:
            info["not_logged"] = not_logged
        folded = RouteEvent(event.seq, now, MORE, info, count, more.first_ts if more is not None else now)
        self._more[host] = folded
        self._append(folded)
        return logged

    def _new_minute(self, now: float) -> None:
        self._window, self._listed, self._more, self._rows, self._folded_lines = now, {}, {}, 0, 0
        self._lines, self._told_past = {}, False

    def _line(self, host: str, now: float) -> bool:
        """The one rule of a remote host's line past its listed events (a folded event's, a request's own):
        written while the minute's lines are within LINES_FOLDED_PER_MINUTE, or, past the host's first
        LINES_PER_HOST of the minute, within all but LINES_KEPT_FOR_HOSTS of it (the other hosts' share).
        Else counted in ``lines_not_logged``; the minute's first such line is told once."""
        if not self._window <= now < self._window + HOST_WINDOW_SECONDS:  # a new minute (or the clock stepped back)
            self._new_minute(now)
        lines = self._lines
        counted = lines.get(host)
        if counted is None and len(lines) >= HOSTS_COUNTED:
            host, counted = OTHER_HOSTS, lines.get(OTHER_HOSTS)
        counted = lines[host] = (counted or 0) + 1
        written = self._folded_lines
        if written < LINES_FOLDED_PER_MINUTE - (0 if counted <= LINES_PER_HOST else LINES_KEPT_FOR_HOSTS):
            self._folded_lines = written + 1
            return True
        self.lines_not_logged += 1
        if not self._told_past and self.told is not None:
            self._told_past = True
            shared = LINES_FOLDED_PER_MINUTE - LINES_KEPT_FOR_HOSTS
            self.told("warn", f"peers' event and request lines past this minute's budget ({written:,} written; "
                              f"{LINES_FOLDED_PER_MINUTE:,} a minute, {shared:,} for a host's lines past its first "
                              f"{LINES_PER_HOST}), first from {host}: the rest of the minute's are counted in "
                              "namesrv_event_lines_not_logged_total, not logged")
        return False

    def _append(self, event: RouteEvent) -> None:
        """``event`` kept as the newest; the oldest, if it goes, out of the index too."""
        if len(self.recent) == RECENT_EVENTS:
            self._unindex(self.recent[0])
        self.recent.append(event)

    def _unindex(self, event: RouteEvent) -> None:
        if event.kind == "changed":
            key = _fold_key(event.info)
            if key is not None and self._changed.get(key) is event:
                del self._changed[key]

    def _drop(self, event: RouteEvent) -> None:
        """``event`` out of ``recent``, found by identity from the newest end (where a broker's
        last "changed" mostly is)."""
        recent = self.recent
        for back in range(1, len(recent) + 1):
            if recent[-back] is event:
                del recent[-back]
                return

    def restore(self, events: list[RouteEvent]) -> None:
        """The last run's events (event_log.py), oldest first, before this run's: numbered on
        from the last one, so ``/api/events?since=`` stays monotonic across the restart."""
        kept = list(self.recent)
        self.recent.clear()
        self.recent.extend(events[-RECENT_EVENTS:])
        self.recent.extend(kept)
        self._changed = {}
        for event in self.recent:
            key = _fold_key(event.info) if event.kind == "changed" else None
            if key is not None:
                self._changed.setdefault(key, event)
        if events:
            self.seen = max(self.seen, events[-1].seq)


def _fold_key(info: dict[str, Any]) -> frozenset[tuple[str, Any]] | None:
    """What tells a "changed" event's info from another's (equal as the dicts are), or None when
    a value cannot be part of a key."""
    try:
        return frozenset(info.items())
    except TypeError:
        return None
