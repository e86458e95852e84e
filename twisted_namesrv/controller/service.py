"""ControllerService: the controller's remoting listener, its scans and its pushes to brokers.

The listener is the server's own: ``RemotingProtocol``/``RemotingFactory`` (framing, limits,
idle timeouts, back-pressure, answers in request order), the same ``Dispatcher`` with the
controller's handler table (controller/processor.py: CONTROLLER_TABLE), bound by the same
``Listener`` and, inside the NameServer, wrapped for TLS by the same ``tls.server.mode``.  It is
a child of NamesrvService (``enableControllerInNamesrv`` or ``--controller-port``) or stands
alone (``twistd namesrv-controller``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import replace
from pathlib import Path
from typing import Any

from twisted.application import service
from twisted.internet import defer, protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from .. import CannotStart, tls
from ..audit import AuditTrail, Trail
from ..budget import FdBudget, MemoryBudget
from ..clocks import owners_view, steady_seconds, underlying
from ..dispatch import Dispatcher
from ..events import RecentEvents
from ..hangup import stop_on_hangup
from ..metrics import Metrics
from ..refusals import Refusals
from ..server import Admission, Listener, Notifier, RemotingFactory
from ..state.acl import AccessControl
from ..state.hosts import KeptHosts
from ..timers import ClockedTimerService
from .audit import CONTROLLER
from .config import ControllerConfig, ControllerConfigError, ControllerPeer
from .log import ControllerLog, ControllerLogError, FileControllerLog, Leadership, SoleLeader
from .manager import ControllerManager
from .metrics import ControllerMetrics
from .processor import CONTROLLER_TABLE, acl_refusal_of

log = Logger()
#: without controllerDLegerPeers or --port (Java's peers name the port; its ControllerStartup listens on 19876)
DEFAULT_CONTROLLER_PORT = 9878
#: DLedgerConfig's defaults, for a controller started without controllerDLegerGroup/SelfId
DEFAULT_GROUP, DEFAULT_SELF_ID = "default", "n0"


class ControllerService(service.MultiService):
    """The controller: log + leadership + manager, and as children the listener, the two scans and
    (several peers) the consensus.

    ``store``/``leadership`` default to the single-node FileControllerLog under
    ``controllerStorePath`` and SoleLeader.  Several peers pass a ``consensus`` instead (the etcd
    store's EtcdConsensus): its ``log`` and ``leadership``, started once the manager follows its
    changes and stopped with the service."""

    def __init__(self, config: ControllerConfig, reactor: Any = None, *, port: int | None = None,
                 bind: str = "127.0.0.1", store: ControllerLog | None = None,
                 leadership: Leadership | None = None, max_frame_length: int = 16 * 1024 * 1024,
                 idle_timeout: float = 120, store_path: str | None = None, consensus: Any = None,
                 max_connections: int = 10_000, max_header_length: int | None = 65536,
                 listen_with: Callable[[RemotingFactory], protocol.Factory] | None = None,
                 acl: AccessControl | None = None, refusals: Refusals | None = None,
                 budget: MemoryBudget | None = None, fds: FdBudget | None = None,
                 audit: Trail | None = None) -> None:
        super().__init__()
        reactor = owners_view(reactor)  # its timers on the monotonic clock, its seconds() the wall's (clocks.py)
        self.setName("controller")
        self.config = config
        self.reactor = reactor
        try:
            self_peer = config.self_peer()
            if consensus is None and store is None and leadership is None:  # the file log: a group of one
                config.refuse_lone_peers()
        except ControllerConfigError as exc:
            raise CannotStart(str(exc)) from None
        bind_address = bind if self_peer is None or port is not None else self_peer.host
        listen_port = port if port is not None else (self_peer.port if self_peer else DEFAULT_CONTROLLER_PORT)
        self.consensus = consensus
        if consensus is not None:
            store, leadership = consensus.log, consensus.leadership
        path = store_path or config["controllerStorePath"] or str(Path.home() / "controller" / "store")
        # appends written in a thread of the reactor's pool: the NameServer's lookups share the reactor
        self.file_log = FileControllerLog(path, reactor) if store is None else None
        self.store: ControllerLog = store if store is not None else self.file_log  # type: ignore[assignment]
        self.leadership: Leadership = leadership or SoleLeader()
        self.metrics = Metrics()
        self.controller_metrics = ControllerMetrics()
        self.notifier = Notifier(reactor, "notify broker role change", self.metrics.pushes, fds)
        refusals = refusals or Refusals()  # standing alone: its own
        self.manager = ControllerManager(
            config, self.store, self.leadership, reactor.seconds,
            group=config["controllerDLegerGroup"] or DEFAULT_GROUP, self_id=config["controllerDLegerSelfId"] or
            DEFAULT_SELF_ID, peers=config.peers, notifier=self.notifier,
            close_channel=self._close_channel, metrics=self.controller_metrics, refusals=refusals,
            steady=steady_seconds(reactor))
        table = CONTROLLER_TABLE if acl is None else replace(CONTROLLER_TABLE, refusal=acl_refusal_of(acl, refusals))
        self.dispatcher = Dispatcher(self.manager, self.metrics, count_requests=True, table=table)
        if budget is None:  # standing alone (controller/tap.py): its own root, with a budget of its own
            budget = MemoryBudget(8 * max_frame_length)
        if audit is None:  # standing alone: its own trail (the log lines; no status page counts or shows them)
            audit = Trail(CONTROLLER, reactor.seconds, acl, AuditTrail(RecentEvents(reactor.seconds, KeptHosts()),
                                                                           (CONTROLLER,)))
        # every state change a request makes is one audit event (audit.py), inside a NameServer
        # counted and shown by its trail (service.py wires it)
        self.dispatcher.observe(audit)
        self.factory = RemotingFactory(self.dispatcher, reactor, max_frame_length, idle_timeout, refusals, budget,
                                       max_connections, max_header_length, "controller", fds)
        self.listener = Listener("controller", listen_with(self.factory) if listen_with else self.factory, reactor,
                                 listen_port, bind_address,
                                 admission=Admission(fds, self.factory.refuse) if fds is not None else None)
        self.listener.setServiceParent(self)
        self._store_open = False
        # the scans, Twisted's TimerService (the first call at start): the manager keeps the
        # inactive-master scan from electing within its first interval as leader (in_first_heartbeat_grace)
        for work, key in ((self.manager.scan_not_active_broker, "scanNotActiveBrokerInterval"),
                          (self.manager.scan_inactive_master, "scanInactiveMasterInterval")):
            scan = ClockedTimerService(float(config[key]) / 1000, work, reactor)
            scan.setName(key)
            scan.setServiceParent(self)
        if consensus is not None:  # joins its group at start (once the manager follows it), leaves at stop
            consensus.setName("consensus")
            consensus.setServiceParent(self)
        self.ready: defer.Deferred[None] = defer.Deferred()

    def _close_channel(self, channel: Hashable) -> None:
        self.factory.close_channel(channel)  # type: ignore[arg-type]

    @property
    def address(self) -> str:
        return self.manager.address

    @property
    def port(self) -> Any:
        return self.listener.port

    def open_store(self) -> None:
        """Read the single-node log now (CannotStart naming the path when it is corrupt or unwritable)."""
        if self.file_log is not None and not self._store_open:
            try:
                self.file_log.open()
            except ControllerLogError as exc:
                log.critical("cannot start: {reason}", reason=str(exc))
                raise CannotStart(str(exc)) from None
            self._store_open = True

    def _bound(self) -> None:
        """The controller's address is the port as bound (--controller-port 0 picks one)."""
        host = self.listener.port.getHost()  # type: ignore[union-attr]
        self.manager.address = f"{host.host}:{host.port}"
        if not self.manager.peers:  # --controller-port: a group of one, as DLedger's defaults name it
            self.manager.peers = [ControllerPeer(self.manager.self_id, host.host, host.port)]
        if isinstance(self.leadership, SoleLeader):
            self.leadership.leader_address = self.manager.address

    def privilegedStartService(self) -> None:
        self.open_store()
        super().privilegedStartService()  # the listener binds
        self._bound()

    def startService(self) -> None:
        self.open_store()
        d = self.manager.start()  # follows the leadership before the consensus (a child) campaigns
        super().startService()  # the listener binds, if privilegedStartService did not; the scans; the consensus
        self._bound()
        if hasattr(self.reactor, "callWhenRunning"):  # SIGHUP a clean stop, as Java's (under twistd its parent is
            # the Application, not None; embedded, the NameServer's handler came first and this one does nothing)
            self.reactor.callWhenRunning(stop_on_hangup, underlying(self.reactor))

        def started(_: object) -> None:
            log.info("controller listening on {address} (group {group}, id {id}), store {store}",
                     address=self.manager.address, group=self.manager.group or "-", id=self.manager.self_id or "-",
                     store=getattr(self.file_log, "path", "external"))
            self.ready.callback(None)

        def failed(failure: Failure) -> None:
            log.critical("controller cannot start: {why}", why=failure.getErrorMessage())
            self.ready.errback(failure)

        d.addCallbacks(started, failed)

    def stopService(self) -> Any:
        for connection in list(self.factory.connections.values()):
            transport: Any = connection.transport
            transport.loseConnection()
        stopped = super().stopService()  # the consensus leaves its group, the scans stop, the listener closes
        if self.file_log is not None:
            closed = self.file_log.close()  # once the append being written is durable
            self._store_open = False
            return defer.gatherResults([defer.maybeDeferred(lambda: stopped), closed], consumeErrors=True)
        return stopped


def embedded_controller(namesrv_config: Any, reactor: Any, port: int | None = None,
                        bind: str | None = None, acl: AccessControl | None = None,
                        refusals: Refusals | None = None, budget: MemoryBudget | None = None,
                        listen_with: Callable[[RemotingFactory], protocol.Factory] | None = None,
                        fds: FdBudget | None = None, audit: Trail | None = None) -> ControllerService:
    """The controller inside the NameServer (Java's enableControllerInNamesrv, or
    ``--controller-port``).  Its keys come from the same -c file, its port follows the same
    ``tls.server.mode`` as the remoting port (Java's TlsSystemConfig is the JVM's); its store defaults to
    ``controller/`` beside kvConfigPath.  CannotStart names the key the controller cannot run with.
    With aclEnable its requests are under the NameServer's ACL (``acl``); its refusals are logged and
    counted with the NameServer's, and what its peers hold counts against the one memory budget; its
    audit events go into the NameServer's audit trail (``audit``: the root's Trail of the controller's codes).
    ``listen_with``: the NameServer's TLS wrapping, its keys read once (tls.listen_with)."""
    props: dict[str, Any] = dict(namesrv_config.extra)
    if "scanNotActiveBrokerInterval" in namesrv_config.file_keys:  # Java fills both configs from the file
        props["scanNotActiveBrokerInterval"] = namesrv_config["scanNotActiveBrokerInterval"]
    if namesrv_config.values.get("controllerType"):  # a NameServer key too (it picks the store)
        props["controllerType"] = namesrv_config.values["controllerType"]
    try:
        config = ControllerConfig.from_properties(props)
        self_peer = config.self_peer()
    except ControllerConfigError as exc:
        raise CannotStart(str(exc)) from None
    if port is None and self_peer is None:
        raise CannotStart("controllerDLegerPeers: Attribute value controllerDLegerPeers of ControllerConfig is null "
                          "or empty (with enableControllerInNamesrv=true, name this controller's "
                          "id-host:port there and its id in controllerDLegerSelfId, or give --controller-port)")
    store_path = config["controllerStorePath"] or str(Path(namesrv_config["kvConfigPath"]).parent / "controller")
    bind = bind or namesrv_config["bindAddress"]
    consensus = None
    if namesrv_config.values.get("controllerType") == "etcd":  # several peers agree through etcd
        consensus = _etcd_consensus({**namesrv_config.values, **props}, config, bind, port, reactor)
    return ControllerService(config, reactor, port=port, bind=bind, store_path=store_path,
                             max_frame_length=namesrv_config["frameMaxLength"],
                             idle_timeout=namesrv_config["serverChannelMaxIdleTimeSeconds"], consensus=consensus,
                             max_connections=namesrv_config["maxConnections"],
                             max_header_length=namesrv_config["headerMaxLength"],
                             listen_with=listen_with or tls.listen_with(namesrv_config),
                             acl=acl, refusals=refusals, budget=budget, fds=fds, audit=audit)


def _etcd_consensus(values: dict[str, Any], config: ControllerConfig, bind: str, port: int | None,
                    reactor: Any) -> Any:
    """The etcd store (controller/etcd.py) for this controller, whose leader key holds its address:
    that address must be known before listening (controllerDLegerPeers at SelfId, or a fixed
    --controller-port)."""
    self_peer = config.self_peer()
    host = self_peer.host if self_peer is not None and port is None else bind
    number = port if port is not None else (self_peer.port if self_peer is not None else None)
    if not number:
        raise CannotStart("controllerType=etcd: the controller's address is its identity among the peers; name "
                          "it in controllerDLegerPeers/controllerDLegerSelfId or give a fixed --controller-port")
    from .etcd import EtcdConsensus  # the etcd store, imported only when asked for

    return EtcdConsensus.from_config(values, f"{host}:{number}", reactor)
