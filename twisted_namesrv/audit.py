"""The audit trail: one ``audit`` event for every state-changing request, done or refused.

Java's NameServer logs some operator requests (wipeWritePerm, updateNamesrvConfig) in lines of
their own and others (deleteTopic, KV changes) not at all; its controller logs none.  Here each
request a listener's ``Audited`` table names (``NAMESRV``: the NameServer's operator codes,
OPERATIONS; the controller's, every code that changes its state, brokers' included, is
controller/audit.py's ``CONTROLLER``) becomes one AuditEvent -- when, from which peer, which
request, who (with aclEnable the accessKey whose signature was checked; a key a request only names,
unsigned or wrongly signed or with ACL off, is kept apart as ``claimed_access_key``, never as who
did it), aimed at what (namespace and key, broker, topic, config keys; never a secret's value, and
no KV value either), and the result -- and the event goes three ways:

- the log, namespace ``twisted_namesrv.audit``: one text line, or in JSON mode (``--log-format
  json``) an object whose ``audit`` field holds the event's fields (docs/operations.md);
- the counter ``namesrv_admin_requests_total{operation,result}`` (every series from the start);
- the status page's recent events (``/api/events``, kind ``audit``).

``AuditTrail`` owns the counts (one per NameServer process, the controller's events counted with
the NameServer's); the composition root (service.py) constructs it once with the page's events, and
hands each listener's dispatcher (``Dispatcher.observe``) a ``Trail`` recording into it: a Trail
hears every dispatched request with its answer and records those its table names; the operation
and target are read from the request code and header here, so the handlers stay as they are.  The
text line quotes every name and value a peer chose unless it is a plain token (escapes.quoted: a
JSON string, its control characters escapes), so the line is one line with its own fields wherever
it is written; logs.py escapes what is left of a line's control characters too.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.logger import Logger, LogLevel

from .context import Peer
from .escapes import clipped_text, quoted, quoted_sentence
from .events import RecentEvents
from .properties import load as load_properties
from .remoting import RemotingCommand, RequestCode, ResponseCode, fastjson
from .remoting.codes import code_name
from .state.acl import ACCESS_KEY, ACL_EXCEPTION, AccessControl
from .state.config import masked
from .state.store import CANNOT_SAVE

log = Logger(namespace="twisted_namesrv.audit")


@dataclass(frozen=True)
class Audited:
    """What one listener's trail records: its operations by request code (the metric's label),
    the header fields that name each one's target, the codes whose body is properties text (the
    target is its keys), the answer's fields worth keeping, and how its codes are named."""

    operations: dict[int, str]
    targets: dict[int, tuple[str, ...]]
    config_codes: frozenset[int]
    effects: tuple[str, ...]
    name: Callable[[int], str]
    #: answer codes that are this listener's state machine's own decisions: declined, neither refused
    #: nor failed (the controller's: a master not available yet, a fenced epoch - nothing failed to
    #: save, nobody asked for what they may not)
    declines: frozenset[int] = frozenset()
    #: which of the other answers are failures, by their remark (None: every one); the rest are refused
    failures: Callable[[str], bool] | None = None


#: the remark of the answer to a handler that raised (Dispatcher._failed: the exception's type, then its text)
_RAISED = re.compile(r"[A-Z]\w*(?:Error|Exception): ")

#: the NameServer's: request code -> operation
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
NAMESRV = Audited(OPERATIONS, {
    RequestCode.PUT_KV_CONFIG: ("namespace", "key"),
    RequestCode.DELETE_KV_CONFIG: ("namespace", "key"),
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: ("brokerName",),
    RequestCode.ADD_WRITE_PERM_OF_BROKER: ("brokerName",),
    RequestCode.DELETE_TOPIC_IN_NAMESRV: ("topic", "clusterName"),
    RequestCode.REGISTER_TOPIC_IN_NAMESRV: ("topic",),
    RequestCode.RETIRE_BROKER_GROUP: ("clusterName", "brokerName", "brokerId"),
}, frozenset({RequestCode.UPDATE_NAMESRV_CONFIG}),
    # how many topics a write-permission change touched, what a retirement forgot
    ("wipeTopicCount", "addTopicCount", "retired"), code_name,
    # failed: a change the disk refused (StoreError's text) or a handler that raised, which page; Java's
    # SYSTEM_ERROR to a request of its own fault (no namespace, a body that is no properties text, a value
    # out of range) and our limits' answers are refused: any peer without ACL sent one in a loop and
    # paged whoever was on call
    failures=lambda remark: CANNOT_SAVE in remark or _RAISED.match(remark) is not None)

#: ok: answered SUCCESS; refused: by the ACL, the config black list or a value's control characters, or aimed
#: at what it may not change (INVALID_PARAMETER, QUERY_NOT_FOUND: a retirement of a registered or unknown
#: group); declined: the listener's state machine's own "not now" (``Audited.declines``: the controller's
#: answer to a broker outside the last sync-state set, which retries every 5 s: logged at info, no alert);
#: failed: a save that failed (namesrv_admin_requests_total{result="failed"} pages; ``Audited.failures`` says
#: which answers are: the NameServer's, a StoreError's; any other answer of the controller's); else refused
RESULTS = ("ok", "refused", "declined", "failed")
_REFUSALS = frozenset({ResponseCode.NO_PERMISSION, ResponseCode.INVALID_PARAMETER, ResponseCode.QUERY_NOT_FOUND})


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
    request: str = ""  # the code's Java name

    @property
    def verified(self) -> bool:
        return self.access_key is not None

    def fields(self) -> dict[str, Any]:
        """The event as JSON-ready fields (the JSON log line's ``audit``, the status page's event)."""
        return {"operation": self.operation, "request": self.request, "code": self.code, "peer": self.peer,
                "access_key": self.access_key, "verified": self.verified,
                "claimed_access_key": self.claimed_access_key, "target": self.target, "result": self.result,
                "reason": self.reason}

    def line(self) -> str:
        """The text log line: who did what to what, and how it ended; every name and value a peer
        chose is quoted unless a plain token (escapes.quoted), so no value forges a field, a result
        or a line."""
        who = (f" accessKey={quoted(self.access_key)} (verified)" if self.access_key else
               f" claimed accessKey={quoted(self.claimed_access_key)} (unverified)" if self.claimed_access_key
               else "")
        target = " ".join(f"{quoted(k)}={_shown(v)}" for k, v in self.target.items())
        why = f" ({quoted_sentence(self.reason)})" if self.reason else ""
        return (f"audit {self.operation} {self.request}({self.code}) from {self.peer}{who}: {target} "
                f"-> {self.result}{why}")


#: the most config keys an event keeps (of one target value: escapes.SHOWN_MAX characters): a request's
#: header fields and body may hold 64 KiB each, and every audited request, done or refused, is a log
#: line, a JSON event and one of the status page's recent events
CONFIG_KEYS_MAX = 64


def clipped(value: Any) -> Any:
    """``value`` as an event keeps it: text beyond SHOWN_MAX characters cut, with how long it was
    (escapes.clipped_text, as the capture report's lines clip names); a config update's keys beyond
    CONFIG_KEYS_MAX left out, with how many."""
    if isinstance(value, dict):
        items = list(value.items())
        kept = {clipped(k): clipped(v) for k, v in items[:CONFIG_KEYS_MAX]}
        if len(items) > CONFIG_KEYS_MAX:
            kept["..."] = f"{len(items) - CONFIG_KEYS_MAX} more keys"
        return kept
    return clipped_text(value) if isinstance(value, str) else value


def _shown(value: Any) -> str:
    """A target value in the text line, quoted unless a plain token: a config update's keys as
    ``{k=v, k="v w"}``."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{quoted(k)}={quoted(v)}" for k, v in value.items()) + "}"
    return quoted(value)


def _result(response: RemotingCommand | None, audited: Audited) -> tuple[str, str | None]:
    if response is None or response.code == ResponseCode.SUCCESS:
        return "ok", None
    remark = response.remark or ""
    reason = remark.removeprefix(ACL_EXCEPTION + ": ")[:200] or None
    if response.code in _REFUSALS or remark.startswith(ACL_EXCEPTION):
        return "refused", reason
    if response.code in audited.declines:
        return "declined", reason
    return ("failed" if audited.failures is None or audited.failures(remark) else "refused"), reason


class AuditTrail:
    """The audit trail of one NameServer process: its counts by (operation, result), the one owner
    of ``namesrv_admin_requests_total`` (the embedded controller's events counted here too); each
    event also logged and fed to the page's ``events``.  ``tables``: the listeners' tables it
    counts for, so that every (operation, result) series is there from the start."""

    def __init__(self, events: RecentEvents, tables: tuple[Audited, ...]) -> None:
        self.events = events
        #: every operation the metric has a series for, from the start
        self.operations = tuple(sorted({name for table in tables for name in table.operations.values()}))
        #: audited requests by (operation, result)
        self.counts: Counter[tuple[str, str]] = Counter()

    def record(self, event: AuditEvent) -> None:
        """Count, show and log one audited request: its line unless the page's events folded it past
        the minute's folded lines (events.py: LINES_FOLDED_PER_MINUTE; counted, not logged)."""
        self.counts[event.operation, event.result] += 1
        fields = event.fields()
        if self.events.feed_event("audit", fields, event.peer):  # held to its host's rate (events.py)
            level = LogLevel.info if event.result in ("ok", "declined") else LogLevel.warn
            log.emit(level, event.line().replace("{", "{{").replace("}", "}}"), audit=fields)


class Trail:
    """One listener's audit trail (``audited``: what it records), with the clock and the ACL that
    says who signed; ``into``: the AuditTrail its events are logged, counted and shown by (the
    NameServer's, also for the controller inside it).  Called as the dispatcher's observer."""

    def __init__(self, audited: Audited, clock: Callable[[], float], acl: AccessControl | None,
                 into: AuditTrail) -> None:
        self.audited, self.clock, self.acl, self.into = audited, clock, acl, into
        #: the codes it records (Dispatcher.observe: a request of another code is not made for it)
        self.heard_codes = frozenset(audited.operations)

    def __call__(self, request: RemotingCommand, peer: Peer, response: RemotingCommand | None) -> None:
        if request.code in self.audited.operations:
            self.into.record(self.event(request, peer, response))

    def event(self, request: RemotingCommand, peer: Peer, response: RemotingCommand | None) -> AuditEvent:
        """The audit event of an answered (or oneway) request whose code the table names."""
        audited = self.audited
        result, reason = _result(response, audited)
        target = self._target(request)
        if response is not None:
            target.update({k: response.ext[k] for k in audited.effects if response.ext.get(k) is not None})
        claimed = request.ext.get(ACCESS_KEY)
        identity = self.acl.verified(request.ext, request.body) if self.acl is not None and claimed else None
        return AuditEvent(self.clock(), peer.address, identity, request.code, audited.operations[request.code],
                          clipped(target), result, reason, None if identity else clipped(claimed),
                          audited.name(request.code))

    def _target(self, request: RemotingCommand) -> dict[str, Any]:
        if request.code in self.audited.config_codes:
            try:  # read as the handler reads it (Java's new String(body, UTF_8))
                props = load_properties(fastjson.java_utf8_decoded(bytes(request.body or b"")))
            except ValueError:
                return {"config": "(unreadable body)"}
            return {"config": masked(props)}
        ext = request.ext
        return {name: ext.get(name) for name in self.audited.targets[request.code] if ext.get(name) is not None}
