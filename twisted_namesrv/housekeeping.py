"""The scanNotActiveBroker timer: a periodic scan removes brokers whose heartbeat is older than
their timeout and closes their connections.  (A closed, reset or idle connection removes the
brokers registered over it at once: Dispatcher.channel_closed.)  Twisted's TimerService: the
first scan runs at start, as Java's (scheduleAtFixedRate after 5 ms), then every interval.
"""

from __future__ import annotations

from twisted.internet import interfaces
from twisted.logger import Logger, LogLevel

from .logs import emit_fields, emit_made
from .server import RemotingFactory
from .state.routes import RouteInfoManager
from .timers import ClockedTimerService

log = Logger()


class HousekeepingService(ClockedTimerService):
    def __init__(self, routes: RouteInfoManager, factory: RemotingFactory, clock: interfaces.IReactorTime,
                 interval: float) -> None:
        super().__init__(interval, self.scan_not_active_broker, clock)
        self.routes = routes
        self.factory = factory

    def scan_not_active_broker(self) -> None:
        for channel in self.routes.scan_not_active_broker():
            self.factory.close_channel(channel)


def log_route_event(kind: str, info: dict) -> None:
    """Every broker registered, changed, expired, closed, idle or unregistered, with its reason."""
    details = " ".join([f"{k}={v}" for k, v in info.items()])  # a list: no generator resumed per field
    # the message made here, as Twisted's legacy events carry theirs ("{log_text}"): one line per
    # registration, and formatting it through a format string was a tenth of a 5,000-broker
    # registration's CPU (logs.py writes such a message as it is); the fields stay the event's,
    # for JSON lines
    emit_fields(log, LogLevel.info, f"broker {kind}: {details}",
                {"details": details, "route_event": kind, "route_info": info})


def log_flapping(level: str, text: str, fields: dict) -> None:
    """flapping.py's lines: a broker started flapping, still flaps (warnings), settled (info)."""
    emit_made(log, LogLevel.warn if level == "warn" else LogLevel.info, text, **fields)
