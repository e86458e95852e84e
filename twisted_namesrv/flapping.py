"""Brokers that keep leaving and coming back: one warning, not a log line per registration.

A broker in a crash loop, or on a link that keeps dropping, registers and leaves again every few
seconds: every registration and every departure is one info line (housekeeping.log_route_event) and
one event on the status page, 24 lines a minute for a broker flapping every 5 s, burying the rest of
the log and pushing everything else out of the page's last 200 events.  What an operator wants at
3 a.m. is "broker-a is flapping" once, how often, and when it stopped.

So a broker (cluster, name, address: events.broker_key) that left FLAP_DEPARTURES times within
FLAP_WINDOW_SECONDS is **flapping**: that departure is told as usual, followed by one warning
(``tell``); its route events after that are summarised, not told one by one (``heard`` says False:
the composition root then neither logs them nor adds them to the page's events; the counters
count them all), with one warning every FLAP_SUMMARY_SECONDS while it goes on, and it **settles**
once FLAP_SETTLE_SECONDS pass without its registering or leaving: one info line then says how many
were summarised, from when to when, and how it was left (registered or gone: a broker that
settles gone is an outage the departure alerts tell).  The windows are on the steady clock
(clocks.py), the times told on the wall clock.  Pure: no Twisted, the clocks and ``tell`` injected;
``tick`` is called by a timer the composition root makes.

Across a restart of the NameServer (``restore``, from the page's events kept in ``events.json``): a
broker that was flapping when it stopped flaps on, since when it started, and settles as any other
once FLAP_SETTLE_SECONDS pass without its registering or leaving (counted from the restart); the
departures of the others within the window count on.  Flapping is the broker's doing, not ours: a
restart of ours fixes nothing of it, and before, it started again at zero, its next two departures
told one by one, a second "flapping" warning and page event, the gauge (and NamesrvBrokerFlapping)
gone meanwhile and its "since" the restart's.

A clean stop is not a crash.  A broker stopped with ``mqshutdown broker`` (or by its supervisor's
SIGTERM) unregisters, and one started again a minute later registers: three such restarts in ten
minutes (an operator's rolling restarts, a maintenance script, a liveness probe that keeps failing)
warned as flapping, the warning of a crash loop, for what an operator did on purpose.  So only
departures without unregistering (CRASHES: expired, closed, idle) make a broker *flapping* (the
warning, NamesrvBrokerFlapping); a broker that left FLAP_DEPARTURES times of which fewer were
crashes is *restarting cleanly*: its lines are summarised the same way (the log and the page are
spared the same noise), at info level, and NamesrvBrokerRestartingCleanly (info) says it.  One
that then crashes FLAP_DEPARTURES times within the window is flapping from then on: one warning.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .events import RouteEvent, broker_key
from .lost_topics import CRASHES, DEPARTURES, LIMIT

#: departures of one broker within FLAP_WINDOW_SECONDS that make its lines summarised: flapping when
#: as many of them were crashes (CRASHES), restarting cleanly when fewer were
FLAP_DEPARTURES = 3
#: the window those departures are counted in (the 10 minutes a departure stays on the page)
FLAP_WINDOW_SECONDS = 600.0
#: a flapping broker settles once this long passes without its registering or leaving
FLAP_SETTLE_SECONDS = 300.0
#: while a broker flaps, one summary line this often (when it had events since the last)
FLAP_SUMMARY_SECONDS = 300.0
#: how often the composition root's timer calls ``tick``
FLAP_TICK_SECONDS = 5.0

#: a flap restored across a restart, before its broker's first route event since: its ``last_kind``
RESTART = "restart"

#: route events that bring a broker (back) into brokerLiveTable
ARRIVALS = frozenset({"registered", "confirmed"})
#: the page's events that start a flap: one of crashes (a warning), one of mostly clean stops (an info)
STARTS = {"flapping": False, "restarting": True}

#: tell(level, message, fields): "warn" or "info", the line made whole, its fields for JSON lines
Tell = Callable[[str, str, dict[str, Any]], None]


@dataclass
class Flap:
    """One broker flapping (or restarting cleanly): since when, what it did since, and what it did last."""

    info: dict[str, Any]
    #: when it started flapping: the wall clock (told), the steady clock (counted)
    since: float
    since_steady: float
    #: restarting cleanly: fewer than FLAP_DEPARTURES of its departures in the window were crashes
    clean: bool = False
    #: while ``clean``: its crashes within the window (steady clock), FLAP_DEPARTURES of which make it flapping
    crashes: deque[float] = field(default_factory=deque)
    #: its route events summarised since it started flapping, by kind
    kinds: Counter[str] = field(default_factory=Counter)
    #: of those, since the last summary line
    recent: Counter[str] = field(default_factory=Counter)
    last_kind: str = ""
    #: when its last route event came, and the last summary line was told (steady clock)
    last_steady: float = 0.0
    summary_steady: float = 0.0

    @property
    def departures(self) -> int:
        return sum(n for kind, n in self.kinds.items() if kind in DEPARTURES)

    @property
    def registrations(self) -> int:
        return sum(n for kind, n in self.kinds.items() if kind in ARRIVALS)


class FlapWatch:
    """The one owner of which brokers flap: a filter in front of the route events' log line and
    page event (``heard``), the flapping brokers for ``/metrics`` and the page (``flapping``), and
    how many started flapping since start (``started``, a counter)."""

    def __init__(self, clock: Callable[[], float], steady: Callable[[], float], tell: Tell) -> None:
        self.clock, self.steady, self.tell = clock, steady, tell
        #: each broker's departures within the window (steady clock, and whether each was a crash), for
        #: those not flapping
        self._departures: dict[tuple[Any, Any, Any], deque[tuple[float, bool]]] = {}
        #: the brokers flapping now by broker_key (read by the composition root's filter: empty, no
        #: call is made for a registration)
        self.now_flapping: dict[tuple[Any, Any, Any], Flap] = {}
        #: brokers that started flapping (crashes) since start, and that started restarting cleanly
        self.started = 0
        self.started_clean = 0

    def heard(self, kind: str, info: dict[str, Any]) -> bool:
        """A route event: True when it is to be told as it is (its log line, its page event),
        False when it is summarised (its broker flaps)."""
        key = broker_key(info)
        flap = self.now_flapping.get(key)
        if flap is not None:
            flap.kinds[kind] += 1
            flap.recent[kind] += 1
            if kind in ARRIVALS or kind in DEPARTURES:  # a "changed" (a slave's new data version at each
                # heartbeat) is summarised too, but is no flap: a broker that stays settles
                flap.last_kind, flap.last_steady, flap.info = kind, self.steady(), dict(info)
                if flap.clean and kind in CRASHES:
                    self._crashed(flap, kind)
            return False
        if kind in DEPARTURES:
            self._departed(key, kind, info)
        return True

    def _departed(self, key: tuple[Any, Any, Any], kind: str, info: dict[str, Any]) -> None:
        now = self.steady()
        times = self._departures.pop(key, None) or deque()
        times.append((now, kind in CRASHES))
        while times[0][0] <= now - FLAP_WINDOW_SECONDS:
            times.popleft()
        if len(times) < FLAP_DEPARTURES:
            self._departures[key] = times  # the newest last: the oldest first out (LIMIT)
            while len(self._departures) > LIMIT:
                del self._departures[next(iter(self._departures))]
            return
        if len(self.now_flapping) >= LIMIT:  # as many flapping as the page keeps departures: told one by one
            self._departures[key] = times
            return
        crashes = deque(when for when, crash in times if crash)
        clean = len(crashes) < FLAP_DEPARTURES
        flap = Flap(dict(info), self.clock(), now, clean, crashes, last_kind=kind, last_steady=now,
                    summary_steady=now)
        self.now_flapping[key] = flap
        minutes = (now - times[0][0]) / 60
        summarised = (f"its registrations and departures are summarised here every {FLAP_SUMMARY_SECONDS / 60:.0f} "
                      f"min until it settles ({FLAP_SETTLE_SECONDS / 60:.0f} min without one)")
        if clean:
            self.started_clean += 1
            stops = len(times) - len(crashes)
            self._tell("info", "restarting cleanly", info,
                       f"{len(times)} departures in {minutes:.1f} min (the last {kind}), {stops} of them clean stops "
                       f"(unregistered: an operator's or a supervisor's restarts, not a crash loop); {summarised}; "
                       f"{FLAP_DEPARTURES} departures without unregistering within {FLAP_WINDOW_SECONDS / 60:.0f} "
                       f"min would make it flapping",
                       flapping="started", clean=True, departures=len(times), crashes=len(crashes),
                       window_s=round(now - times[0][0], 3))
            return
        self.started += 1
        self._tell("warn", "flapping", info,
                   f"{len(times)} departures in {minutes:.1f} min (the last {kind}); {summarised}",
                   flapping="started", clean=False, departures=len(times), crashes=len(crashes),
                   window_s=round(now - times[0][0], 3))

    def _crashed(self, flap: Flap, kind: str) -> None:
        """A broker restarting cleanly left without unregistering: FLAP_DEPARTURES such within the
        window make it flapping, one warning (its restarts before were clean stops, its crashes now
        are not)."""
        now = flap.last_steady
        crashes = flap.crashes
        crashes.append(now)
        while crashes[0] <= now - FLAP_WINDOW_SECONDS:
            crashes.popleft()
        if len(crashes) < FLAP_DEPARTURES:
            return
        first = crashes[0]
        flap.clean = False
        crashes.clear()
        self.started += 1
        self._tell("warn", "flapping", flap.info,
                   f"{FLAP_DEPARTURES} departures without unregistering in {(now - first) / 60:.1f} min (the last "
                   f"{kind}), summarised as restarting cleanly for the {(now - flap.since_steady) / 60:.1f} min "
                   f"before; its "
                   f"registrations and departures are summarised here until it settles "
                   f"({FLAP_SETTLE_SECONDS / 60:.0f} min without one)",
                   flapping="started", clean=False, departures=FLAP_DEPARTURES, crashes=FLAP_DEPARTURES)

    def restore(self, events: Iterable[RouteEvent]) -> None:
        """The last run's events (event_log.py; oldest first, before any of this run's): a broker
        whose "flapping" (or "restarting") event has no "settled" after it flaps on (restarts on),
        said in one line, settling once FLAP_SETTLE_SECONDS pass after the restart without its
        registering or leaving; the others' departures within the window counted on.  An event
        stamped ahead of the wall clock (a step back since) is not counted: how long ago it came
        cannot be told."""
        now, steady = self.clock(), self.steady()
        flapping: dict[tuple[Any, Any, Any], RouteEvent] = {}
        departures: dict[tuple[Any, Any, Any], deque[tuple[float, bool]]] = {}
        for event in events:
            key = event.broker_key
            if event.kind in STARTS:
                began = flapping.get(key)  # restarting cleanly, then flapping: flapping since it began
                flapping[key] = event if began is None else RouteEvent(event.seq, began.ts, event.kind, event.info,
                                                                       1, event.ts)
                departures.pop(key, None)
            elif event.kind == "settled":
                flapping.pop(key, None)
            elif event.kind in DEPARTURES and key not in flapping and 0 <= now - event.ts < FLAP_WINDOW_SECONDS:
                departures.setdefault(key, deque()).append((steady - (now - event.ts), event.kind in CRASHES))
        for key, times in list(departures.items())[-LIMIT:]:
            self._departures[key] = times
        for key, event in list(flapping.items())[-LIMIT:]:
            info = {name: value for name, value in event.info.items() if name != "reason"}
            since_steady = steady - max(0.0, now - event.ts)
            clean = STARTS[event.kind]
            flap = Flap(info, event.ts, since_steady, clean, last_kind=RESTART, last_steady=steady,
                        summary_steady=steady)
            self.now_flapping[key] = flap
            self._tell("info" if clean else "warn", _still(flap), info,
                       f"{_doing(flap)} since before this restart ({(steady - since_steady) / 60:.1f} min): its "
                       f"registrations and departures are summarised here until it settles "
                       f"({FLAP_SETTLE_SECONDS / 60:.0f} min without one)", flapping="ongoing", clean=clean,
                       restored=True)

    def tick(self) -> None:
        """The timer's call: a broker that neither registered nor left for FLAP_SETTLE_SECONDS
        settles; one still flapping is summarised every FLAP_SUMMARY_SECONDS; departures older
        than the window forgotten."""
        now = self.steady()
        for key, flap in list(self.now_flapping.items()):
            if now - flap.last_steady >= FLAP_SETTLE_SECONDS:
                del self.now_flapping[key]
                self._settled(flap, now)
            elif now - flap.summary_steady >= FLAP_SUMMARY_SECONDS and flap.recent:
                self._summarise(flap, now)
        oldest = now - FLAP_WINDOW_SECONDS
        for key in [key for key, times in self._departures.items() if times[-1][0] <= oldest]:
            del self._departures[key]

    def _summarise(self, flap: Flap, now: float) -> None:
        minutes = (now - flap.summary_steady) / 60
        self._tell("info" if flap.clean else "warn", _still(flap), flap.info,
                   f"{_kinds(flap.recent)} in the last {minutes:.1f} min (the last {flap.last_kind}); {_doing(flap)} "
                   f"for {(now - flap.since_steady) / 60:.1f} min",
                   flapping="ongoing", clean=flap.clean, events=dict(flap.recent), last=flap.last_kind)
        flap.recent.clear()
        flap.summary_steady = now

    def _settled(self, flap: Flap, now: float) -> None:
        left = ("gone" if flap.last_kind in DEPARTURES else
                "not back since the restart" if flap.last_kind == RESTART else "registered")
        quiet = now - flap.last_steady
        self._tell("info", "settled", flap.info,
                   f"{left} (the last {flap.last_kind} {quiet / 60:.1f} min ago) after {_doing(flap)} "
                   f"{(flap.last_steady - flap.since_steady) / 60:.1f} min: "
                   f"{_kinds(flap.kinds) or 'no route event'} summarised",
                   flapping="settled", clean=flap.clean, events=dict(flap.kinds), last=flap.last_kind, left=left)

    def _tell(self, level: str, what: str, info: dict[str, Any], detail: str, **fields: Any) -> None:
        """One line: ``broker WHAT: cluster=... broker=... id=... addr=...: DETAIL``."""
        self.tell(level, f"broker {what}: {_name(info)}: {detail}",
                  {**fields, "broker_info": dict(info), "detail": detail})

    def flapping(self) -> list[Flap]:
        """The brokers flapping now (crashes: the warning), the longest flapping first."""
        return [flap for flap in self.now_flapping.values() if not flap.clean]

    def restarting(self) -> list[Flap]:
        """The brokers restarting cleanly now (their lines summarised, no warning), the longest first."""
        return [flap for flap in self.now_flapping.values() if flap.clean]

    def flap_of(self, info: dict[str, Any]) -> Flap | None:
        """The broker's flap, if it flaps now."""
        return self.now_flapping.get(broker_key(info))


def _name(info: dict[str, Any]) -> str:
    return f"cluster={info.get('cluster')} broker={info.get('broker')} id={info.get('id')} addr={info.get('addr')}"


def _doing(flap: Flap) -> str:
    """What a summarised broker does, as its lines say it."""
    return "restarting cleanly" if flap.clean else "flapping"


def _still(flap: Flap) -> str:
    return "still restarting cleanly" if flap.clean else "still flapping"


def _kinds(kinds: Counter[str]) -> str:
    """``12 registered, 12 closed``: the most first."""
    return ", ".join(f"{n} {kind}" for kind, n in kinds.most_common() if n)
