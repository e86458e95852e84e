"""Answers that take seconds to build, built in a thread of the reactor's pool.

A topic list of a million topics (GET_ALL_TOPIC_LIST_FROM_NAMESERVER, GET_TOPICS_BY_CLUSTER, the
unit lists: mqadmin's topicList, any peer's without ACL) is ordered as Java's hash tables iterate
and encoded: 3-4 s of CPU, all of it the reactor's when built in a handler, so every lookup waited
for it, and a peer asking again and again held them for good.  Built here, the reactor's thread
takes the interpreter back every switch interval (5 ms; the build sorts and encodes in pieces of
a few milliseconds, bodies/route.py), and lookups go on meanwhile.

One build at a time (each holds its whole answer: one at a time bounds the memory, and more
threads would only take more turns of the interpreter from the reactor's thread); asks for a
build already under way (the same key) share it.  On a clock without threads (a test's
``task.Clock``) a build is made at once.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from twisted.internet import defer, interfaces, threads
from twisted.python.failure import Failure

T = TypeVar("T")


class BuildsApart:
    """``build(key, make)``: a Deferred of what ``make()`` returns, made in a thread of ``reactor``'s pool."""

    def __init__(self, reactor: object) -> None:
        self.reactor = reactor
        self._one_at_a_time = defer.DeferredLock()
        #: the builds under way or waiting their turn, by key, and who waits for each
        self._waiting: dict[Hashable, list[defer.Deferred[Any]]] = {}

    def build(self, key: Hashable, make: Callable[[], T]) -> defer.Deferred[T]:
        mine: defer.Deferred[T] = defer.Deferred()
        waiting = self._waiting.get(key)
        if waiting is not None:
            waiting.append(mine)
            return mine
        if not interfaces.IReactorThreads.providedBy(self.reactor):
            return defer.maybeDeferred(make)
        self._waiting[key] = [mine]
        reactor: interfaces.IReactorThreads = self.reactor  # type: ignore[assignment]

        def run() -> defer.Deferred[T]:
            return threads.deferToThreadPool(reactor, reactor.getThreadPool(), make)

        def done(result: T | Failure) -> None:
            for told in self._waiting.pop(key):
                if isinstance(result, Failure):
                    told.errback(result)
                else:
                    told.callback(result)

        self._one_at_a_time.run(run).addBoth(done)
        return mine
