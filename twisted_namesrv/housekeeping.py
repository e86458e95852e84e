"""The scanNotActiveBroker timer: a periodic scan removes brokers whose heartbeat is older than
their timeout and closes their connections.  (A closed, reset or idle connection removes the
brokers registered over it at once: Dispatcher.channel_closed.)
"""

from __future__ import annotations

from twisted.application.service import Service
from twisted.internet import interfaces, task
from twisted.logger import Logger

from .server import RemotingFactory
from .state.routes import RouteInfoManager

log = Logger()


class HousekeepingService(Service):
    def __init__(self, routes: RouteInfoManager, factory: RemotingFactory, clock: interfaces.IReactorTime,
                 interval: float) -> None:
        self.routes = routes
        self.factory = factory
        self.interval = interval
        self._scan = task.LoopingCall(self.scan_not_active_broker)
        self._scan.clock = clock

    def startService(self) -> None:
        super().startService()
        self._scan.start(self.interval, now=False)

    def stopService(self) -> None:
        if self._scan.running:
            self._scan.stop()
        return super().stopService()

    def scan_not_active_broker(self) -> None:
        for channel in self.routes.scan_not_active_broker():
            self.factory.close_channel(channel)


def log_route_event(kind: str, info: dict) -> None:
    """Every broker registered, changed, expired, closed, idle or unregistered, with its reason."""
    details = " ".join(f"{k}={v}" for k, v in info.items())
    log.info("broker {route_event}: {details}", details=details, route_event=kind, route_info=info)
