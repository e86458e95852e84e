"""Answers that take seconds to build, built in a thread of the reactor's pool.

A topic list of a million topics (GET_ALL_TOPIC_LIST_FROM_NAMESERVER, GET_TOPICS_BY_CLUSTER, the
unit lists: mqadmin's topicList, any peer's without ACL) is ordered as Java's hash tables iterate
and encoded: 3-4 s of CPU, all of it the reactor's when built in a handler, so every lookup waited
for it, and a peer asking again and again held them for good.  Built here, the reactor's thread
takes the interpreter back every switch interval (5 ms; the build sorts and encodes in pieces of
a few milliseconds, bodies/route.py), and lookups go on meanwhile.

One build at a time (each holds its whole answer: one at a time bounds the memory, and more
threads would only take more turns of the interpreter from the reactor's thread).  A build is
asked for by ``begin``, called in the reactor's thread in the turn the build begins: it takes
what the build reads (the topics' names: 8 MB at a million) and returns the function the thread
runs.  A build waiting its turn holds nothing but who waits for it, and the asks for one that
has not begun (the same key) share it: whatever peers ask for and change meanwhile, at most one
build of a key waits beside the one under way, and it answers with the names of its beginning,
never older than any ask it answers.  An ask while one is under way waits for the next.
Keys that peers make by the thousand (a cluster's topic list: any peer that may register makes
clusters) are asked for wrapped in ``Behind``: those builds begin only when no other waits, so many
connections each asking a different cluster's list queue that many builds behind the one under way,
and an operator's whole topic list (one key, shared) waits for that one, not for all of them.
An ask cancelled before its build begins (the status page's search whose client went away) is
let go: a build no one waits for any more is never begun, and nothing of it is held.
Each ask holds its decoded request, its Deferreds and their callbacks until answered (2.0-2.3 KB
by tracemalloc, ``WAITER_BYTES``): given the server's memory budget (budget.py,
receiveMemoryBudget), an ask takes that much of it until it is answered or let go, and an ask the
budget has no room for is refused (``NoRoom``: its caller answers an error, logs and counts it).
Before, only the peers' connections bounded them: at maxConnections' 10,000, each asking a cluster's
list behind a long build and reading nothing, 20-23 MB that nothing counted.
On a clock without threads (a test's ``task.Clock``) a build is made at once.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, NamedTuple, TypeVar

from twisted.internet import defer, interfaces, threads
from twisted.python.failure import Failure

from .budget import MemoryBudget

T = TypeVar("T")

#: ``begin()``, in the reactor's thread when the build begins: the function its thread runs
Begin = Callable[[], Callable[[], T]]


#: what one ask waiting for a build holds (its request decoded, its Deferreds and callbacks: 2.0-2.3
#: KB by tracemalloc for a GET_TOPICS_BY_CLUSTER), taken from the memory budget until it is answered
WAITER_BYTES = 2048


class NoRoom(Exception):
    """An ask refused: the memory budget has no room for one more waiting (its caller refuses it)."""


class Behind(NamedTuple):
    """A key of builds that wait behind every other build not begun (module docstring)."""

    key: Hashable


class Scrape(NamedTuple):
    """A key whose asks take nothing from the memory budget: Prometheus' scrapes of /metrics. They
    are few (the HTTP port's own connection limit bounds them, and all join one build), and a scrape
    refused when the budget is full would read as the server down (NamesrvDown) just when an
    operator needs its figures."""

    key: Hashable


class BuildsApart:
    """``build(key, begin)``: a Deferred of what ``begin()()`` returns, made in a thread of ``reactor``'s pool."""

    def __init__(self, reactor: object, budget: MemoryBudget | None = None) -> None:
        self.reactor = reactor
        #: what the asks waiting hold is taken from it (None: not counted, a test's)
        self.budget = budget
        #: the asks waiting now (each holding WAITER_BYTES of the budget), and those refused for want of room
        self.asks = 0
        self.refused = 0
        #: each build not begun yet, in the order first asked: its ``begin`` and who waits for it
        #: (asks for it meanwhile join it)
        self._waiting: dict[Hashable, tuple[Begin[Any], list[defer.Deferred[Any]]]] = {}
        #: the same for keys asked for ``Behind``: begun only when none of the others waits
        self._behind: dict[Hashable, tuple[Begin[Any], list[defer.Deferred[Any]]]] = {}
        self._running = False

    def build(self, key: Hashable, begin: Begin[T]) -> defer.Deferred[T]:
        if not interfaces.IReactorThreads.providedBy(self.reactor):
            return at_once(key, begin)
        budget = None if isinstance(key, Scrape) else self.budget
        if budget is not None and not budget.take(WAITER_BYTES, inflation=False):
            self.refused += 1
            return defer.fail(NoRoom(f"no room in receiveMemoryBudget ({budget.limit} bytes, {budget.held} held) "
                                     f"for one more ask waiting for a build ({self.asks} wait)"))
        self.asks += 1
        waiting = self._behind if isinstance(key, Behind) else self._waiting
        pending = waiting.get(key)
        if pending is None:
            pending = waiting[key] = (begin, [])
        told = pending[1]

        def cancelled(mine: defer.Deferred[T]) -> None:
            """Not waited for any more: let go, and the build too if no one else waits (not begun)."""
            if mine in told:
                told.remove(mine)
                if not told and waiting.get(key) is pending:
                    del waiting[key]
        mine: defer.Deferred[T] = defer.Deferred(cancelled)
        told.append(mine)
        self._next()
        return mine.addBoth(self._answered, budget)

    def _answered(self, result: T, budget: MemoryBudget | None) -> T:
        """An ask answered, failed or let go: what it held goes back to the budget it was taken from."""
        self.asks -= 1
        if budget is not None:
            budget.release(WAITER_BYTES)
        return result

    def _next(self) -> None:
        """Begin the build asked for first (not ``Behind`` before one that is), unless one is under way."""
        waiting = self._waiting or self._behind
        if self._running or not waiting:
            return
        key = next(iter(waiting))
        begin, told = waiting.pop(key)  # begun: an ask from now on waits for the next
        self._running = True
        # an IReactorThreads (``__init__`` checked it): typed as one, mypy reads zope's interface methods,
        # declared without ``self``, as taking none ("does not accept self argument")
        reactor: Any = self.reactor
        try:
            make = begin()
        except Exception:
            made: defer.Deferred[Any] = defer.fail()
        else:
            made = threads.deferToThreadPool(reactor, reactor.getThreadPool(), make)

        def done(result: object) -> None:
            self._running = False
            for one in told:
                if one.called:  # cancelled while it was built
                    continue
                if isinstance(result, Failure):
                    one.errback(result)
                else:
                    one.callback(result)
            self._next()
        made.addBoth(done)

    def waiting(self) -> list[Hashable]:
        """The keys of the builds asked for and not begun yet, in the order they begin (as things stand)."""
        return [*self._waiting, *self._behind]


def at_once(key: Hashable, begin: Begin[T]) -> defer.Deferred[T]:
    """A build made now, in this thread (no reactor's pool: a test's clock, the default state's)."""
    return defer.maybeDeferred(lambda: begin()())
