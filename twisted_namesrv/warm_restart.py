"""``--route-snapshot PATH``: load the routes at start, write them after changes.

Writes are atomic (state/store.write_atomically) and rate-limited: a check every
``routeSnapshotInterval`` ms writes only when the routes changed since the last write, and a
clean stop writes once more.  A snapshot that cannot be read or used (not JSON, NaN, nested past
what this server writes, a damaged table) is logged, counted (``unreadable``, ``corrupt``) and
skipped, a damaged one kept as ``.corrupt``: routes are soft state, so the server starts empty (as
without a snapshot) rather than not at all.

A snapshot must also be recent: each check that finds nothing new to write stamps the file's
modification time with the time of the check, so the mtime says until when the file was known to
hold the routes.  One older than ``routeSnapshotMaxAge`` (the server was down that long, or another
NameServer - Java's, in a rollback - served meanwhile) is not served: its brokers would have expired
had a NameServer been running, and what changed meanwhile is unknown.  It is logged and counted in
``namesrv_store_load_refusals_total{store="routeSnapshotPath",reason="too_old"}``, and the server
starts empty; the next write replaces it.  So is one stamped ahead of the host's clock
(``reason="ahead_of_clock"``): the clock stepped back since, by as much or more, so how old it is
cannot be told (a boot before NTP's sync with the hardware clock behind read a snapshot five
minutes old as "current in an hour" and served it).  So is one whose tables pass a limit a registration is
held to (maxBrokerGroups, maxBrokers, maxBrokersPerGroup, maxTopicsPerBroker, maxTopicQueueEntries,
maxNameLength: written under larger limits, or crafted), counted as ``reason="over_limits"``.

A write that fails (a full disk, a read-only remount, no descriptor left) is counted in
``namesrv_store_write_failures_total{store="routeSnapshotPath",error}`` (NamesrvStoreNotWritten) and
logged once per failing spell, then once when a write succeeds again: tried at every check, it was an
error line every ``routeSnapshotInterval`` and no count at all, while the file aged past
``routeSnapshotMaxAge`` (its mtime is stamped only once a write succeeds), so a restart then started
empty with nothing having said why before it.

Encoding a big table takes long enough to stall every client, so the periodic write runs in a
forked child (as Redis' BGSAVE does): it sees the routes as they were at the fork, writes them
atomically and exits; the reactor only forks and reaps.  One child at a time; the stop writes
in the foreground, after any child has finished.
"""

from __future__ import annotations

import gc
import json
import os
import signal
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from twisted.internet import interfaces
from twisted.logger import Logger

from .bodies.register import RegistrationRefused
from .hangup import default_hangup
from .state.files import UNKNOWN_ERRNO, NotRegularFile, errno_name, read_regular
from .state.routes import RouteInfoManager
from .state.snapshot import SnapshotError, export_routes, import_routes
from .state.store import DocumentError, load_document, set_aside, write_atomically
from .timers import StepTimerService

log = Logger()
CHILD_POLL = 0.05  # s between checks whether a forked write has finished


@dataclass(slots=True)
class _Writer:
    """A forked child writing the snapshot of ``version``; it reports an error on ``errors``."""

    pid: int
    errors: int
    version: tuple[int, int]


#: seconds an mtime may be ahead of the clock before the snapshot's age is unknown: the stamp is the
#: same host's clock, so only a step back (or a file copied from another host) puts it further ahead
CLOCK_SLACK = 1.0
#: the store's name in namesrv_store_write_failures_total's ``store`` label (the key that names the file)
STORE = "routeSnapshotPath"


class RouteSnapshotService(StepTimerService):
    """Restores the routes before the start (``load``), writes them when changed (every ``interval``
    seconds, in a child) and at a clean stop."""

    def __init__(self, routes: RouteInfoManager, path: str, clock: interfaces.IReactorTime, interval: float,
                 background: bool = hasattr(os, "fork"), max_age: float = 0.0,
                 load_refusals: Counter[tuple[str, str]] | None = None,
                 failures: Counter[tuple[str, str]] | None = None, failing: dict[str, str] | None = None) -> None:
        super().__init__(interval, self.write_if_changed, clock)
        self.routes = routes
        self.path = Path(path)
        self.background = background
        #: seconds; a snapshot confirmed current longer ago than this is not served (0: any age)
        self.max_age = max_age
        self.load_refusals = Counter() if load_refusals is None else load_refusals
        #: failed writes by (STORE, errno name): namesrv_store_write_failures_total
        self.failures = Counter() if failures is None else failures
        self._failing = False  # a write failed and none has succeeded since: said once
        #: the stores failing now (metrics.store_failing): this one's name in it while its writes fail
        self.failing: dict[str, str] = {} if failing is None else failing
        self._clock = clock
        self._written: tuple[int, int] | None = None
        self._writer: _Writer | None = None
        #: load() has run (a snapshot that could not be read counts: the server starts empty on purpose)
        self.loaded = False

    def load(self) -> int:
        """Restore the routes (before listening); the number of unconfirmed brokers."""
        self.loaded = True
        if not self.path.exists():
            return 0
        try:
            age = self._clock.seconds() - self.path.stat().st_mtime
            if self.max_age and age < -CLOCK_SLACK:
                self.load_refusals["routeSnapshotPath", "ahead_of_clock"] += 1
                log.error("route snapshot {path} not served: last known current {ahead:.0f} s ahead of this host's "
                          "clock (stepped back since it was written), so its age is unknown; starting with empty "
                          "routes until brokers register", path=str(self.path), ahead=-age)
                return 0
            if self.max_age and age > self.max_age:
                self.load_refusals["routeSnapshotPath", "too_old"] += 1
                log.error("route snapshot {path} not served: last known current {age:.0f} s ago, over "
                          "routeSnapshotMaxAge ({max_age:.0f} s); starting with empty routes until brokers register",
                          path=str(self.path), age=age, max_age=self.max_age)
                return 0
            data = read_regular(self.path, None)
        except OSError as exc:  # a FIFO (never opened blocking: files.py), a device: soft state, start without
            reason = "not_regular" if isinstance(exc, NotRegularFile) else "unreadable"
            self.load_refusals["routeSnapshotPath", reason] += 1
            log.error("route snapshot {path} not readable, starting with empty routes: {error}", path=str(self.path),
                      error=exc)
            return 0
        try:
            restored = import_routes(self.routes, load_document(data))
        except RegistrationRefused as refusal:  # tables no registration could have made here: not served
            self.load_refusals["routeSnapshotPath", "over_limits"] += 1
            log.error("route snapshot {path} not served: {why} [{reason}], the limits a registration is held to; "
                      "starting with empty routes until brokers register", path=str(self.path), why=refusal,
                      reason=refusal.reason)
            return 0
        except (DocumentError, SnapshotError) as exc:  # bad JSON, NaN, nested too deeply; a damaged table
            self.load_refusals["routeSnapshotPath", "corrupt"] += 1
            kept = set_aside(self.path)  # the next write must not destroy what went wrong
            log.error("route snapshot {path} not loaded ({error}); kept as {kept}, starting with empty routes",
                      path=str(self.path), error=exc, kept=str(kept))
            return 0
        self._written = self._version()
        log.info("route snapshot {path}: {brokers} brokers and {topics} topics restored, each unconfirmed until "
                 "it registers again", path=str(self.path), brokers=restored, topics=len(self.routes.topicQueueTable))
        return restored

    def _version(self) -> tuple[int, int]:
        """What a write would change: the routes' generation and the live brokers."""
        return self.routes.generation, len(self.routes.brokerLiveTable)

    def write_again(self) -> None:
        """The file is gone (its data directory removed while running): written at the next check,
        the routes changed or not (unchanged, a check only stamps the file's time)."""
        self._written = None

    def write_if_changed(self, background: bool | None = None) -> None:
        """Write when the routes changed since the last write; in a child unless told otherwise,
        and not while a child still writes (the next check catches up)."""
        if self._writer is not None and not self.finish_write(block=False):
            return
        version = self._version()
        if version == self._written:
            if self._stamp():
                self._recovered()
            return
        if not (self.background if background is None else background):
            try:
                self._write()
            except OSError as exc:
                self._failed(_error_name(exc), str(exc))
                return
            self._succeeded(version)
            return
        self._writer = self._fork_writer(version)
        self._clock.callLater(CHILD_POLL, self._poll_writer)

    def _stamp(self) -> bool:
        """The file holds the routes as they are now: its mtime says so (see above).  One that cannot
        be stamped (a data directory remounted read-only) is a failed write: the routes unchanged, no
        write would say it, and the file aged silently past routeSnapshotMaxAge, so a restart started
        with empty routes though nothing had said the snapshot was not kept."""
        now = self._clock.seconds()
        try:
            os.utime(self.path, (now, now))
        except FileNotFoundError:
            return False  # not written yet: the next write makes it
        except OSError as exc:
            self._failed(_error_name(exc), f"cannot mark {self.path} current (its modification time): "
                                           f"{exc.strerror or exc} ({_error_name(exc)})")
            return False
        return True

    def _write(self) -> None:
        write_atomically(self.path, json.dumps(export_routes(self.routes), separators=(",", ":")).encode(), STORE)

    def _failed(self, error: str, message: str) -> None:
        """A write that failed: counted, and said once per failing spell (tried again at every check)."""
        self.failures[STORE, error] += 1
        if not self._failing:
            log.error("cannot write route snapshot {path}: {error}; tried again at every check, said again once "
                      "written: a restart meanwhile serves the last one written only while it is within "
                      "routeSnapshotMaxAge of its last write, else starts with empty routes", path=str(self.path),
                      error=message)
        self._failing = True
        self.failing[STORE] = error

    def _succeeded(self, version: tuple[int, int]) -> None:
        self._written = version
        if self._stamp():
            self._recovered()

    def _recovered(self) -> None:
        """Written (or marked current) after a failing spell: said once."""
        if self._failing:
            log.info("route snapshot {path} written again", path=str(self.path))
        self._failing = False
        self.failing.pop(STORE, None)

    def _fork_writer(self, version: tuple[int, int]) -> _Writer:
        errors, report = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: write, report, exit; never back into the reactor or its handlers
            status = 1
            try:
                os.close(errors)
                gc.disable()  # the collector would touch (and so copy) every page of the routes
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                default_hangup()
                self._write()
                status = 0
            except BaseException as exc:  # noqa: BLE001 - whatever it is, the parent logs it
                os.write(report, f"{_error_name(exc)} {exc}".encode(errors="replace")[:4000])
            finally:
                os._exit(status)
        os.close(report)
        return _Writer(pid, errors, version)

    def _poll_writer(self) -> None:
        if self._writer is not None and not self.finish_write(block=False):
            self._clock.callLater(CHILD_POLL, self._poll_writer)

    def finish_write(self, block: bool = True) -> bool:
        """True once no child is writing (waiting for it when ``block``); logs a failed write."""
        writer = self._writer
        if writer is None:
            return True
        pid, status = os.waitpid(writer.pid, 0 if block else os.WNOHANG)
        if pid == 0:
            return False
        self._writer = None
        error = os.read(writer.errors, 4096).decode(errors="replace")
        os.close(writer.errors)
        code = os.waitstatus_to_exitcode(status)
        if code == 0:
            self._succeeded(writer.version)
        else:
            name, _, message = error.partition(" ")  # the child's report: "ENOSPC cannot save ..."
            if not message:  # killed before it could say
                name, message = UNKNOWN_ERRNO, f"the writing child ended with status {code}"
            self._failed(name, message)
        return True

    def stopService(self):
        stopped = super().stopService()  # the timer first
        self.finish_write()
        self.write_if_changed(background=False)
        return stopped


def _error_name(exc: BaseException) -> str:
    """The ``error`` label of a failed write: its errno's name (ENOSPC, EROFS...), else UNKNOWN_ERRNO (no
    errno: the routes could not be encoded, no memory; a child killed before it could say)."""
    return errno_name(exc) if isinstance(exc, OSError) else UNKNOWN_ERRNO
