"""The composition root of a NameServer: every owner constructed once and every subscription wired
here (``build``: the state's owners, what the server observes of itself, who hears route changes and
route events, in a stated order); what it starts from, read once (``load``); the service tree built
on it (``NamesrvService``: listeners, timers, the controller: children, constructed without I/O); a
clean stop.  Nothing registers itself by being imported, and no constructor elsewhere makes an owner
of its own: tests build through ``build`` too."""

from __future__ import annotations

import gc
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from time import perf_counter
from typing import TYPE_CHECKING, Any

from twisted.application import service
from twisted.internet import defer, interfaces, protocol, task
from twisted.logger import Logger
from twisted.python.failure import Failure

from . import CannotStart, __version__, heap, sdnotify, stalls
from .answer_cache import AnswerCache
from .apart import BuildsApart
from .audit import NAMESRV, AuditTrail, Trail
from .budget import (
    HTTP_HEADROOM,
    LIMIT_CHECK_SECONDS,
    FdBudget,
    LimitWatch,
    MemoryBudget,
    count_open_fds,
    default_budget,
    descriptor_room,
    fd_limit_warning,
    machine_limit,
    make_table_room,
    memory_limit_warning,
    open_file_limit,
    resident_bytes,
)
from .clocks import PROCESS_KEEP_TIMERS, owners_view, since_now, steady_seconds, underlying
from .context import NamesrvState
from .controller.audit import CONTROLLER
from .data_lock import StoreLock, lock_stores
from .departures import DepartedBrokers
from .dispatch import Dispatcher
from .event_log import EventLogService, events_path
from .events import RecentEvents
from .file_writer import FileWriter
from .flapping import FLAP_TICK_SECONDS, FlapWatch
from .hangup import stop_on_hangup
from .housekeeping import HousekeepingService, log_clean_stop, log_flapping, log_route_event
from .lost_topics import CLEAN_STOP, DEPARTURES, LostTopics
from .metrics import Metrics
from .observations import Observations
from .outages import HealthWatch, RouteHealth
from .processor import waiting_for_service
from .refusals import Refusals
from .remoting import RemotingCommand, RequestCode
from .remoting.fastjson import java_utf8
from .remoting.foreign import HTTP, HTTP2, TLS
from .schema import SERVER_SCHEMA
from .server import Admission, Listener, Notifier, RemotingFactory
from .starts import UNCLEAN, Counted, count_clean_stop, count_start, last_run_unclean, starts_path
from .state.acl import RELOAD_INTERVAL_SECONDS, AccessControl, AclConfigError
from .state.config import ConfigError, NamesrvConfig
from .state.costly import KeepTimers
from .state.hosts import KeptHosts, host_port
from .state.kv import NAMESPACE_ORDER_TOPIC_CONFIG, KVConfigError, KVConfigManager
from .state.routes import RouteInfoManager
from .state.store import Save, Saved, SavesOfNewest, StoreError, unwritable
from .state.topology import Topology
from .timers import ClockedTimerService
from .tls import connect_with, listen_with
from .topology_store import TopologyStoreService, topology_path
from .warm_restart import RouteSnapshotService

if TYPE_CHECKING:  # both only with metricsPort (the peers view's): imported where it is built
    from .client import TlsWrap
    from .peers import PeersService

log = Logger()
BOOT_MESSAGE = "The Name Server boot success. serializeType=JSON"


def foreign_words(config: NamesrvConfig) -> dict[str, str]:
    """What the remoting port's refusal says of a peer whose first bytes are HTTP, HTTP/2 or TLS
    (remoting/foreign.py): a probe or browser pointed at the wrong port, a gRPC client given the
    NameServer's address instead of a proxy's, a client with TLS on."""
    http = (f"this port speaks RocketMQ remoting; HTTP (the status page, /metrics, /healthz) is on port "
            f"{config['metricsPort']}" if config["metricsPort"] else
            "this port speaks RocketMQ remoting, and this server serves no HTTP (metricsPort=0)")
    words = {HTTP: http, HTTP2: "a gRPC client (RocketMQ 5.x's SDKs): this port speaks RocketMQ remoting; gRPC "
                                "clients connect to a 5.x proxy's gRPC port (8081 as shipped), the proxy to this one"}
    if config["tls.server.mode"] == "disabled":
        words[TLS] = ("a client with TLS on (tls.enable=true), and this port does not speak TLS "
                      "(tls.server.mode=disabled)")
    return words


def check_paths(config: NamesrvConfig) -> None:
    """The files the server writes must be writable before it listens: a data dir that is a file
    would otherwise fail at the first KV change, answered with SYSTEM_ERROR.  A path a file set
    (the ``-c`` file's ``kvConfigPath``, pointing at the old Java server's directory) is named with
    that file, as a value out of range is: the operator looks there, not at ``--data-dir``."""
    for key in ("kvConfigPath", "routeSnapshotPath"):
        if config[key]:
            cause = unwritable(config[key])
            if cause:
                source = config.sources.get(key, "command line")
                where = "" if source == "command line" else f"{source}: "
                raise ConfigError(f"{where}{key}={config[key]}: {cause}")


#: how often the stores' directories are checked for being still there (data_lock.StoreLock.check)
DATA_DIR_CHECK_SECONDS = 5.0


def store_directories(config: NamesrvConfig) -> list[Path]:
    """The directories the server writes its stores to (the KV store's, the topology's, the events',
    the route snapshot's): each locked while it runs (data_lock.py)."""
    paths = [Path(config["kvConfigPath"]), topology_path(config), events_path(config)]
    if config["routeSnapshotPath"]:
        paths.append(Path(config["routeSnapshotPath"]))
    return [path.parent for path in paths]


def store_refusal(failures: Counter[tuple[str, str]],
                  consequence: str = "the change is refused", quiet: bool = False) -> Callable[[StoreError], None]:
    """What a store's failed save does besides its answer: one log line saying what became of the
    change (``quiet``: none, the caller says it), one count by (store, errno)."""
    def refused(error: StoreError) -> None:
        failures[error.what, error.errno_name] += 1
        if not quiet:
            log.error("{error}; {consequence}", error=str(error), consequence=consequence)

    return refused


def _say_what_was_read(config: NamesrvConfig, kv: KVConfigManager, kv_path: Path) -> None:
    """The start's lines on the files it read, as Java's "load KV config table OK": started in place of
    mqnamesrv on its ~/namesrv, nothing said whether its kvConfig.json and namesrv.properties were read."""
    if kv.not_utf8:
        log.warn("{path}: {why}: read as ISO-8859-1, as a Java NameServer whose default charset is ISO-8859-1 "
                 "wrote and read it (one on UTF-8 reads U+FFFD there); the next KV change writes it as UTF-8",
                 path=str(kv_path), why=kv.not_utf8)
    if kv_path.exists():
        entries = sum(len(keys) for keys in kv.configTable.values())
        log.info("load KV config table OK: {path}, {namespaces} namespaces, {entries} keys", path=str(kv_path),
                 namespaces=len(kv.configTable), entries=entries)
    store = str(config["configStorePath"])
    read = sorted(name for name, source in config.sources.items() if source == store)
    if read:
        log.info("{path}: {count} keys read ({names})", path=store, count=len(read), names=", ".join(read))


def saved_by(writer: FileWriter, refused: Callable[[StoreError], None]) -> Save:
    """A store's ``save(data, saved)`` through ``writer`` (a thread of the reactor's pool, one write
    at a time): a failed save is refused (logged, counted) and told as its StoreError."""
    def save(make: Callable[[], bytes], saved: Saved) -> None:
        def done(error: OSError | None) -> None:
            if error is not None and not isinstance(error, StoreError):
                error = StoreError(writer.what, writer.path, error)
            if error is not None:
                refused(error)
            saved(error)
        writer.write_soon(make, done)
    return save


@dataclass(frozen=True)
class Owners:
    """Every owner of a NameServer's state, each constructed once by ``build``: what the handlers
    are given (``state``), what the server observes of itself (``seen``) and the descriptors every
    port's connections may take (``fds``)."""

    state: NamesrvState
    seen: Observations
    fds: FdBudget


def build(config: NamesrvConfig, clock: interfaces.IReactorTime, notifier=None,
          keep_answers: bool = True, fd_limit: int | None = None,
          keep_timers: KeepTimers = PROCESS_KEEP_TIMERS) -> Owners:
    """Every owner, constructed once and wired, in one place (as Java's NamesrvController and
    twisted.names' tap): the KV store loaded from its file (a corrupt file raises KVConfigError),
    with aclEnable the accounts (AclConfigError).  A save that fails is counted in the metrics by
    (store, errno name).  ``keep_answers=False``: a cache that keeps nothing (the differential
    tests' reference).  ``fd_limit``: the descriptor limit ``load`` read (``ulimit -n``; None:
    unlimited, every connection admitted), less fdReserve the budget of every port's connections.
    ``keep_timers``: what the values costly to make are kept by (state/costly.py: the health behind
    /readyz and /metrics, /api's clusters), the process's monotonic clock and CPU time unless a test
    gives its own.

    Who hears what, in this order (nothing subscribes itself):

    - a complete route change: the answer cache (drops what it makes stale);
    - a key put or deleted: the answer cache (an ORDER_TOPIC_CONFIG key is a topic's orderTopicConf);
    - a config update: the answer cache (everything: switches shape answers);
    - a departure that took topics away: the lost topics, before the event's listeners;
    - a route event: the log line and the page's events unless its broker flaps (flapping.py:
      then summarised), the counter by kind, the departed brokers, the remembered topology (each
      reads the tables as changed: events come once the change is complete);
    - an audited request (each listener's dispatcher's observer, a ``Trail`` NamesrvService wires,
      the NameServer's and the embedded controller's): the one audit trail, which logs it, counts
      it and feeds it to the page's events;
    - a stall of the server itself (stalls.py, its timer NamesrvService's): the log line, the counters
      /metrics reads, and the page's "stalled" event."""
    missing = [key.name for key in SERVER_SCHEMA.keys if key.name not in config.schema.by_name]
    if missing:  # a partial schema would take the controller's keys as unknown ones: typed, checked and guarded nowhere
        raise ConfigError(f"the NameServer's config does not know {', '.join(missing)}: build it with "
                          "schema.SERVER_SCHEMA")
    seconds = clock.seconds
    metrics = Metrics()
    refused = store_refusal(metrics.store_failures)
    kv_path = Path(config["kvConfigPath"])
    kv_file = FileWriter(clock, kv_path, "kvConfigPath")  # off the reactor thread: any peer may put (state/kv.py)
    # updateNamesrvConfig applies a change its file cannot take (a read-only ConfigMap), as Java does
    applied_anyway = store_refusal(metrics.store_failures, "the change is applied in memory only, until the restart")
    config_file = FileWriter(clock, config["configStorePath"], "configStorePath")  # off the reactor thread, too
    config_saves = SavesOfNewest(saved_by(config_file, applied_anyway), lambda: java_utf8(config.stored_text()))
    # written again while its file is missing (a data directory removed, a disk full meanwhile): every
    # failure counted, said once a spell by NamesrvService.check_data_dirs, not a line every 5 s
    counted = store_refusal(metrics.store_failures, quiet=True)
    # ORDER_TOPIC_CONFIG, which 5.x hands to every broker whole, bounded on its own (0: by maxKvBytes alone)
    order_bound = int(config["maxOrderTopicConfigBytes"])
    kv = KVConfigManager(saved_by(kv_file, refused), lambda: config["maxKvBytes"],
                         {NAMESPACE_ORDER_TOPIC_CONFIG: order_bound} if order_bound else {}, saved_by(kv_file, counted))
    kv.load(kv_path)
    _say_what_was_read(config, kv, kv_path)
    steady = steady_seconds(clock)  # heartbeats, windows and counts: no clock step (clocks.py)
    routes = RouteInfoManager(config, steady, notifier=notifier)
    answers = AnswerCache(routes, keep=keep_answers)
    acl = (AccessControl.from_file(config["aclAccountsFile"], config["aclReadRequired"], config["aclBrokerNetworks"],
                                   bound_required=config["aclNamesrvSignatureRequired"],
                                   window=config["aclSignatureWindowSeconds"], clock=seconds)
           if config["aclEnable"] else None)
    budget = MemoryBudget(config["receiveMemoryBudget"] or default_budget(config["frameMaxLength"]))
    hosts = KeptHosts()  # the host each peer counts under, for the topology's bound and the page's
    topology = Topology(seconds, hosts)
    uptime = since_now(steady)
    # the page's events, and the one budget of peers' event and request lines a minute (events.py)
    events = RecentEvents(seconds, hosts, said)
    state = NamesrvState(config, routes, kv, answers, seconds, Refusals(), budget, topology, seconds(),
                         config_saves.save, BuildsApart(clock, budget).build, acl=acl, uptime=uptime,
                         request_line=events.request_line)
    # the 10 minutes a departure and its lost topics are kept: on the steady clock (clocks.py)
    departed = DepartedBrokers(seconds, steady)
    lost = LostTopics(seconds, steady=steady)
    flaps = FlapWatch(seconds, steady, flapping_told(events))
    # a reactor that did not run for a while (SIGSTOP, a paused VM): its line, counters and page event
    stalled = stalls.StallWatch(keep_timers.clock, stall_told(events))
    seen = Observations(metrics, events, departed, lost, AuditTrail(events, (NAMESRV, CONTROLLER)),
                        HealthWatch(routes, topology, keep_timers, rejoin_window(config, uptime)), flaps, stalled)
    # what makes kept answers stale
    routes.subscribe(answers.changed, answers.holds)
    kv.subscribe(answers.kv_changed)
    config.subscribe(answers.config_changed)
    # route events, each once its change is complete
    routes.listen_lost(lost.departed)
    routes.listen(told_unless_flapping(flaps, events, topology, routes))
    for heard in (metrics.route_event, departed.route_event, topology.heard):
        routes.listen(heard)
    fds = FdBudget(fd_limit, config["fdReserve"], count_open_fds, steady,
                   HTTP_HEADROOM if config["metricsPort"] else 0)
    return Owners(state, seen, fds)


def said(level: str, text: str) -> None:
    """One log line at ``level`` (``info``, ``warn``) for an owner that tells rather than logs."""
    getattr(log, level)("{text}", text=text)


def told_unless_flapping(flaps: FlapWatch, events: RecentEvents, topology: Topology | None = None,
                         routes: RouteInfoManager | None = None) -> Callable[[str, dict], None]:
    """The route events' log line and page event, unless the broker flaps (flapping.py): then they
    are summarised, its start and end one page event each; every one is counted all the same.  The
    page's events say whether the line is written (events.py: a flood's lines past
    LINES_FOLDED_PER_MINUTE are counted, not logged).
    ``topology.origin``: the peer whose request is being applied, the host a page event counts
    against (events.py: EVENTS_PER_HOST; read as an attribute: every registration's path).  An
    unregistration that emptied its group (or cluster) says so in a line of its own
    (housekeeping.log_clean_stop, read from ``routes``): in this listener, no call more for the
    registrations."""
    flapping = flaps.now_flapping

    def told(kind: str, info: dict) -> None:
        if flapping and flaps.flap_of(info) is not None:  # none flapping: nothing more for a registration
            flaps.heard(kind, info)  # summarised
            return
        if events.route_event(kind, info, None if topology is None else topology.origin):  # (past the
            log_route_event(kind, info)  # folded events' lines a minute, counted and not logged: events.py)
        if kind in DEPARTURES:  # may make it flapping: the warning after the departure's line
            if kind == CLEAN_STOP and routes is not None:
                log_clean_stop(info, routes, topology)
            flaps.heard(kind, info)
    return told


def stall_told(events: RecentEvents) -> Callable[[float, str], None]:
    """A stall (stalls.py) on the status page: one "stalled" event, its line as the reason."""
    def told(gap: float, text: str) -> None:
        events.feed_event("stalled", {"reason": text, "seconds": round(gap, 1)})
    return told


def flapping_told(events: RecentEvents) -> Callable[[str, str, dict], None]:
    """flapping.py's lines: logged; a broker's start and end of flapping (or of restarting cleanly)
    also one page event each (its route events meanwhile are not on the page)."""
    def tell(level: str, text: str, fields: dict) -> None:
        log_flapping(level, text, fields)
        if fields["flapping"] != "ongoing":
            kind = ("settled" if fields["flapping"] == "settled" else
                    "restarting" if fields["clean"] else "flapping")
            events.feed_event(kind, {**fields["broker_info"], "reason": fields["detail"]})
    return tell


def rejoin_window(config: NamesrvConfig, uptime: Callable[[], float]) -> Callable[[], float]:
    """Seconds left of a start's window for brokers to register again (``readinessBrokerWait``):
    ``/readyz`` waits that long for the groups up before the restart, and outages.py calls them
    rejoining meanwhile.  On the steady clock (``NamesrvState.uptime``): a wall clock stepped back
    an hour at boot (NTP's first sync) kept ``/readyz`` unready for the hour."""
    return lambda: config["readinessBrokerWait"] / 1000 - uptime()


@dataclass
class Loaded:
    """What a NameServer starts from, read from disk by ``load`` before anything is built on it."""

    owners: Owners
    #: NOTIFY_MIN_BROKER_ID_CHANGE's pushes (the routes' notifier)
    notifier: Notifier
    #: the status page's events of the last run, restored
    events: EventLogService
    #: routes of the last run (routeSnapshotPath), restored; None without a snapshot file
    snapshots: RouteSnapshotService | None
    #: the broker groups seen before, expected back (topologyPath), restored
    topology: TopologyStoreService
    #: what a remoting port listens with, the TLS keys read (tls.server.mode)
    listen_with: Callable[[RemotingFactory], protocol.Factory]
    #: what this server's own connections to its peers go over (None: plain TCP), the keys read
    connect_with: TlsWrap | None = None

    @property
    def state(self) -> NamesrvState:
        return self.owners.state


def load(config: NamesrvConfig, reactor: interfaces.IReactorTime) -> Loaded:
    """Every read a start needs, in one place: the data dir checked, the descriptor limit (ulimit
    -n), the page's events, the KV store, the ACL accounts (aclEnable), the route snapshot, the TLS
    certificate and key.  What the server cannot run with is one CannotStart naming the key or file
    (each launcher prints it as its one line)."""
    try:
        check_paths(config)
        notifier = Notifier(reactor, "notify min broker id change")
        fd_limit = open_file_limit()
        owners = build(config, reactor, min_broker_id_notifier(notifier, config.profile.mq_version),
                       fd_limit=fd_limit)
        # before the reactor's pool starts a thread: a table grown later waits for RCU (budget.py)
        make_table_room(descriptor_room(config["maxConnections"], config["fdReserve"], fd_limit))
        state, metrics = owners.state, owners.seen.metrics
        # counted in namesrv_broker_pushes_total; each push holds a descriptor of the reserve's budget
        notifier.counts, notifier.fds = metrics.pushes, owners.fds
        events = EventLogService(owners.seen.events, events_path(config), reactor, failures=metrics.store_failures,
                                 failing=metrics.store_failing,
                                 lost=owners.seen.lost, present=lambda: state.routes.topicQueueTable,
                                 load_refusals=metrics.store_load_refusals)
        events.load(UNCLEAN if last_run_unclean(starts_path(config)) else "")
        owners.seen.flaps.restore(list(owners.seen.events.recent))  # a broker flapping before flaps on
        topology = TopologyStoreService(state.topology, topology_path(config), reactor,
                                        metrics.store_load_refusals, failures=metrics.store_failures,
                                        failing=metrics.store_failing)
        topology.load()
        state.save_topology = topology.save_now
        snapshots = None
        if config["routeSnapshotPath"]:
            snapshots = RouteSnapshotService(state.routes, config["routeSnapshotPath"], reactor,
                                             config["routeSnapshotInterval"] / 1000,
                                             max_age=config["routeSnapshotMaxAge"] / 1000,
                                             load_refusals=metrics.store_load_refusals,
                                             failures=metrics.store_failures, failing=metrics.store_failing)
            snapshots.load()
            topology.topology.seed(restored_members(state.routes))  # a snapshot older than the memory's file
        wrap = listen_with(config)  # a bad TLS setup fails here
        to_peers = connect_with(config) if config["metricsPort"] else None  # the peers view's client
    except KVConfigError as exc:
        raise CannotStart(f"kvConfigPath: {exc}; fix or move the file, the NameServer will not start with it") \
            from None
    except (AclConfigError, ConfigError) as exc:
        raise CannotStart(str(exc)) from None
    return Loaded(owners, notifier, events, snapshots, topology, wrap, to_peers)


def restored_members(routes: RouteInfoManager) -> list[tuple[str, str, int, str]]:
    """(cluster, group, id, address) of every member in the routes (restored from a snapshot)."""
    return [(str(broker.cluster), name, broker_id, addr) for name, broker in routes.brokerAddrTable.items()
            for broker_id, addr in broker.brokerAddrs.items()]


def reload_acl(acl: AccessControl, metrics: Metrics) -> None:
    """The ACL timer's work: read the accounts file again if it changed, and say what happened; a
    file that does not load (half written, bad YAML, a FIFO or a directory swapped in) leaves the
    accounts read before, one error line and one count in ``metrics.acl_reload_failures``.  Whatever
    goes wrong, the timer goes on (an exception out of here would end it: no later change of the
    accounts, a revoked one included, would ever be read)."""
    try:
        outcome = acl.reload_if_changed()
    except Exception as exc:  # the timer's boundary: anything unforeseen is a failed reload, said once
        outcome = f"not reloaded, the accounts read before stay: {type(exc).__name__}: {exc}"
    if outcome is None:
        return
    if outcome.startswith("reloaded"):
        log.info("aclAccountsFile: {outcome}", outcome=outcome)
    else:
        metrics.acl_reload_failures += 1
        log.error("aclAccountsFile: {outcome}", outcome=outcome)


def min_broker_id_notifier(push: Notifier, version: int) -> Callable[[str, dict[str, str]], None]:
    """NOTIFY_MIN_BROKER_ID_CHANGE (905), oneway, as Java's NamesrvController.remotingClient sends it."""
    def notify(broker_addr: str, header: dict[str, str]) -> None:
        push(broker_addr, RemotingCommand.request(RequestCode.NOTIFY_MIN_BROKER_ID_CHANGE, header, version=version,
                                                  oneway=True).encode())
    return notify


#: young objects before a collection (CPython's default is 700): a young pass walks up to this many
#: objects, so it is also the longest pause the collector adds to a turn (docs/benchmarks.md)
GC_YOUNG_THRESHOLD = 5_000
#: the collector's thresholds: a young pass per GC_YOUNG_THRESHOLD new objects, the middle
#: generation's pass after every young one (CPython's 10: every eleventh), a full one after 120
#: of those (about as many new objects as CPython's 10 x 10 passes of 10,000): see tune_gc
GC_THRESHOLDS = (GC_YOUNG_THRESHOLD, 0, 120)


def tune_gc() -> None:
    """At CPython's default threshold (700) the young passes come so often that their survivors
    soon make full collections of every connection's objects: 17-37 ms passes while 5,000 brokers
    register or leave; at 50,000 each young pass walks 50,000 objects when they are tracked ones
    (a connection's): 12-16 ms.  While brokers register for the first time every young object
    survives, and the middle generation's pass walks all the survivors since its last one: at
    10,000 young objects and CPython's every eleventh pass, ~100k objects at 5,000 brokers (26-40
    ms of CPU, a lookup's wait).  Now a young pass walks at most 5,000 objects and the middle one
    those of one young pass more (the real server's longest passes at 5,000 brokers 3 ms:
    tools/bench/server_turns.py); each object is walked as often as before, the full collections
    come after about as many new objects, and the 1M-topic tables are mostly untracked objects.
    Freezing what boot created keeps it out of every later full collection."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


#: how long answers worked out in steps may hold the reactor before it reads other connections again:
#: a lookup read meanwhile waits for it and the step that passes it (at 0.003 a heartbeat storm's
#: longest lookup wait at 100k topics was one such tick, 3.6-3.7 ms of CPU); a turn more costs the
#: reactor about 5 us of CPU (20,000 empty steps one a turn on reactor.py's reactor: 4.6-4.7 us each),
#: under 1% of a job of steps at 1 ms
STEPS_PER_TURN_SECONDS = 0.001


def step_cooperator(reactor: interfaces.IReactorTime) -> task.Cooperator:
    """Runs the steps of big answers (dispatch.py) a few milliseconds per reactor turn."""
    def budget() -> Callable[[], bool]:
        deadline = perf_counter() + STEPS_PER_TURN_SECONDS
        return lambda: perf_counter() >= deadline
    return task.Cooperator(terminationPredicateFactory=budget, scheduler=lambda work: reactor.callLater(0, work))


def settle_in_steps(routes: RouteInfoManager, cooperator: task.Cooperator) -> Callable[[], None]:
    """RouteInfoManager.on_settle: what a committed change still has to write into topicQueueTable
    is written by ``cooperator``'s steps, a few milliseconds of them per reactor turn (one task
    at a time; state/settling.py)."""
    running: list[task.CooperativeTask] = []

    def failed(failure: Failure) -> None:
        log.failure("writing a route change into topicQueueTable failed", failure)

    def start() -> None:
        if not running:
            running.append(cooperator.cooperate(routes.settle_steps()))
            running[0].whenDone().addErrback(failed).addBoth(lambda _: running.clear())
    return start


class NamesrvService(service.MultiService):
    """The NameServer: its listeners, timers and (when asked for) controller are child services.
    Built on what ``load`` read, reading nothing itself; ``from_config`` does both."""

    @classmethod
    def from_config(cls, config: NamesrvConfig, reactor=None, controller_port: int | None = None,
                    controller_bind: str | None = None, log_lines_lost: Counter | None = None) -> NamesrvService:
        """Read what the server starts from (``load``) and build it: CannotStart names what it cannot run with.
        ``log_lines_lost``: the log writer's count of lines it could not write (logs.LineWriter), for /metrics."""
        reactor = owners_view(reactor)  # its timers on the monotonic clock, its seconds() the wall's (clocks.py)
        loaded = load(config, reactor)
        if log_lines_lost is not None:
            loaded.owners.seen.metrics.log_lines_lost = log_lines_lost
        return cls(config, loaded, reactor, controller_port, controller_bind)

    def __init__(self, config: NamesrvConfig, loaded: Loaded, reactor, controller_port: int | None = None,
                 controller_bind: str | None = None) -> None:
        super().__init__()
        self.config = config
        self.reactor = reactor
        self.seen = loaded.owners.seen
        self.metrics = self.seen.metrics
        self.events = loaded.events  # the page's events kept
        self.events.setServiceParent(self)
        self.topology = loaded.topology  # the broker groups expected back, kept
        self.topology.setServiceParent(self)
        #: the outages, for the status page, /api, /metrics and /readyz alike (one computation)
        self.health = self.seen.health
        self.notifier = loaded.notifier
        self.state = loaded.state
        steps = step_cooperator(reactor)  # big work in steps: registrations, and writing route changes in
        self.state.routes.on_settle = settle_in_steps(self.state.routes, steps)
        self.dispatcher = Dispatcher(self.state, self.metrics, count_requests=bool(config["metricsPort"]),
                                     call_later=reactor.callLater, cooperator=steps)
        # the audit trail (audit.py): the NameServer's requests, and below the controller's, into the one trail
        self.dispatcher.observe(Trail(NAMESRV, self.state.clock, self.state.acl, self.seen.audit))
        # every port's connections within the descriptors (ulimit -n) less a reserve for the stores
        self.fds = loaded.owners.fds
        self.factory = RemotingFactory(self.dispatcher, reactor, config["frameMaxLength"],
                                       config["serverChannelMaxIdleTimeSeconds"], self.state.refusals,
                                       self.state.budget, config["maxConnections"], config["headerMaxLength"],
                                       fds=self.fds, foreign=foreign_words(config),
                                       max_connections_per_host=config["maxConnectionsPerHost"])
        if self.state.acl is not None:  # the accounts file is read again when it changes, as Java's is
            ClockedTimerService(RELOAD_INTERVAL_SECONDS, partial(reload_acl, self.state.acl, self.metrics),
                                reactor).setServiceParent(self)
        self.housekeeping = HousekeepingService(self.state.routes, self.factory, reactor, config.scan_interval_s)
        self.housekeeping.setServiceParent(self)
        ClockedTimerService(FLAP_TICK_SECONDS, self.seen.flaps.tick, reactor).setServiceParent(self)
        # a reactor that did not turn for a while (SIGSTOP, a paused VM) says so once it turns again
        ClockedTimerService(stalls.TICK_SECONDS, self.seen.stalls.tick, reactor).setServiceParent(self)
        # the C library's free pages back to the system after work (heap.py), where it is glibc
        trim = heap.glibc_trim()
        if trim is not None:
            self.heap_trim: heap.HeapTrim | None = heap.HeapTrim(trim)
            ClockedTimerService(heap.TICK_SECONDS, self.heap_trim.tick, reactor).setServiceParent(self)
        else:
            self.heap_trim = None
        # the memory limit read again (a container resized in place): the default budget follows it
        self.memory_limit = LimitWatch(self.state.budget, config["frameMaxLength"], not config["receiveMemoryBudget"],
                                       machine_limit, resident_bytes, said)
        ClockedTimerService(LIMIT_CHECK_SECONDS, self.memory_limit.tick, reactor).setServiceParent(self)
        # a data directory removed while running (rm -rf, a restore over it): locked again, its stores rewritten
        ClockedTimerService(DATA_DIR_CHECK_SECONDS, self.check_data_dirs, reactor).setServiceParent(self)
        # systemd's WatchdogSec: a hung reactor is restarted
        watchdog = sdnotify.watchdog_service(reactor, failed=self.metrics.watchdog_failed)
        if watchdog is not None:
            watchdog.setServiceParent(self)
        self.snapshots = loaded.snapshots
        if self.snapshots is not None:
            self.snapshots.setServiceParent(self)
        self.controller = None  # RocketMQ 5.x's controller, when asked for (imported only then)
        if config["enableControllerInNamesrv"] or controller_port is not None:
            from .controller.service import embedded_controller

            self.controller = embedded_controller(config, reactor, controller_port, controller_bind, self.state.acl,
                                                  self.state.refusals, self.state.budget, loaded.listen_with,
                                                  self.fds, Trail(CONTROLLER, self.state.clock, self.state.acl,
                                                                  self.seen.audit))
            self.controller.setServiceParent(self)
        # the listening ports are child services, as in twisted.names' tap (internet.TCPServer)
        self.remoting = Listener("listenPort", loaded.listen_with(self.factory), reactor, config["listenPort"],
                                 config["bindAddress"], config["serverSocketBacklog"],
                                 Admission(self.fds, self.factory.refuse))
        self.remoting.setServiceParent(self)
        self.web: Listener | None = None
        self.stopping = False
        self.data_lock: StoreLock | None = None  # the stores' directories, locked while serving
        self.kv_unwritten_said = False  # the KV file's rewrite failing said (kv_written_again)
        self.counted: Counted | None = None  # this start in starts.json, until the clean stop's mark
        self.peers: PeersService | None = None
        if config["metricsPort"]:
            # the HTTP side (twisted.web, prometheus_client: about 5 MB of resident memory) is imported only
            # with metricsPort; both are installed with the package (setup.cfg), so it never lacks them
            from .peers import PeersService
            from .web.site import make_site

            self.peers = PeersService(self.state, self.own_address, self.peer_list, reactor,
                                      config["peersCompareInterval"] / 1000, loaded.connect_with)  # peers view
            self.peers.setServiceParent(self)
            site = make_site(self.state, self.factory, self.seen, self.http_resources(), self.controller, self.peers,
                             reactor, self.fds)
            self.web = Listener("metricsPort", site, reactor, config["metricsPort"], config["metricsBindAddress"],
                                config["serverSocketBacklog"],
                                Admission(self.fds, partial(self.state.refusals, "http"), site.make_room, probes=True))
            self.web.setServiceParent(self)
        self.port_ready: defer.Deferred = defer.Deferred()
        self.web_ready: defer.Deferred = defer.Deferred()  # fires with the status page's port

    def http_resources(self) -> dict:
        """The probes and the address server, beside the status page on the HTTP port."""
        from .web.health import health_resources
        from .web.nsaddr import nsaddr_resources

        return {**health_resources(self.liveness, self.readiness_probe),
                **nsaddr_resources(self.config, self.listen_port)}

    def own_address(self) -> str:
        """How the peers view names this server (its routes are read in process): its remoting
        port, on loopback when it listens on every interface."""
        host = str(self.config["bindAddress"])
        host = "127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host
        return host_port(host, self.listen_port())

    def peer_list(self) -> list[str]:
        from .peers import peer_addresses  # (only the peers view, with metricsPort, asks)

        return peer_addresses(self.config, self.listen_port())

    def listen_port(self) -> int:
        """The remoting port as bound (listenPort 0 picks one), else as configured."""
        port: Any = self.port
        return port.getHost().port if port is not None else self.config["listenPort"]

    def liveness(self) -> dict[str, bool]:
        """``/healthz``: the process answers (this runs in it) and every listener is bound."""
        return {f"{listener.name}_bound": listener.port is not None for listener in self.listeners()}

    def readiness_probe(self) -> tuple[dict[str, bool], dict[str, Any]]:
        """``/readyz``'s checks and details from one computation of the route health (each walks
        every broker group: at the limits' 20,000 groups, not twice a probe)."""
        health = self.health.health()
        return self.readiness(health), self.readiness_details(health)

    def readiness(self, health: RouteHealth | None = None) -> dict[str, bool]:
        """``/readyz``: live, the KV store and any route snapshot loaded (both are loaded before the
        service can start: a KV file that cannot be read stops the start), not stopping, and the
        broker groups that were up when it last saved its topology (state/topology.py) routed again -
        registered since the start or restored from the route snapshot - or ``readinessBrokerWait``
        ms past the start: a group that stays down must not keep every NameServer unready for ever,
        and one that was down before the restart is an outage, not a reason to wait.  Nor while
        ``needWaitForService`` holds route lookups ("name server not ready", as Java's 5.x): ready
        then sent a Service's clients, and an operator restarting NameServers one by one, to one
        that answers no route yet (processor.waiting_for_service, the one rule for both)."""
        health = self.health.health() if health is None else health
        return {**self.liveness(), "kv_loaded": self.state.kv is not None,
                "route_snapshot_loaded": self.snapshots is None or self.snapshots.loaded,
                "started": bool(self.running), "not_stopping": not self.stopping,
                "broker_groups_back": not health.rejoin_left or not health.not_back,
                "route_lookups_answered": not waiting_for_service(self.state)}

    def readiness_details(self, health: RouteHealth | None = None) -> dict[str, Any]:
        """What /readyz says beside its checks: "N of M known broker groups back"."""
        health = self.health.health() if health is None else health
        absent = [f"{group.cluster}/{group.broker}" for group in health.absent]
        waiting = [f"{group.cluster}/{group.broker}" for group in health.not_back]
        return {"broker_groups": {"known": health.known, "back": health.back, "routed": health.known - len(absent),
                                  "absent": absent[:20], "up_before_restart_not_back": waiting[:20],
                                  "summary": f"{health.back} of {health.known} known broker groups back"}}

    @property
    def port(self) -> interfaces.IListeningPort | None:
        return self.remoting.port

    @property
    def web_port(self) -> interfaces.IListeningPort | None:
        return self.web.port if self.web else None

    def listeners(self) -> list[Listener]:
        return [child for child in self if isinstance(child, Listener)]

    def bind_all(self) -> None:
        """Every port is bound before anything runs: either the server serves all it was asked
        to, or this raises CannotStart and nothing is left listening."""
        bound: list[Listener] = []
        try:
            for listener in self.listeners():
                listener.bind()
                bound.append(listener)
        except CannotStart:
            for listener in bound:
                listener.unbind()
            raise

    def privilegedStartService(self) -> None:
        """twistd binds here, before it drops privileges (a port below 1024 as root)."""
        self._lock_and_bind()
        super().privilegedStartService()

    def _lock_and_bind(self) -> None:
        """Lock the stores' directories (data_lock.py: a second server on the same data dir waits for
        this one to stop, then cannot start), then bind every port; a start that cannot bind leaves
        no lock file or data directory behind.  Once: twistd's privileged step, else the start."""
        if self.data_lock is None:
            self.data_lock = lock_stores(store_directories(self.config))
        try:
            self.bind_all()
        except BaseException:
            self._release_lock(undo=True)
            raise

    def check_data_dirs(self) -> None:
        """A store directory whose lock file is gone (data_lock.StoreLock.check: the directory removed,
        moved or restored over while running): said once, counted as a store that could not be kept
        (NamesrvStoreNotWritten), a page event; once locked again (at once, or at a later check when a
        full disk refused it), every store there written again from memory.  Before, nothing said so:
        the KV store was written again only at its next change, a restart meanwhile started with none,
        and a second server could lock the directory.  Then the KV store, while its file does not hold
        it (``kv_written_again``)."""
        if self.data_lock is None:
            return
        checked = self.data_lock.check()
        for directory in checked.lost:
            self.metrics.store_failures["dataDirectory", "removed"] += 1
            when = "" if directory in checked.relocked else " as soon as it can be (tried every 5 s: a full disk)"
            text = (f"{directory} lost its lock file while the server ran (the directory removed, moved or "
                    f"restored over): locked again, and the stores kept there written again from memory{when} "
                    f"(the KV config, the route snapshot, the topology, the events; the starts' count at the "
                    f"clean stop); anything else that was there (namesrv.properties, the controller's log) "
                    f"is not: restore it from a backup")
            log.warn("{text}", text=text, directory=str(directory))
            self.seen.events.feed_event("data_dir_removed", {"reason": text})
            if Path(self.config["kvConfigPath"]).parent == directory:
                self.state.kv.file_lost()  # written below once its directory is locked again
        for directory in checked.relocked:
            if directory not in checked.lost:
                log.info("{directory} locked again; the stores kept there written again from memory",
                         directory=str(directory))
            for store, path in ((self.topology, topology_path(self.config)), (self.events, events_path(self.config)),
                                (self.snapshots, Path(self.config["routeSnapshotPath"] or "."))):
                if store is not None and path.parent == directory:
                    store.write_again()
        self.kv_written_again(self.data_lock.pending)

    def kv_written_again(self, pending: set[Path]) -> None:
        """While the KV file does not hold the table (``KVConfigManager.missing``: its directory was
        removed) it is written again at every check its directory is locked at (not ``pending``: never
        into a directory another server may have locked meanwhile), each failure counted
        (``kvConfigPath``), one error line once a write failed (a full disk: ``unwritten``;
        ``namesrv_kv_unwritten`` 1 while missing, NamesrvKVUnwritten) and one when it is written:
        before, a failed rewrite was left so, and a restart after the disk was freed started without
        the KV config."""
        kv, path = self.state.kv, str(self.config["kvConfigPath"])
        if kv.missing and Path(path).parent not in pending:
            kv.write_again()  # done at once on a test's clock, else in a thread: its outcome read next time
        if kv.unwritten is not None and not self.kv_unwritten_said:
            self.kv_unwritten_said = True
            log.error("KV config {path} is not on disk ({why}): a restart now starts without it; written "
                      "again every {seconds:.0f} s until it can be (free space on its disk)",
                      path=path, why=kv.unwritten, seconds=DATA_DIR_CHECK_SECONDS)
        if not kv.missing and self.kv_unwritten_said:
            self.kv_unwritten_said = False
            log.info("KV config {path} written again", path=path)

    def _release_lock(self, undo: bool = False) -> None:
        if self.data_lock is not None:
            self.data_lock.release(undo)
            self.data_lock = None

    def startService(self) -> None:
        tune_gc()
        heap.fix_mmap_threshold()  # peers' big frames mapped on their own, unmapped when freed (heap.py)
        unbound = sum(listener.port is None for listener in self.listeners())
        warning = fd_limit_warning(self.config["maxConnections"], self.fds.reserve,
                                   (count_open_fds() or 0) + unbound + self.fds.headroom)
        if warning:
            log.warn("{warning}", warning=warning)
        warning = memory_limit_warning(self.state.budget.limit, resident_bytes(), machine_limit())
        if warning:
            log.warn("{warning}", warning=warning)
        self._lock_and_bind()  # python -m twisted_namesrv starts without the privileged step
        # counted once bound, the data dir locked, and as the user that runs (not twistd's privileged step)
        self.counted = count_start(starts_path(self.config), self.metrics.store_failures,
                                   self.metrics.store_load_refusals)
        self.metrics.starts, self.metrics.unclean_starts = self.counted
        super().startService()
        address = self.remoting.port.getHost()
        self.state.listen_address = host_port(address.host, address.port)
        if self.data_lock is not None:
            self.data_lock.note(f"pid {os.getpid()}, listening on {self.state.listen_address}")
        log.info("{message}, address {address}, compat {compat}, twisted-namesrv {version}", message=BOOT_MESSAGE,
                 address=self.state.listen_address, host=address.host, port=address.port,  # JSON logs' fields
                 compat=self.config.profile.name, version=__version__)
        if self.web is not None:
            address = self.web.port.getHost()
            log.info("metrics and status page on http://{address}/", address=host_port(address.host, address.port))
            self._warn_of_open_web()
            self.web_ready.callback(self.web.port)
        self.port_ready.callback(self.remoting.port)
        sdnotify.ready_when_running(self.reactor, f"serving on {self.state.listen_address}")  # systemd: all bound
        if hasattr(self.reactor, "callWhenRunning"):  # after the reactor's own SIGTERM handler
            self.reactor.callWhenRunning(stop_on_hangup, underlying(self.reactor))  # SIGHUP: a clean stop, as Java's

    def _warn_of_open_web(self) -> None:
        """The status page and /api show every route and KV value: bound beyond this machine without
        ACL they answer loopback peers only (web/auth.py's LoopbackGate); say so where the operator looks."""
        from .web.auth import is_loopback

        host = self.config["metricsBindAddress"]
        if not is_loopback(host) and not self.config["aclEnable"]:
            log.warn("the HTTP side on {host} serves /metrics, the probes and /rocketmq/nsaddr to anyone who "
                     "reaches it, the status page and /api to this machine only (aclEnable=false): enable ACL "
                     "to see them from elsewhere", host=host)

    def stopService(self):
        self.stopping = True
        d = defer.maybeDeferred(super().stopService)  # the listeners stop listening first
        for connection in list(self.factory.connections.values()):
            connection.close_reason = "server stopping"  # the brokers did not leave: the server went
            connection.transport.loseConnection()
        return d.addBoth(self._unlock_stores)

    def _unlock_stores(self, result: object) -> object:
        """Once the stores' last writes are made (the children's stops): this run marked stopped
        cleanly (starts.py: the next start is not an unclean one), and the next server may start."""
        if self.counted is not None:
            count_clean_stop(starts_path(self.config), self.counted, self.metrics.store_failures)
            self.counted = None
        self._release_lock()
        return result
