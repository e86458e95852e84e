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
On a clock without threads (a test's ``task.Clock``) a build is made at once.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from twisted.internet import defer, interfaces, threads
from twisted.python.failure import Failure

T = TypeVar("T")

#: ``begin()``, in the reactor's thread when the build begins: the function its thread runs
Begin = Callable[[], Callable[[], T]]


class BuildsApart:
    """``build(key, begin)``: a Deferred of what ``begin()()`` returns, made in a thread of ``reactor``'s pool."""

    def __init__(self, reactor: object) -> None:
        self.reactor = reactor
        self._one_at_a_time = defer.DeferredLock()
        #: who waits for each build not begun yet, by key (asks for it meanwhile join it)
        self._waiting: dict[Hashable, list[defer.Deferred[Any]]] = {}

    def build(self, key: Hashable, begin: Begin[T]) -> defer.Deferred[T]:
        if not interfaces.IReactorThreads.providedBy(self.reactor):
            return at_once(key, begin)
        mine: defer.Deferred[T] = defer.Deferred()
        waiting = self._waiting.get(key)
        if waiting is not None:
            waiting.append(mine)
            return mine
        told = self._waiting[key] = [mine]
        reactor: interfaces.IReactorThreads = self.reactor  # type: ignore[assignment]

        def run() -> defer.Deferred[T]:
            del self._waiting[key]  # begun: an ask from now on waits for the next
            try:
                make = begin()
            except Exception:
                return defer.fail()
            return threads.deferToThreadPool(reactor, reactor.getThreadPool(), make)

        def done(result: T | Failure) -> None:
            for one in told:
                if isinstance(result, Failure):
                    one.errback(result)
                else:
                    one.callback(result)

        self._one_at_a_time.run(run).addBoth(done)
        return mine


def at_once(key: Hashable, begin: Begin[T]) -> defer.Deferred[T]:
    """A build made now, in this thread (no reactor's pool: a test's clock, the default state's)."""
    return defer.maybeDeferred(lambda: begin()())
