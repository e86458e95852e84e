"""The scanNotActiveBroker timer: a periodic scan removes brokers whose heartbeat is older than
their timeout and closes their connections.  (A closed, reset or idle connection removes the
brokers registered over it at once: Dispatcher.channel_closed.)  Twisted's TimerService: the
first scan runs at start, as Java's (scheduleAtFixedRate after 5 ms), then every interval.
"""

from __future__ import annotations

from twisted.internet import interfaces
from twisted.logger import Logger, LogLevel

from .logs import emit_fields, emit_made
from .lost_topics import CLEAN_STOP
from .server import RemotingFactory
from .state.routes import RouteInfoManager
from .state.topology import Topology
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


def log_clean_stop(info: dict, routes: RouteInfoManager, topology: Topology | None) -> None:
    """An unregistration's lines when it emptied its broker group, and its cluster (``clean_stop_lines``):
    warnings, as the alerts say a clean stop.  Before, each broker's "broker unregistered" line was all,
    and whether a group or a whole cluster was gone had to be worked out from them."""
    for text in clean_stop_lines(info, routes, topology):
        emit_made(log, LogLevel.warn, text, cluster=info.get("cluster"), broker=info.get("broker"))


def clean_stop_lines(info: dict, routes: RouteInfoManager, topology: Topology | None) -> list[str]:
    """What an unregistration (``info``: its route event's, the tables already without the broker)
    stopped: its group, when it was the group's last member; its cluster, when it was the cluster's
    last group, said as what it is: every group's last member unregistered, or some groups had left
    without unregistering before (a crash, by the remembered topology's ``how``)."""
    cluster, broker = info.get("cluster"), info.get("broker")
    if not isinstance(broker, str) or broker in routes.brokerAddrTable:
        return []  # members are left: not the group's last
    lines = [f"broker group {cluster}/{broker} stopped cleanly: its last member ({info.get('addr')}, id "
             f"{info.get('id')}) unregistered; its queues are out of the routes until it starts again (removed "
             f"on purpose: namesrv-admin retireBrokerGroup -c {cluster} -b {broker})"]
    if not isinstance(cluster, str) or cluster in routes.clusterAddrTable:
        return lines
    others = [] if topology is None else [group for key, group in topology.groups.items()
                                          if key[0] == cluster and key[1] != broker]
    crashed = [f"{group.broker} ({group.how})" for group in others if group.how != CLEAN_STOP]
    if not crashed:
        lines.append(f"cluster {cluster} stopped cleanly: the last member of each of its {len(others) + 1} broker "
                     f"group(s) unregistered; nothing can be sent to its topics until its brokers start again, and "
                     f"nothing crashed")
    else:
        lines.append(f"cluster {cluster} has no broker left: its last broker group stopped cleanly, but "
                     f"{len(crashed)} of its groups left without unregistering before: {', '.join(crashed[:10])}")
    return lines
