"""A connection's calls to a 5.x controller -> ``controller/`` rows and the notes the fail-over story needs.

Every header and body is read by the server's own codec (twisted_namesrv.controller.headers and
.bodies): what the server would make of a request, and what it writes in an answer, read back.
Only answered SUCCESS are facts: an answer is the controller's view at the time it was captured
(its master, masterEpoch, syncStateSet and syncStateSetEpoch for a broker group). A body cut
short, not JSON or not of the layout, a header field Java could not parse, a request of a version
before 5.0 or past the last known one, or an answer whose request was not captured is a counted
``undecodable`` note (CONTROLLER_UNDECODABLE), never a fact.

Notes go to the task's tally (model/tally.add) as (group, key, count, first, last, worst):

- CONTROLLER_VIEW: (server, broker name, masterBrokerId, masterAddress, masterEpoch, syncStateSet,
  syncStateSetEpoch, code name) -> the answers saying it (first, last: when they were captured);
  a field the answer does not carry is None.
- CONTROLLER_EVENT: (server, broker name, what, cluster, broker id, broker address, response code,
  epoch, set, set epoch): CONTROLLER_ELECT_MASTER, CONTROLLER_ALTER_SYNC_STATE_SET, register and
  apply-broker-id, as asked and answered.
- CONTROLLER_HEARTBEAT: (server, cluster, broker name, broker id, broker address, connection) -> its
  heartbeats there (worst: its longest silence, in seconds).
- CONTROLLER_CLOSED: (server, cluster, broker name, broker id, broker address, connection, how) -> when
  the connection its heartbeats came over closed (the controller takes it as inactive at once).
- CONTROLLER_BROKER_EPOCH: (server, broker name, broker id, broker address, epoch) -> the heartbeats
  carrying that masterEpoch: a broker knows an epoch only once the controller elected it.
- CONTROLLER_NOTICE: (the controller's host, the broker endpoint told, masterBrokerId, masterAddress,
  masterEpoch, syncStateSet, syncStateSetEpoch) -> NOTIFY_BROKER_ROLE_CHANGED, the controller's own
  notice of an election to a broker's port (captured only where the broker's port is: its client
  port is ephemeral, so the controller is known by its host).
- CONTROLLER_UNDECODABLE: (server, code name, why) -> how many.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Iterable, Iterator
from typing import Any

from spark_analysis.capture.conversation import CapturedCommand
from spark_analysis.capture.reassembly import Connection
from twisted_namesrv.controller import bodies, headers
from twisted_namesrv.controller.codes import ControllerRequestCode as Req
from twisted_namesrv.remoting.codes import V5_0_0, VERSION_NAMES
from twisted_namesrv.remoting.values import BadRequest

CONTROLLER, CONTROLLER_NOTE = "controller", "controller_note"
CONTROLLER_VIEW, CONTROLLER_EVENT = "controller_view", "controller_event"
CONTROLLER_HEARTBEAT, CONTROLLER_CLOSED = "controller_heartbeat", "controller_closed"
CONTROLLER_UNDECODABLE, CONTROLLER_BROKER_EPOCH = "controller_undecodable", "controller_broker_epoch"
CONTROLLER_NOTICE = "controller_notice"
#: the codes a controller is asked (NOTIFY_BROKER_ROLE_CHANGED, 1008, is its request to a broker)
ASKED = frozenset(Req) - {Req.NOTIFY_BROKER_ROLE_CHANGED, Req.BROKER_HEARTBEAT}
#: BROKER_HEARTBEAT goes to NameServers too: a controller's only on a connection carrying ASKED codes
HEARTBEAT, NOTICE = Req.BROKER_HEARTBEAT, Req.NOTIFY_BROKER_ROLE_CHANGED
_CONTROLLER_CODES = frozenset(int(code) for code in (*ASKED, NOTICE))
_KIND_CODE = operator.attrgetter("kind.code")
_HIGHER_VERSION = len(VERSION_NAMES) - 1
NO_REQUEST = "answer without its request"  # (a request never answered is the calls' own finding: unanswered)

_NAMES = {int(code): code.name for code in Req}
Row = tuple[Any, ...]
Note = tuple[str, tuple[Any, ...], int, float, float, Any]


def code_name(code: int) -> str:
    """A controller code's Java name (RequestCode), or the number."""
    return _NAMES.get(code, str(code))


class Undecodable(ValueError):
    """Why a call says nothing: the words of the note."""


def is_controller_connection(requests: Iterable[CapturedCommand]) -> bool:
    """Whether any request is one a controller is asked (its codes as ints: a member of an enum read
    off its class and compared cost ~0.35 us, for each request of every connection)."""
    return not _CONTROLLER_CODES.isdisjoint(map(_KIND_CODE, requests))


def controller_rows(conn_id: str, connection: Connection, pairs: list[tuple[CapturedCommand, CapturedCommand | None]],
                    orphans: list[CapturedCommand]) -> Iterator[tuple[str, Row | Note]]:
    """CONTROLLER rows (one per call, one per broker group an answer tells of) and CONTROLLER_NOTE
    notes for one connection's (request, answer) pairs, in time order; ``orphans``: the answers
    that paired with no request."""
    server = connection.server
    heartbeats: dict[tuple[Any, ...], list[float]] = {}
    conn_id_key = f"{connection.client}@{connection.opened_ts:.6f}"
    for request, answer in pairs:
        if request.code not in ASKED and request.code not in (HEARTBEAT, NOTICE):
            continue
        command = request.command
        try:
            facts = list(_facts(request, answer))
        except (Undecodable, ValueError) as exc:
            why = str(exc) if isinstance(exc, Undecodable | BadRequest) else _why(exc)
            yield CONTROLLER_NOTE, (CONTROLLER_UNDECODABLE, (server, code_name(command.code), why), 1, request.ts,
                                    request.ts, None)
            yield CONTROLLER, _row(conn_id, connection, request, answer, {}, why)
            continue
        for fact in facts or [{}]:
            yield CONTROLLER, _row(conn_id, connection, request, answer, fact, None)
            yield from _notes(server, conn_id_key, request, answer, fact, heartbeats)
    for key, times in heartbeats.items():
        silence = max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0)
        yield CONTROLLER_NOTE, (CONTROLLER_HEARTBEAT, key, len(times), times[0], times[-1], round(silence, 6))
        if connection.closed_ts is not None:
            how = f"{connection.close_kind} from {connection.first_close_by}"
            yield CONTROLLER_NOTE, (CONTROLLER_CLOSED, (*key, how), 1, connection.closed_ts, connection.closed_ts, None)
    for answer in orphans:
        yield CONTROLLER_NOTE, (CONTROLLER_UNDECODABLE, (server, "?", NO_REQUEST), 1, answer.ts, answer.ts, None)


def _why(exc: ValueError) -> str:
    """A body's fault in words: cut short (JSON ending inside a string, object or array), not
    JSON, or not of the layout."""
    if isinstance(exc, json.JSONDecodeError):
        return "body truncated" if _cut_short(exc.doc) else "body not JSON"
    if isinstance(exc, UnicodeDecodeError):
        return "body not JSON"
    return f"not the layout: {str(exc)[:80]}"


def _cut_short(text: str) -> bool:
    """Whether JSON text ends inside a string or with an object or array still open."""
    depth, quoted, escaped = 0, False, False
    for char in text:
        if quoted:
            escaped, quoted = (False, True) if escaped else (char == "\\", char != '"')
        elif char == '"':
            quoted = True
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
    return quoted or depth > 0


def _facts(request: CapturedCommand, answer: CapturedCommand | None) -> Iterator[dict[str, Any]]:
    """What one call says, by the server's codec: the request's fields, and where answered
    SUCCESS, the controller's view (one per broker group for GET_SYNC_STATE_DATA)."""
    command = request.command
    if not V5_0_0 <= command.version < _HIGHER_VERSION:
        raise Undecodable(f"unknown version {command.version}")
    code, ext = command.code, command.ext
    fact: dict[str, Any]
    ok = answer is not None and answer.command.code == 0
    reply = answer.command if answer is not None else None
    if code == NOTICE:
        ids, _ = bodies.parse_sync_state_set(_body(command))
        yield _master(headers.MasterHeader.from_ext(ext)) | {"sync_state_set": ids}
    elif code == HEARTBEAT:
        h = headers.BrokerHeartbeatRequestHeader.from_ext(ext)
        yield {"cluster": h.clusterName, "broker_name": h.brokerName, "broker_id": h.brokerId,
               "broker_addr": h.brokerAddr, "broker_epoch": h.epoch}
    elif code == Req.CONTROLLER_APPLY_BROKER_ID:
        a = headers.ApplyBrokerIdRequestHeader.from_ext(ext)
        yield {"cluster": a.clusterName, "broker_name": a.brokerName, "broker_id": a.appliedBrokerId,
               "broker_addr": a.brokerAddress}
    elif code == Req.CONTROLLER_REGISTER_BROKER:
        r = headers.RegisterBrokerToControllerRequestHeader.from_ext(ext)
        fact = {"cluster": r.clusterName, "broker_name": r.brokerName, "broker_id": r.brokerId,
                "broker_addr": r.brokerAddress}
        if ok and reply is not None:
            fact |= _master_and_set(reply)
        yield fact
    elif code == Req.CONTROLLER_ELECT_MASTER:
        e = headers.ElectMasterRequestHeader.from_ext(ext)
        fact = {"cluster": e.clusterName, "broker_name": e.brokerName, "broker_id": e.brokerId}
        if ok and reply is not None:
            ids, members = bodies.parse_elect_master_body(_body(reply))
            master = headers.MasterHeader.from_ext(reply.ext)
            fact |= _master(master) | {"sync_state_set": ids, "members": members}
        yield fact
    elif code == Req.CONTROLLER_ALTER_SYNC_STATE_SET:
        s = headers.AlterSyncStateSetRequestHeader.from_ext(ext)
        asked, _ = bodies.parse_sync_state_set(_body(command))
        fact = {"broker_name": s.brokerName, "master_broker_id": s.masterBrokerId, "master_epoch": s.masterEpoch,
                "asked_set": asked}
        if ok and reply is not None:
            new_epoch = headers.new_sync_state_set_epoch(reply.ext)
            if new_epoch is None:
                raise Undecodable("not the layout: no newSyncStateSetEpoch")
            fact |= {"sync_state_set": asked, "sync_state_set_epoch": new_epoch}
        yield fact
    elif code == Req.CONTROLLER_GET_REPLICA_INFO:
        fact = {"broker_name": headers.text(ext, "brokerName")}
        if ok and reply is not None:
            fact |= _master_and_set(reply)
        yield fact
    elif code == Req.CONTROLLER_GET_SYNC_STATE_DATA and ok and reply is not None:
        for name, info in sorted(bodies.parse_broker_replicas_info(_body(reply)).items()):
            members = {r.brokerId: r.brokerAddress for r in (*info.inSyncReplicas, *info.notInSyncReplicas)
                       if r.brokerAddress}
            in_sync = frozenset(r.brokerId for r in info.inSyncReplicas)
            yield {"broker_name": name, "master_broker_id": info.masterBrokerId, "master_addr": info.masterAddress,
                   "master_epoch": info.masterEpoch, "sync_state_set": in_sync,
                   "sync_state_set_epoch": info.syncStateSetEpoch, "members": members}


def _body(command: Any) -> bytes | None:
    return None if command.body is None else bytes(command.body)


def _master_and_set(reply: Any) -> dict[str, Any]:
    """The master named by an answer's header and the syncStateSet (with its epoch) in its body:
    what CONTROLLER_REGISTER_BROKER and GET_REPLICA_INFO both answer."""
    ids, epoch = bodies.parse_sync_state_set(_body(reply))
    return _master(headers.MasterHeader.from_ext(reply.ext)) | {"sync_state_set": ids, "sync_state_set_epoch": epoch}


def _master(header: headers.MasterHeader) -> dict[str, Any]:
    return {"master_broker_id": header.masterBrokerId, "master_addr": header.masterAddress,
            "master_epoch": header.masterEpoch, "sync_state_set_epoch": header.syncStateSetEpoch}


def _row(conn_id: str, connection: Connection, request: CapturedCommand, answer: CapturedCommand | None,
         fact: dict[str, Any], note: str | None) -> Row:
    command = request.command
    ids = fact.get("sync_state_set")
    return (request.ts, conn_id, connection.client, connection.server, command.code, code_name(command.code),
            None if answer is None else answer.command.code,
            None if answer is None else (answer.ts - request.ts) * 1000.0, command.is_oneway,
            fact.get("cluster"), fact.get("broker_name"), fact.get("broker_id"), fact.get("broker_addr"),
            fact.get("broker_epoch"), fact.get("master_broker_id"), fact.get("master_addr"), fact.get("master_epoch"),
            None if ids is None else sorted(ids), fact.get("sync_state_set_epoch"), note, None, None)


def _notes(server: str, conn: str, request: CapturedCommand, answer: CapturedCommand | None, fact: dict[str, Any],
           heartbeats: dict[tuple[Any, ...], list[float]]) -> Iterator[tuple[str, Note]]:
    code = request.command.code
    name = fact.get("broker_name")
    key: tuple[Any, ...]
    if code == NOTICE:
        host = conn.rsplit("@", 1)[0].rsplit(":", 1)[0]  # the controller: the client, its port ephemeral
        key = (host, server, fact.get("master_broker_id"), fact.get("master_addr"), fact.get("master_epoch"),
               tuple(sorted(fact["sync_state_set"])), fact.get("sync_state_set_epoch"))
        yield CONTROLLER_NOTE, (CONTROLLER_NOTICE, key, 1, request.ts, request.ts, None)
        return
    if code == HEARTBEAT:
        key = (server, fact["cluster"], name, fact["broker_id"], fact["broker_addr"], conn)
        heartbeats.setdefault(key, []).append(request.ts)
        if fact["broker_epoch"] is not None:
            yield CONTROLLER_NOTE, (CONTROLLER_BROKER_EPOCH, (server, name, fact["broker_id"], fact["broker_addr"],
                                                              fact["broker_epoch"]), 1, request.ts, request.ts, None)
        return
    response = None if answer is None else answer.command.code
    ids = fact.get("sync_state_set")
    ids_key = None if ids is None else tuple(sorted(ids))
    t = request.ts if answer is None else answer.ts
    if code in (Req.CONTROLLER_ELECT_MASTER, Req.CONTROLLER_ALTER_SYNC_STATE_SET, Req.CONTROLLER_REGISTER_BROKER,
                Req.CONTROLLER_APPLY_BROKER_ID):
        epoch = fact.get("master_epoch")
        key = (server, name, code_name(code), fact.get("cluster"), fact.get("broker_id", fact.get("master_broker_id")),
               fact.get("broker_addr"), response, epoch, ids_key, fact.get("sync_state_set_epoch"))
        yield CONTROLLER_NOTE, (CONTROLLER_EVENT, key, 1, t, t, None)
    for broker_id, addr in sorted((fact.get("members") or {}).items()):  # the group's ids and addresses
        yield CONTROLLER_NOTE, (CONTROLLER_EVENT, (server, name, "member", None, broker_id, addr, response,
                                                   None, None, None), 1, t, t, None)
    if response == 0 and (fact.get("master_epoch") is not None or ids is not None):
        key = (server, name, fact.get("master_broker_id"), fact.get("master_addr"), fact.get("master_epoch"),
               ids_key, fact.get("sync_state_set_epoch"), code_name(code))
        yield CONTROLLER_NOTE, (CONTROLLER_VIEW, key, 1, t, t, None)
