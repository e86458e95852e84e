"""``--route-snapshot PATH``: load the routes at start, write them after changes.

Writes are atomic (state/store.write_atomically) and rate-limited: a check every
``routeSnapshotInterval`` ms writes only when the routes changed since the last write, and a
clean stop writes once more.  A snapshot that cannot be read is logged and skipped: routes are
soft state, so the server starts empty (as without a snapshot) rather than not at all.
"""

from __future__ import annotations

import json
from pathlib import Path

from twisted.application.service import Service
from twisted.internet import interfaces, task
from twisted.logger import Logger

from .state.routes import RouteInfoManager
from .state.snapshot import SnapshotError, export_routes, import_routes
from .state.store import write_atomically

log = Logger()


class RouteSnapshotService(Service):
    def __init__(self, routes: RouteInfoManager, path: str, clock: interfaces.IReactorTime, interval: float) -> None:
        self.routes = routes
        self.path = Path(path)
        self.interval = interval
        self._written: tuple[int, int] | None = None
        self._check = task.LoopingCall(self.write_if_changed)
        self._check.clock = clock

    def load(self) -> int:
        """Restore the routes (before listening); the number of unconfirmed brokers."""
        if not self.path.exists():
            return 0
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            log.error("route snapshot {path} not readable, starting with empty routes: {error}", path=str(self.path),
                      error=exc)
            return 0
        try:
            restored = import_routes(self.routes, json.loads(data))
        except (ValueError, SnapshotError) as exc:  # SnapshotError is a ValueError; so is bad JSON
            kept = self.path.with_name(self.path.name + ".corrupt")
            self.path.replace(kept)  # the next write must not destroy what went wrong
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

    def write_if_changed(self) -> None:
        version = self._version()
        if version == self._written:
            return
        try:
            write_atomically(self.path, json.dumps(export_routes(self.routes), separators=(",", ":")).encode())
        except OSError as exc:
            log.error("cannot write route snapshot {path}: {error}", path=str(self.path), error=exc)
            return
        self._written = version

    def startService(self) -> None:
        super().startService()
        self._check.start(self.interval, now=False)

    def stopService(self):
        if self._check.running:
            self._check.stop()
        self.write_if_changed()
        return super().stopService()
