"""A small etcd v3 client over etcd's JSON gateway, on Twisted's HTTP client.

etcd serves its gRPC API as JSON too (``POST /v3/kv/range`` and so on; keys and values base64,
64-bit numbers as strings, fields at their default value left out). Talking to that gateway through
``twisted.web.client.Agent`` needs no new dependency and no thread: the Python gRPC clients for etcd
are either unmaintained and broken with today's protobuf, or asyncio/thread based. ``/v3/`` is the
gateway's path from etcd 3.4 on (Debian 12 ships 3.4.23; 3.4 still also answers the older
``/v3beta/``, which 3.5 dropped).

Only what the controller needs: range, txn, lease grant/keep-alive/revoke, and a watch (a streamed
answer, one JSON object per line). Calls go to one endpoint at a time and move on to the next when a
connection fails; see ``EtcdGateway.call`` for which calls are tried again there.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from io import BytesIO
from typing import Any

from twisted.internet import error as net_error
from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.protocol import Protocol, connectionDone
from twisted.internet.task import deferLater
from twisted.python.failure import Failure
from twisted.web.client import (
    Agent,
    FileBodyProducer,
    HTTPConnectionPool,
    PotentialDataLoss,
    RequestTransmissionFailed,
    ResponseDone,
    ResponseFailed,
    ResponseNeverReceived,
)
from twisted.web.http_headers import Headers

API = "/v3"
JSON_HEADERS = Headers({b"Content-Type": [b"application/json"]})
CALL_TIMEOUT = 5.0  # seconds a unary call may take before it fails (its outcome then unknown)
UNAVAILABLE_RETRIES = 8  # tries again after a 503 (etcd electing its leader: about a second)
UNAVAILABLE_PAUSE = 0.25  # seconds between those tries
#: connection failures that prove nothing reached the endpoint
_NOT_SENT = (net_error.ConnectionRefusedError, net_error.ConnectError, net_error.DNSLookupError)
#: the connection went away during the call: etcd may or may not have acted on it
_LOST = (ResponseNeverReceived, RequestTransmissionFailed, ResponseFailed)


class EtcdError(Exception):
    """etcd answered with an error (``status``: the HTTP status, 503 while etcd elects its leader), or
    could not be reached (``status`` 0); the message names the call."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def _body(data: bytes) -> Any:
    """A request body for Agent (an IBodyProducer, which mypy cannot see through zope's interfaces)."""
    return FileBodyProducer(BytesIO(data))


def prefix_end(prefix: bytes) -> bytes:
    """The range_end that makes a range cover every key starting with ``prefix`` (etcd's rule:
    the prefix with its last byte below 0xff incremented)."""
    for i in range(len(prefix) - 1, -1, -1):
        if prefix[i] < 0xFF:
            return prefix[:i] + bytes([prefix[i] + 1])
    return b"\0"  # all keys


@dataclass(frozen=True, slots=True)
class KeyValue:
    """One key as etcd holds it (revisions are etcd's global revision numbers)."""

    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int

    @classmethod
    def from_json(cls, kv: dict[str, Any]) -> KeyValue:
        return cls(unb64(kv.get("key")), unb64(kv.get("value")), int(kv.get("create_revision", 0)),
                   int(kv.get("mod_revision", 0)), int(kv.get("lease", 0)))


class EtcdGateway:
    """Calls to one etcd cluster through its JSON gateway."""

    def __init__(self, endpoints: list[str], reactor: Any, timeout: float = CALL_TIMEOUT) -> None:
        if not endpoints:
            raise ValueError("no etcd endpoint given")
        self.endpoints = list(endpoints)
        self.reactor = reactor
        self.timeout = timeout
        self._current = 0
        self._pool = HTTPConnectionPool(reactor, persistent=True)
        self._pool.maxPersistentPerHost = 4
        self._agent = Agent(reactor, connectTimeout=timeout, pool=self._pool)
        self._watches: list[WatchStream] = []

    # -- unary calls ------------------------------------------------------------------------------

    @inlineCallbacks
    def call(self, path: str, body: dict[str, Any], retry: bool = True) -> Any:
        """POST ``body`` to ``/v3/<path>``; the answer's JSON object.

        A connection that fails moves the calls on to the next endpoint, and this call with them when
        nothing can have reached etcd (connection refused) or when ``retry`` says doing it twice is
        harmless (every call but a transaction): once round the endpoints. A 503 (etcd electing its
        own leader) is tried again a few times, a moment apart, when ``retry`` allows."""
        data = json.dumps(body).encode()
        unreachable = unavailable = 0
        while True:
            endpoint = self.endpoints[self._current]
            try:
                answer = yield self._post(endpoint, path, data)
                return answer
            except _NOT_SENT + _LOST as exc:
                self._current = (self._current + 1) % len(self.endpoints)
                why = Failure(exc).getErrorMessage()
                if isinstance(exc, _LOST) and not retry:
                    raise EtcdError(f"etcd {path}: connection to {endpoint} lost, outcome unknown: {why}") from None
                unreachable += 1
                if unreachable >= len(self.endpoints):
                    raise EtcdError(f"etcd {path}: no endpoint answered ({', '.join(self.endpoints)}): {why}") \
                        from None
            except EtcdError as exc:
                unavailable += 1
                if exc.status != 503 or not retry or unavailable > UNAVAILABLE_RETRIES:
                    raise
                yield deferLater(self.reactor, UNAVAILABLE_PAUSE, lambda: None)

    @inlineCallbacks
    def _post(self, endpoint: str, path: str, data: bytes) -> Any:
        url = f"{endpoint}{API}/{path}".encode()
        request = self._agent.request(b"POST", url, JSON_HEADERS, _body(data))
        request.addTimeout(self.timeout, self.reactor)
        response = yield request
        reading = read_body(response)
        reading.addTimeout(self.timeout, self.reactor)
        raw = yield reading
        try:
            answer = json.loads(raw)
        except ValueError:
            raise EtcdError(f"etcd {path}: HTTP {response.code}, not JSON: {raw[:200]!r}") from None
        if response.code != 200 or "error" in answer:
            message = answer.get("message") or answer.get("error") or raw[:200]
            raise EtcdError(f"etcd {path}: HTTP {response.code}: {message}", response.code)
        return answer

    def range(self, key: bytes, range_end: bytes | None = None, limit: int = 0,
              revision: int = 0) -> Deferred[Any]:
        body: dict[str, Any] = {"key": b64(key)}
        if range_end is not None:
            body["range_end"] = b64(range_end)
        if limit:
            body["limit"] = str(limit)
        if revision:
            body["revision"] = str(revision)
        return self.call("kv/range", body)

    def txn(self, compare: list[dict[str, Any]], success: list[dict[str, Any]],
            failure: list[dict[str, Any]] | None = None) -> Deferred[Any]:
        return self.call("kv/txn", {"compare": compare, "success": success, "failure": failure or []}, retry=False)

    @inlineCallbacks
    def lease_grant(self, ttl: int) -> Any:
        """A new lease of ``ttl`` seconds: (id, granted ttl)."""
        answer = yield self.call("lease/grant", {"TTL": str(ttl)})
        return int(answer["ID"]), int(answer.get("TTL", 0))

    @inlineCallbacks
    def lease_keepalive(self, lease: int) -> Any:
        """Renew ``lease`` once: its remaining TTL, 0 when etcd no longer has it."""
        answer = yield self.call("lease/keepalive", {"ID": str(lease)})
        return int(answer.get("result", {}).get("TTL", 0))

    def lease_revoke(self, lease: int) -> Deferred[Any]:
        """Revoke ``lease``: the keys attached to it are deleted at once."""
        return self.call("lease/revoke", {"ID": str(lease)})

    # -- watch ------------------------------------------------------------------------------------

    @inlineCallbacks
    def watch(self, key: bytes, start_revision: int, on_events: Callable[[list[dict[str, Any]]], None]) -> Any:
        """Watch ``key`` from ``start_revision``: ``on_events`` gets each batch of events (dicts with
        ``type`` absent for PUT, "DELETE" for a delete, and ``kv``). Fires with the WatchStream once
        etcd confirmed the watch; its ``ended`` fires when the stream stops for any reason."""
        body = json.dumps({"create_request": {"key": b64(key), "start_revision": str(start_revision)}}).encode()
        endpoint = self.endpoints[self._current]
        # a streamed answer keeps its connection: its own pool, so unary calls never wait behind it
        agent = Agent(self.reactor, connectTimeout=self.timeout, pool=HTTPConnectionPool(self.reactor, False))
        request = agent.request(b"POST", f"{endpoint}{API}/watch".encode(), JSON_HEADERS,
                                _body(body))
        request.addTimeout(self.timeout, self.reactor)
        response = yield request
        if response.code != 200:
            raw = yield read_body(response)
            raise EtcdError(f"etcd watch: HTTP {response.code}: {raw[:200]!r}")
        stream = WatchStream(on_events)
        response.deliverBody(stream)
        self._watches.append(stream)
        stream.ended.addBoth(self._forget, stream)
        stream.created.addTimeout(self.timeout, self.reactor)
        try:
            yield stream.created
        except Exception:
            stream.cancel()
            raise
        return stream

    def _forget(self, result: Any, stream: WatchStream) -> Any:
        if stream in self._watches:
            self._watches.remove(stream)
        return result

    def close(self) -> Deferred[Any]:
        """End every watch and close the pooled connections."""
        for stream in list(self._watches):
            stream.cancel()
        return self._pool.closeCachedConnections()


def read_body(response: Any) -> Deferred[bytes]:
    """The whole body of ``response``; cancelling the Deferred (the call's timeout) closes the
    connection.  Not twisted.web.client.readBody: an Agent hands the body protocol
    HTTP11ClientProtocol's ``TransportProxyProducer``, which has no ``abortConnection`` (Twisted issue
    8227, open), so readBody warns (DeprecationWarning) at every answer and its cancel closes nothing: a
    stalled etcd body stayed connected past the timeout, and its late end raised AlreadyCalledError.
    ``stopProducing`` is what the proxy passes on (tests/controller/test_etcd.py, the stalled answer)."""
    body = _Body()
    body.done = Deferred(lambda _: body.transport.stopProducing() if body.transport else None)
    response.deliverBody(body)
    return body.done


class _Body(Protocol):
    done: Deferred[bytes]

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def dataReceived(self, data: bytes) -> None:
        self._parts.append(data)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self.done.called:
            return
        if reason.check(ResponseDone, PotentialDataLoss):
            self.done.callback(b"".join(self._parts))
        else:
            self.done.errback(reason)


class WatchStream(Protocol):
    """The body of a watch answer: one JSON object per line, read as it comes."""

    def __init__(self, on_events: Callable[[list[dict[str, Any]]], None]) -> None:
        self.on_events = on_events
        self.created: Deferred[None] = Deferred()
        self.ended: Deferred[str] = Deferred()  # fires with why the stream ended
        self._buffer = b""
        self._why: str | None = None

    def dataReceived(self, data: bytes) -> None:
        self._buffer += data
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            if line.strip():
                self._message(line)

    def _message(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            self._stop(f"not JSON: {line[:200]!r}")
            return
        result = message.get("result")
        if result is None:
            self._stop(f"error: {message.get('error') or message}")
            return
        if result.get("canceled"):
            self._stop(f"canceled by etcd: {result.get('cancel_reason') or 'compacted'}")
            return
        if result.get("created") and not self.created.called:
            self.created.callback(None)
        events = result.get("events")
        if events:
            self.on_events(events)

    def _stop(self, why: str) -> None:
        self._why = why
        self.cancel()

    def cancel(self) -> None:
        """Stop watching (closes the connection)."""
        if self._why is None:
            self._why = "canceled"
        if self.transport is not None:
            self.transport.stopProducing()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        why = self._why or ("closed by etcd" if reason.check(ResponseDone) else reason.getErrorMessage())
        if not self.created.called:
            self.created.errback(EtcdError(f"etcd watch: {why}"))
        if not self.ended.called:
            self.ended.callback(why)
