"""Dispatcher: from request frames to answer frames, without sockets; every listener's.

One path per request, for every code: a repeated plain JSON route lookup is answered from memory
(AnswerCache.replies_from_memory; ``answer_read`` for a client's repeats at the start of a read,
before it is cut into frames) without decoding; any other frame is decoded once, refused or
handed to its handler once (``_outcome``: the same generator runs a handler written in steps and
one that is not), encoded once, and, when its handler says so, kept by the answer cache with the
topic and variant the handler worked out.  A broker's first registration of the common shape is
tried first as one (``processor.register_fused``: read from its frame, applied by the same rules,
its answer spliced), which hands any other back to that path before anything changed.  After
each dispatched request the observers hear the request and its response (``observe``): the place
for an audit trail.

The handlers come from a ``HandlerTable``; the NameServer's is ``NAMESRV_TABLE`` (processor.py),
the controller's ``CONTROLLER_TABLE`` (controller/processor.py).  A handler returns a response (or
an ``Answer``), or a Deferred of a response: the controller's answers wait for the controller log.
A Deferred that has already fired (the file log's) is answered at once; one that has not makes
``answer`` return a ``Later``, and the frames after it wait for it, as for a big request.

A big request whose handler is written in steps (a broker's whole topic table) is answered later
too: its steps run across reactor turns through a Cooperator, a few milliseconds of them per turn,
so other connections are answered meanwhile.  Small ones past the first AT_ONCE_PER_TURN of a
reactor turn are answered in the turns after, that many a turn: thousands of brokers
re-registering at once are read in few turns, and the lookups read in the same turn would
otherwise wait for every one of them; those read past the turn's share are known by their code
alone (``peek_code``) and decoded in the turn that answers them.

What is refused before any handler is the table's (``refusal``: the ACL) and the dispatcher's (an
unknown code); a handler that raises costs one error answer, never the connection: a
``BadRequest`` (a field Java cannot decode) is answered SYSTEM_ERROR naming it and logged in one
warning line, anything else is logged with its traceback.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

from twisted.internet import defer, task
from twisted.logger import Logger
from twisted.python.failure import Failure

from . import processor
from .answer_cache import NO_LIMIT, UNREAD, RenewalKey, Unread, renewal_key_steps
from .context import Peer
from .metrics import OTHER_CODE, Metrics
from .processor import REGISTER_BROKER, Answer, Handler, SteppedHandler
from .remoting import JSON_SERIALIZE, ONEWAY_FLAG, RemotingCommand, RemotingDecodeError, ResponseCode
from .remoting.command import peek_code
from .remoting.values import BadRequest
from .state.routes import Channel
from .steps import STEP_BYTES, Steps, run_steps

log = Logger()

#: the code a registration's and a heartbeat's answer is tried and counted by, the enum member
#: itself read once: Python 3.11 reads ``ResponseCode.X`` through EnumType's ``__getattr__`` hook
#: (type's own look-up, called as a method), about 1,000 instructions a read (the JSON serialize type:
#: remoting.JSON_SERIALIZE; REGISTER_BROKER: processor, the handler table, which tries a first registration by it)
_SUCCESS = ResponseCode.SUCCESS

#: small requests with a handler in steps (registrations) answered at once in one reactor turn; the
#: turn's others are answered in the turns after, as many a turn (about 70-140 µs each: 16 of them
#: are a few milliseconds, as much as a Cooperator's turn)
AT_ONCE_PER_TURN = 16

#: the bytes of big registrations (STEP_BYTES or more: a broker's table of a thousand topics and up)
#: renewed from memory in one reactor turn at most: checking one against its broker's kept
#: registration hashes all of it (SHA-1 and its CRC, about 1.3 ms a MiB), as much as a Cooperator's
#: tick (service.STEPS_PER_TURN_SECONDS); one past it, or bigger, is checked in the Cooperator's
#: steps (AnswerCache.renewal_in_steps), a STEP_BYTES a step
RENEWED_BYTES_PER_TURN = 3 * STEP_BYTES

#: the largest registration whose answer is kept to be renewed from memory (in steps past
#: RENEWED_BYTES_PER_TURN): about 25k topics, the 100k step's brokers' 3.2 MB.  A bigger one goes the
#: usual way every time: 5.x brokers send tables past 50k topics in pieces of about 8 MB one after the
#: other on one connection, each of which would replace the last one's key (one hash of it more to
#: keep, one more to check, for nothing)
RENEWED_IN_STEPS_BYTES = 16 * STEP_BYTES

#: closed channels whose brokers are removed in one reactor turn (dispatch.channel_closed), about
#: 12-16 us a broker (1,000 held a turn for 11-16 ms at 5,000 brokers, turns.py); the groups they
#: empty join the walk of topicQueueTable of those before them while it has not started
CLOSED_PER_TURN = 250

#: hears every dispatched request (refused, failed or handled) with its response, after the handler
Observer = Callable[[RemotingCommand, Peer, RemotingCommand], None]
#: a handler's result: at once, or (the controller's) once the log has it
Outcome = Answer | defer.Deferred[Answer]


def _serves_every_code(state: Any, code: int) -> bool:
    return True


def _checks_no_peer(state: Any, code: int) -> bool:
    return False


@dataclass(frozen=True)
class HandlerTable:
    """What a listener answers, and how it refuses and fails: a handler per code (``handlers``),
    the ones written in steps for big requests (``in_steps``), what is refused before any handler
    (``refusal``: the ACL; None lets the request through), which codes with a handler this state
    serves (``serves``: 4.9.8 knows no 5.x codes), how an error is answered (``error_reply``:
    state, request, code, remark), what a closed channel takes with it (``closed``: the channels
    closed together, with their reasons), a listener's own per-request count beside Metrics
    (``counted``: state, request, handled by its handler?, seconds) and the word the log lines use
    for its requests (``subject``)."""

    handlers: Mapping[int, Handler | Callable[[Any, RemotingCommand, Peer], Any]]
    in_steps: Mapping[int, SteppedHandler]
    refusal: Callable[[Any, RemotingCommand, Peer], RemotingCommand | None]
    error_reply: Callable[[Any, RemotingCommand, int, str], RemotingCommand]
    closed: Callable[[Any, dict[Channel, str]], None]
    serves: Callable[[Any, int], bool] = _serves_every_code
    counted: Callable[[Any, RemotingCommand, bool, float], None] | None = None
    #: whether a request of this code is let in by who sends it (the ACL), not by its bytes alone:
    #: then no answer frame is kept to be served again to the same bytes (``replies_from_memory``)
    checks_peer: Callable[[Any, int], bool] = _checks_no_peer
    keeps_answers: bool = True
    subject: str = "request"
    #: the listener its refusals are counted and logged under (refusals.REASONS)
    listener: str = "remoting"
    #: every code with a handler, in one go or in steps (a code with neither is unknown)
    codes: frozenset[int] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "codes", frozenset(self.handlers) | frozenset(self.in_steps))


NAMESRV_TABLE = HandlerTable(processor.HANDLERS, processor.HANDLERS_IN_STEPS, processor.refusal,
                             processor.error_reply, processor.channels_closed, processor.serves,
                             checks_peer=processor.checks_peer)


@dataclass
class Later:
    """An answer worked out in steps or waiting for a Deferred: ``answer`` fires with its frame
    (None: nothing to send); ``rest`` are the frames that came after it, answered once it is sent;
    ``size``: the bytes of the frame being answered, held until it is."""

    answer: defer.Deferred[bytes | None]
    rest: Sequence[bytes]
    size: int = 0


@dataclass
class Full:
    """The answers worked out fill the room the caller gave: ``rest`` are the frames not answered
    yet, to answer once those are written (a read of small requests must not become gigabytes of
    answers held for a peer that does not read them)."""

    rest: Sequence[bytes]



class _NoAnswersKept:
    """The answer cache of a listener that keeps none (the controller's): its headers parsed each time."""

    replies: dict[bytes, bytes] = {}
    renewals: dict[Channel, object] = {}
    headers = None

    @staticmethod
    def forget_channel(channel: Channel) -> None:
        pass


#: what a handler answers at once: tested before Deferred, an abstract class whose isinstance
#: runs Python (ABCMeta's) on every request
_ANSWERED = (RemotingCommand, Answer)


class AnswerNotEncodable(Exception):
    """A response that cannot be encoded: answered with an error, not the connection lost."""


class Dispatcher:
    """One entry for request frames (``answer``), one for closed channels (``channel_closed``).

    ``count_requests``: count and time every request for /metrics, only when metrics are served
    (the clock reads cost route lookup throughput: docs/benchmarks.md); rejections and route
    events are always counted."""

    def __init__(self, state: Any, metrics: Metrics, count_requests: bool = False,
                 call_later: Callable[[float, Callable[[], None]], object] | None = None,
                 cooperator: task.Cooperator | None = None, step_from: int = STEP_BYTES,
                 table: HandlerTable = NAMESRV_TABLE) -> None:
        self.state = state
        self.table = table
        self.metrics = metrics
        self.count_requests = count_requests
        self.observers: list[Observer] = []
        self._call_later = call_later  # the reactor's callLater
        self._cooperator = cooperator  # None: every request is answered at once
        self.step_from = step_from  # frames from this size whose code has a handler in steps take them
        self._at_once = 0  # requests with a handler in steps answered at once in this reactor turn
        self._renewed_bytes = 0  # bytes of big registrations checked against their kept one in this turn
        #: small requests with a handler in steps past a turn's AT_ONCE_PER_TURN, oldest first
        self._waiting: deque[tuple[defer.Deferred[bytes | None], Callable[[], None]]] = deque()
        self._one_at_a_time = defer.DeferredLock()
        #: channels closed in this reactor turn, with their reasons, in the order they closed
        self._closed: dict[Channel, str] = {}
        #: a first registration of the common shape through the fused path (processor.register_fused);
        #: False sends every one the general way (the equivalence tests' reference)
        self.fused = True
        #: the codes some observer hears (``observe``: an observer's ``heard_codes``, every code
        #: for one without them): a registration of a code no observer hears may skip its request
        self._heard_codes: frozenset[int] | None = frozenset()

    @property
    def answers(self) -> Any:
        """The answer cache (the state's: tests replace it); none for a table that keeps no answers."""
        return self.state.answers if self.table.keeps_answers else _NoAnswersKept

    def observe(self, observer: Observer) -> None:
        """``observer(request, peer, response)`` after every dispatched request from now on (only
        those of its ``heard_codes`` when it names them: the others' may be answered without a
        request made for it, ``processor.register_fused``)."""
        self.observers.append(observer)
        codes = getattr(observer, "heard_codes", None)
        self._heard_codes = None if codes is None or self._heard_codes is None else self._heard_codes | codes

    # -- frames in, frames out ------------------------------------------------------------------
    def answer(self, frames: Sequence[bytes], peer: Peer, out: list[bytes],
               room: int = NO_LIMIT) -> Later | Full | None:
        """Append the answers to ``frames`` (length prefixes stripped) to ``out``, in order;
        nothing for oneway requests and for responses to our own notifications.  A frame answered
        in steps stops there: its Later holds the frames after it.  Once the answers appended
        reach ``room`` bytes (at least one is), the frames after them are left in a Full.

        Raises RemotingDecodeError when a frame is not a command (``out`` holds the answers
        before it): the caller closes the channel."""
        answers, counted = self.answers, self.count_requests
        index, count, used = 0, len(frames), 0
        while index < count:
            if used >= room:
                return Full(frames[index:])
            begun = perf_counter() if counted else 0.0
            frame = frames[index]
            big = len(frame) >= self.step_from
            # a broker's connection keeping its heartbeat's answer: its frame is tried as that heartbeat
            # first (a storm's every read), as a kept lookup only when it is not one
            kept_here = bool(answers.renewals) and peer.channel in answers.renewals
            renewable = kept_here and (not big or len(frame) <= RENEWED_IN_STEPS_BYTES)
            if renewable and (not big or self._renewal_fits(len(frame))):
                renewable = False  # (tried: not again in steps)
                encoded = answers.renewal_from_memory(frame, peer.channel)
                if encoded is not None:  # a broker's heartbeat: its registration again, renewed
                    out.append(encoded)
                    used += len(encoded)
                    if counted:
                        self.metrics.answered(REGISTER_BROKER, _SUCCESS,
                                              perf_counter() - begun)
                    index += 1
                    continue
            fusable_head = frame.startswith(processor.FUSED_HEAD, 4)  # a registration: no kept lookup
            if answers.replies and not fusable_head:
                mark = len(out)
                done = answers.replies_from_memory(frames, index, out, room - used)
                if done > index:
                    used += sum(map(len, out[mark:]))
                    if counted:
                        self.metrics.answered_from_memory((perf_counter() - begun) / (done - index), done - index)
                    index = done
                    continue
            index += 1
            if not big and self._at_once >= AT_ONCE_PER_TURN and self._turn_full_for(frame):
                return Later(self._answer_next_turn(frame, None, peer, begun), frames[index:], len(frame))
            full = None  # whether this turn's AT_ONCE_PER_TURN are answered (asked once: _turn_full counts)
            # (a connection that registered before: live, most likely, which the fused path hands back)
            if not big and not kept_here and fusable_head and self._fusable():
                full = self._cooperator is not None and self._turn_full()
                if full:  # (tried fused when its turn comes, as a frame left undecoded)
                    return Later(self._answer_next_turn(frame, None, peer, begun), frames[index:], len(frame))
                encoded = self._fused(frame, peer, begun)
                if encoded is not None:
                    out.append(encoded)
                    used += len(encoded)
                    continue
            request = RemotingCommand.decode(memoryview(frame) if big else frame,  # a big body: a view, no copy
                                             answers.headers)
            if request.is_response:
                continue  # answers to our own oneway notifications; nothing waits for them
            if self._cooperator is not None and request.code in self.table.in_steps:
                if big:
                    return Later(self._answer_in_steps(frame, request, peer, begun, self._cooperator, renewable),
                                 frames[index:], len(frame))
                if self._turn_full() if full is None else full:
                    return Later(self._answer_next_turn(frame, request, peer, begun), frames[index:], len(frame))
            outcome = run_steps(self._outcome(request, peer))
            # waits for the controller log: the frames after it wait too
            if not isinstance(outcome, _ANSWERED) and isinstance(outcome, defer.Deferred):
                return Later(self._answer_later(frame, request, peer, outcome, begun), frames[index:], len(frame))
            encoded = self._answer_frame(frame, request, peer, outcome, begun)
            if encoded is not None:
                out.append(encoded)
                used += len(encoded)
        return None

    def _fusable(self) -> bool:
        """Whether a registration may take the fused path: the NameServer's, no observer hearing it."""
        heard = self._heard_codes
        return (self.fused and self.table is NAMESRV_TABLE
                and heard is not None and REGISTER_BROKER not in heard)

    def _fused(self, frame: bytes, peer: Peer, begun: float) -> bytes | None:
        """A first registration of the common shape through processor.register_fused: its answer,
        encoded and kept, counted; None when the general path answers it (nothing changed)."""
        try:
            fused = processor.register_fused(self.state, frame, peer)
        except Exception as exc:  # (a bug past the point of no return: one answer, as _outcome's)
            request = RemotingCommand.decode(frame, self.answers.headers)
            return self._answer_frame(frame, request, peer, Answer(self._failed(request, peer, exc), handled=False),
                                      begun)
        if fused is None or isinstance(fused, processor.Fused):
            return None if fused is None else self._answer_frame(frame, fused.request, peer, fused.answer, begun)
        if self.count_requests:
            self.metrics.answered(REGISTER_BROKER, _SUCCESS, perf_counter() - begun)
        return fused

    def _turn_full_for(self, frame: bytes) -> bool:
        """Whether this turn, already full, leaves ``frame`` for a later one without decoding it:
        a small request whose code (``peek_code``: a guess, checked when it is decoded) has a
        handler in steps.  During a storm hundreds of registrations are read in one turn; the
        ones past AT_ONCE_PER_TURN cost that turn no more than this look (decoding each one's
        header there made the turn, and a lookup read in it, wait for all of them)."""
        return self._cooperator is not None and self._call_later is not None and peek_code(frame) in self.table.in_steps

    def _turn_full(self) -> bool:
        """Whether a small request with a handler in steps takes them: once AT_ONCE_PER_TURN were
        answered at once in this reactor turn (counted again from the next)."""
        if self._call_later is None:
            return False
        if self._at_once >= AT_ONCE_PER_TURN:
            return True
        if not self._at_once:
            self._call_later(0, self._next_turn)
        self._at_once += 1
        return False

    def _next_turn(self) -> None:
        self._at_once = 0

    def _renewal_fits(self, size: int) -> bool:
        """Whether a big registration of ``size`` bytes is checked against its broker's kept one
        in this turn (``renewal_from_memory``: no header decoded, no steps), within the turn's
        RENEWED_BYTES_PER_TURN (counted again from the next); one past it takes the steps, as a
        changed table does.  A broker of 2,000 topics sending its table again (324 KB) is renewed so
        in 0.37-0.45 ms of CPU with its reads, most of it the hashing."""
        if size > RENEWED_BYTES_PER_TURN:
            return False
        if self._call_later is None:
            return True
        if self._renewed_bytes + size > RENEWED_BYTES_PER_TURN:
            return False
        if not self._renewed_bytes:
            self._call_later(0, self._next_renewal_turn)
        self._renewed_bytes += size
        return True

    def _next_renewal_turn(self) -> None:
        self._renewed_bytes = 0

    def _answer_next_turn(self, frame: bytes, request: RemotingCommand | None, peer: Peer,
                          begun: float) -> defer.Deferred[bytes | None]:
        """A small request with a handler in steps past this turn's AT_ONCE_PER_TURN: it waits its
        turn in arrival order and is answered at once within a later turn's AT_ONCE_PER_TURN
        (``_answer_waiting``), so a storm of them is answered that many a turn with the lookups in
        between, and none waits behind a big one's steps.  ``request`` None: not decoded yet
        (``_turn_full_for``), it is then; a frame that does not decode fails the answer with the
        RemotingDecodeError (the protocol closes the channel, as for one it decodes at once)."""
        answer: defer.Deferred[bytes | None] = defer.Deferred()

        def run() -> None:
            if (request is None and frame.startswith(processor.FUSED_HEAD, 4) and self._fusable()
                    and peer.channel not in self.answers.renewals):
                encoded = self._fused(frame, peer, begun)  # (its place in the turn taken by _answer_waiting)
                if encoded is not None:
                    answer.callback(encoded)
                    return
            try:
                decoded = request if request is not None else RemotingCommand.decode(frame, self.answers.headers)
            except RemotingDecodeError:
                answer.errback(Failure())
                return
            if decoded.is_response:
                answer.callback(None)
                return
            outcome = run_steps(self._outcome(decoded, peer))
            if isinstance(outcome, defer.Deferred):  # (a guess that was wrong: a handler not in steps)
                self._answer_later(frame, decoded, peer, outcome, begun).chainDeferred(answer)
                return
            answer.callback(self._answer_frame(frame, decoded, peer, outcome, begun))
        if not self._waiting:
            self._call_later(0, self._answer_waiting)  # type: ignore[misc]
        self._waiting.append((answer, run))
        return answer

    def _answer_waiting(self) -> None:
        """This turn's share of the small requests waiting, oldest first; the rest in the next
        (each waiting request is looked at once: a storm of thousands costs no more than its size)."""
        waiting = self._waiting
        while waiting:
            answer, run = waiting[0]
            if answer.called:  # cancelled: the peer went
                waiting.popleft()
                continue
            if self._turn_full():
                self._call_later(0, self._answer_waiting)  # type: ignore[misc]
                return
            waiting.popleft()
            run()

    def answer_read(self, data: bytes, out: list[bytes], room: int = NO_LIMIT) -> int:
        """Answer the repeated plain JSON route lookups at the start of a read as it came, before
        it is cut into frames (AnswerCache.replies_from_read), appending their answers to ``out``
        (about ``room`` bytes of them at most, at least one): the bytes of ``data`` answered (0:
        none; the rest goes through ``answer`` once cut)."""
        answers = self.answers
        if not answers.replies or data.startswith(processor.FUSED_HEAD, 8):  # (a registration is no lookup)
            return 0
        if not self.count_requests:
            return answers.replies_from_read(data, out, room)[0]
        begun = perf_counter()
        used, count = answers.replies_from_read(data, out, room)
        if count:
            self.metrics.answered_from_memory((perf_counter() - begun) / count, count)
        return used

    def handle(self, frame: bytes, peer: Peer) -> bytes | None:
        """The answer to one frame answered at once (tests and tools): None when nothing is sent."""
        out: list[bytes] = []
        later = self.answer([frame], peer, out)
        assert later is None, "handle() answers at once: use answer() for frames answered in steps"
        return b"".join(out) if out else None

    def dispatch(self, request: RemotingCommand, peer: Peer) -> RemotingCommand | None:
        """The response to a decoded request, through the same path (tests and tools)."""
        outcome = run_steps(self._outcome(request, peer))
        assert not isinstance(outcome, defer.Deferred), "dispatch() answers at once: use answer()"
        return None if request.is_oneway else outcome.response

    # -- the one dispatch path ------------------------------------------------------------------
    def _outcome(self, request: RemotingCommand, peer: Peer) -> Steps[Outcome]:
        """Refused, or handled by the request's handler (through its steps when it has them),
        or failed; the observers hear it (once a Deferred answer fires)."""
        table, state, code = self.table, self.state, request.header.code  # (the property: a call a read)
        response: Any = table.refusal(state, request, peer)
        handled = response is None
        if handled and (code not in table.codes or not table.serves(state, code)):
            response = table.error_reply(state, request, ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                         f" request type {code} not supported")
            handled = False
        if handled:
            try:
                stepped = table.in_steps.get(code)
                if stepped is not None:
                    response = yield from stepped(state, request, peer)
                else:
                    response = table.handlers[code](state, request, peer)
            except Exception as exc:
                response, handled = self._failed(request, peer, exc), False
        if not isinstance(response, _ANSWERED) and isinstance(response, defer.Deferred):
            return self._when_answered(request, peer, response)
        return self._heard(request, peer, response, handled)

    def _heard(self, request: RemotingCommand, peer: Peer, response: RemotingCommand | Answer,
               handled: bool) -> Answer:
        answer = response if isinstance(response, Answer) else Answer(response, handled=handled)
        for observer in self.observers:
            observer(request, peer, answer.response)
        return answer

    def _failed(self, request: RemotingCommand, peer: Peer, exc: BaseException) -> RemotingCommand:
        """The answer to a handler that raised (or an answer that cannot be encoded): a bad request
        is refused with its reason; a bug costs one answer, never the connection."""
        subject = self.table.subject
        if isinstance(exc, BadRequest):  # a refusal: one warning a host, every one counted (a loop is no flood)
            self.state.refusals(self.table.listener, "bad_request", peer.address, "{subject} {code} refused: {why}",
                                subject=subject, code=request.code, why=str(exc))
            remark = str(exc)
        elif getattr(exc, "logged", False):  # a refused write (a store that failed) said why in one line already
            remark = str(exc)
        else:
            log.failure("process {subject} {code} from {peer} failed", Failure(exc, type(exc), exc.__traceback__),
                        subject=subject, code=request.code, peer=peer.address)
            remark = f"{type(exc).__name__}: {exc}"
        return self.table.error_reply(self.state, request, ResponseCode.SYSTEM_ERROR, remark)

    def _when_answered(self, request: RemotingCommand, peer: Peer,
                       pending: defer.Deferred[RemotingCommand]) -> Outcome:
        """A handler's Deferred: its Answer now when it has fired (the file log answers in the same
        turn: no Deferred, so pipelined requests do not nest), else a Deferred of it."""
        answered: defer.Deferred[Answer] = pending.addCallbacks(
            lambda response: self._heard(request, peer, response, True),
            lambda failure: self._heard(request, peer, self._failed(request, peer, failure.value), False))
        done: list[Answer] = []

        def now(answer: Answer) -> Answer:
            done.append(answer)
            return answer

        answered.addCallback(now)
        if done:
            return done[0]
        outer: defer.Deferred[Answer] = defer.Deferred()  # cancelling it (peer gone) leaves the handler's turn alone
        answered.addCallbacks(outer.callback, outer.errback)
        return outer

    def _answer_later(self, frame: bytes, request: RemotingCommand, peer: Peer, pending: defer.Deferred[Answer],
                      begun: float) -> defer.Deferred[bytes | None]:
        return pending.addCallback(lambda answer: self._answer_frame(frame, request, peer, answer, begun))

    def _answer_frame(self, frame: bytes, request: RemotingCommand, peer: Peer, answer: Answer | None,
                      begun: float, renewal_key: RenewalKey | None | Unread = UNREAD) -> bytes | None:
        """Encoded, kept when its handler said what under (``renewal_key``: the registration's,
        worked out in steps already), counted; None for a oneway request."""
        if answer is None or request.header.flag & ONEWAY_FLAG:  # (is_oneway, without the property's call)
            if self.count_requests:
                self._count(request, None, answer is None or answer.handled, begun)
            return None
        response = answer.response
        try:
            encoded = response.encode()
        except Exception as exc:
            unencodable = AnswerNotEncodable(f"cannot encode the answer: {type(exc).__name__}")
            response = self._failed(request, peer, unencodable)
            answer, encoded = Answer(response, handled=False), response.encode()
        if answer.topic is not None and response.code == 0:
            reusable = not self.table.checks_peer(self.state, request.code)
            self.answers.keep_route(frame if reusable else None, request, response, encoded, answer.topic,
                                    answer.variant)
        elif answer.renewal is not None and self._renews_from_memory(frame, request, response, peer):
            self.answers.keep_renewal(frame, peer.channel, request.header.opaque, encoded, answer.renewal,
                                      renewal_key)
        if self.count_requests:
            self._count(request, response.code, answer.handled, begun)
        return encoded

    def _renews_from_memory(self, frame: bytes, request: RemotingCommand, response: RemotingCommand,
                            peer: Peer) -> bool:
        """Whether the answer to a registration the same bytes renew again is kept for them
        (AnswerCache.keep_renewal): a plain JSON one answered SUCCESS in JSON, on a connection,
        when its bytes alone let it in (not when the ACL checks it by peer), up to
        RENEWED_IN_STEPS_BYTES (checked again in steps past a turn's RENEWED_BYTES_PER_TURN)."""
        asked = request.header  # its fields read once (RemotingCommand's properties are a call each)
        return (response.header.code == _SUCCESS and asked.code == REGISTER_BROKER
                and peer.channel is not None and (len(frame) < self.step_from or len(frame) <= RENEWED_IN_STEPS_BYTES)
                and request.serialize_type == JSON_SERIALIZE
                and response.serialize_type == JSON_SERIALIZE
                and not (asked.flag & ONEWAY_FLAG) and not self.table.checks_peer(self.state, asked.code))

    def _count(self, request: RemotingCommand, response_code: int | None, handled: bool, begun: float) -> None:
        seconds = perf_counter() - begun
        code = request.code if request.code in self.table.codes else OTHER_CODE
        self.metrics.answered(code, response_code, seconds)
        if self.table.counted is not None:
            self.table.counted(self.state, request, handled, seconds)

    def _answer_in_steps(self, frame: bytes, request: RemotingCommand, peer: Peer, begun: float,
                         cooperator: task.Cooperator, renewable: bool = False) -> defer.Deferred[bytes | None]:
        """One job in steps at a time, in arrival order: several brokers registering at once
        decode one table after the other, so memory holds one decoded table, as before steps.
        ``renewable``: its connection keeps the answer to its last registration, so the job first
        checks the frame against it (``AnswerCache.renewal_in_steps``: a big table sent again is
        renewed by hashing it, a STEP_BYTES a step, not decoded); a registration kept for
        renewing later is hashed in steps too (``renewal_key_steps``), not in the turn answering it."""
        answers = self.answers
        key: list[RenewalKey | None] = []

        def steps() -> Steps[bytes | Outcome]:
            if renewable:
                renewed = yield from answers.renewal_in_steps(frame, peer.channel)
                if renewed is not None:
                    return renewed
            outcome = yield from self._outcome(request, peer)
            if (isinstance(outcome, Answer) and outcome.renewal is not None and peer.channel is not None
                    and len(frame) <= RENEWED_IN_STEPS_BYTES):
                key.append((yield from renewal_key_steps(frame)))
            return outcome

        job = SteppedJob(steps())
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
                return
            outcome = job.result
            assert not isinstance(outcome, defer.Deferred), "a handler in steps answers when its steps end"
            if isinstance(outcome, bytes):  # renewed from memory
                if self.count_requests:
                    self.metrics.answered(REGISTER_BROKER, _SUCCESS, perf_counter() - begun)
                answer.callback(outcome)
            else:
                answer.callback(self._answer_frame(frame, request, peer, outcome, begun, key[0] if key else UNREAD))

        self._one_at_a_time.run(run).addBoth(deliver)
        return answer

    # -- closed channels ------------------------------------------------------------------------
    def channel_closed(self, channel: Channel, reason: str = "connection closed") -> None:
        """BrokerHousekeepingService: the brokers registered over ``channel`` go with it; ``reason``
        ("connection closed", or "idle: ..." when the idle timeout closed it) is in their events.

        With ``call_later``, at the reactor's next turn, together with every channel closed in this
        one: when a rack loses its network, the groups it empties leave the topic table in one scan
        rather than one scan each, so lookups wait for one scan. Without it (tests), at once."""
        self.answers.forget_channel(channel)
        if self._call_later is None:
            self.table.closed(self.state, {channel: reason})
            return
        if not self._closed:
            self._call_later(0, self._remove_closed)
        self._closed[channel] = reason

    def _remove_closed(self) -> None:
        """The channels closed so far, CLOSED_PER_TURN a turn in closing order: a rack of
        brokers lost at once leaves in a few scans, and no turn removes thousands of them (5,000
        brokers in one turn took 114 ms of CPU, a lookup's wait)."""
        closed = self._closed
        if len(closed) <= CLOSED_PER_TURN:
            self._closed = {}
        else:
            now = dict(itertools.islice(closed.items(), CLOSED_PER_TURN))
            for channel in now:
                del closed[channel]
            closed = now
            self._call_later(0, self._remove_closed)  # type: ignore[misc]
        self.table.closed(self.state, closed)


class SteppedJob:
    """The dispatch path of one request run by a Cooperator: its result once done, stopped when
    the peer goes."""

    def __init__(self, steps: Steps[bytes | Outcome]) -> None:
        self._steps = steps
        self._running: task.CooperativeTask | None = None
        self.result: bytes | Outcome | None = None

    def _all(self) -> Steps[None]:
        self.result = yield from self._steps

    def run(self, cooperator: task.Cooperator) -> defer.Deferred[object]:
        self._running = cooperator.cooperate(self._all())
        return self._running.whenDone()

    def cancel(self, _: object) -> None:
        if self._running is not None:
            self._running.stop()
