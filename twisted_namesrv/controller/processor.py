"""The controller's handlers, one per RequestCode (Java's ControllerRequestProcessor), in one
table (CONTROLLER_TABLE) that the NameServer's Dispatcher runs (dispatch.py).

A handler reads the request's header and body, and returns the answer: at once for what needs no
turn (metadata, heartbeats, configuration), or a Deferred for what goes through the manager's
turn and the log.  A header or body that Java could not decode is a ``BadRequest``: the dispatcher
answers SYSTEM_ERROR naming the field, as Java answers the exception.  "Not the leader" is the
manager's answer (ControllerManager.submit), after the header is read, as in Java; ``refusal`` is
where a check before any handler goes (the ACL)."""

from __future__ import annotations

from collections.abc import Callable, Hashable

import msgspec
from twisted.internet import defer

from .. import properties
from ..context import Peer
from ..dispatch import HandlerTable
from ..refusals import Refusals, acl_refusal
from ..remoting import RemotingCommand, fastjson
from ..remoting.codes import V5_3_3
from ..remoting.values import NAMES_BODY_MAX, BadRequest, java_bool, small_body
from ..state.acl import AccessControl, controller_request_class
from ..state.config import control_characters, oversized
from . import bodies, headers
from .codes import ControllerRequestCode as Req
from .codes import ControllerResponseCode as Code
from .config import CONTROLLER_KEY_NAMES, UPDATABLE, ControllerConfigError
from .manager import ControllerManager
from .replicas import ControllerResult

Answer = RemotingCommand | defer.Deferred[RemotingCommand] | None
Handler = Callable[[ControllerManager, RemotingCommand, Peer], Answer]


def respond(request: RemotingCommand, result: ControllerResult) -> RemotingCommand:
    ext = None if result.header is None else bodies.ext_of(result.header)
    return RemotingCommand.response_to(request, result.code, result.remark, ext, result.body, version=V5_3_3)


def reply(request: RemotingCommand, code: int, remark: str | None = None, body: bytes | None = None,
          ext: dict[str, object] | None = None) -> RemotingCommand:
    return respond(request, ControllerResult(ext, code, remark, body))


def _answer(request: RemotingCommand,
            pending: defer.Deferred[ControllerResult | None]) -> defer.Deferred[RemotingCommand]:
    def answered(result: ControllerResult | None) -> RemotingCommand:
        if result is None:  # Java: createResponseCommand(null)
            return reply(request, Code.SYSTEM_ERROR, "not set any response code")
        return respond(request, result)

    return pending.addCallback(answered)


def _text(request: RemotingCommand, name: str, required: bool = False) -> str | None:
    return headers.text(request.ext, name, required)


def _required(request: RemotingCommand, name: str) -> str:
    return headers.required(request.ext, name)


def _long(request: RemotingCommand, name: str, bits: int = 64) -> int | None:
    return headers.long_field(request.ext, name, bits)


# -- the handlers ------------------------------------------------------------------------------

def alter_sync_state_set(manager: ControllerManager, request: RemotingCommand, peer: Peer) -> Answer:
    header = headers.AlterSyncStateSetRequestHeader.from_ext(request.ext)
    body = small_body(request.body, "CONTROLLER_ALTER_SYNC_STATE_SET")
    try:
        new_set, set_epoch = bodies.parse_sync_state_set(body)
    except ValueError as exc:
        raise BadRequest(f"CONTROLLER_ALTER_SYNC_STATE_SET: {exc}") from None
    return _answer(request, manager.submit(lambda: manager.replicas.alter_sync_state_set(
        str(header.brokerName), header.masterBrokerId, header.masterEpoch, new_set, set_epoch, manager.alive)))


def elect_master(manager: ControllerManager, request: RemotingCommand, peer: Peer) -> Answer:
    header = headers.ElectMasterRequestHeader.from_ext(request.ext)
    trigger = "admin" if header.designateElect else "broker"
    broker_id = -1 if header.brokerId is None else header.brokerId
    return _answer(request, manager.elect_master(header.clusterName, header.brokerName, broker_id,
                                                 header.designateElect, trigger))


def _within_limits(manager: ControllerManager, peer: Peer, what: str, cluster: str | None, broker_name: str | None,
                   broker_id: int | None, texts: tuple[str | None, ...],
                   then: Callable[[], ControllerResult]) -> Callable[[], ControllerResult]:
    """``then`` at its turn, unless the request would pass a limit of the tables (replicas.py:
    MAX_BROKER_SETS, MAX_BROKER_IDS, MAX_TEXT_LENGTH): then a refusal, logged and counted, and no event."""
    def supplier() -> ControllerResult:
        refused = manager.replicas.limit_refusal(cluster, broker_name, broker_id, texts)
        if refused is None:
            return then()
        reason, why = refused
        manager.refusals("controller", reason, peer.address, "{what} of broker set {broker} refused: {why}",
                         what=what, broker=str(broker_name)[:200], why=why)
        return ControllerResult({"clusterName": cluster, "brokerName": broker_name}).fail(
            Code.CONTROLLER_INVALID_REQUEST, f"{what} refused: {why}")
    return supplier


def register_broker(manager: ControllerManager, request: RemotingCommand, peer: Peer) -> Answer:
    header = headers.RegisterBrokerToControllerRequestHeader.from_ext(request.ext)
    return _answer(request, manager.submit(_within_limits(
        manager, peer, "registerBroker", header.clusterName, header.brokerName, header.brokerId,
        (header.brokerAddress,), lambda: manager.replicas.register_broker(
            header.clusterName, header.brokerName, header.brokerId, header.brokerAddress, manager.alive))))


def get_replica_info(manager: ControllerManager, request: RemotingCommand, peer: Peer) -> Answer:
    broker_name = _text(request, "brokerName")
    return _answer(request, manager.submit(lambda: manager.replicas.get_replica_info(broker_name), write=False))


def get_metadata_info(manager: ControllerManager, request: RemotingCommand, peer: Peer) -> Answer:
    return reply(request, Code.SUCCESS, ext=manager.metadata())


def broker_heartbeat(manager: ControllerManager, request: RemotingCommand, peer: Peer) -> Answer:
    if _long(request, "brokerId") is None:
        return reply(request, Code.CONTROLLER_INVALID_REQUEST, "Heart beat with empty brokerId")
    h = headers.BrokerHeartbeatRequestHeader.from_ext(request.ext)
    refused = manager.heartbeats.limit_refusal(h.clusterName, h.brokerName, h.brokerAddr, h.brokerId)
    if refused is not None:
        reason, why = refused
        manager.refusals("controller", reason, peer.address, "heartbeat of broker {broker} refused: {why}",
                         broker=h.brokerName[:200], why=why)
        return reply(request, Code.CONTROLLER_INVALID_REQUEST, f"heartbeat refused: {why}")
    first = manager.heartbeats.on_broker_heartbeat(
        h.clusterName, h.brokerName, h.brokerAddr, h.brokerId, h.heartbeatTimeoutMills, peer.channel, h.epoch,
        h.maxOffset, h.confirmOffset, h.electionPriority)
    if first:
        manager.log_new_broker(h.clusterName, h.brokerName, h.brokerId, h.brokerAddr)
    return reply(request, Code.SUCCESS, "Heart beat success")


#: GET_SYNC_STATE_DATA's body as Java's brokers and mqadmin write it (fastjson: standard JSON), read in
#: one pass that stops at its first value that is no name; anything else is read as fastjson reads it
_NAMES = msgspec.json.Decoder(list[str])


def get_sync_state_data(manager: ControllerManager, request: RemotingCommand, peer: Peer) -> Answer:
    names: list[object] = []
    if request.body:
        body = small_body(request.body, "CONTROLLER_GET_SYNC_STATE_DATA", NAMES_BODY_MAX) or b""
        try:  # a list of anything else was decoded whole first: 1 MiB of fastjson's bare keys, half a second
            decoded = _NAMES.decode(body)
        except msgspec.ValidationError:
            raise BadRequest("CONTROLLER_GET_SYNC_STATE_DATA: the body is not a JSON list of broker names") from None
        except msgspec.DecodeError:
            decoded = None
        try:
            decoded = fastjson.loads(body) if decoded is None else decoded
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadRequest(f"CONTROLLER_GET_SYNC_STATE_DATA: the body is not a JSON list of broker names: {exc}") \
                from None
        if not isinstance(decoded, list) or not all(isinstance(n, str) for n in decoded):
            raise BadRequest("CONTROLLER_GET_SYNC_STATE_DATA: the body is not a JSON list of broker names")
        names = decoded
    if not names:
        return reply(request, Code.SYSTEM_ERROR, "not set any response code")
    wanted = [str(n) for n in names]
    return _answer(request, manager.submit(lambda: manager.replicas.get_sync_state_data(wanted, manager.alive),
                                           write=False))


def update_controller_config(manager: ControllerManager, request: RemotingCommand, peer: Peer) -> Answer:
    if request.body is None:
        return reply(request, Code.SUCCESS)
    too_big = oversized(request.body)
    if too_big:
        manager.refusals("controller", "config_size", peer.address, "updateControllerConfig with {why}", why=too_big)
        return reply(request, Code.NO_PERMISSION, f"Can not update config: {too_big}.")
    try:  # as Java reads it: new String(body, UTF_8), malformed bytes U+FFFD, then the same checks
        props = properties.load(fastjson.java_utf8_decoded(bytes(request.body)))
    except ValueError as exc:
        return reply(request, Code.SYSTEM_ERROR, f"string2Properties error: {exc}")
    blocked = set(str(manager.config["configBlackList"]).split(";")) | {"configBlackList", "configStorePath",
                                                                       "rocketmqHome"}
    guarded = {k for k in props if k in CONTROLLER_KEY_NAMES and k not in UPDATABLE}
    refused = sorted(blocked & props.keys() | guarded)
    if refused:
        manager.refusals("controller", "config_key", peer.address,
                         "updateControllerConfig of keys in black list: {keys}", keys=", ".join(refused))
        return reply(request, Code.NO_PERMISSION, "Can not update config in black list.")
    controls = control_characters(props)
    if controls:
        manager.refusals("controller", "config_value", peer.address, "updateControllerConfig with {controls}",
                         controls=controls)
        return reply(request, Code.NO_PERMISSION, f"Can not update config: {controls}.")
    try:
        manager.config.update({k: v for k, v in props.items() if k in CONTROLLER_KEY_NAMES})
    except ControllerConfigError as exc:
        return reply(request, Code.SYSTEM_ERROR, str(exc))
    return reply(request, Code.SUCCESS)


def get_controller_config(manager: ControllerManager, request: RemotingCommand, peer: Peer) -> Answer:
    return reply(request, Code.SUCCESS, body=manager.config.properties_text().encode("utf-8"))


def clean_broker_data(manager: ControllerManager, request: RemotingCommand, peer: Peer) -> Answer:
    cluster = _text(request, "clusterName")
    broker_name = _required(request, "brokerName")
    ids = _text(request, "brokerControllerIdsToClean")
    living = java_bool(_text(request, "isCleanLivingBroker"))
    return _answer(request, manager.submit(lambda: manager.replicas.clean_broker_data(
        cluster, broker_name, ids, living, manager.alive)))


def get_next_broker_id(manager: ControllerManager, request: RemotingCommand, peer: Peer) -> Answer:
    cluster, broker_name = _text(request, "clusterName"), _text(request, "brokerName")
    return _answer(request, manager.submit(lambda: manager.replicas.get_next_broker_id(cluster, broker_name),
                                           write=False))


def apply_broker_id(manager: ControllerManager, request: RemotingCommand, peer: Peer) -> Answer:
    header = headers.ApplyBrokerIdRequestHeader.from_ext(request.ext)
    return _answer(request, manager.submit(_within_limits(
        manager, peer, "applyBrokerId", header.clusterName, header.brokerName, header.appliedBrokerId,
        (header.registerCheckCode,), lambda: manager.replicas.apply_broker_id(
            header.clusterName, header.brokerName, header.appliedBrokerId, header.registerCheckCode))))


HANDLERS: dict[int, Handler] = {
    Req.CONTROLLER_ALTER_SYNC_STATE_SET: alter_sync_state_set,
    Req.CONTROLLER_ELECT_MASTER: elect_master,
    Req.CONTROLLER_REGISTER_BROKER: register_broker,
    Req.CONTROLLER_GET_REPLICA_INFO: get_replica_info,
    Req.CONTROLLER_GET_METADATA_INFO: get_metadata_info,
    Req.BROKER_HEARTBEAT: broker_heartbeat,
    Req.CONTROLLER_GET_SYNC_STATE_DATA: get_sync_state_data,
    Req.UPDATE_CONTROLLER_CONFIG: update_controller_config,
    Req.GET_CONTROLLER_CONFIG: get_controller_config,
    Req.CLEAN_BROKER_DATA: clean_broker_data,
    Req.CONTROLLER_GET_NEXT_BROKER_ID: get_next_broker_id,
    Req.CONTROLLER_APPLY_BROKER_ID: apply_broker_id,
}


def refusal(manager: ControllerManager, request: RemotingCommand, peer: Peer) -> RemotingCommand | None:
    """What the controller refuses before any handler without ACL: nothing (``acl_refusal_of``)."""
    return None


def acl_refusal_of(acl: AccessControl, refusals: Refusals) -> Callable[[ControllerManager, RemotingCommand, Peer],
                                                                       RemotingCommand | None]:
    """The table's ``refusal`` with aclEnable: the NameServer's ACL by the controller's request
    classes (state/acl.py: brokers' own codes, operators' always by an admin), logged and counted."""
    def refused(manager: ControllerManager, request: RemotingCommand, peer: Peer) -> RemotingCommand | None:
        code = request.code
        denied = acl_refusal(acl, refusals, "controller", code, request.ext, request.body, peer.address,
                             controller_request_class(code, request.ext),
                             Req(code).name if code in Req._value2member_map_ else None)
        return None if denied is None else reply(request, Code.SYSTEM_ERROR, denied)
    return refused


def error_reply(manager: ControllerManager, request: RemotingCommand, code: int, remark: str) -> RemotingCommand:
    return reply(request, code, remark)


def channels_closed(manager: ControllerManager, closed: dict[Hashable, str]) -> None:
    """BrokerHousekeepingService: the brokers whose heartbeats came over them are inactive now."""
    for channel in closed:
        manager.on_channel_close(channel)


def counted(manager: ControllerManager, request: RemotingCommand, handled: bool, seconds: float) -> None:
    """rocketmq_controller_request_total/latency: refused and failed requests are "failed"."""
    manager.metrics.request(request.code, "success" if handled else "failed", seconds * 1e6)


CONTROLLER_TABLE = HandlerTable(HANDLERS, {}, refusal, error_reply, channels_closed,  # type: ignore[arg-type]
                                counted=counted, keeps_answers=False, subject="controller request",
                                listener="controller")
