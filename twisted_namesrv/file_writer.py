"""A store's file written off the reactor thread: the periodic writers' and the ones any peer's
request makes (PUT_KV_CONFIG, UPDATE_NAMESRV_CONFIG: state/kv.py, state/store.py's SavesOfNewest).

state/store.py's write_atomically fsyncs the file and its directory.  On a busy disk one such
write waited 0.4-0.9 s (the topology's, every 2 s while 1,000 brokers registered, load 5:
tools/bench/server_turns.py), all of it the reactor's, so every lookup waited with it.  The
periodic writers (the page's events, the topology) hand the bytes, encoded in the reactor thread,
to a thread of the reactor's pool: one write of a file at a time (a tick while one is in flight
writes nothing; the next catches up), and a write that must be done before the caller goes on (a
retirement, the stop) waits for the one in flight and is made in the calling thread.  A request's
change is answered once its write is done (``write_soon``'s ``done``).  On a clock
without threads (a test's ``task.Clock``) every write is made at once.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from twisted.internet import interfaces, threads
from twisted.logger import Logger
from twisted.python.failure import Failure

from .state.store import StoreError, write_atomically

log = Logger()


class FileWriter:
    """Writes ``path`` (``what`` names it in errors: state/store.py's StoreError); each write that
    fails is counted in ``failures`` by (store, errno), as every store's saves are
    (namesrv_store_write_failures_total), in the reactor thread."""

    def __init__(self, reactor: object, path: str | os.PathLike[str], what: str = "file",
                 failures: Counter[tuple[str, str]] | None = None) -> None:
        self.reactor = reactor
        self.path = path
        self.what = what
        self.failures = failures
        self._lock = threading.Lock()  # one write of the file at a time, whichever thread makes it
        #: a write handed to a thread has not finished yet
        self.in_flight = False
        #: writes numbered as asked for (in the reactor thread), and the newest made: a thread's write
        #: that starts after a newer one was made in the calling thread (a retirement, the stop)
        #: is skipped, never laid over it
        self._asked = 0
        self._made = 0

    def write_now(self, data: bytes) -> None:
        """Write ``data`` in this thread (after a write in flight); OSError (StoreError) when it
        cannot be made durable."""
        try:
            self._write(self._number(), data)
        except OSError as exc:
            self._count(exc)
            raise

    def _count(self, error: OSError) -> None:
        if self.failures is not None and isinstance(error, StoreError):
            self.failures[error.what, error.errno_name] += 1

    def _number(self) -> int:
        self._asked += 1
        return self._asked

    def _write(self, number: int, data: bytes | Callable[[], bytes]) -> None:
        with self._lock:
            if number < self._made:
                return  # asked for before the one made: its data is older
            write_atomically(self.path, data if isinstance(data, bytes) else data(), self.what)
            self._made = number

    def write_soon(self, data: bytes | Callable[[], bytes], done: Callable[[OSError | None], None]) -> None:
        """Write ``data`` (or what it makes, made in the thread) in a thread of the reactor's pool;
        ``done`` is called in the reactor thread with None, or the OSError that stopped it.  Only
        while none is ``in_flight``."""
        assert not self.in_flight, "one write of a file at a time"
        if not interfaces.IReactorThreads.providedBy(self.reactor):
            try:
                self.write_now(data if isinstance(data, bytes) else data())
            except OSError as exc:
                done(exc)
                return
            done(None)
            return
        self.in_flight = True
        # an IReactorThreads: typed as one, mypy reads zope's interface methods, declared without
        # ``self``, as taking none ("does not accept self argument"), as apart.py says
        reactor: Any = self.reactor

        def finished(result: object) -> None:
            self.in_flight = False
            if isinstance(result, Failure):
                error = result.value
                if not isinstance(error, OSError):  # a bug, or no memory to encode: failed all the same
                    log.failure("writing {path} failed", result, path=str(self.path))
                    error = StoreError(self.what, self.path, OSError(None, f"{type(error).__name__}: {error}"))
                self._count(error)
                done(error)  # told either way: a caller waits for it (a KV change's, a config update's)
                return
            done(None)
        threads.deferToThreadPool(reactor, reactor.getThreadPool(), self._write, self._number(), data
                                  ).addBoth(finished)
