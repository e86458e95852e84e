"""Dispatcher: from a request frame to its answer frame, without sockets.

As in Java's Dispatcher, this is where the parts meet: the state (configuration, route
and KV tables, the answer cache), the handler table and the metrics.  The protocol hands over
whole frames and writes what comes back; a channel that closes is reported here.

A big request whose handler is written in steps (HANDLERS_IN_STEPS: a broker's whole topic
table) is answered later: its steps run across reactor turns through a Cooperator, so other
connections are answered meanwhile, and ``handle`` returns a Deferred of the answer frame.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from time import perf_counter

from twisted.internet import defer, task
from twisted.python.failure import Failure

from .audit import AUDITED, record
from .context import NamesrvState, Peer
from .metrics import OTHER_CODE, Metrics
from .processor import (
    HANDLERS,
    HANDLERS_IN_STEPS,
    V5_REQUEST_CODES,
    BadRequest,
    respond,
    route_variant,
)
from .remoting import RemotingCommand, RequestCode, ResponseCode
from .state.routes import Channel
from .steps import STEP_BYTES, Steps

Answer = bytes | None

log = logging.getLogger(__name__)


class Dispatcher:
    """One entry for requests (``handle``), one for closed channels (``channel_closed``).

    ``count_requests``: count and time every request for /metrics, only when metrics are served
    (the clock reads cost route lookup throughput: docs/benchmarks.md); rejections and route
    events are always counted."""

    def __init__(self, state: NamesrvState, metrics: Metrics | None = None, count_requests: bool = False,
                 call_later: Callable[[float, Callable[[], None]], object] | None = None,
                 cooperator: task.Cooperator | None = None, step_from: int = STEP_BYTES) -> None:
        self.state = state
        self.answers = state.answers
        self.metrics = metrics or Metrics(clock=state.clock)
        self.count_requests = count_requests
        self._call_later = call_later  # the reactor's callLater
        self._cooperator = cooperator  # None: every request is answered at once
        self.step_from = step_from  # frames from this size whose code has a handler in steps take them
        self._one_at_a_time = defer.DeferredLock()
        #: channels closed in this reactor turn, with their reasons, in the order they closed
        self._closed: dict[Channel, str] = {}

    def handle(self, frame: bytes, peer: Peer) -> Answer | defer.Deferred[Answer]:
        """The answer frame to one request frame (length prefix stripped, as both are here), or
        None when nothing is sent (oneway requests, responses to our own notifications); a
        Deferred of that for a big request answered in steps (cancel it when the peer goes).

        Raises RemotingDecodeError when the frame is not a command: the caller closes the channel."""
        if len(frame) >= self.step_from and self._cooperator is not None:
            request = RemotingCommand.decode(memoryview(frame))  # its body a view: no copy in this turn
            if request.code in HANDLERS_IN_STEPS and not request.is_response:
                return self._answer_in_steps(request, peer, self._cooperator)
        if self.count_requests:
            return self._handle_counted(frame, peer)
        return self.answers.reply_to(frame) or self._answer_frame(frame, peer)[1]

    def _handle_counted(self, frame: bytes, peer: Peer) -> bytes | None:
        begun = perf_counter()
        reply = self.answers.reply_to(frame)
        if reply is not None:
            self.metrics.answered_from_memory(perf_counter() - begun, 1)
            return reply
        request, encoded, response_code = self._answer_frame(frame, peer)
        if request is not None:
            code = request.code if request.code in HANDLERS else OTHER_CODE
            self.metrics.answered(code, response_code, perf_counter() - begun)
        return encoded

    def _answer_frame(self, frame: bytes, peer: Peer) -> tuple[RemotingCommand | None, bytes | None, int | None]:
        """(the request, or None for a response frame; the answer frame; its response code)."""
        request = RemotingCommand.decode(frame)
        if request.is_response:
            return None, None, None  # answers to our own oneway notifications; nothing waits for them
        answered = self.answer(request, peer)
        if answered is None:
            return request, None, None
        response, encoded = answered
        if request.code == RequestCode.GET_ROUTEINFO_BY_TOPIC and response.code == ResponseCode.SUCCESS:
            self._keep_route_reply(frame, request, response, encoded)
        return request, encoded, response.code

    def _keep_route_reply(self, frame: bytes, request: RemotingCommand, response: RemotingCommand,
                          encoded: bytes) -> None:
        topic, variant, zone = route_variant(self.state, request)
        if zone is None and topic is not None:
            self.answers.keep_reply(frame, request, response, encoded, topic, variant)

    def answer(self, request: RemotingCommand, peer: Peer) -> tuple[RemotingCommand, bytes] | None:
        """dispatch, encoded."""
        response = self.dispatch(request, peer)
        return None if response is None else self._encoded(request, response, peer)

    def _encoded(self, request: RemotingCommand, response: RemotingCommand,
                 peer: Peer) -> tuple[RemotingCommand, bytes]:
        """An answer that cannot be encoded costs one error reply, not the connection."""
        try:
            return response, response.encode()
        except Exception as exc:
            log.exception("cannot encode the answer to request %s from %s", request.code, peer.address)
            response = respond(self.state, request, ResponseCode.SYSTEM_ERROR,
                               f"cannot encode the answer: {type(exc).__name__}", normal=False)
            return response, response.encode()

    def dispatch(self, request: RemotingCommand, peer: Peer) -> RemotingCommand | None:
        """Answer one request by its code (HANDLERS); None when nothing is to be sent (oneway)."""
        response = self._refusal(request, peer)
        if response is None:
            try:
                response = HANDLERS[request.code](self.state, request, peer)
            except Exception as exc:
                response = self._failed(request, peer, exc)
        if request.code in AUDITED:  # the audit trail's one call (audit.py)
            record(self.state, self.metrics, request, peer, response)
        return None if request.is_oneway else response

    def _dispatch_steps(self, request: RemotingCommand, peer: Peer) -> Steps[RemotingCommand | None]:
        """dispatch, through the handler written in steps."""
        response = self._refusal(request, peer)
        if response is None:
            try:
                response = yield from HANDLERS_IN_STEPS[request.code](self.state, request, peer)
            except Exception as exc:
                response = self._failed(request, peer, exc)
        return None if request.is_oneway else response

    def _answer_in_steps(self, request: RemotingCommand, peer: Peer,
                         cooperator: task.Cooperator) -> defer.Deferred[Answer]:
        """One job in steps at a time, in arrival order: several brokers registering at once
        decode one table after the other, so memory holds one decoded table, as before steps."""
        begun = perf_counter()
        answered: list[RemotingCommand | None] = []
        running: list[task.CooperativeTask] = []

        def cancel(_: object) -> None:  # the peer went
            if running:
                running[0].stop()

        answer: defer.Deferred[Answer] = defer.Deferred(cancel)

        def steps() -> Steps[None]:
            answered.append((yield from self._dispatch_steps(request, peer)))

        def run() -> defer.Deferred[object] | None:
            if answer.called:  # cancelled while the job before it ran: the peer went
                return None
            running.append(cooperator.cooperate(steps()))
            return running[0].whenDone()

        def deliver(result: object) -> None:
            if answer.called:
                return
            if isinstance(result, Failure):
                answer.errback(result)
            else:
                answer.callback(self._answer_frame_of(request, answered[0], peer, begun))

        self._one_at_a_time.run(run).addBoth(deliver)
        return answer

    def _answer_frame_of(self, request: RemotingCommand, response: RemotingCommand | None, peer: Peer,
                         begun: float) -> Answer:
        if response is None:
            return None
        response, encoded = self._encoded(request, response, peer)
        if self.count_requests:
            self.metrics.answered(request.code, response.code, perf_counter() - begun)
        return encoded

    def _refusal(self, request: RemotingCommand, peer: Peer) -> RemotingCommand | None:
        """The answer to a request no handler may take: refused by the ACL, or an unknown code."""
        state = self.state
        acl = state.acl
        refusal = (acl.refusal(request.code, request.ext, request.body, peer.address)
                   if acl and acl.guards(request.code) else None)
        if refusal is not None:  # as a Java broker answers an AclException
            log.warning("request %s from %s refused: %s", request.code, peer.address, refusal)
            return respond(state, request, ResponseCode.SYSTEM_ERROR, refusal, normal=False)
        if request.code not in HANDLERS or (request.code in V5_REQUEST_CODES and not state.profile.v5_request_codes):
            return respond(state, request, ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                           f" request type {request.code} not supported", normal=False)
        return None

    def _failed(self, request: RemotingCommand, peer: Peer, exc: Exception) -> RemotingCommand:
        """The answer to a handler that raised: a bad request is refused with its reason; a
        handler bug costs one answer, never the connection."""
        if isinstance(exc, BadRequest):
            log.warning("request %s from %s refused: %s", request.code, peer.address, exc)
            return respond(self.state, request, ResponseCode.SYSTEM_ERROR, str(exc), normal=False)
        log.exception("process request %s from %s failed", request.code, peer.address)
        return respond(self.state, request, ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}", normal=False)

    def channel_closed(self, channel: Channel, reason: str = "connection closed") -> None:
        """BrokerHousekeepingService: the brokers registered over ``channel`` go with it; ``reason``
        ("connection closed", or "idle: ..." when the idle timeout closed it) is in their events.

        With ``call_later``, at the reactor's next turn, together with every channel closed in this
        one: when a rack loses its network, the groups it empties leave the topic table in one scan
        rather than one scan each, so lookups wait for one scan. Without it (tests), at once."""
        if self._call_later is None:
            self.state.routes.on_channel_destroy(channel, reason)
            return
        if not self._closed:
            self._call_later(0, self._remove_closed)
        self._closed[channel] = reason

    def _remove_closed(self) -> None:
        closed, self._closed = self._closed, {}
        self.state.routes.on_channels_destroy(closed)
