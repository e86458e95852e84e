"""The audit trail: one ``audit`` event for every state-changing request, done or refused.

Java's NameServer logs some operator requests (wipeWritePerm, updateNamesrvConfig) in lines of
their own and others (deleteTopic, KV changes) not at all.  Here each request whose code is in
OPERATIONS becomes one AuditEvent -- when, from which peer, which
request, who (with aclEnable the accessKey whose signature was checked; a key a request only names,
unsigned or wrongly signed or with ACL off, is kept apart as ``claimed_access_key``, never as who
did it), aimed at what (namespace and key, broker, topic, config keys; never a secret's value, and
no KV value either), and the result -- and the event goes three ways:

- the log, namespace ``twisted_namesrv.audit``: one text line, or in JSON mode (``--log-format
  json``) an object whose ``audit`` field holds the event's fields (docs/operations.md);
- the counter ``namesrv_admin_requests_total{operation,result}`` (every series from the start);
- the status page's recent events (``/api/events``, kind ``audit``).

``observer`` is what the service hands the dispatcher (``Dispatcher.observe``): it hears every
dispatched request with its answer and records those whose code is in AUDITED; the operation and
target are read from the request code and header here, so the handlers stay as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.logger import Logger, LogLevel

from .context import NamesrvState, Peer
from .metrics import Metrics
from .remoting import RemotingCommand, RequestCode, ResponseCode
from .remoting.codes import code_name
from .state.acl import ACCESS_KEY, ACL_EXCEPTION
from .state.config import masked, parse_properties

log = Logger(namespace="twisted_namesrv.audit")

#: request code -> operation (the metric's label)
OPERATIONS: dict[int, str] = {
    RequestCode.PUT_KV_CONFIG: "put_kv_config",
    RequestCode.DELETE_KV_CONFIG: "delete_kv_config",
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: "wipe_write_perm",
    RequestCode.ADD_WRITE_PERM_OF_BROKER: "add_write_perm",
    RequestCode.DELETE_TOPIC_IN_NAMESRV: "delete_topic",
    RequestCode.REGISTER_TOPIC_IN_NAMESRV: "register_topic",
    RequestCode.UPDATE_NAMESRV_CONFIG: "update_namesrv_config",
    RequestCode.RETIRE_BROKER_GROUP: "retire_broker_group",
}
AUDITED = frozenset(OPERATIONS)
#: ok: answered SUCCESS; refused: by the ACL or the config black list, or aimed at what it may not change
#: (INVALID_PARAMETER, QUERY_NOT_FOUND: a retirement of a registered or unknown group); failed: any other
#: answer (a save that failed: namesrv_admin_requests_total{result="failed"} pages)
RESULTS = ("ok", "refused", "failed")
_REFUSALS = frozenset({ResponseCode.NO_PERMISSION, ResponseCode.INVALID_PARAMETER, ResponseCode.QUERY_NOT_FOUND})
#: header fields that name a request's target, by request code (values of other fields are not kept)
_TARGET_FIELDS: dict[int, tuple[str, ...]] = {
    RequestCode.PUT_KV_CONFIG: ("namespace", "key"),
    RequestCode.DELETE_KV_CONFIG: ("namespace", "key"),
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: ("brokerName",),
    RequestCode.ADD_WRITE_PERM_OF_BROKER: ("brokerName",),
    RequestCode.DELETE_TOPIC_IN_NAMESRV: ("topic", "clusterName"),
    RequestCode.REGISTER_TOPIC_IN_NAMESRV: ("topic",),
    RequestCode.RETIRE_BROKER_GROUP: ("clusterName", "brokerName", "brokerId"),
}
#: answer fields worth keeping: how many topics a write-permission change touched, what a retirement forgot
_EFFECT_FIELDS = ("wipeTopicCount", "addTopicCount", "retired")


@dataclass(frozen=True, slots=True)
class AuditEvent:
    time: float
    peer: str
    access_key: str | None  # the verified identity: the accessKey whose secret signed the request (aclEnable)
    code: int
    operation: str
    target: dict[str, Any]
    result: str
    reason: str | None = None  # the answer's remark when not ok
    claimed_access_key: str | None = None  # an accessKey the request names that nothing verified

    @property
    def verified(self) -> bool:
        return self.access_key is not None

    @property
    def request(self) -> str:
        return code_name(self.code)

    def fields(self) -> dict[str, Any]:
        """The event as JSON-ready fields (the JSON log line's ``audit``, the status page's event)."""
        return {"operation": self.operation, "request": self.request, "code": self.code, "peer": self.peer,
                "access_key": self.access_key, "verified": self.verified,
                "claimed_access_key": self.claimed_access_key, "target": self.target, "result": self.result,
                "reason": self.reason}

    def line(self) -> str:
        """The text log line: who did what to what, and how it ended."""
        who = (f" accessKey={self.access_key} (verified)" if self.access_key else
               f" claimed accessKey={self.claimed_access_key} (unverified)" if self.claimed_access_key else "")
        target = " ".join(f"{k}={_shown(v)}" for k, v in self.target.items())
        why = f" ({self.reason})" if self.reason else ""
        return (f"audit {self.operation} {self.request}({self.code}) from {self.peer}{who}: {target} "
                f"-> {self.result}{why}")


def _shown(value: Any) -> str:
    """A target value in the text line: a config update's keys as ``{k=v, k=v}``."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={v}" for k, v in value.items()) + "}"
    return str(value)


def event_of(state: NamesrvState, request: RemotingCommand, peer: Peer,
             response: RemotingCommand | None) -> AuditEvent:
    """The audit event of an answered (or oneway) request whose code is in AUDITED."""
    result, reason = _result(response)
    target = _target(request)
    if response is not None:
        target.update({k: response.ext[k] for k in _EFFECT_FIELDS if response.ext.get(k) is not None})
    claimed = request.ext.get(ACCESS_KEY)
    identity = state.acl.verified(request.ext, request.body) if state.acl is not None and claimed else None
    return AuditEvent(state.clock(), peer.address, identity, request.code, OPERATIONS[request.code], target, result,
                      reason, None if identity else claimed)


def _result(response: RemotingCommand | None) -> tuple[str, str | None]:
    if response is None or response.code == ResponseCode.SUCCESS:
        return "ok", None
    remark = response.remark or ""
    refused = response.code in _REFUSALS or remark.startswith(ACL_EXCEPTION)
    return ("refused" if refused else "failed"), remark.removeprefix(ACL_EXCEPTION + ": ")[:200] or None


def _target(request: RemotingCommand) -> dict[str, Any]:
    if request.code == RequestCode.UPDATE_NAMESRV_CONFIG:
        try:
            props = parse_properties(bytes(request.body or b"").decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return {"config": "(unreadable body)"}
        return {"config": masked(props)}
    ext = request.ext
    return {name: ext.get(name) for name in _TARGET_FIELDS[request.code] if ext.get(name) is not None}


def record(state: NamesrvState, metrics: Metrics, request: RemotingCommand, peer: Peer,
           response: RemotingCommand | None) -> AuditEvent:
    """Log, count and show one audited request."""
    event = event_of(state, request, peer, response)
    level = LogLevel.info if event.result == "ok" else LogLevel.warn
    log.emit(level, event.line().replace("{", "{{").replace("}", "}}"), audit=event.fields())
    metrics.admin_requests[event.operation, event.result] += 1
    metrics.feed_event("audit", event.fields())
    return event


def observer(state: NamesrvState, metrics: Metrics) -> Callable[[RemotingCommand, Peer, RemotingCommand], None]:
    """The dispatcher's observer (``Dispatcher.observe``) that records every audited request."""

    def heard(request: RemotingCommand, peer: Peer, response: RemotingCommand) -> None:
        if request.code in AUDITED:
            record(state, metrics, request, peer, response)

    return heard
