"""What every handler is given: the NameServer's state and the peer a request came over.  Each field
of the state is an owner constructed once, by the composition root (service.py: ``build``)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from twisted.internet import defer

from . import apart
from .answer_cache import AnswerCache
from .budget import MemoryBudget
from .compat import Profile
from .refusals import Refusals
from .state.acl import AccessControl
from .state.config import NamesrvConfig
from .state.kv import KVConfigManager
from .state.routes import RouteInfoManager
from .state.store import Saved
from .state.topology import Topology


@dataclass(slots=True)
class Peer:
    """The connection a request came over: its channel id and remote ``ip:port`` (one per
    connection: slots, as thousands of brokers and clients each have one)."""

    channel: Any
    address: str = ""


@dataclass
class NamesrvState:
    """Configuration, route and KV tables, the answers kept from them, and the clock."""

    config: NamesrvConfig
    routes: RouteInfoManager
    kv: KVConfigManager
    #: answers kept from the tables, subscribed to the routes', the KV store's and the config's changes
    answers: AnswerCache
    clock: Callable[[], float]
    #: every listener's refusals, logged and counted (refusals.py)
    refusals: Refusals
    #: what peers may make the server hold, unfinished frames and inflating bodies (budget.py)
    budget: MemoryBudget
    #: the broker groups seen, kept after they leave (state/topology.py)
    topology: Topology
    #: when this start began, on the wall clock (what the status page shows)
    started_at: float = 0.0
    #: ``save_config(saved)``: write the config as it is now (UPDATE_NAMESRV_CONFIG), telling
    #: ``saved`` once the write is over (state/store.py's SavesOfNewest, off the reactor thread)
    save_config: Callable[[Saved], None] = field(default=lambda saved: saved(None))
    #: ``build_apart(key, begin)``: a Deferred of what ``begin()()`` returns, the latter made in a thread
    #: (apart.py: topic lists of a million topics, the status page's topic search); by default at once
    build_apart: Callable[[Hashable, Callable[[], Callable[[], Any]]], defer.Deferred[Any]] = field(
        default=apart.at_once)
    #: signed-request checks (aclEnable); None: no checks
    acl: AccessControl | None = None
    #: ``host:port`` the remoting port is bound to, once listening (the status page's identity)
    listen_address: str = ""
    #: what writes the topology at once (an operator's retirement; raises StoreError when it cannot):
    #: topology_store.py's save_now, once ``load`` read the file; None before
    save_topology: Callable[[], None] | None = None
    #: seconds since this start, on the steady clock (clocks.since_now): the windows counted from the
    #: start (waitSecondsForService, readinessBrokerWait) are not stretched by a wall clock stepped back
    uptime: Callable[[], float] = field(default=lambda: float("inf"))
    #: ``request_line(peer)``: whether to write a line a request writes of its own, Java's info line of a
    #: write-permission change or an applied config update (events.py's ``request_line``: a remote peer's
    #: held to the events' lines a minute, past them counted, not logged); by default always
    request_line: Callable[[str], bool] = field(default=lambda peer: True)

    @property
    def profile(self) -> Profile:
        return self.config.profile
