"""The NameServer's handlers: one function per RequestCode, in one table (HANDLERS).

A handler takes the NameServer state, a request and its peer and returns the response command,
or an ``Answer``: the response with what the answer cache needs to keep it (a found route's topic
and variant), worked out once by the handler and passed on, never recomputed.  No I/O here except
through the state's callbacks; no handler keeps or drops cached answers (the cache subscribes to
the state's changes).  The dispatcher (dispatch.py) refuses, dispatches, encodes and keeps.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from . import properties
from .apart import Behind, NoRoom
from .audit import clipped
from .bodies.register import (
    HASHED_PIECE,
    RegisterBodyError,
    RegisterBrokerBody,
    RegistrationRefused,
    decode_register_body_steps,
    split_data_version,
    split_small,
)
from .bodies.register_header import RegisterBrokerHeader
from .bodies.route import (
    DataVersion,
    QueueData,
    cluster_info_bean,
    in_zone,
    kv_table_bean,
    topic_list_body,
)
from .cluster_info import ClusterInfoPieces
from .context import NamesrvState, Peer
from .escapes import clipped_text
from .refusals import acl_refusal
from .remoting import RemotingCommand, RequestCode, ResponseCode, SerializeType, fastjson
from .remoting.codes import V3_0_11, V4_9_4, code_name
from .remoting.crc import crc32_masked_steps
from .remoting.values import BadRequest, java_bool, parse_java_integer, small_body
from .state.config import ConfigError, control_characters, masked, oversized
from .state.kv import NAMESPACE_ORDER_TOPIC_CONFIG, KVLimitError
from .state.order_topics import order_topic_conf_problem
from .state.registration import (
    Memos,
    digests,
    plan_steps,
    registration_digest,
    request_of,
    split_registration_digest,
)
from .state.routes import (
    Channel,
    RegisterBrokerResult,
    Renewable,
    RouteData,
    SystemTopicListShown,
    has_unit_flag,
    has_unit_sub_flag,
)
from .state.store import Saved, StoreError
from .steps import Steps, run_steps

log = Logger()

ZONE_NAME = "__ZONE_NAME"
ZONE_MODE = "__ZONE_MODE"


@dataclass(slots=True)
class Answer:
    """A handler's response with what the answer cache needs to keep it: a found route's topic
    and variant (route_variant), None when the answer is not to be kept; ``handled``: False when
    the dispatcher refused the request or its handler failed (the controller counts those apart)."""

    response: RemotingCommand
    topic: str | None = None
    variant: Hashable = None
    handled: bool = True
    #: a registration the broker's same bytes may renew again (AnswerCache.keep_renewal)
    renewal: Renewable | None = None


Handler = Callable[[NamesrvState, RemotingCommand, Peer], RemotingCommand | Answer | defer.Deferred[RemotingCommand]]
SteppedHandler = Callable[[NamesrvState, RemotingCommand, Peer], Steps[RemotingCommand | Answer]]


# -- helpers shared by the handlers ------------------------------------------------------------

def respond(state: NamesrvState, request: RemotingCommand, code: int = ResponseCode.SUCCESS,
            remark: str | None = None, ext: dict[str, str | None] | None = None, body: bytes | None = None,
            normal: bool = True) -> RemotingCommand:
    """A response as each Java generation writes it: its version, and its header type (4.9.8
    answers a normal response in the request's type; error replies and 5.3.3 use JSON)."""
    profile = state.profile
    follow_request = normal and profile.reply_in_request_serialize_type
    serialize_type = request.serialize_type if follow_request else SerializeType.JSON
    return RemotingCommand.response_to(request, code, remark, ext, body, version=profile.mq_version,
                                       serialize_type=serialize_type)


def java_long(value: str | None, field_name: str) -> int:
    """An unboxed Long header field: missing or malformed ends as Java's NPE -> SYSTEM_ERROR."""
    number = parse_java_integer(value)
    if number is None:
        raise BadRequest(f"header field {field_name} is missing or not a long: {str(value)[:40]!r}")
    return number


def java_text(value: object) -> str:
    """String concatenation in Java: null reads as "null"."""
    return "null" if value is None else str(value)


def json_body(request: RemotingCommand) -> Any:
    """The body of a request decoded at once (QUERY_DATA_VERSION, REGISTER_TOPIC_IN_NAMESRV), at most
    BODY_AT_ONCE_MAX (values.small_body)."""
    body = small_body(request.body, f"request {request.code}") or b""
    try:
        return fastjson.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"body is not JSON: {exc}") from None


# -- KV config (100, 101, 102, 219) ---------------------------------------------------------

def put_kv_config(state: NamesrvState, request: RemotingCommand,
                  peer: Peer) -> RemotingCommand | defer.Deferred[RemotingCommand]:
    ext = request.ext
    namespace, key = ext.get("namespace"), ext.get("key")
    if namespace is None or key is None:
        return respond(state, request, ResponseCode.SYSTEM_ERROR, "namespace or key is null")
    if namespace == NAMESPACE_ORDER_TOPIC_CONFIG:  # a route's orderTopicConf, parsed by every producer
        problem = order_topic_conf_problem(key, ext.get("value"))
        if problem:  # nothing changed (Java stores any value)
            state.refusals("remoting", "order_topic_conf", peer.address,
                           "putKVConfig ORDER_TOPIC_CONFIG/{key} refused: {why}", key=clipped_text(key), why=problem)
            return respond(state, request, ResponseCode.NO_PERMISSION, f"putKVConfig refused: {problem}",
                           normal=False)
    answer, saved = _answered_once_saved(state, request, "putKVConfig")
    try:
        state.kv.put(namespace, key, ext.get("value"), saved)
    except KVLimitError as exc:  # nothing changed (Java has no limit)
        state.refusals("remoting", "max_kv_bytes", peer.address, "putKVConfig {namespace}/{key} refused: {why}",
                       namespace=namespace[:200], key=key[:200], why=str(exc))
        return respond(state, request, ResponseCode.SYSTEM_ERROR, f"putKVConfig refused: {exc}", normal=False)
    return answer


def _answered_once_saved(state: NamesrvState, request: RemotingCommand,
                         verb: str) -> tuple[defer.Deferred[RemotingCommand], Saved]:
    """A KV change's answer, given once the store says it is durable (the write may finish in a
    later turn: state/kv.py), and what the store tells: SUCCESS, or SYSTEM_ERROR when the save
    failed (logged and counted by the store; nothing changed)."""
    answer: defer.Deferred[RemotingCommand] = defer.Deferred()

    def saved(error: StoreError | None) -> None:
        answer.callback(respond(state, request) if error is None else
                        respond(state, request, ResponseCode.SYSTEM_ERROR, f"{verb} not applied: {error}"))
    return answer, saved


def get_kv_config(state: NamesrvState, request: RemotingCommand, peer: Peer) -> RemotingCommand:
    namespace, key = request.ext.get("namespace"), request.ext.get("key")
    value = state.kv.get(namespace, key)
    if value is None:
        return respond(state, request, ResponseCode.QUERY_NOT_FOUND,
                       f"No config item, Namespace: {java_text(namespace)} Key: {java_text(key)}", ext={})
    return respond(state, request, ext={"value": value})


def delete_kv_config(state: NamesrvState, request: RemotingCommand,
                     peer: Peer) -> defer.Deferred[RemotingCommand]:
    answer, saved = _answered_once_saved(state, request, "deleteKVConfig")
    state.kv.delete(request.ext.get("namespace"), request.ext.get("key"), saved)
    return answer


def get_kvlist_by_namespace(state: NamesrvState, request: RemotingCommand,
                            peer: Peer) -> RemotingCommand | defer.Deferred[RemotingCommand]:
    """A namespace's whole table (up to maxKvBytes: any peer may fill it): kept, else encoded in a
    thread (apart.py; its keys in Java's HashMap order: seconds of the reactor's time at 100k keys)."""
    namespace = request.ext.get("namespace")
    table = state.kv.get_kv_list(namespace)

    def not_found() -> RemotingCommand:
        remark = f"No config item, Namespace: {java_text(namespace)}"
        return respond(state, request, ResponseCode.QUERY_NOT_FOUND, remark)
    if table is None or namespace is None:
        return not_found()
    kept = state.answers.kv_list(namespace, table)
    if kept is not None:
        return respond(state, request, body=kept)

    def begin() -> Callable[[], tuple[dict[str, str] | None, bytes]]:
        now = state.kv.get_kv_list(namespace)  # the table as it is when the build begins (apart.py)
        return lambda: (now, b"" if now is None else fastjson.dumps_bytes(kv_table_bean(now)))

    def built(made: tuple[dict[str, str] | None, bytes]) -> RemotingCommand:
        made_of, body = made
        if made_of is None:  # deleted before the build began
            return not_found()
        if state.kv.get_kv_list(namespace) is made_of:
            state.answers.keep_kv_list(namespace, made_of, body)
        return respond(state, request, body=body)
    return _apart(state, request, peer, ("kvlist", namespace), begin, built)


# -- brokers (103, 104, 322, 904, 901) --------------------------------------------------------

def register_broker_steps(state: NamesrvState, request: RemotingCommand,
                          peer: Peer) -> Steps[RemotingCommand | Answer]:
    """REGISTER_BROKER. A broker's whole table is checked, decoded, compared with the queues and
    its new entries staged in steps (a big one takes tens of milliseconds), giving a plan
    (state/registration.py) that RouteInfoManager.apply_registration applies in the last step, as
    under Java's write lock: the tables change only there, so lookups meanwhile see the routes
    before it, and after it all of it (its entries are written into topicQueueTable afterwards,
    in steps of their own: state/settling.py).  A table past a limit (maxTopicsPerBroker as it is
    decoded, the tables' limits as it would apply) is refused whole (``registration_refused``)."""
    ext, version, body = request.ext, request.header.version, request.body  # (properties: read once)
    header = RegisterBrokerHeader.from_ext(ext)
    crc = header.bodyCrc32  # an unmasked CRC fails parseInt: no check
    if crc != 0 and (actual := (yield from crc32_masked_steps(body))) != crc:
        # Java warns at every one; a refusal here (any peer may send them in a loop): one warning a
        # host, every one counted
        state.refusals("remoting", "crc32", peer.address, "receive registerBroker request, crc32 not match "
                       "(bodyCrc32 {crc}, its body's {actual}), answered SYSTEM_ERROR", crc=crc, actual=actual)
        return respond(state, request, ResponseCode.SYSTEM_ERROR, "crc32 not match", ext={})
    split = None  # a JSON body's dataVersion and the digest of the rest: hashed once, for both digests
    if body and not header.compressed and version >= V3_0_11:
        split = yield from split_data_version(body)
    digest = None
    names = header.names  # a property: worked out once
    if names is not None and header.brokerId is not None:
        digest = yield from registration_digest(state.config.revision, version, ext, body, split)
        renewed = state.routes.renew_registration(header, peer.channel, digest)
        if renewed is not None:  # the last one applied, sent again: its table is held as it says
            return renewable_answer(state, request, header, names, digest, renewed)
    # the header read it by the same rule (parse_java_integer): only a missing or malformed one is read again
    broker_id = header.brokerId if header.brokerId is not None else java_long(header.brokerIdText, "brokerId")
    if names is None:
        # Java 5.3.3 stores nothing (NPE on the null key); say why instead of a bare 0
        return respond(state, request, ResponseCode.SYSTEM_ERROR,
                       f"register broker failed: header field {header.missing} is missing", ext={}, normal=False)
    cluster, addr, name = names
    routes = state.routes

    def decode(known: Memos | None) -> Steps[RegisterBrokerBody]:
        """The body decoded, in full unless ``known`` lets a part of it be skipped."""
        config = state.config.values  # the running values as the dict they are (no call a read)
        return decode_register_body_steps(body, header.compressed, version, config["inflateMaxLength"],
                                          () if known is None else digests(known), routes.reusable_pieces(known),
                                          state.budget, config["maxTopicsPerBroker"], split)

    def memo() -> Memos | None:
        """The bodies this broker's queues hold as they say, if a registration may skip one."""
        return routes.registration_memo(cluster, addr, name, broker_id, bool(header.enableActingMaster))

    known = memo()
    try:
        decoded = yield from decode(known)
        if (decoded.tableUnchanged or decoded.tableSkipped) and memo() is not known:
            decoded = run_steps(decode(None))  # its queues were changed meanwhile: the table applies in full
    except RegisterBodyError as exc:
        return respond(state, request, ResponseCode.SYSTEM_ERROR, str(exc), normal=False)
    except RegistrationRefused as refusal:
        return registration_refused(state, request, peer, refusal, names)
    registration = request_of(header, names, broker_id, decoded, peer.channel, version,
                              state.profile.per_broker_heartbeat_timeout, digest)
    plan = yield from plan_steps(registration, routes)
    topology = state.topology
    topology.origin = peer.address  # a new group it names counts against its host (state/topology.py)
    try:
        result = routes.apply_registration(plan)
    except RegistrationRefused as refusal:
        return registration_refused(state, request, peer, refusal, names)
    finally:
        topology.origin = None
    if result is None:
        return respond(state, request, ResponseCode.SYSTEM_ERROR, "register broker failed", ext={})
    return renewable_answer(state, request, header, names, digest, result)


#: how a REGISTER_BROKER's JSON header begins as a Java broker writes it (fastjson: its keys in
#: order, the code first): the frames the fused path (``register_fused``) is tried on
FUSED_HEAD = b'{"code":103,'
#: the keys of the header of the common shape, no more (a remark, say, goes the general way)
_FUSED_KEYS = frozenset({"code", "extFields", "flag", "language", "opaque", "serializeTypeCurrentRPC", "version"})
_STR_ONLY = frozenset({str})
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
#: the enum member itself, read once (Python 3.11 reads ``RequestCode.X`` through EnumType's
#: ``__getattr__`` hook: about 1,000 instructions, as much as several checks here); dispatch, which
#: tries and counts a registration's answer by it, imports it from here (its handler table)
REGISTER_BROKER = RequestCode.REGISTER_BROKER


class Fused(msgspec.Struct, frozen=True, gc=False):
    """A registration the fused path applied: the request decoded (the ``decode`` of the general
    path, only where an answer other than the master's spliced one needs it) and its answer."""

    request: RemotingCommand
    answer: Answer


def register_fused(state: NamesrvState, frame: bytes, peer: Peer) -> bytes | Fused | None:
    """REGISTER_BROKER's first registration of the common shape in one function: a small plain
    JSON frame (``FUSED_HEAD``) from a broker not live yet on a connection, its header of Java's
    usual keys (its ints in range, every extField a string), its names and brokerId sent, its body
    uncompressed, its bodyCrc32 as its bytes say, no filter server.  Its header is read once from
    the frame (no RemotingCommand or Header made for it), its body decoded once (hashed for its
    split and digest as the general path hashes it, and the frame for its renewal key), and
    the state applies it by the one rule (state/registration.py: ``plan_steps``,
    ``apply_registration``), as ``register_broker_steps`` asks it.  A master's answer is spliced
    from its kept pieces (``AnswerCache.keep_first_renewal``): the bytes ``respond`` encodes, the
    same kept for its renewal; any other is made the general way (``Fused``).  None, before
    anything changed, for any other frame: the general path answers it (a live broker's, a
    compressed body, a filter server, a CRC that does not match, a body that does not decode ...;
    a slave's answer or a refusal the fused path makes as that path does); its answers, tables,
    lines and events are the same either way (tests/test_fused_registration.py)."""
    header_length = int.from_bytes(frame[1:4], "big")
    end = 4 + header_length
    channel = peer.channel
    if frame[0] or end >= len(frame) or channel is None or state.acl is not None:
        return None
    try:
        obj = fastjson.loads(frame[4:end])
    except (UnicodeDecodeError, ValueError):
        return None
    if type(obj) is not dict or obj.keys() != _FUSED_KEYS or obj["language"] != "JAVA":
        return None
    ext, version, opaque, flag = obj["extFields"], obj["version"], obj["opaque"], obj["flag"]
    if (obj["code"] != REGISTER_BROKER or type(flag) is not int or flag  # (a bool flag: refused)
            or type(ext) is not dict or type(version) is not int
            or type(opaque) is not int or not _INT32_MIN <= opaque <= _INT32_MAX
            or not V3_0_11 <= version <= _INT32_MAX or not set(map(type, ext.values())) <= _STR_ONLY):
        return None
    header = RegisterBrokerHeader.from_ext(ext)
    names, broker_id = header.names, header.brokerId
    if names is None or broker_id is None or header.compressed:
        return None
    cluster, addr, name = names
    routes = state.routes
    if routes.brokerLiveTable.get(routes.live_key(cluster, addr)) is not None:
        return None  # live: renewed or its memos read the general way (RouteInfoManager.renew, registration_memo)
    body = frame[end:]
    crc = header.bodyCrc32
    if crc != 0 and zlib.crc32(body) & 0x7FFFFFFF != crc:
        return None
    return run_steps(_fused_steps(state, frame, peer, header, names, broker_id, body, version, opaque, ext))


def _fused_steps(state: NamesrvState, frame: bytes, peer: Peer, header: RegisterBrokerHeader,
                 names: tuple[str, str, str], broker_id: int, body: bytes, version: int, opaque: int,
                 ext: dict[str, str]) -> Steps[bytes | Fused | None]:
    """``register_fused`` past its header: one generator run once (a small body's steps take
    none), so each part's result comes back through ``yield from``, not a StopIteration caught."""
    config, routes, channel = state.config.values, state.routes, peer.channel
    try:
        whole = split_small(body)  # (small: at once, with its SHA-1, which its renewal key goes on from)
        split = whole.split if whole is not None else None
        if whole is None and len(body) > HASHED_PIECE:
            split = yield from split_data_version(body)
        if split is not None:  # (at once: no generator for it)
            digest = split_registration_digest(state.config.revision, version, ext, split)
        else:
            digest = yield from registration_digest(state.config.revision, version, ext, body, split)
        decoded = yield from decode_register_body_steps(body, False, version, config["inflateMaxLength"], (), None,
                                                        state.budget, config["maxTopicsPerBroker"], split)
    except (RegisterBodyError, RegistrationRefused):
        return None
    if decoded.filterServerList:
        return None
    registration = request_of(header, names, broker_id, decoded, channel, version,
                              state.profile.per_broker_heartbeat_timeout, digest)
    plan = yield from plan_steps(registration, routes)
    topology = state.topology
    topology.origin = peer.address  # as register_broker_steps
    try:
        result = routes.apply_registration(plan, just_made=True)  # (run at once: nothing ran since plan_steps)
    except RegistrationRefused as refusal:
        request = RemotingCommand.decode(frame, state.answers.headers)
        return Fused(request, Answer(registration_refused(state, request, peer, refusal, names)))
    finally:
        topology.origin = None
    if result is None:
        request = RemotingCommand.decode(frame, state.answers.headers)
        return Fused(request, Answer(respond(state, request, ResponseCode.SYSTEM_ERROR, "register broker failed",
                                             ext={})))
    renewal = Renewable(names, broker_id, header.enableActingMaster, header.zoneName, digest, result.shown)
    profile = state.profile
    if (result.haServerAddr or result.masterAddr or state.kv.get_kv_list(NAMESPACE_ORDER_TOPIC_CONFIG) is not None
            and (not profile.order_topic_reply_switch or config["returnOrderTopicConfigToBroker"])):
        request = RemotingCommand.decode(frame, state.answers.headers)
        answer = Answer(registration_answer(state, request, result))
        answer.renewal = renewal
        return Fused(request, answer)
    return state.answers.keep_first_renewal(frame, channel, opaque, profile.mq_version, renewal, whole)


def renewable_answer(state: NamesrvState, request: RemotingCommand, header: RegisterBrokerHeader,
                     names: tuple[str, str, str] | None, digest: bytes | None, result: RegisterBrokerResult) -> Answer:
    """A registration applied in full or renewed: its answer, with what renews the broker when the
    same bytes come again on its connection (the answer cache keeps it: ``Renewable``); ``names``
    the header's (worked out once by the caller)."""
    answer = Answer(registration_answer(state, request, result))
    if digest is not None and names is not None and header.brokerId is not None:
        answer.renewal = Renewable(names, header.brokerId, header.enableActingMaster, header.zoneName, digest,
                                   result.shown)
    return answer


def registration_answer(state: NamesrvState, request: RemotingCommand, result: RegisterBrokerResult) -> RemotingCommand:
    """A registration's answer: the master's addresses for a slave, and the order topics' KV
    table where the generation returns it (returnOrderTopicConfigToBroker)."""
    reply_body = None
    if not state.profile.order_topic_reply_switch or state.config.values["returnOrderTopicConfigToBroker"]:
        table = state.kv.get_kv_list(NAMESPACE_ORDER_TOPIC_CONFIG)
        reply_body = None if table is None else fastjson.dumps_bytes(kv_table_bean(table))
    if not (result.haServerAddr or result.masterAddr):  # a master's: nothing to show, nothing to order
        return respond(state, request, ext={}, body=reply_body)
    reply_ext = {"haServerAddr": result.haServerAddr, "masterAddr": result.masterAddr}
    return respond(state, request, ext=fastjson.java_hash_map({k: v for k, v in reply_ext.items() if v}),
                   body=reply_body)


def registration_refused(state: NamesrvState, request: RemotingCommand, peer: Peer, refusal: RegistrationRefused,
                         names: tuple[str, str, str]) -> RemotingCommand:
    """A registration a limit refused, nothing of it applied: one log line and one count
    (refusals.py: the limit's name as the reason), answered SYSTEM_ERROR with why, which a Java
    broker (4.9.8 and 5.x alike) logs as it logs any failed registration ("Failed to register
    current broker to name server ... CODE: 1 DESC: register broker refused: ...") and sends
    again at its next registration (30 s)."""
    cluster, addr, name = names
    state.refusals("remoting", refusal.reason, peer.address, "register broker {broker} ({addr}) of cluster "
                   "{cluster} refused: {why}", broker=name, addr=addr, cluster=cluster, why=str(refusal))
    return respond(state, request, ResponseCode.SYSTEM_ERROR, f"register broker refused: {refusal}", ext={},
                   normal=False)


def unregister_broker(state: NamesrvState, request: RemotingCommand, peer: Peer) -> RemotingCommand:
    header = RegisterBrokerHeader.from_ext(request.ext)  # the same four fields, read by the same rules
    if header.brokerId is None and not state.profile.unregister_by_address:
        raise BadRequest("java.lang.NullPointerException: header field brokerId is missing")
    topology = state.topology
    topology.origin = peer.address  # its page event counts against this peer's host (events.py)
    try:
        state.routes.unregister_broker(header.clusterName, header.brokerAddr, header.brokerName, header.brokerId)
    finally:
        topology.origin = None
    return respond(state, request)


def live_broker(state: NamesrvState, ext: Mapping[str, str | None]) -> tuple[str | None, str | None]:
    """The (clusterName, brokerAddr) a heartbeat names its broker by in the live table.  Java 5.3.3
    keys that table by both (BrokerAddrInfo, whose hashCode reads each one's length): a request
    missing either fails there with a NullPointerException, SYSTEM_ERROR, and changes nothing.
    Java 4.9.8 keys it by the address alone, in a HashMap, where a null finds nothing."""
    cluster, addr = ext.get("clusterName"), ext.get("brokerAddr")
    if state.profile.live_key_includes_cluster:
        for name, value in (("clusterName", cluster), ("brokerAddr", addr)):
            if value is None:
                raise BadRequest(f"java.lang.NullPointerException: header field {name} is missing")
    return cluster, addr


def query_data_version(state: NamesrvState, request: RemotingCommand, peer: Peer) -> RemotingCommand:
    if request.body is None and not state.profile.query_data_version_always_refreshes:
        raise BadRequest("java.lang.NullPointerException: QUERY_DATA_VERSION without a body")
    try:
        version = None if request.body is None else DataVersion.from_json(json_body(request))
    except (AttributeError, TypeError, OverflowError, ValueError) as exc:
        raise BadRequest(f"body is not a DataVersion: {exc}") from None
    cluster, addr = live_broker(state, request.ext)  # after the body, as Java decodes it first
    routes = state.routes
    changed = routes.is_broker_topic_config_changed(cluster, addr, version)
    if state.profile.query_data_version_always_refreshes or not changed:
        routes.update_broker_info_update_timestamp(cluster, addr)
    stored = routes.query_broker_topic_config(cluster, addr)
    body = None if stored is None else fastjson.dumps_bytes(stored.bean(state.profile.v5_bodies))
    return respond(state, request, ext={"changed": "true" if changed else "false"}, body=body)


def broker_heartbeat(state: NamesrvState, request: RemotingCommand, peer: Peer) -> RemotingCommand:
    state.routes.update_broker_info_update_timestamp(*live_broker(state, request.ext))
    return respond(state, request)


def get_broker_member_group(state: NamesrvState, request: RemotingCommand, peer: Peer) -> RemotingCommand:
    ext = request.ext
    addrs = state.routes.broker_member_group(ext.get("brokerName"))
    group = {"brokerAddrs": fastjson.java_hash_map(addrs), "brokerName": ext.get("brokerName"),
             "cluster": ext.get("clusterName")}
    # Java builds this reply with createResponseCommand(null) and never clears the remark.
    return respond(state, request, remark="not set any response code",
                   body=fastjson.dumps_bytes({"brokerMemberGroup": group}))


# -- routes (105, 106, 217) ------------------------------------------------------------------

def route_variant(state: NamesrvState, request: RemotingCommand) -> tuple[str | None, tuple, str | None]:
    """What a route answer depends on besides the route: (topic, variant, zone filter or None).
    The variant is (standard JSON?, orderTopicConf), or for a lookup filtered by zone (encoded
    with the plain encoder whatever the client asked: ZoneRouteRPCHook) (False, orderTopicConf,
    zone): a variant of the topic's kept route, dropped with the others by the same changes."""
    ext = request.ext
    topic = ext.get("topic")
    order_conf = state.kv.get(NAMESPACE_ORDER_TOPIC_CONFIG, topic) if state.config["orderMessageEnable"] else None
    zone = ext.get(ZONE_NAME) if state.profile.zone_filtered_routes and java_bool(ext.get(ZONE_MODE)) else None
    if zone and zone.strip():
        return topic, (False, order_conf, zone), zone
    standard = request.version >= V4_9_4 or java_bool(ext.get("acceptStandardJsonOnly"))
    return topic, (standard, order_conf), None


def waiting_for_service(state: NamesrvState) -> bool:
    config = state.config
    return (state.profile.wait_for_service and config["needWaitForService"]
            and state.uptime() < config["waitSecondsForService"])


def get_route_info_by_topic(state: NamesrvState, request: RemotingCommand, peer: Peer) -> RemotingCommand | Answer:
    """A found route, filtered by zone or not, is an Answer the cache may keep under its topic and
    variant: a zone's lookup repeated with no change between filtered and joined the whole route
    again, 164 ms at 20,000 groups, at any client's choice."""
    if waiting_for_service(state):
        return respond(state, request, ResponseCode.SYSTEM_ERROR, "name server not ready")
    topic, variant, zone = route_variant(state, request)
    body = state.answers.route(topic, variant)
    if body is None:
        body = encode_route(state, topic, variant[1], variant[0], zone)
        if body is None:
            remark = f"No topic route info in name server for the topic: {java_text(topic)}{state.profile.faq_suffix}"
            return respond(state, request, ResponseCode.TOPIC_NOT_EXIST, remark)
    response = respond(state, request, body=body)
    return response if topic is None else Answer(response, topic, variant)


def encode_route(state: NamesrvState, topic: str | None, order_conf: str | None, standard: bool,
                 zone: str | None) -> bytes | None:
    """The route body (None: no route), filtered by ``zone`` when not None: patched from what the
    answer cache keeps by group (zone_routes.py) when it may, else worked out whole."""
    if zone is not None and topic is not None and state.answers.keeps_zone_routes():
        return state.answers.zone_route_body(topic, zone, order_conf, state.profile.v5_bodies)
    route = state.routes.pickup_topic_route_data(topic)
    if route is None:
        return None
    if zone is not None:
        route = filter_by_zone(route, zone)
        standard = False  # ZoneRouteRPCHook re-encodes with the plain encoder
    return state.answers.route_body(route, order_conf, state.profile.v5_bodies, standard)


def filter_by_zone(route: RouteData, zone: str) -> RouteData:
    """ZoneRouteRPCHook: keep brokers without a master or in the requested zone."""
    kept = [b for b in route.brokerDatas if in_zone(b, zone)]
    names = {b.brokerName for b in kept}
    addrs = {a for b in kept for a in b.brokerAddrs.values()}
    return RouteData([q for q in route.queueDatas if q.brokerName in names], kept,
                     {a: s for a, s in route.filterServerTable.items() if a in addrs},
                     route.topicQueueMappingByBroker)


def get_broker_cluster_info(state: NamesrvState, request: RemotingCommand, peer: Peer) -> RemotingCommand:
    """Joined of kept pieces (cluster_info.py): encoded whole, it held the reactor for about a second
    at 20,000 groups after every change of one group."""
    routes, v5, concurrent = state.routes, state.profile.v5_bodies, state.profile.concurrent_tables

    def build() -> bytes:
        return fastjson.dumps_bytes(cluster_info_bean(routes.brokerAddrTable, routes.clusterAddrTable, v5, concurrent))

    def joined(pieces: ClusterInfoPieces) -> bytes:
        return pieces.body(routes.brokerAddrTable, routes.clusterAddrTable, v5, concurrent)

    return respond(state, request, body=state.answers.cluster_info(RequestCode.GET_BROKER_CLUSTER_INFO, build, joined))


def register_topic_in_namesrv(state: NamesrvState, request: RemotingCommand, peer: Peer) -> RemotingCommand:
    """Always 0, as Java; without a topic nothing is stored (5.3.3: NPE on the null key)."""
    if request.body and request.ext.get("topic") is not None:
        try:
            listed = json_body(request).get("queueDatas") or []
        except AttributeError as exc:
            raise BadRequest(f"body is not a TopicRouteData: {exc}") from None
        try:
            state.routes.check_register_topic_count(len(listed))  # before a Python step an entry
            queues = [QueueData.from_json(q) for q in listed]
        except (AttributeError, TypeError, KeyError, OverflowError, ValueError) as exc:
            raise BadRequest(f"body is not a TopicRouteData: {exc}") from None
        except RegistrationRefused as refusal:
            state.refusals("remoting", refusal.reason, peer.address, "register topic {topic} refused: {why}",
                           topic=str(request.ext.get("topic"))[:200], why=str(refusal))
            return respond(state, request, ResponseCode.SYSTEM_ERROR, f"register topic refused: {refusal}",
                           normal=False)
        try:
            state.routes.register_topic(request.ext.get("topic"), queues)
        except RegistrationRefused as refusal:  # past a limit of the tables: nothing stored (Java has none)
            state.refusals("remoting", refusal.reason, peer.address, "register topic {topic} refused: {why}",
                           topic=str(request.ext.get("topic"))[:200], why=str(refusal))
            return respond(state, request, ResponseCode.SYSTEM_ERROR, f"register topic refused: {refusal}",
                           normal=False)
    return respond(state, request)


# -- administration (205, 327, 216) ----------------------------------------------------------

def wipe_write_perm_of_broker(state: NamesrvState, request: RemotingCommand, peer: Peer) -> RemotingCommand:
    count = state.routes.wipe_write_perm_of_broker(request.ext.get("brokerName"))
    if state.request_line(peer.address):  # Java's line, held to the events' budget (any peer may loop it)
        log.info("wipe write perm of broker[{broker}], client: {peer}, {count}",
                 broker=request.ext.get("brokerName"), peer=peer.address, count=count)
    return respond(state, request, ext={"wipeTopicCount": str(count)})


def add_write_perm_of_broker(state: NamesrvState, request: RemotingCommand, peer: Peer) -> RemotingCommand:
    count = state.routes.add_write_perm_of_broker(request.ext.get("brokerName"))
    if state.request_line(peer.address):  # Java's line, held to the events' budget (any peer may loop it)
        log.info("add write perm of broker[{broker}], client: {peer}, {count}",
                 broker=request.ext.get("brokerName"), peer=peer.address, count=count)
    return respond(state, request, ext={"addTopicCount": str(count)})


def delete_topic_in_namesrv(state: NamesrvState, request: RemotingCommand, peer: Peer) -> RemotingCommand:
    state.routes.delete_topic(request.ext.get("topic"), request.ext.get("clusterName"))
    return respond(state, request)


# -- the remembered topology (ours: 90001) -----------------------------------------------------

def retire_broker_group(state: NamesrvState, request: RemotingCommand, peer: Peer) -> RemotingCommand:
    """RETIRE_BROKER_GROUP: forget a cluster (no ``brokerName``), a broker group, or one member
    id of it (``brokerId``) that the topology remembers (state/topology.py), so that it is no
    longer expected.  Only what has left the routes: a registered group answers INVALID_PARAMETER
    (stop its brokers first, or they come back at their next heartbeat anyway).  The change is
    saved before the answer; a save that fails puts the memory back and answers SYSTEM_ERROR."""
    ext = request.ext
    cluster, broker = ext.get("clusterName") or None, ext.get("brokerName") or None
    broker_id = parse_java_integer(ext.get("brokerId"), 32)
    topology, save = state.topology, state.save_topology
    if save is None:
        return respond(state, request, ResponseCode.SYSTEM_ERROR, "this NameServer keeps no topology file")
    if cluster is None or (ext.get("brokerId") and (broker_id is None or broker is None)):
        return respond(state, request, ResponseCode.INVALID_PARAMETER,
                       "clusterName is required; brokerId, if given, is a number and needs brokerName")
    registered = _still_registered(state, cluster, broker, broker_id)
    if registered:
        return respond(state, request, ResponseCode.INVALID_PARAMETER,
                       f"still registered: {registered}; stop those brokers first (a registered broker is not retired)")
    before = topology.copy()
    forgotten = topology.retire(cluster, broker, broker_id)
    if not forgotten:
        what = cluster if broker is None else f"{cluster}/{broker}" + ("" if broker_id is None else f" id {broker_id}")
        return respond(state, request, ResponseCode.QUERY_NOT_FOUND, f"{what} is not remembered")
    try:
        save()
    except StoreError as exc:
        topology.restore(before)
        return respond(state, request, ResponseCode.SYSTEM_ERROR, f"not retired: {exc}")
    names = ", ".join(f"{c}/{b}" + ("" if i is None else f" id {i}") for c, b, i in forgotten)
    log.info("retired {names}: no longer expected, client: {peer}", names=names, peer=peer.address)
    return respond(state, request, remark=f"retired {names}", ext={"retired": names})


def _still_registered(state: NamesrvState, cluster: str, broker: str | None, broker_id: int | None) -> str:
    """What of the target is in the routes now (empty: nothing)."""
    routes = state.routes
    if broker is None:
        return ", ".join(f"{cluster}/{name}" for name in routes.clusterAddrTable.get(cluster, ()))
    group = routes.brokerAddrTable.get(broker)
    if group is None or group.cluster != cluster:
        return ""
    if broker_id is None:
        return f"{cluster}/{broker}"
    return f"{cluster}/{broker} id {broker_id}" if broker_id in group.brokerAddrs else ""


# -- topic lists (206, 224, 304, 311, 312, 313) ------------------------------------------------

def _list_disabled(state: NamesrvState, switch: str) -> bool:
    return state.profile.topic_list_gates and not state.config[switch]


TopicList = RemotingCommand | defer.Deferred[RemotingCommand]


def _apart(state: NamesrvState, request: RemotingCommand, peer: Peer, key: Hashable, begin: Callable[[], Any],
           built: Callable[[Any], RemotingCommand]) -> defer.Deferred[RemotingCommand]:
    """``built(what state.build_apart(key, begin) makes)``; an ask the memory budget has no room
    to wait (apart.py: NoRoom) is refused (``memory_budget``: a line, a count) and answered
    SYSTEM_ERROR."""
    def no_room(failure: Failure) -> RemotingCommand:
        failure.trap(NoRoom)
        state.refusals("remoting", "memory_budget", peer.address, "{code} refused: {why}",
                       code=code_name(request.code), why=str(failure.value))
        return respond(state, request, ResponseCode.SYSTEM_ERROR, f"server busy: {failure.value}")
    made: defer.Deferred[RemotingCommand] = state.build_apart(key, begin).addCallbacks(built, no_room)
    return made


def _topic_list(state: NamesrvState, request: RemotingCommand, peer: Peer, switch: str, key: Hashable,
                pick: Callable[[list[str]], list[str]] | None = None, one_cluster: bool = False) -> TopicList:
    """A topic list: kept under ``key``, else built apart (apart.py: a thread; a million topics
    take seconds to order and encode) from the topics as they are when the build begins,
    ``pick``ed there, and kept if no topic changed meanwhile (``one_cluster``'s within a bound
    in bytes: AnswerCache.keep_topics)."""
    if _list_disabled(state, switch):
        return respond(state, request, ResponseCode.SYSTEM_ERROR, "disable")
    kept = state.answers.kept_topics(key)
    if kept is not None:
        return respond(state, request, body=kept)

    def begin() -> Callable[[], tuple[int, bytes]]:
        generation, topics, concurrent = state.answers.topic_generation, state.routes.all_topics(), \
            state.profile.concurrent_tables

        def build() -> tuple[int, bytes]:  # in the thread
            return generation, topic_list_body(topics if pick is None else pick(topics), None, concurrent)
        return build

    def built(made: tuple[int, bytes]) -> RemotingCommand:
        generation, body = made
        state.answers.keep_topics(key, body, generation, one_cluster)
        return respond(state, request, body=body)
    # a cluster's list waits behind the others: peers make clusters by the thousand (apart.py)
    return _apart(state, request, peer, Behind(key) if one_cluster else key, begin, built)


def get_all_topic_list(state: NamesrvState, request: RemotingCommand, peer: Peer) -> TopicList:
    return _topic_list(state, request, peer, "enableAllTopicList", RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)


def get_topics_by_cluster(state: NamesrvState, request: RemotingCommand, peer: Peer) -> TopicList:
    cluster = request.ext.get("cluster")
    if cluster not in state.routes.clusterAddrTable and not _list_disabled(state, "enableTopicList"):
        return respond(state, request, body=topic_list_body([], None, state.profile.concurrent_tables))  # kept: none
    return _topic_list(state, request, peer, "enableTopicList", (RequestCode.GET_TOPICS_BY_CLUSTER, cluster),
                       lambda topics: state.routes.topics_by_cluster(cluster, topics), one_cluster=True)


def get_system_topic_list(state: NamesrvState, request: RemotingCommand, peer: Peer) -> RemotingCommand:
    """Kept until a change reaches what it shows (AnswerCache.system_topics: the cluster and group
    names, one group's address): built for every ask, it hashed and ordered every name in the
    reactor, 1 s of CPU an ask at 20,000 groups named in 512 characters, for any peer that asked in
    a loop; kept until any group changed, a peer's registration and an ask in a loop did the same."""

    def build() -> tuple[bytes, SystemTopicListShown]:
        topics, addr, shown = state.routes.system_topic_list_shown()
        return topic_list_body(topics, addr, state.profile.concurrent_tables), shown

    return respond(state, request, body=state.answers.system_topics(build))


def get_unit_topic_list(state: NamesrvState, request: RemotingCommand, peer: Peer) -> TopicList:
    return _topic_list(state, request, peer, "enableTopicList", RequestCode.GET_UNIT_TOPIC_LIST,
                       lambda topics: state.routes.unit_topics(has_unit_flag, topics))


def get_has_unit_sub_topic_list(state: NamesrvState, request: RemotingCommand, peer: Peer) -> TopicList:
    return _topic_list(state, request, peer, "enableTopicList", RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST,
                       lambda topics: state.routes.unit_topics(has_unit_sub_flag, topics))


def get_has_unit_sub_ununit_topic_list(state: NamesrvState, request: RemotingCommand, peer: Peer) -> TopicList:
    return _topic_list(state, request, peer, "enableTopicList", RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST,
                       lambda topics: state.routes.unit_topics(
                           lambda flag: not has_unit_flag(flag) and has_unit_sub_flag(flag), topics))


# -- configuration (318, 319) ----------------------------------------------------------------

def update_namesrv_config(state: NamesrvState, request: RemotingCommand,
                          peer: Peer) -> RemotingCommand | defer.Deferred[RemotingCommand]:
    if not request.body:
        return respond(state, request)
    too_big = oversized(request.body)
    if too_big:
        state.refusals("remoting", "config_size", peer.address, "updateNamesrvConfig with {why}", why=too_big)
        return respond(state, request, ResponseCode.NO_PERMISSION, f"Can not update config: {too_big}.")
    try:  # as Java reads it: new String(body, UTF_8), malformed bytes U+FFFD, then the same checks
        props = properties.load(fastjson.java_utf8_decoded(bytes(request.body)))
    except ValueError:
        return respond(state, request, ResponseCode.SYSTEM_ERROR, "string2Properties error")
    blocked = sorted(set(props) & state.config.blocked_keys())
    if blocked:
        state.refusals("remoting", "config_key", peer.address, "updateNamesrvConfig of keys in black list: {keys}",
                       keys=", ".join(blocked))
        return respond(state, request, ResponseCode.NO_PERMISSION, "Can not update config in black list.")
    controls = control_characters(props)
    if controls:
        state.refusals("remoting", "config_value", peer.address, "updateNamesrvConfig with {controls}",
                       controls=controls)
        return respond(state, request, ResponseCode.NO_PERMISSION, f"Can not update config: {controls}.")
    try:
        state.config.apply({k: v for k, v in props.items() if k in state.config.values or k in state.config.extra})
    except ConfigError as exc:
        return respond(state, request, ResponseCode.SYSTEM_ERROR, str(exc))
    answer: defer.Deferred[RemotingCommand] = defer.Deferred()

    def saved(error: StoreError | None) -> None:
        state.config.saved(error)
        written = state.request_line(peer.address)  # Java's line, held to the events' budget (any peer may loop it)
        if error is not None:  # Java's way: applied, the failed save logged (and here counted by the store)
            if written:
                log.warn("updateNamesrvConfig from {peer}: {props} applied in memory only, until the restart: "
                         "{error}", peer=peer.address, props=clipped(masked(props)), error=str(error))
            answer.callback(respond(state, request, remark=f"applied in memory only, until the restart: {error}"))
            return
        # clipped as the audit event is: a body of 64 KiB of keys, any peer's without ACL, was a 50 KB line
        if written:
            log.info("updateNamesrvConfig from {peer}: {props}", peer=peer.address, props=clipped(masked(props)))
        answer.callback(respond(state, request))
    state.save_config(saved)  # off the reactor thread: any peer may send it (state/store.py's SavesOfNewest)
    return answer


def get_namesrv_config(state: NamesrvState, request: RemotingCommand, peer: Peer) -> RemotingCommand:
    return respond(state, request, body=fastjson.java_utf8(state.config.properties_text()))


# -- refusals and failures: what the dispatcher answers instead of a handler ------------------

def checks_peer(state: NamesrvState, code: int) -> bool:
    """Whether the ACL checks requests of ``code``: then who sends one (the peer's address, the
    accounts as last reloaded) decides, and the same bytes may be refused next time."""
    return state.acl is not None and state.acl.guards(code, None)


def refusal(state: NamesrvState, request: RemotingCommand, peer: Peer) -> RemotingCommand | None:
    """The answer to a request the ACL refuses (as a Java broker answers an AclException), logged
    and counted as a refusal (refusals.py)."""
    if state.acl is None:  # (no ACL, the usual case: nothing of the request is read)
        return None
    denied = acl_refusal(state.acl, state.refusals, "remoting", request.code, request.ext, request.body,
                         peer.address)
    if denied is None:
        return None
    return respond(state, request, ResponseCode.SYSTEM_ERROR, denied, normal=False)


def serves(state: NamesrvState, code: int) -> bool:
    """4.9.8 knows none of the 5.x codes: they are unknown codes there."""
    return code not in V5_REQUEST_CODES or state.profile.v5_request_codes


def error_reply(state: NamesrvState, request: RemotingCommand, code: int, remark: str) -> RemotingCommand:
    """A refusal or failure, as each Java generation writes an error (JSON header)."""
    return respond(state, request, code, remark, normal=False)


def channels_closed(state: NamesrvState, closed: dict[Channel, str]) -> None:
    """BrokerHousekeepingService: the brokers registered over the closed channels go with them."""
    state.routes.on_channels_destroy(closed)


# -- the table ---------------------------------------------------------------------------------

HANDLERS: dict[int, Handler] = {
    RequestCode.PUT_KV_CONFIG: put_kv_config,
    RequestCode.GET_KV_CONFIG: get_kv_config,
    RequestCode.DELETE_KV_CONFIG: delete_kv_config,
    RequestCode.UNREGISTER_BROKER: unregister_broker,
    RequestCode.GET_ROUTEINFO_BY_TOPIC: get_route_info_by_topic,
    RequestCode.GET_BROKER_CLUSTER_INFO: get_broker_cluster_info,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: wipe_write_perm_of_broker,
    RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: get_all_topic_list,
    RequestCode.DELETE_TOPIC_IN_NAMESRV: delete_topic_in_namesrv,
    RequestCode.REGISTER_TOPIC_IN_NAMESRV: register_topic_in_namesrv,
    RequestCode.GET_KVLIST_BY_NAMESPACE: get_kvlist_by_namespace,
    RequestCode.GET_TOPICS_BY_CLUSTER: get_topics_by_cluster,
    RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: get_system_topic_list,
    RequestCode.GET_UNIT_TOPIC_LIST: get_unit_topic_list,
    RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST: get_has_unit_sub_topic_list,
    RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: get_has_unit_sub_ununit_topic_list,
    RequestCode.UPDATE_NAMESRV_CONFIG: update_namesrv_config,
    RequestCode.GET_NAMESRV_CONFIG: get_namesrv_config,
    RequestCode.QUERY_DATA_VERSION: query_data_version,
    RequestCode.ADD_WRITE_PERM_OF_BROKER: add_write_perm_of_broker,
    RequestCode.GET_BROKER_MEMBER_GROUP: get_broker_member_group,
    RequestCode.BROKER_HEARTBEAT: broker_heartbeat,
    RequestCode.RETIRE_BROKER_GROUP: retire_broker_group,
}


#: handlers whose work grows with the request (a broker's whole table), written in steps: the
#: dispatcher always takes their steps, across reactor turns when the request is big, else straight through
HANDLERS_IN_STEPS: dict[int, SteppedHandler] = {
    RequestCode.REGISTER_BROKER: register_broker_steps,
}
#: every code with a handler, in one go or in steps
CODES = frozenset(HANDLERS) | frozenset(HANDLERS_IN_STEPS)

V5_REQUEST_CODES = frozenset({RequestCode.REGISTER_TOPIC_IN_NAMESRV, RequestCode.GET_BROKER_MEMBER_GROUP,
                              RequestCode.BROKER_HEARTBEAT})
