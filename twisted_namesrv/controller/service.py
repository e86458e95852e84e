"""ControllerService: the controller's remoting listener, its scans and its pushes to brokers.

The listener is the server's own ``RemotingProtocol``/``RemotingFactory`` (framing, limits,
idle timeouts, back-pressure, answers in request order) with ``ControllerDispatcher`` in place
of the NameServer's dispatcher.  It is a child of NamesrvService (``enableControllerInNamesrv``
or ``--controller-port``) or stands alone (``twistd namesrv-controller``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Hashable
from pathlib import Path
from time import perf_counter
from typing import Any

from twisted.application import service
from twisted.internet import defer, protocol, task
from twisted.internet.error import CannotListenError
from twisted.logger import Logger
from twisted.python.failure import Failure

from .. import CannotStart
from ..budget import MemoryBudget
from ..context import Peer
from ..dispatch import Later, answer_frame_by_frame
from ..metrics import Metrics
from ..refusals import Refusals, acl_refusal
from ..remoting import RemotingCommand
from ..server import RemotingFactory
from ..state.acl import AccessControl, controller_request_class
from ..tls import listening_factory
from .codes import ControllerRequestCode as Req
from .codes import ControllerResponseCode as Code
from .config import ControllerConfig, ControllerConfigError
from .config import Peer as ControllerPeer
from .log import ControllerLog, ControllerLogError, FileControllerLog, Leadership, SoleLeader
from .manager import ControllerManager
from .metrics import ControllerMetrics
from .processor import HANDLERS, BadRequest, reply

log = Logger()
#: without controllerDLegerPeers or --port (Java's peers name the port; its ControllerStartup listens on 19876)
DEFAULT_CONTROLLER_PORT = 9878
#: DLedgerConfig's defaults, for a controller started without controllerDLegerGroup/SelfId
DEFAULT_GROUP, DEFAULT_SELF_ID = "default", "n0"


class ControllerDispatcher:
    """What RemotingProtocol asks of a dispatcher: ``answer`` a read's frames, ``channel_closed``,
    ``metrics`` (connections, rejections) and ``count_requests``.  Its answers wait for the
    controller log (a Deferred), so it answers frame by frame (``handle``) rather than through a
    HandlerTable, whose handlers answer at once or in steps."""

    count_requests = True

    def __init__(self, manager: ControllerManager, metrics: Metrics, acl: AccessControl | None = None,
                 refusals: Refusals | None = None) -> None:
        self.manager = manager
        self.metrics = metrics
        self.acl = acl  # the NameServer's, with aclEnable: the controller's port is under it too
        self.refusals = refusals or Refusals()

    def answer(self, frames: list[bytes], peer: Peer, out: list[bytes]) -> Later | None:
        return answer_frame_by_frame(self.handle, frames, peer, out)

    def handle(self, frame: bytes, peer: Peer) -> bytes | None | defer.Deferred[bytes | None]:
        request = RemotingCommand.decode(frame)  # RemotingDecodeError: the protocol closes the channel
        if request.is_response:
            return None  # brokers' answers to our oneway pushes: nothing waits for them
        begun = perf_counter()
        denied = acl_refusal(self.acl, self.refusals, "controller", request.code, request.ext, request.body,
                             peer.address, controller_request_class(request.code, request.ext),
                             Req(request.code).name if request.code in Req._value2member_map_ else None)
        if denied is not None:  # as the NameServer's port answers an AclException
            return self._encoded(request, reply(request, Code.SYSTEM_ERROR, denied), begun, "failed")
        handler = HANDLERS.get(request.code)
        if handler is None:
            return self._encoded(request, reply(request, Code.REQUEST_CODE_NOT_SUPPORTED,
                                                f" request type {request.code} not supported"), begun, "failed")
        try:
            answer = handler(self.manager, request, peer)
        except Exception as exc:
            return self._encoded(request, self._failed(request, peer, exc), begun, "failed")
        if isinstance(answer, defer.Deferred):
            done: list[bytes | None] = []

            def encoded(response: RemotingCommand) -> bytes | None:
                frame = self._encoded(request, response, begun, "success")
                done.append(frame)
                return frame

            def failed(failure: Failure) -> bytes | None:
                frame = self._encoded(request, self._failed(request, peer, failure.value), begun, "failed")
                done.append(frame)
                return frame

            frames: defer.Deferred[bytes | None] = answer.addCallbacks(encoded, failed)
            if done:  # answered in this turn (the file log): no Deferred, so pipelined requests do not nest
                return done[0]
            outer: defer.Deferred[bytes | None] = defer.Deferred()  # cancelling it (peer gone) leaves the turn alone
            frames.addCallbacks(outer.callback, outer.errback)
            return outer
        return self._encoded(request, answer, begun, "success")

    def _encoded(self, request: RemotingCommand, response: RemotingCommand | None, begun: float,
                 status: str) -> bytes | None:
        self.manager.metrics.request(request.code, status, (perf_counter() - begun) * 1e6)
        if response is None or request.is_oneway:
            return None
        return response.encode()

    def _failed(self, request: RemotingCommand, peer: Peer, exc: BaseException) -> RemotingCommand:
        if isinstance(exc, BadRequest):
            log.warn("controller request {code} from {peer} refused: {why}", code=request.code, peer=peer.address,
                     why=str(exc))
            return reply(request, Code.SYSTEM_ERROR, str(exc))
        log.failure("controller request {code} from {peer} failed", Failure(exc), code=request.code,
                    peer=peer.address)
        return reply(request, Code.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")

    def channel_closed(self, channel: Hashable, reason: str = "connection closed") -> None:
        self.manager.on_channel_close(channel)


class BrokerNotifier:
    """Pushes a frame (NOTIFY_BROKER_ROLE_CHANGED, oneway) to a broker's listen port on a
    connection of its own, as Java's NotifyService does through its remoting client."""

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor
        self.sent = 0
        self.failed = 0

    def __call__(self, address: str, frame: bytes) -> None:
        host, _, port = address.rpartition(":")
        try:
            number = int(port)
        except ValueError:
            log.warn("cannot notify broker {addr}: not host:port", addr=address)
            return
        d = protocol.ClientCreator(self.reactor, protocol.Protocol).connectTCP(host, number, timeout=3)

        def send(proto: Any) -> None:
            proto.transport.write(frame)
            proto.transport.loseConnection()
            self.sent += 1

        def failed(failure: Failure) -> None:
            self.failed += 1
            log.warn("notify broker {addr} of its role failed: {why}", addr=address, why=failure.getErrorMessage())

        d.addCallbacks(send, failed)


class ControllerService(service.MultiService):
    """The controller: log + leadership + manager + listener + scans.

    ``store``/``leadership`` default to the single-node FileControllerLog under
    ``controllerStorePath`` and SoleLeader.  Several peers pass a ``consensus`` instead (the etcd
    store's EtcdConsensus): its ``log`` and ``leadership``, started once the manager follows its
    changes and stopped with the service."""

    def __init__(self, config: ControllerConfig, reactor: Any = None, *, port: int | None = None,
                 bind: str = "127.0.0.1", store: ControllerLog | None = None,
                 leadership: Leadership | None = None, max_frame_length: int = 16 * 1024 * 1024,
                 idle_timeout: float = 120, store_path: str | None = None, consensus: Any = None,
                 max_connections: int = 10_000, max_header_length: int | None = 65536,
                 acl: AccessControl | None = None, refusals: Refusals | None = None,
                 budget: MemoryBudget | None = None) -> None:
        super().__init__()
        if reactor is None:
            from twisted.internet import reactor as default_reactor
            reactor = default_reactor
        self.setName("controller")
        self.config = config
        self.reactor = reactor
        try:
            self_peer = config.self_peer()
        except ControllerConfigError as exc:
            raise CannotStart(str(exc)) from None
        self.bind_address = bind if self_peer is None or port is not None else self_peer.host
        self.listen_port = port if port is not None else (self_peer.port if self_peer else DEFAULT_CONTROLLER_PORT)
        self.consensus = consensus
        if consensus is not None:
            store, leadership = consensus.log, consensus.leadership
        path = store_path or config["controllerStorePath"] or str(Path.home() / "controller" / "store")
        self.file_log = FileControllerLog(path) if store is None else None
        self.store: ControllerLog = store if store is not None else self.file_log  # type: ignore[assignment]
        self.leadership: Leadership = leadership or SoleLeader()
        self.metrics = Metrics(clock=reactor.seconds)
        self.controller_metrics = ControllerMetrics()
        self.notifier = BrokerNotifier(reactor)
        self.manager = ControllerManager(
            config, self.store, self.leadership, reactor.seconds,
            group=config["controllerDLegerGroup"] or DEFAULT_GROUP, self_id=config["controllerDLegerSelfId"] or
            DEFAULT_SELF_ID, peers=config.peers, notifier=self.notifier,
            close_channel=self._close_channel, metrics=self.controller_metrics)
        self.dispatcher = ControllerDispatcher(self.manager, self.metrics, acl, refusals)
        self.factory = RemotingFactory(self.dispatcher, reactor, max_frame_length,  # type: ignore[arg-type]
                                       idle_timeout, max_connections, max_header_length, self.dispatcher.refusals,
                                       budget, "controller")
        #: what the port listens with: the factory, or TLS over it (tls.listening_factory)
        self.listening: protocol.Factory = self.factory
        self.port: Any = None
        self._scans = [self._looping(self.manager.scan_not_active_broker, "scanNotActiveBrokerInterval"),
                       self._looping(self.manager.scan_inactive_master, "scanInactiveMasterInterval")]
        self.ready: defer.Deferred[None] = defer.Deferred()

    def _looping(self, work: Callable[[], None], key: str) -> tuple[task.LoopingCall, str]:
        call = task.LoopingCall(work)
        call.clock = self.reactor
        return call, key

    def _close_channel(self, channel: Hashable) -> None:
        self.factory.close_channel(channel)  # type: ignore[arg-type]

    @property
    def address(self) -> str:
        return self.manager.address

    def open_store(self) -> None:
        """Read the single-node log now (CannotStart naming the path when it is corrupt or unwritable)."""
        if self.file_log is not None and self.file_log._fd is None:
            try:
                self.file_log.open()
            except ControllerLogError as exc:
                log.critical("cannot start: {reason}", reason=str(exc))
                raise CannotStart(str(exc)) from None

    def bind(self) -> None:
        if self.port is not None:
            return
        try:
            self.port = self.reactor.listenTCP(self.listen_port, self.listening, interface=self.bind_address)
        except CannotListenError as exc:
            cause = exc.socketError.strerror if isinstance(exc.socketError, OSError) else str(exc.socketError)
            reason = f"cannot listen on {self.bind_address}:{self.listen_port} (controller): {cause}"
            log.critical("cannot start: {reason}", reason=reason)
            raise CannotStart(reason) from None
        host = self.port.getHost()
        self.manager.address = f"{host.host}:{host.port}"
        if not self.manager.peers:  # --controller-port: a group of one, as DLedger's defaults name it
            self.manager.peers = [ControllerPeer(self.manager.self_id, host.host, host.port)]
        if isinstance(self.leadership, SoleLeader):
            self.leadership.leader_address = self.manager.address

    def privilegedStartService(self) -> None:
        self.open_store()
        self.bind()
        super().privilegedStartService()

    def startService(self) -> None:
        self.open_store()
        self.bind()
        super().startService()
        d = self.manager.start()
        if self.consensus is not None:  # campaign once the manager follows the leadership
            self.consensus.start().addErrback(
                lambda failure: log.error("controller consensus: {why}", why=failure.getErrorMessage()))

        def started(_: object) -> None:
            for call, key in self._scans:
                call.start(max(0.1, float(self.config[key]) / 1000), now=False)
            log.info("controller listening on {address} (group {group}, id {id}), store {store}",
                     address=self.manager.address, group=self.manager.group or "-", id=self.manager.self_id or "-",
                     store=getattr(self.file_log, "path", "external"))
            self.ready.callback(None)

        def failed(failure: Failure) -> None:
            log.critical("controller cannot start: {why}", why=failure.getErrorMessage())
            self.ready.errback(failure)

        d.addCallbacks(started, failed)

    def stopService(self) -> Any:
        for call, _ in self._scans:
            if call.running:
                call.stop()
        for connection in list(self.factory.connections.values()):
            transport: Any = connection.transport
            transport.loseConnection()
        port, self.port = self.port, None
        super().stopService()
        if self.file_log is not None:
            self.file_log.close()
        stopping = [port.stopListening() if port is not None else None,
                    self.consensus.stop() if self.consensus is not None else None]
        return defer.gatherResults([d for d in stopping if isinstance(d, defer.Deferred)], consumeErrors=True)


def embedded_controller(namesrv_config: Any, reactor: Any, port: int | None = None,
                        bind: str | None = None, acl: AccessControl | None = None,
                        refusals: Refusals | None = None, budget: MemoryBudget | None = None) -> ControllerService:
    """The controller inside the NameServer (Java's enableControllerInNamesrv, or
    ``--controller-port``).  Its keys come from the same -c file; its store defaults to
    ``controller/`` beside kvConfigPath.  CannotStart names the key the controller cannot run with.
    Its port is under the NameServer's rules: ``tls.server.mode`` (as Java's controller follows
    TlsSystemConfig), the ACL (``acl``), the refusals' log and counts, the memory budget."""
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
    controller = ControllerService(config, reactor, port=port, bind=bind, store_path=store_path,
                                   max_frame_length=namesrv_config["frameMaxLength"],
                                   idle_timeout=namesrv_config["serverChannelMaxIdleTimeSeconds"],
                                   consensus=consensus, max_connections=namesrv_config["maxConnections"],
                                   max_header_length=namesrv_config["headerMaxLength"], acl=acl, refusals=refusals,
                                   budget=budget)
    controller.listening = listening_factory(namesrv_config, controller.factory)  # a bad TLS setup fails here
    return controller


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
    etcd = importlib.import_module(".etcd", __package__)  # the etcd store, only when asked for
    return etcd.EtcdConsensus.from_config(values, f"{host}:{number}", reactor)
