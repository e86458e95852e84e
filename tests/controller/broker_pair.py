"""A controller-mode broker double: what a 5.3.3 broker with ``enableControllerMode=true`` says
to the controller (BrokerOuterAPI, ReplicasManager) and to the NameServer.

It extends the interop tests' BrokerDouble (listening port, REGISTER_BROKER to the NameServer)
with the controller conversation: 1005 metadata, 1012/1013 next and apply broker id, 1003
register, 1002 elect when nobody is master, 904 heartbeats (oneway), 1001 alter sync-state set
as master, and the NOTIFY_BROKER_ROLE_CHANGED (1008) the controller pushes to its listen port.
A new master re-registers with the NameServer as brokerId 0, as a real broker does."""

from __future__ import annotations

from twisted.internet import defer

from tests.interop.broker_double import BrokerDouble
from tests.support import connect
from twisted_namesrv.controller.codes import ControllerRequestCode as Req
from twisted_namesrv.remoting import RemotingCommand
from twisted_namesrv.remoting.codes import V5_3_3


class ControllerModeBroker(BrokerDouble):
    def __init__(self, reactor, broker_name: str = "broker-ctl", cluster: str = "CtlCluster") -> None:
        # two topics: 5.3.3 refuses a first registration that carries a single one
        super().__init__(reactor, broker_name, cluster, topics={"CtlTopic": 4, "TBW102": 8}, version=V5_3_3,
                         broker_id=-1)
        self.controller_id: int | None = None  # the id the broker keeps on disk
        self.link = None  # controller connection
        self.opaque = 100
        self.master_id: int | None = None
        self.master_epoch = 0
        self.sync_state_set: list[int] = []
        self.sync_state_set_epoch = 0
        self.pushes: list[RemotingCommand] = []
        self.role_changed: defer.Deferred | None = None
        #: what its heartbeats announce (a real broker beats every second; the double beats when told)
        self.heartbeat_timeout_ms = 10_000
        #: connections to the other controllers of a group, heartbeats only (ReplicasManager beats every one)
        self.heartbeat_links: list = []

    @property
    def is_master(self) -> bool:
        return self.master_id is not None and self.master_id == self.controller_id

    def call(self, code: int, ext: dict | None = None, body: bytes | None = None) -> defer.Deferred:
        self.opaque += 1
        return self.link.call(RemotingCommand.request(code, ext or {}, body, opaque=self.opaque, version=V5_3_3))

    def heartbeat(self, timeout_ms: int | None = None, link=None) -> None:
        self.opaque += 1
        timeout_ms = self.heartbeat_timeout_ms if timeout_ms is None else timeout_ms
        ext = {"clusterName": self.cluster, "brokerName": self.broker_name, "brokerAddr": self.addr,
               "brokerId": str(self.controller_id), "heartbeatTimeoutMills": str(timeout_ms), "epoch": str(
                   self.master_epoch), "maxOffset": "0", "confirmOffset": "0", "electionPriority": "0"}
        request = RemotingCommand.request(Req.BROKER_HEARTBEAT, ext, opaque=self.opaque, version=V5_3_3, oneway=True)
        (link or self.link).send(request.encode())

    @defer.inlineCallbacks
    def heartbeat_also_to(self, controller_port: int):
        """Heartbeat a follower controller too, on a connection of its own, as a 5.3.3 broker
        heartbeats every controller it knows: a follower that becomes leader knows who is alive."""
        link = yield connect(controller_port)
        self.heartbeat_links.append(link)
        self.heartbeat(link=link)

    @defer.inlineCallbacks
    def start_in_controller_mode(self, namesrv_port: int, controller_port: int):
        """Listen, get (or keep) a broker id, register, elect if there is no master, heartbeat,
        then register with the NameServer (brokerId 0 as master)."""
        self.port = self.reactor.listenTCP(0, self, interface="127.0.0.1")
        self.listen_port = self.port.getHost().port
        self.link = yield connect(controller_port)
        meta = yield self.call(Req.CONTROLLER_GET_METADATA_INFO)
        assert meta.ext["isLeader"] == "true", meta.header
        if self.controller_id is None:
            ids = {"clusterName": self.cluster, "brokerName": self.broker_name}
            answer = yield self.call(Req.CONTROLLER_GET_NEXT_BROKER_ID, ids)
            wanted = int(answer.ext["nextBrokerId"])
            check = f"{self.addr};{int(self.reactor.seconds() * 1000)}"
            applied = yield self.call(Req.CONTROLLER_APPLY_BROKER_ID, {**ids, "appliedBrokerId": str(wanted),
                                                                       "registerCheckCode": check})
            assert applied.code == 0, applied.header
            self.controller_id = wanted
        registered = yield self.call(Req.CONTROLLER_REGISTER_BROKER, {
            "clusterName": self.cluster, "brokerName": self.broker_name, "brokerId": str(self.controller_id),
            "brokerAddress": self.addr})
        assert registered.code == 0, registered.header
        self.heartbeat()
        if "masterBrokerId" in registered.ext:
            self._take(registered.ext)
        else:
            elected = yield self.call(Req.CONTROLLER_ELECT_MASTER, {
                "clusterName": self.cluster, "brokerName": self.broker_name, "brokerId": str(self.controller_id),
                "designateElect": "false"})
            assert elected.code in (0, 2011), elected.header
            self._take(elected.ext)
        yield self.register_as_role(namesrv_port)

    @defer.inlineCallbacks
    def follow(self, controller_port: int):
        """A new controller leader (the old one's process died): as a broker's metadata refresh
        finds it, connect to it and heartbeat there, so its liveness (and the closing of this
        connection) is the new leader's to watch."""
        if self.link is not None:
            self.link.transport.loseConnection()
        self.link = yield connect(controller_port)
        meta = yield self.call(Req.CONTROLLER_GET_METADATA_INFO)
        assert meta.ext["isLeader"] == "true", meta.header
        self.heartbeat()

    def _take(self, ext: dict) -> None:
        self.master_id = int(ext["masterBrokerId"])
        self.master_epoch = int(ext["masterEpoch"])
        self.sync_state_set_epoch = int(ext["syncStateSetEpoch"])

    def register_as_role(self, namesrv_port: int) -> defer.Deferred:
        self.broker_id = 0 if self.is_master else self.controller_id
        return self.register(namesrv_port)

    def alter_sync_state_set(self, ids: list[int], epoch: int | None = None) -> defer.Deferred:
        body = (f'{{"syncStateSet":{ids},"syncStateSetEpoch":'
                f'{self.sync_state_set_epoch if epoch is None else epoch}}}').replace(" ", "").encode()
        return self.call(Req.CONTROLLER_ALTER_SYNC_STATE_SET, {
            "brokerName": self.broker_name, "masterBrokerId": str(self.controller_id),
            "masterEpoch": str(self.master_epoch)}, body)

    def answer(self, request: RemotingCommand) -> RemotingCommand:
        if request.code == Req.NOTIFY_BROKER_ROLE_CHANGED:
            self.pushes.append(request)
            self._take(request.ext)
            waiter, self.role_changed = self.role_changed, None
            if waiter is not None:
                waiter.callback(request)
        return super().answer(request)

    @defer.inlineCallbacks
    def kill(self):
        """kill -9: every connection reset, the port closed."""
        for connection in (self.link, self.namesrv_link, *self.heartbeat_links):
            if connection is not None:
                connection.transport.abortConnection()
                yield connection.closed
        self.link = self.namesrv_link = None
        self.heartbeat_links = []
        for connection in list(self.connections):
            connection.transport.abortConnection()
        if self.port is not None:
            port, self.port = self.port, None
            yield port.stopListening()
