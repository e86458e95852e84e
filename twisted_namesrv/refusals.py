"""Refusals: whatever a listener refuses -- a plain peer on a TLS port, a failed handshake, a request
the ACL turns away, an HTTP request without an account or for a foreign Host, a limit hit -- is one
log line naming the listener, the peer and the reason, and one count in
``namesrv_refusals_total{listener,reason}`` (web/collector.py).

A peer looping on refused requests must not flood the log: each (listener, peer host, reason)'s
first refusal is a warning, later ones are debug events, all counted (``LimitLog``).  A peer host
is ``peer_group``'s: an IPv6 peer is its /64, so one rotating through its addresses is one host.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping

from twisted.logger import Logger

from .remoting.codes import code_name
from .state.acl import ACL_EXCEPTION, AccessControl, request_class
from .state.hosts import peer_group, peer_host

log = Logger(namespace="twisted_namesrv.refusals")

#: every listener (the metric's ``listener`` label) and its reasons, served at 0 from the start so
#: that an alert has a series to read
REASONS: dict[str, tuple[str, ...]] = {
    "remoting": ("acl", "frame_length", "header_length", "undecodable", "max_connections", "idle", "memory_budget",
                 "tls_handshake", "tls_renegotiation", "not_tls", "config_key", "config_value", "config_size",
                 "fd_reserve", "fd_table_full", "max_topics_per_broker", "max_broker_groups", "max_brokers",
                 "max_brokers_per_group", "max_topic_queue_entries", "max_name_length", "filter_servers",
                 "max_kv_bytes", "order_topic_conf", "max_connections_per_host", "crc32", "bad_request"),
    "controller": ("acl", "frame_length", "header_length", "undecodable", "max_connections", "idle",
                   "memory_budget", "tls_handshake", "tls_renegotiation", "not_tls", "config_key", "config_value",
                   "config_size", "fd_reserve", "fd_table_full", "max_broker_groups", "max_brokers_per_group",
                   "max_name_length", "max_brokers", "bad_request"),
    "http": ("unauthenticated", "not_admin", "host", "not_loopback", "max_connections", "idle", "request_timeout",
             "request_body", "bad_request", "fd_reserve", "fd_table_full", "memory_budget", "search_per_client",
             "search_total"),
}


class LimitLog:
    """Each (key, peer host)'s first hit is a warning; later ones are debug events (and counted
    elsewhere), so a peer looping on bad frames or connections cannot flood the log.  The host is
    keyed and shown as ``peer_group`` makes it (an IPv6 peer: its /64).

    The pairs remembered are bounded (CAPACITY) and forgotten all at once at most every
    RENEWED_SECONDS (``now``: a monotonic clock, an NTP step moves nothing): forgotten whenever full,
    a peer owning more hosts than that (a /48 holds 65,536 /64s) going round them again had a
    warning line per connection without end.  Full within that time, the log says so once and a new
    host's first hit is a debug event, counted as every hit is: at most CAPACITY + 1 warnings then."""

    CAPACITY = 10_000  # (host, key) pairs remembered
    RENEWED_SECONDS = 3600.0

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self._seen: set[tuple[str, str]] = set()
        self._now = now
        self._renewed = now()
        self._full_said = False

    def __call__(self, host: str, limit: str, message: str, /, listener: str = "", **fields: object) -> None:
        host = peer_group(host)
        key = (host, f"{listener}:{limit}")  # each listener's first hit of a limit is a warning of its own
        # one event dict: a caller's field named like ours (host, limit, listener) must not make the
        # log call itself raise (a TypeError there would lose the line); ours win
        event = {**fields, "limit": limit, "host": host, "listener": listener}
        if key in self._seen or not self._room():
            log.debug(message, **event)
            return
        self._seen.add(key)
        log.warn(message + " (further hits of this limit from {host} are counted, not logged)", **event)

    def _room(self) -> bool:
        """Whether a new pair can be remembered: the table forgotten when full and due, else said full once."""
        if len(self._seen) < self.CAPACITY:
            return True
        now = self._now()
        if now - self._renewed >= self.RENEWED_SECONDS:
            self._seen.clear()
            self._renewed, self._full_said = now, False
            return True
        if not self._full_said:
            self._full_said = True
            log.warn("refusals from more than {capacity} hosts: a new host's first refusal is counted, not logged, "
                     "for {seconds:.0f} s more", capacity=self.CAPACITY,
                     seconds=self.RENEWED_SECONDS - (now - self._renewed))
        return False


def peer_text(addr: object) -> str:
    """A peer's ``host:port`` as every refusal and connection writes it (an IPv6 host bare: peer_host
    reads it back); ``?`` for what the address lacks."""
    return f"{getattr(addr, 'host', '?')}:{getattr(addr, 'port', '?')}"


class Refusals:
    """One per server, shared by its listeners: the counts and the flood-limited log."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self.limit_log = LimitLog()

    def __call__(self, listener: str, reason: str, peer: str, message: str, /, **fields: object) -> None:
        """Count and log one refusal; ``message`` is a twisted.logger format that may use ``{peer}``,
        ``{listener}``, ``{reason}`` and ``fields``."""
        self.counts[listener, reason] += 1
        event: dict[str, object] = {**fields, "reason": reason, "peer": peer, "refused": reason}
        event.pop("listener", None)  # ours wins, passed by name (LimitLog's keying reads it typed)
        self.limit_log(peer_host(peer), reason, "refused on {listener} from {peer}: " + message + " [{reason}]",
                       listener=listener, **event)

    def series(self) -> list[tuple[str, str, int]]:
        """(listener, reason, count) for every known series and any other counted."""
        known = {(listener, reason) for listener, reasons in REASONS.items() for reason in reasons}
        return [(listener, reason, self.counts[listener, reason])
                for listener, reason in sorted(known | set(self.counts))]


def acl_refusal(acl: AccessControl | None, refusals: Refusals, listener: str, code: int,
                ext: Mapping[str, str | None], body: bytes | memoryview | None, peer: str,
                kind: str | None = None, name: str | None = None) -> str | None:
    """The AclException text a request from ``peer`` is refused with (logged and counted as
    ``acl`` on ``listener``), or None when the ACL is off or lets it in.  ``kind``: its class when
    it is not a NameServer code's (the controller's), ``name`` the code's name then."""
    if acl is None or not acl.guards(code, kind):
        return None
    denied = acl.refusal(code, ext, body, peer, kind)
    if denied is not None:
        refusals(listener, "acl", peer, "request {code} ({name}, {kind}) refused: {why}", code=code,
                 name=name or code_name(code), kind=kind or request_class(code),
                 why=denied.removeprefix(ACL_EXCEPTION + ": "))
    return denied
