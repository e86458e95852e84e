"""The controller's high availability on etcd: who leads (``EtcdLeadership``) and the event log only
the leader can write (``EtcdControllerLog``).

Several NameServers whose controllers are peers share one etcd cluster. Under the group's key prefix
(``controllerEtcdKeyPrefix`` + ``controllerDLegerGroup`` + ``/``):

``leader``
    the leader controller's remoting address, put with the leader's lease. A controller campaigns by
    creating it when absent (one transaction); the key's create_revision names that leadership (its
    *term*). Every peer watches it; when the leader's process dies its lease expires, etcd deletes the
    key and the others campaign at once.
``log/00000000000000000001`` ...
    the events, one key each, in order.
``last``
    the index of the last event. Its mod_revision tells whether the log moved since this leader read it.

An append is one transaction: compare that the leader key still holds our address and our term, and
that ``last`` is as this leader last saw it, then put the events and the new ``last``. A deposed
leader's append (its lease expired while it was paused or cut off) fails that guard and lands nothing,
so two controllers never both hand out a broker id or an epoch.

A leader steps down on its own before its lease can have expired at etcd, when keep-alives go
unanswered; and when an append's outcome is unknown (etcd timed out), it resigns rather than guess, so
that whoever leads next replays what etcd holds.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from twisted.application.service import Service
from twisted.internet.defer import Deferred, DeferredLock, fail, inlineCallbacks, succeed
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from ..clocks import owners_view
from .config import etcd_endpoints
from .etcd_gateway import EtcdError, EtcdGateway, KeyValue, WatchStream, b64, prefix_end
from .log import NotLeader

log = Logger()

DEFAULT_KEY_PREFIX = "/rocketmq/controller/"
DEFAULT_GROUP = "DefaultControllerGroup"  # when controllerDLegerGroup is not set (Java requires it for DLedger)
DEFAULT_LEASE_TTL = 3  # seconds: a dead leader is replaced within about this long
#: etcd refuses a transaction of more than --max-txn-ops (128 by default) operations: the events and ``last``
MAX_EVENTS_PER_APPEND = 127
#: etcd refuses a request over --max-request-bytes (1.5 MiB by default); base64 adds a third
MAX_APPEND_BYTES = 1 << 20
CHANGES_KEPT = 20  # leadership changes the status keeps
REPLAY_PAGE = 1000  # events per range request while replaying
INDEX_DIGITS = 20  # log keys sort in index order: zero-padded to the width of a 64-bit number


def group_prefix(key_prefix: str, group: str) -> bytes:
    """The keys of one controller group: ``/rocketmq/controller/`` + ``DefaultControllerGroup`` + ``/``."""
    if not group or "/" in group:
        raise ValueError(f"controller group {group!r}: must be non-empty, without '/'")
    return f"{key_prefix.rstrip('/')}/{group}/".encode()


def _revision(answer: dict[str, Any]) -> int:
    return int(answer.get("header", {}).get("revision", 0))


def _range_kvs(answer: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue.from_json(kv) for kv in answer.get("kvs", [])]


def _txn_range_kvs(answer: dict[str, Any], i: int = 0) -> list[KeyValue]:
    return _range_kvs(answer.get("responses", [{}])[i].get("response_range", {}))


class EtcdLeadership:
    """This controller's view of who leads the group, kept true through an etcd lease and a watch.

    ``start`` grants a lease and keeps it alive every third of its TTL; each beat also looks at the
    leader key and campaigns when it is free. The watch on the leader key makes changes known at
    once; the beat is the safety net when the watch breaks.
    """

    def __init__(self, gateway: EtcdGateway, prefix: bytes, address: str, ttl: int = DEFAULT_LEASE_TTL,
                 clock: Any = None) -> None:
        self.gateway = gateway
        self.prefix = prefix
        self.address = address
        self.ttl = ttl
        self.clock = clock if clock is not None else gateway.reactor
        self.leader_key = prefix + b"leader"
        self.is_leader = False
        self.leader_address: str | None = None
        #: the create_revision of the leader key this controller put, while it leads: appends compare it
        self.term: int | None = None
        self._subscribers: list[Callable[[bool, str | None], None]] = []
        self._lease: int | None = None
        self._lease_deadline: Any = None  # an IDelayedCall
        self._beat: LoopingCall | None = None
        self._watch: WatchStream | None = None
        self._observing = DeferredLock()  # one campaign or look at the leader key at a time
        self._running = False
        self._failing: str | None = None  # why the last beat failed, to log a change once
        #: the last changes, for the status page: (time, is_leader, leader_address, why)
        self.changes: deque[tuple[float, bool, str | None, str]] = deque(maxlen=CHANGES_KEPT)

    @property
    def interval(self) -> float:
        return self.ttl / 3

    def subscribe(self, callback: Callable[[bool, str | None], None]) -> None:
        self._subscribers.append(callback)

    def status(self) -> dict[str, Any]:
        """For the status page and the JSON API: role, leader, term, and the last changes and why."""
        return {"role": "leader" if self.is_leader else "follower", "address": self.address,
                "leader": self.leader_address, "term": self.term, "leaseTtlSeconds": self.ttl,
                "etcd": list(self.gateway.endpoints), "etcdProblem": self._failing,
                "changes": [{"time": t, "isLeader": lead, "leader": leader, "why": why}
                            for t, lead, leader, why in self.changes]}

    # -- lifecycle --------------------------------------------------------------------------------

    @inlineCallbacks
    def start(self) -> Any:
        """Join the group: fires after the first beat (this controller leads, or knows who does,
        unless etcd could not be reached; the beats go on trying)."""
        self._running = True
        yield self._beat_once()
        self._beat = LoopingCall(self._beat_once)
        self._beat.clock = self.clock
        self._beat.start(self.interval, now=False)

    @inlineCallbacks
    def stop(self) -> Any:
        """Leave the group: revoke the lease, so that the leader key (if ours) goes at once and a
        peer takes over without waiting for the TTL."""
        lease = self._lease
        self._halt()
        self._lease = None
        self.term = None
        self._set(False, None, "stopped")
        if lease is not None:
            try:
                yield self.gateway.lease_revoke(lease)
            except Exception as exc:
                log.warn("controller leadership: could not revoke lease {lease} on stop: {why}", lease=lease,
                         why=exc)

    def crash(self) -> None:
        """Stop every beat, timer and watch at once and tell nobody, as a process killed or frozen
        would: the lease runs out at etcd on its own. For tests of the handover."""
        self._halt()

    def _halt(self) -> None:
        self._running = False
        if self._beat is not None and self._beat.running:
            self._beat.stop()
        self._beat = None
        if self._lease_deadline is not None and self._lease_deadline.active():
            self._lease_deadline.cancel()
        self._lease_deadline = None
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    # -- the beat ---------------------------------------------------------------------------------

    @inlineCallbacks
    def _beat_once(self) -> Any:
        """Keep the lease, look at (or campaign for) the leader key, keep the watch. Never fails:
        a LoopingCall stops at its first error. A failed keep-alive does not stop the look at the
        leader key: followers still learn who leads."""
        if not self._running:
            return
        problems = []
        try:
            yield self._keep_lease()
        except Exception as exc:
            problems.append(f"keep-alive: {exc}")
        try:
            revision = yield self._observing.run(self._observe)
            if self._watch is None and self._running:
                yield self._start_watch(revision + 1)
        except Exception as exc:
            problems.append(f"leader key: {exc}")
        why = "; ".join(problems) or None
        if why != self._failing:
            if why is None:
                log.info("controller leadership: etcd answers again")
            else:
                log.warn("controller leadership: etcd beat failed: {why}", why=why)
        self._failing = why

    @inlineCallbacks
    def _keep_lease(self) -> Any:
        sent = self.clock.seconds()
        lease = self._lease
        if lease is not None:
            remaining = yield self.gateway.lease_keepalive(lease)
            if lease != self._lease:
                return  # given up while the keep-alive was under way: the next beat grants a new one
            if remaining > 0:
                self._lease_alive_until(sent + remaining)
                return
            self._lost(f"lease {lease} expired at etcd")
            self._lease = None
        lease, granted = yield self.gateway.lease_grant(self.ttl)
        if not self._running:
            yield self.gateway.lease_revoke(lease)  # stopped meanwhile: leave nothing behind
            return
        self._lease = lease
        self._lease_alive_until(sent + granted)

    def _lease_alive_until(self, expiry: float) -> None:
        """The lease lives at etcd at least until ``expiry`` (measured from when the keep-alive was
        sent); a leader stops writing a little before, unless a later keep-alive moves it on."""
        if self._lease_deadline is not None and self._lease_deadline.active():
            self._lease_deadline.cancel()
        margin = self.interval / 2
        self._lease_deadline = self.clock.callLater(max(0.0, expiry - margin - self.clock.seconds()),
                                                    self._lease_timed_out)

    def _lease_timed_out(self) -> None:
        self._lease_deadline = None
        self._lost(f"no keep-alive answer from etcd within the lease's {self.ttl} s")
        self._lease = None  # the next beat grants a new one

    @inlineCallbacks
    def _observe(self) -> Any:
        """Campaign if the leader key is free, else learn who holds it; the revision seen."""
        if self._lease is None:
            answer = yield self.gateway.range(self.leader_key)
            kvs = _range_kvs(answer)
            self._saw(kvs[0] if kvs else None)
            return _revision(answer)
        answer = yield self.gateway.txn(
            [{"key": b64(self.leader_key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
            [{"request_put": {"key": b64(self.leader_key), "value": b64(self.address.encode()),
                              "lease": str(self._lease)}}],
            [{"request_range": {"key": b64(self.leader_key)}}])
        revision = _revision(answer)
        if answer.get("succeeded"):
            self._lead(revision)  # the put's revision is the key's create_revision
            return revision
        kvs = _txn_range_kvs(answer)
        current = kvs[0] if kvs else None
        if current is not None and current.value == self.address.encode() and current.lease != self._lease:
            # our address under a lease we no longer hold: left by this controller before a restart or a
            # lost lease. Nobody serves behind it; revoking that lease frees the key for a campaign now.
            log.info("controller leadership: revoking stale lease {lease} of our own leader key",
                     lease=current.lease)
            try:
                yield self.gateway.lease_revoke(current.lease)
            except EtcdError as exc:  # expired meanwhile ("lease not found"): the key went with it
                log.info("controller leadership: stale lease {lease}: {why}", lease=current.lease, why=exc)
            current = None
        self._saw(current)
        return revision

    def _saw(self, current: KeyValue | None) -> None:
        ours = current is not None and current.value == self.address.encode()
        if ours and self._lease is not None and current is not None and current.lease == self._lease:
            self._lead(current.create_revision)
        elif current is None or ours:  # none, or ours under a lost lease: nobody serves behind it
            self._lost("the leader key is gone") if self.is_leader else self._set(False, None, "no leader")
        else:
            self._follow(current)

    def _lead(self, term: int) -> None:
        if not self._running:
            return  # a campaign that answered after stop(): its lease is revoked, the key gone
        if self.term != term:
            if self.is_leader:  # a new term without a step-down in between: subscribers replay
                self._lost(f"term {self.term} ended")
            log.info("controller leadership: {address} leads (term {term})", address=self.address, term=term)
            self.term = term
        self._set(True, self.address, f"won the campaign (term {term})")

    def _follow(self, current: KeyValue) -> None:
        if self.is_leader:
            log.warn("controller leadership: {address} deposed, {leader} leads", address=self.address,
                     leader=current.value.decode(errors="replace"))
        self.term = None
        leader = current.value.decode(errors="replace")
        self._set(False, leader, f"{leader} leads")

    def _lost(self, why: str) -> None:
        if self.is_leader:
            log.warn("controller leadership: {address} steps down: {why}", address=self.address, why=why)
        self.term = None
        self._set(False, None, why)

    def _set(self, is_leader: bool, leader_address: str | None, why: str) -> None:
        if (is_leader, leader_address) == (self.is_leader, self.leader_address):
            return
        self.is_leader, self.leader_address = is_leader, leader_address
        self.changes.append((self.clock.seconds(), is_leader, leader_address, why))
        for callback in list(self._subscribers):
            try:
                callback(is_leader, leader_address)
            except Exception:
                log.failure("controller leadership: a subscriber failed")

    # -- what appends learn -----------------------------------------------------------------------

    def deposed(self, term: int, leader_address: str | None) -> None:
        """An append found the leader key no longer ours (``leader_address`` holds it now, if any)."""
        if self.term == term:
            if leader_address is None or leader_address == self.address:  # ours from another lease: stale
                self._lost("the leader key is gone")
            else:
                self._follow(KeyValue(self.leader_key, leader_address.encode(), 0, 0, 0))

    def resign(self, why: str) -> None:
        """Give the leadership up (the lease revoked, best effort): the next leader, maybe this
        controller again, starts from a replay of what etcd holds."""
        lease, self._lease = self._lease, None
        self._lost(why)
        if lease is not None:
            self.gateway.lease_revoke(lease).addErrback(
                lambda failure: log.warn("controller leadership: could not revoke lease {lease}: {why}",
                                         lease=lease, why=failure.getErrorMessage()))

    # -- the watch --------------------------------------------------------------------------------

    @inlineCallbacks
    def _start_watch(self, start_revision: int) -> Any:
        stream = yield self.gateway.watch(self.leader_key, start_revision, self._on_events)
        if not self._running:
            stream.cancel()
            return
        self._watch = stream
        stream.ended.addCallback(self._watch_ended, stream)

    def _watch_ended(self, why: str, stream: WatchStream) -> None:
        if self._watch is stream:
            self._watch = None  # the next beat looks again and watches anew
            if self._running:
                log.info("controller leadership: watch on the leader key ended ({why})", why=why)

    def _on_events(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            kv = KeyValue.from_json(event.get("kv", {}))
            if event.get("type") == "DELETE":
                self._lost("the leader key was deleted (lease expired or revoked)") if self.is_leader \
                    else self._set(False, None, "the leader key was deleted")
                if self._running:
                    self._observing.run(self._observe).addErrback(
                        lambda failure: log.warn("controller leadership: campaign failed: {why}",
                                                 why=failure.getErrorMessage()))
            elif kv.value == self.address.encode() and self._lease is not None and kv.lease == self._lease:
                continue  # our own campaign's put: _observe takes the lead from its answer
            elif self.term is None or kv.create_revision != self.term:
                self._follow(kv)


class ReplayFirst(RuntimeError):
    """An append from a controller whose state no replay has built (or whose view of the log was
    lost): its events could contradict what the log holds."""


class EtcdControllerLog:
    """The controller's events in etcd, appended only by the current leader, and only on top of
    what this controller has seen: its last replay and its own appends since. If the log moved
    since (another leader wrote), the append fails its guard and this controller resigns, so a
    controller that missed events can never write events computed without them.
    """

    def __init__(self, gateway: EtcdGateway, leadership: EtcdLeadership, page_size: int = REPLAY_PAGE) -> None:
        self.gateway = gateway
        self.leadership = leadership
        self.page_size = page_size
        self.log_prefix = leadership.prefix + b"log/"
        self.last_key = leadership.prefix + b"last"
        self._lock = DeferredLock()  # appends and replays one at a time, in call order
        self._seen = False  # _last_index/_last_mod hold what the last replay and later appends saw
        self._last_index = 0
        self._last_mod = 0  # mod_revision of ``last`` (0: not there yet)

    def index_key(self, index: int) -> bytes:
        return self.log_prefix + str(index).zfill(INDEX_DIGITS).encode()

    # -- replay -----------------------------------------------------------------------------------

    def replay(self) -> Deferred[list[bytes]]:
        return self._lock.run(self._replay)

    @inlineCallbacks
    def _replay(self) -> Any:
        """Every event at one revision (pages read at the revision of the first read)."""
        answer = yield self.gateway.range(self.last_key)
        revision = _revision(answer)
        last_index, last_mod = self._last_of(_range_kvs(answer))
        events: list[bytes] = []
        start, end = self.index_key(1), prefix_end(self.log_prefix)
        while True:
            page = yield self.gateway.range(start, end, limit=self.page_size, revision=revision)
            kvs = _range_kvs(page)
            for kv in kvs:
                expected = self.index_key(len(events) + 1)
                if kv.key != expected:
                    raise EtcdError(f"etcd event log under {self.log_prefix.decode()!r}: found "
                                    f"{kv.key.decode(errors='replace')!r} where {expected.decode()!r} belongs")
                events.append(kv.value)
            if not page.get("more") or not kvs:
                break
            start = kvs[-1].key + b"\0"
        if len(events) != last_index:
            raise EtcdError(f"etcd event log under {self.log_prefix.decode()!r}: {len(events)} events but "
                            f"{self.last_key.decode()!r} says {last_index}")
        self._seen, self._last_index, self._last_mod = True, last_index, last_mod
        return events

    def _last_of(self, kvs: list[KeyValue]) -> tuple[int, int]:
        if not kvs:
            return 0, 0
        try:
            return int(kvs[0].value), kvs[0].mod_revision
        except ValueError:
            raise EtcdError(f"etcd key {self.last_key.decode()!r}: not an index: {kvs[0].value[:50]!r}") from None

    # -- append -----------------------------------------------------------------------------------

    def append(self, events: list[bytes]) -> Deferred[None]:
        if not events:
            return succeed(None)
        if len(events) > MAX_EVENTS_PER_APPEND:
            return fail(ValueError(f"{len(events)} events in one append: etcd takes at most "
                                   f"{MAX_EVENTS_PER_APPEND} in one transaction"))
        size = sum(len(event) for event in events)
        if size > MAX_APPEND_BYTES:
            return fail(ValueError(f"{size} bytes of events in one append: at most {MAX_APPEND_BYTES}"))
        return self._lock.run(self._append, list(events))

    @inlineCallbacks
    def _append(self, events: list[bytes]) -> Any:
        leadership = self.leadership
        term = leadership.term
        if not leadership.is_leader or term is None:
            raise NotLeader(leadership.leader_address)
        if not self._seen:
            raise ReplayFirst(f"append to the etcd log under {self.log_prefix.decode()!r} before a replay: "
                              "replay when this controller becomes leader")
        first = self._last_index + 1
        last = first + len(events) - 1
        puts = [{"request_put": {"key": b64(self.index_key(first + i)), "value": b64(event)}}
                for i, event in enumerate(events)]
        puts.append({"request_put": {"key": b64(self.last_key), "value": b64(str(last).encode())}})
        guard = [
            {"key": b64(leadership.leader_key), "target": "VALUE", "result": "EQUAL",
             "value": b64(leadership.address.encode())},
            {"key": b64(leadership.leader_key), "target": "CREATE", "result": "EQUAL", "create_revision": str(term)},
            {"key": b64(self.last_key), "target": "MOD", "result": "EQUAL", "mod_revision": str(self._last_mod)},
        ]
        try:
            answer = yield self.gateway.txn(guard, puts, [{"request_range": {"key": b64(leadership.leader_key)}}])
        except Exception as exc:
            self._seen = False
            leadership.resign(f"an append's outcome is unknown ({exc}): the next leader replays etcd")
            raise NotLeader(None) from exc
        if answer.get("succeeded"):
            self._last_index, self._last_mod = last, _revision(answer)
            return None
        self._seen = False
        kvs = _txn_range_kvs(answer)
        current = kvs[0] if kvs else None
        if current is not None and current.create_revision == term:
            leadership.resign("the event log moved since this controller's replay: it replays when it leads again")
            raise NotLeader(None)
        holder = current.value.decode(errors="replace") if current is not None else None
        leadership.deposed(term, holder)
        raise NotLeader(holder)


class EtcdConsensus(Service):
    """The gateway, leadership and log of one controller, started and stopped together; a Twisted
    service, so that it can be a child of the NameServer's MultiService.

    The controller subscribes to ``leadership`` and replays ``log`` whenever it becomes leader.
    """

    def __init__(self, endpoints: list[str], key_prefix: str, group: str, address: str,
                 ttl: int = DEFAULT_LEASE_TTL, reactor: Any = None) -> None:
        reactor = owners_view(reactor)  # its timers on the monotonic clock, its seconds() the wall's (clocks.py)
        self.gateway = EtcdGateway(endpoints, reactor)
        self.leadership = EtcdLeadership(self.gateway, group_prefix(key_prefix, group), address, ttl)
        self.log = EtcdControllerLog(self.gateway, self.leadership)

    @classmethod
    def from_config(cls, values: Mapping[str, Any], address: str, reactor: Any = None) -> EtcdConsensus:
        """From the ``-c`` file's keys: controllerEtcdEndpoints, controllerEtcdKeyPrefix,
        controllerDLegerGroup, controllerEtcdLeaseTtlSeconds; ``address`` is this controller's
        remoting address, ``host:port``."""
        return cls(etcd_endpoints(str(values.get("controllerEtcdEndpoints", ""))),
                   str(values.get("controllerEtcdKeyPrefix") or DEFAULT_KEY_PREFIX),
                   str(values.get("controllerDLegerGroup") or DEFAULT_GROUP), address,
                   int(values.get("controllerEtcdLeaseTtlSeconds") or DEFAULT_LEASE_TTL), reactor)

    def start(self) -> Deferred[Any]:
        """Join the group; fires once this controller leads or knows who does (or etcd did not
        answer: the beats go on trying)."""
        return self.leadership.start()

    @inlineCallbacks
    def stop(self) -> Any:
        """Leave the group (a leader's successor takes over at once) and close the connections."""
        yield self.leadership.stop()
        yield self.gateway.close()

    def startService(self) -> None:
        super().startService()
        self.start().addErrback(lambda failure: log.failure("controller on etcd: start failed", failure))

    def stopService(self) -> Deferred[Any]:
        super().stopService()
        return self.stop()
