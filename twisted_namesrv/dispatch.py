"""Dispatcher: from request frames to answer frames, without sockets.

One path per request, for every code: a repeated plain JSON route lookup is answered from memory
(AnswerCache.replies_from_memory) without decoding; any other frame is decoded once, refused or
handed to its handler once (``_outcome``: the same generator runs a handler written in steps and
one that is not), encoded once, and, when its handler says so, kept by the answer cache with the
topic and variant the handler worked out.  After each dispatched request the observers hear the
request and its response (``observe``): the place for an audit trail.

The handlers come from a ``HandlerTable``; the NameServer's is ``NAMESRV_TABLE`` (processor.py).
Another listener behind the same protocol class (server.py) is a second Dispatcher with its own
table, or a dispatcher of its own that answers frame by frame (``answer_frame_by_frame``), as
RocketMQ 5.x's controller does (controller/service.py: its answers wait for the controller log).

A big request whose handler is written in steps (a broker's whole topic table) is answered later:
its steps run across reactor turns through a Cooperator, so other connections are answered
meanwhile, and ``answer`` returns a ``Later`` for it; the frames after it wait for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from twisted.internet import defer, task
from twisted.python.failure import Failure

from . import processor
from .context import Peer
from .metrics import OTHER_CODE, Metrics
from .processor import Answer, Handler, SteppedHandler
from .remoting import RemotingCommand
from .state.routes import Channel
from .steps import STEP_BYTES, Steps, run_steps

log = logging.getLogger(__name__)

#: hears every dispatched request (refused, failed or handled) with its response, after the handler
Observer = Callable[[RemotingCommand, Peer, RemotingCommand], None]


@dataclass(frozen=True)
class HandlerTable:
    """What a listener answers: a handler per code (``handlers``), the ones written in steps for
    big requests (``in_steps``), what is refused before any handler (``refusal``: ACL, unknown
    codes) and the answer to a handler that raised (``failure``)."""

    handlers: Mapping[int, Handler]
    in_steps: Mapping[int, SteppedHandler]
    refusal: Callable[[Any, RemotingCommand, Peer], RemotingCommand | None]
    failure: Callable[[Any, RemotingCommand, Peer, Exception], RemotingCommand]


NAMESRV_TABLE = HandlerTable(processor.HANDLERS, processor.HANDLERS_IN_STEPS, processor.refusal,
                             processor.failure)


@dataclass
class Later:
    """An answer worked out in steps: ``answer`` fires with its frame (None: nothing to send);
    ``rest`` are the frames that came after it, answered once it is sent."""

    answer: defer.Deferred[bytes | None]
    rest: list[bytes]


def answer_frame_by_frame(handle: Callable[[bytes, Peer], bytes | None | defer.Deferred[bytes | None]],
                          frames: list[bytes], peer: Peer, out: list[bytes]) -> Later | None:
    """``Dispatcher.answer`` for a dispatcher that answers one frame at a time: ``handle`` gives
    each frame's answer, None (nothing to send) or a Deferred of either (answered later: the
    frames after it wait).  What a dispatcher of its own (not a HandlerTable) needs to be served
    by RemotingProtocol: ``def answer(self, frames, peer, out): return answer_frame_by_frame(self.handle, ...)``."""
    for index, frame in enumerate(frames):
        reply = handle(frame, peer)
        if isinstance(reply, defer.Deferred):
            return Later(reply, frames[index + 1:])
        if reply is not None:
            out.append(reply)
    return None


class AnswerNotEncodable(Exception):
    """A response that cannot be encoded: answered with an error, not the connection lost."""


class Dispatcher:
    """One entry for request frames (``answer``), one for closed channels (``channel_closed``).

    ``count_requests``: count and time every request for /metrics, only when metrics are served
    (the clock reads cost route lookup throughput: docs/benchmarks.md); rejections and route
    events are always counted."""

    def __init__(self, state: Any, metrics: Metrics | None = None, count_requests: bool = False,
                 call_later: Callable[[float, Callable[[], None]], object] | None = None,
                 cooperator: task.Cooperator | None = None, step_from: int = STEP_BYTES,
                 table: HandlerTable = NAMESRV_TABLE) -> None:
        self.state = state
        self.table = table
        self.metrics = metrics or Metrics(clock=state.clock)
        self.count_requests = count_requests
        self.observers: list[Observer] = []
        self._call_later = call_later  # the reactor's callLater
        self._cooperator = cooperator  # None: every request is answered at once
        self.step_from = step_from  # frames from this size whose code has a handler in steps take them
        self._one_at_a_time = defer.DeferredLock()
        #: channels closed in this reactor turn, with their reasons, in the order they closed
        self._closed: dict[Channel, str] = {}

    @property
    def answers(self) -> Any:
        """The answer cache (the state's: tests replace it)."""
        return self.state.answers

    def observe(self, observer: Observer) -> None:
        """``observer(request, peer, response)`` after every dispatched request from now on."""
        self.observers.append(observer)

    # -- frames in, frames out ------------------------------------------------------------------
    def answer(self, frames: list[bytes], peer: Peer, out: list[bytes]) -> Later | None:
        """Append the answers to ``frames`` (length prefixes stripped) to ``out``, in order;
        nothing for oneway requests and for responses to our own notifications.  A frame answered
        in steps stops there: its Later holds the frames after it.

        Raises RemotingDecodeError when a frame is not a command (``out`` holds the answers
        before it): the caller closes the channel."""
        answers, counted = self.answers, self.count_requests
        index, count = 0, len(frames)
        while index < count:
            begun = perf_counter() if counted else 0.0
            if answers.replies:
                done = answers.replies_from_memory(frames, index, out)
                if done > index:
                    if counted:
                        self.metrics.answered_from_memory((perf_counter() - begun) / (done - index), done - index)
                    index = done
                    continue
            frame = frames[index]
            index += 1
            big = len(frame) >= self.step_from
            request = RemotingCommand.decode(memoryview(frame) if big else frame)  # a big body: a view, no copy
            if request.is_response:
                continue  # answers to our own oneway notifications; nothing waits for them
            if big and self._cooperator is not None and request.code in self.table.in_steps:
                return Later(self._answer_in_steps(frame, request, peer, begun, self._cooperator), frames[index:])
            encoded = self._answer_frame(frame, request, peer, run_steps(self._outcome(request, peer)), begun)
            if encoded is not None:
                out.append(encoded)
        return None

    def handle(self, frame: bytes, peer: Peer) -> bytes | None:
        """The answer to one frame answered at once (tests and tools): None when nothing is sent."""
        out: list[bytes] = []
        later = self.answer([frame], peer, out)
        assert later is None, "handle() answers at once: use answer() for frames answered in steps"
        return b"".join(out) if out else None

    def dispatch(self, request: RemotingCommand, peer: Peer) -> RemotingCommand | None:
        """The response to a decoded request, through the same path (tests and tools)."""
        response = run_steps(self._outcome(request, peer)).response
        return None if request.is_oneway else response

    # -- the one dispatch path ------------------------------------------------------------------
    def _outcome(self, request: RemotingCommand, peer: Peer) -> Steps[Answer]:
        """Refused, or handled by the request's handler (through its steps when it has them),
        or failed; the observers hear it."""
        table, state = self.table, self.state
        response: RemotingCommand | Answer | None = table.refusal(state, request, peer)
        if response is None:
            try:
                stepped = table.in_steps.get(request.code)
                if stepped is not None:
                    response = yield from stepped(state, request, peer)
                else:
                    response = table.handlers[request.code](state, request, peer)
            except Exception as exc:
                response = table.failure(state, request, peer, exc)
        answer = response if isinstance(response, Answer) else Answer(response)
        for observer in self.observers:
            observer(request, peer, answer.response)
        return answer

    def _answer_frame(self, frame: bytes, request: RemotingCommand, peer: Peer, answer: Answer | None,
                      begun: float) -> bytes | None:
        """Encoded, kept when its handler said what under, counted; None for a oneway request."""
        if answer is None or request.is_oneway:
            if self.count_requests:
                self.metrics.answered(self._counted_code(request), None, perf_counter() - begun)
            return None
        response = answer.response
        try:
            encoded = response.encode()
        except Exception as exc:
            response = self.table.failure(self.state, request, peer,
                                          AnswerNotEncodable(f"cannot encode the answer: {type(exc).__name__}"))
            answer, encoded = Answer(response), response.encode()
        if answer.topic is not None and response.code == 0:
            self.answers.keep_route(frame, request, response, encoded, answer.topic, answer.variant)
        if self.count_requests:
            self.metrics.answered(self._counted_code(request), response.code, perf_counter() - begun)
        return encoded

    def _counted_code(self, request: RemotingCommand) -> int:
        return request.code if request.code in self.table.handlers else OTHER_CODE

    def _answer_in_steps(self, frame: bytes, request: RemotingCommand, peer: Peer, begun: float,
                         cooperator: task.Cooperator) -> defer.Deferred[bytes | None]:
        """One job in steps at a time, in arrival order: several brokers registering at once
        decode one table after the other, so memory holds one decoded table, as before steps."""
        job = SteppedJob(self._outcome(request, peer))
        answer: defer.Deferred[bytes | None] = defer.Deferred(job.cancel)

        def run() -> defer.Deferred[object] | None:
            if answer.called:  # cancelled while the job before it ran: the peer went
                return None
            return job.run(cooperator)

        def deliver(result: object) -> None:
            if answer.called:
                return
            if isinstance(result, Failure):
                answer.errback(result)
            else:
                answer.callback(self._answer_frame(frame, request, peer, job.result, begun))

        self._one_at_a_time.run(run).addBoth(deliver)
        return answer

    # -- closed channels ------------------------------------------------------------------------
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


class SteppedJob:
    """The dispatch path of one request run by a Cooperator: its result once done, stopped when
    the peer goes."""

    def __init__(self, steps: Steps[Answer]) -> None:
        self._steps = steps
        self._running: task.CooperativeTask | None = None
        self.result: Answer | None = None

    def _all(self) -> Steps[None]:
        self.result = yield from self._steps

    def run(self, cooperator: task.Cooperator) -> defer.Deferred[object]:
        self._running = cooperator.cooperate(self._all())
        return self._running.whenDone()

    def cancel(self, _: object) -> None:
        if self._running is not None:
            self._running.stop()
