"""Answers that take seconds to build, built in a thread of the reactor's pool.

A topic list of a million topics (GET_ALL_TOPIC_LIST_FROM_NAMESERVER, GET_TOPICS_BY_CLUSTER, the
unit lists: mqadmin's topicList, any peer's without ACL) is ordered as Java's hash tables iterate
and encoded: 3-4 s of CPU, all of it the reactor's when built in a handler, so every lookup waited
for it, and a peer asking again and again held them for good.  Built here, the reactor's thread
takes the interpreter back every switch interval (5 ms; the build sorts and encodes in pieces of
a few milliseconds, bodies/route.py), and lookups go on meanwhile.

One build at a time (each holds its whole answer: one at a time bounds the memory, and more
threads would only take more turns of the interpreter from the reactor's thread).  The asks for
a build (the same key) that has not begun yet share it, and it is made by the newest ask's
``make`` (the one holding the newest names; the older ones are let go): whatever peers ask for
and change meanwhile, at most one build of a key waits, beside the one under way.  An ask while
that one is under way waits for the next: the one under way may be of names older than the ask.
On a clock without threads (a test's ``task.Clock``) a build is made at once.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from twisted.internet import defer, interfaces, threads
from twisted.python.failure import Failure

T = TypeVar("T")


class _Waiting:
    """A build that has not begun: the newest ask's ``make`` and who waits for it."""

    def __init__(self, make: Callable[[], Any], told: defer.Deferred[Any]) -> None:
        self.make = make
        self.told = [told]


class BuildsApart:
    """``build(key, make)``: a Deferred of what ``make()`` returns, made in a thread of ``reactor``'s pool."""

    def __init__(self, reactor: object) -> None:
        self.reactor = reactor
        self._one_at_a_time = defer.DeferredLock()
        #: the builds waiting their turn, by key (one a key: asks for it meanwhile join it)
        self._waiting: dict[Hashable, _Waiting] = {}

    def build(self, key: Hashable, make: Callable[[], T]) -> defer.Deferred[T]:
        if not interfaces.IReactorThreads.providedBy(self.reactor):
            return defer.maybeDeferred(make)
        mine: defer.Deferred[T] = defer.Deferred()
        waiting = self._waiting.get(key)
        if waiting is not None:
            waiting.make = make  # the newest ask's: its names are the newest
            waiting.told.append(mine)
            return mine
        waiting = self._waiting[key] = _Waiting(make, mine)
        reactor: interfaces.IReactorThreads = self.reactor  # type: ignore[assignment]

        def run() -> defer.Deferred[T]:
            del self._waiting[key]  # begun: an ask from now on waits for the next
            return threads.deferToThreadPool(reactor, reactor.getThreadPool(), waiting.make)

        def done(result: T | Failure) -> None:
            for told in waiting.told:
                if isinstance(result, Failure):
                    told.errback(result)
                else:
                    told.callback(result)

        self._one_at_a_time.run(run).addBoth(done)
        return mine
