"""The status page's recent events, kept across restarts in the data directory.

Without this a restart (an upgrade, the OOM killer, a node drain) wipes the one record of what
the brokers did, and the page says "none yet" just when an operator asks what happened.  The
last ``events.RECENT_EVENTS`` events (broker events and the audit trail) are written to
``events.json`` beside ``kvConfigPath`` (``eventsPath`` says otherwise) by state/store.py's
write_atomically - a reader never sees half a file - at most every EVENTS_SAVE_SECONDS when they
changed (in a thread: file_writer.py), and at a clean stop; so a kill -9 loses at most the last few seconds of them.

The topics still lost (lost_topics.py: their last broker left in the last ten minutes and none
serves them) go in the same file, under ``lost_topics``, so that a restart does not forget them
(an older server reading the file skips the key).

At start they are loaded back, numbered as before, and a ``started`` event marks the restart.  A
file that cannot be used (not JSON, not ours, a field missing, NaN or a number past a double's
range, nested past what this server writes, over FILE_LIMIT) is logged naming it, counted in
``namesrv_store_load_refusals_total{store="eventsPath"}`` and, when damaged, kept as
``events.json.corrupt`` for whoever wants to look: the server starts with no earlier events, it
never refuses to start over them, as Java's NameServer (which keeps no events) would not: a FIFO, a
device or a directory at the path is not read either (``not_regular``; opened without blocking:
state/files.py).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Container, Sequence
from pathlib import Path
from typing import Any

from twisted.internet import interfaces
from twisted.logger import Logger

from . import __version__
from .events import RECENT_EVENTS, RecentEvents, RouteEvent
from .file_writer import FileWriter
from .lost_topics import DEPARTURES, LostTopic, LostTopics
from .state.config import NamesrvConfig
from .state.files import FileTooBig, NotRegularFile, errno_name, read_regular
from .state.store import DocumentError, document_items, load_document, set_aside
from .timers import StepTimerService

log = Logger()
EVENTS_FILE = "events.json"
FORMAT = 1
#: how often changed events are written (a kill -9 loses at most these seconds of events)
EVENTS_SAVE_SECONDS = 2.0
#: the largest events file read back: RECENT_EVENTS events (an audit event keeps at most 64 values of
#: 256 characters) and lost_topics.LIMIT lost topics (five names of up to 512 characters each), every
#: character escaped, are under 40 MB; a 2 GB file swapped in was read whole at start
FILE_LIMIT = 64 << 20
#: its name in namesrv_store_load_refusals_total{store}
STORE = "eventsPath"


class EventsFileError(DocumentError):
    """The events file is not one this server wrote; the message says what is wrong."""


def events_path(config: NamesrvConfig) -> Path:
    """``eventsPath``, else ``events.json`` beside the KV store (the data directory)."""
    configured = str(config["eventsPath"])
    return Path(configured) if configured else Path(config["kvConfigPath"]).with_name(EVENTS_FILE)


def encode_events(events: list[RouteEvent], lost: Sequence[LostTopic] = ()) -> bytes:
    return json.dumps({"format": FORMAT, "events": [
        {"seq": e.seq, "ts": e.ts, "kind": e.kind, "info": e.info, "count": e.count, "first_ts": e.first_ts}
        for e in events], "lost_topics": [lost_topic_item(topic) for topic in lost]},
        default=str, separators=(",", ":")).encode()


def decode_events(data: bytes) -> list[RouteEvent]:
    """The events of a file encode_events wrote, oldest first, at most RECENT_EVENTS; anything
    else raises EventsFileError naming what is wrong."""
    try:
        items = document_items(data, FORMAT, "events", "an events file")
    except DocumentError as exc:
        raise EventsFileError(str(exc)) from None
    events = []
    for number, item in enumerate(items):
        try:
            event = RouteEvent(int(item["seq"]), float(item["ts"]), str(item["kind"]), dict(item["info"]),
                               int(item["count"]), float(item["first_ts"]))
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise EventsFileError(f"event {number}: {type(exc).__name__}: {exc}") from None
        events.append(event)
    events.sort(key=lambda e: e.seq)
    return events[-RECENT_EVENTS:]


def lost_topic_item(topic: LostTopic) -> dict[str, Any]:
    """A lost topic as the file keeps it, its fields in their order: its steady-clock stamp
    (``at``) means nothing to the next run.  Written out, not ``dataclasses.asdict`` (which copies
    every field through a recursive walk: a save of the 1,000 topics a mass disconnect leaves lost
    took the reactor 16 ms of CPU, a lookup's wait, in a trace of the ten-broker curve step)."""
    return {"topic": topic.topic, "cluster": topic.cluster, "broker": topic.broker, "addr": topic.addr,
            "kind": topic.kind, "reason": topic.reason, "ts": topic.ts}


def decode_lost_topics(data: bytes) -> list[LostTopic]:
    """The lost topics of a file encode_events wrote (none in a file of an older server), oldest
    first; anything else raises EventsFileError naming what is wrong."""
    try:
        items = load_document(data).get("lost_topics", [])
    except (DocumentError, AttributeError) as exc:
        raise EventsFileError(str(exc)) from None
    if not isinstance(items, list):
        raise EventsFileError("lost_topics: not a list")
    lost = []
    for number, item in enumerate(items):
        try:
            cluster, addr, kind = item["cluster"], item["addr"], str(item["kind"])
            if kind not in DEPARTURES:
                raise ValueError(f"kind {kind!r} is no departure")
            lost.append(LostTopic(str(item["topic"]), None if cluster is None else str(cluster), str(item["broker"]),
                                  None if addr is None else str(addr), kind, str(item["reason"]),
                                  float(item["ts"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise EventsFileError(f"lost topic {number}: {type(exc).__name__}: {exc}") from None
    return lost


class EventLogService(StepTimerService):
    """Loads the events before the start (``load``), writes them when changed (every ``interval``
    seconds) and at a clean stop."""

    def __init__(self, events: RecentEvents, path: str | os.PathLike[str], clock: interfaces.IReactorTime,
                 interval: float = EVENTS_SAVE_SECONDS, failures: Counter[tuple[str, str]] | None = None,
                 failing: dict[str, str] | None = None,
                 lost: LostTopics | None = None, present: Callable[[], Container[str]] = tuple,
                 load_refusals: Counter[tuple[str, str]] | None = None) -> None:
        """``failures``: its file's failed writes counted (file_writer.FileWriter), a retirement's and
        the stop's too.  ``lost``: the lost topics kept with the events, those not in ``present()``
        (topicQueueTable as it is then, not as wired: a table replaced, by a route snapshot, must
        not be held; a topic served again is lost no more, nor after the restart).  ``load_refusals``:
        a file not used at start counted by why (namesrv_store_load_refusals_total)."""
        super().__init__(interval, self.save_if_changed, clock)
        self.events = events
        self.lost = lost
        self.present = present
        self.path = Path(path)
        self.writer = FileWriter(clock, self.path, "eventsPath", failures)
        self._saved = -1
        self._failing = False
        #: the stores failing now (metrics.store_failing): this one's name in it while its writes fail
        self.failing: dict[str, str] = {} if failing is None else failing
        self.load_refusals: Counter[tuple[str, str]] = Counter() if load_refusals is None else load_refusals

    def load(self, how: str = "") -> int:
        """Restore the events of the last run, then record this start (``how``: after what, told in its
        line, starts.py's UNCLEAN or nothing); how many were restored."""
        restored: list[RouteEvent] = []
        if self.path.exists():
            try:
                data = read_regular(self.path, FILE_LIMIT)
                restored, lost = decode_events(data), decode_lost_topics(data)
                if self.lost is not None:
                    self.lost.restore(lost)
            except OSError as exc:  # a FIFO (never opened blocking: files.py), a device, a directory, too big
                reason = ("not_regular" if isinstance(exc, NotRegularFile) else
                          "too_big" if isinstance(exc, FileTooBig) else "unreadable")
                self.load_refusals[STORE, reason] += 1
                log.error("events file {path} not readable, starting without earlier events: {error}",
                          path=str(self.path), error=exc.strerror)
            except EventsFileError as exc:
                self.load_refusals[STORE, "corrupt"] += 1
                kept = set_aside(self.path)
                log.error("events file {path} skipped ({error}); kept as {kept}, starting without earlier events",
                          path=str(self.path), error=exc, kept=str(kept))
        self._saved = self.events.seen  # nothing new yet: a start that fails writes nothing
        if restored:  # the line between the last run's events and this one's
            self.events.restore(restored)
            after = f" {how}" if how else ""
            self.events.feed_event("started", {"reason": f"NameServer restarted (twisted-namesrv {__version__})"
                                                f"{after}; the {len(restored)} events below are from before"})
        return len(restored)

    def write_again(self) -> None:
        """The file is gone (its data directory removed while running): written at the next check,
        changed or not."""
        self._saved = -1

    def save_if_changed(self, now: bool = False) -> None:
        """Write the events when they changed since the last write: in a thread (file_writer.py),
        or ``now`` in this one (the stop)."""
        seen = self.events.seen
        if seen == self._saved or (self.writer.in_flight and not now):
            return
        lost = self.lost.recent(self.present()) if self.lost is not None else ()
        data = encode_events(list(self.events.recent), lost)
        if not now:
            self.writer.write_soon(data, lambda error: self._written(seen, error))
            return
        try:
            self.writer.write_now(data)
        except OSError as exc:
            self._written(seen, exc)
            return
        self._written(seen, None)

    def _written(self, seen: int, error: OSError | None) -> None:
        if error is not None:
            if not self._failing:  # once per failing spell, not every two seconds
                log.error("cannot write events file {path}: {error}; the page's events will not survive a restart "
                          "until it can", path=str(self.path), error=error.strerror or error)
            self._failing = True
            self.failing["eventsPath"] = errno_name(error)
            return
        if self._failing:
            log.info("events file {path} written again", path=str(self.path))
        self._failing = False
        self.failing.pop("eventsPath", None)
        self._saved = max(self._saved, seen)

    def stopService(self) -> Any:
        stopped = super().stopService()  # the timer first
        self.save_if_changed(now=True)
        if self.events.seen != self._saved:  # the stop's write failed (logged once per spell: maybe long ago)
            log.error("events file {path} not written at the stop: the page's {count} events since its last write, "
                      "and the topics lost since, will not be shown after the restart", path=str(self.path),
                      count=self.events.seen - max(self._saved, 0))
        return stopped
