"""The controller log: where events become durable before they are answered; and leadership.

The interface is shared with the etcd store (controller/etcd.py): ``ControllerLog`` keeps every
committed event in order, ``Leadership`` says whether this controller may write.  Here the
single-node implementations: ``FileControllerLog`` (an append-only file, fsync'd before
``append`` fires) and ``SoleLeader`` (always the leader).

An append's write and fsync run in a thread of the reactor's pool, one append at a time and in
order, as the NameServer's own stores are written (file_writer.py): the embedded controller shares
the NameServer's reactor, and an fsync on a slow disk held it, every route lookup waiting with it.
The append is answered in the reactor thread once its records are durable; on a clock without
threads (a test's ``task.Clock``, or no reactor given) it is made at once in the calling thread.

File format: records of ``length (4 bytes, big-endian) | crc32 (4) | event bytes``.  A record
cut short at the very end of the file was never acknowledged (``append`` fires after fsync): it
is dropped at replay, and the file truncated to the last whole record.  Anything else that does
not read back (a bad checksum before the end, a foreign file) refuses to start, naming the path.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from twisted.internet import defer, interfaces, threads
from twisted.logger import Logger

from ..state.files import UNKNOWN_ERRNO, errno_name, open_regular
from ..state.store import StoreError, fsync_directory, write_atomically

log = Logger()
_RECORD = struct.Struct(">II")
MAGIC = b"RMQCTLLOG1\n"
MAX_RECORD = 64 << 20


class NotLeader(Exception):
    """This controller may not write: another holds the leadership (its address, or None)."""

    def __init__(self, leader_address: str | None) -> None:
        super().__init__(f"not the controller leader (leader: {leader_address or 'unknown'})")
        self.leader_address = leader_address


class ControllerLogError(Exception):
    """The store cannot be read or written: the controller refuses to start (names the path), or a
    change is refused (``errno_name`` says why, for the metrics)."""

    errno_name = UNKNOWN_ERRNO
    logged = False  # a refused append logged its line already: the dispatcher answers it without a traceback


class ControllerLog(Protocol):
    def replay(self) -> defer.Deferred[list[bytes]]:
        """Every committed event, oldest first (at start / on becoming leader)."""

    def append(self, events: list[bytes]) -> defer.Deferred[None]:
        """Fires once durable; errbacks NotLeader if not leader."""


class Leadership(Protocol):
    is_leader: bool
    leader_address: str | None  # the leader controller's remoting address "host:port", or None

    def subscribe(self, callback: Callable[[bool, str | None], None]) -> None:
        """``callback(is_leader, leader_address)`` on every change."""


class SoleLeader:
    """One controller, always the leader (the single-node default)."""

    def __init__(self, address: str | None = None) -> None:
        self.is_leader = True
        self.leader_address = address

    def subscribe(self, callback: Callable[[bool, str | None], None]) -> None:
        """Nothing ever changes."""


class FileControllerLog:
    """Events in one append-only file under ``controllerStorePath``, fsync'd per append."""

    FILE_NAME = "controller.log"

    def __init__(self, store_path: str | os.PathLike[str], reactor: object = None,
                 fsync: Callable[[int], None] = os.fsync) -> None:
        """``reactor``: appends are written in a thread of its pool, if it has one (module
        docstring); ``fsync``: how an append is made durable (a test's slow or failing disk)."""
        self.directory = Path(store_path)
        self.path = self.directory / self.FILE_NAME
        self.reactor = reactor
        self.fsync = fsync
        self._fd: int | None = None
        self.records = 0
        self.bytes = 0
        #: why the file may hold bytes past ``bytes`` (an append failed and its cut too), or None
        self._dirty: OSError | None = None
        #: appends one at a time, in the order asked (a thread's write and a close wait their turn)
        self._appends = defer.DeferredLock()

    # -- start ----------------------------------------------------------------------------------

    def open(self) -> list[bytes]:
        """Read every event, cut a torn tail, and open for appending; ControllerLogError names the
        path when the store is corrupt or cannot be written."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fresh = not self.path.exists()
            fd = open_regular(self.path, os.O_RDWR | os.O_CREAT)  # a FIFO or a directory: refused (files.py)
        except OSError as exc:
            raise ControllerLogError(f"controllerStorePath: cannot open {self.path}: {exc.strerror}") from None
        try:
            data = _read_all(fd)
            if fresh or not data:
                os.write(fd, MAGIC)
                os.fsync(fd)
                fsync_directory(self.directory)
                data = MAGIC
            events, good = self._parse(data)
            if good < len(data):
                os.ftruncate(fd, good)  # a record cut by a crash: never acknowledged
                if good == 0:  # even the header was cut
                    os.lseek(fd, 0, os.SEEK_SET)
                    os.write(fd, MAGIC)
                    good = len(MAGIC)
                os.fsync(fd)
            os.lseek(fd, 0, os.SEEK_END)
        except OSError as exc:
            os.close(fd)
            raise ControllerLogError(f"controllerStorePath: cannot prepare {self.path}: {exc.strerror}") from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self.records, self.bytes = len(events), good
        return events

    def _parse(self, data: bytes) -> tuple[list[bytes], int]:
        if not data.startswith(MAGIC):
            if MAGIC.startswith(data):  # a crash while creating the file
                return [], 0
            raise ControllerLogError(f"controllerStorePath: {self.path} is not a controller log (bad header); "
                                     "fix or move it, the controller will not start with it")
        events, offset = [], len(MAGIC)
        while offset < len(data):
            if offset + _RECORD.size > len(data):
                break  # torn tail
            length, crc = _RECORD.unpack_from(data, offset)
            end = offset + _RECORD.size + length
            if length > MAX_RECORD:
                raise self._corrupt(offset, "impossible record length")
            if end > len(data):
                break  # torn tail
            payload = data[offset + _RECORD.size:end]
            if zlib.crc32(payload) != crc:
                if end == len(data):
                    break  # the last record, half written
                raise self._corrupt(offset, "checksum mismatch")
            events.append(payload)
            offset = end
        return events, offset

    def _corrupt(self, offset: int, why: str) -> ControllerLogError:
        return ControllerLogError(f"controllerStorePath: {self.path} is corrupt at byte {offset} ({why}); "
                                  "fix or move it, the controller will not start with it")

    # -- the ControllerLog interface -----------------------------------------------------------

    def replay(self) -> defer.Deferred[list[bytes]]:
        """Every event, read again once the appends asked for before are written."""
        return self._appends.run(self._reopen)

    def _reopen(self) -> list[bytes]:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        return self.open()

    def append(self, events: list[bytes]) -> defer.Deferred[None]:
        """Write and fsync the records before firing: what is answered is on disk.  A write or fsync
        that fails is undone before the error is answered: the file is cut back to its last good
        record and fsync'd, so the next append lands right after it (never after a half record)
        and a restart replays exactly the acknowledged events.  If even the cut fails, the log
        refuses every append until a cut succeeds (each later append retries it).  The write is
        made off the reactor thread (module docstring), after the appends asked for before."""
        if self._fd is None:
            return defer.fail(ControllerLogError(f"controllerStorePath: {self.path} is not open"))
        record = b"".join(_RECORD.pack(len(e), zlib.crc32(e)) + e for e in events)
        return self._appends.run(self._append, record, len(events))

    def _append(self, record: bytes, count: int) -> defer.Deferred[None]:
        fd = self._fd
        if fd is None:  # closed while it waited its turn
            return defer.fail(ControllerLogError(f"controllerStorePath: {self.path} is not open"))

        def written(outcome: _Written) -> None:
            if outcome.cut_error is not None:
                log.error("controllerStorePath: cannot cut {path} back to byte {size}: {why}", path=str(self.path),
                          size=self.bytes, why=outcome.cut_error.strerror)
            if outcome.error is not None:
                raise self._failed(outcome.error, outcome.what)
            self.records += count
            self.bytes += len(record)
        return self._off_reactor(self._write, fd, record).addCallback(written)

    def _off_reactor(self, work: Callable[..., _Written], *args: Any) -> defer.Deferred[_Written]:
        """``work`` in a thread of the reactor's pool, or here when there is none."""
        if interfaces.IReactorThreads.providedBy(self.reactor):
            reactor: Any = self.reactor
            return threads.deferToThreadPool(reactor, reactor.getThreadPool(), work, *args)
        return defer.maybeDeferred(work, *args)

    def _write(self, fd: int, record: bytes) -> _Written:
        """The disk's part of an append (in a thread): what failed, and what became of it."""
        if self._dirty is not None:
            cut_error = self._cut_back(fd)
            if cut_error is not None:
                return _Written(self._dirty, "the log is not writable until it is cut back", cut_error)
        try:
            _write_all(fd, record)
            self.fsync(fd)
        except OSError as exc:
            self._dirty = exc
            cut_error = self._cut_back(fd)
            return _Written(exc, "undone" if cut_error is None else "NOT undone: appends refused until it is",
                            cut_error)
        return _Written()

    def _cut_back(self, fd: int) -> OSError | None:
        """Truncate to the last good record and fsync; None when the file is clean again."""
        try:
            os.ftruncate(fd, self.bytes)
            self.fsync(fd)
            os.lseek(fd, self.bytes, os.SEEK_SET)
        except OSError as exc:
            return exc
        self._dirty = None
        return None

    def _failed(self, exc: OSError, what: str) -> ControllerLogError:
        name = errno_name(exc)
        error = ControllerLogError(f"controllerStorePath: cannot write {self.path}: {exc.strerror} ({name}); "
                                   f"the change is refused, {what}")
        error.errno_name, error.logged = name, True
        log.error("{error}", error=str(error))
        return error

    def compact(self, snapshot: bytes) -> None:
        """Replace the log by one record (a ReplicasSnapshotEvent of the state its events built):
        written beside it, fsync'd, renamed over it, the directory fsync'd - a crash leaves the old
        log or the new one, both of which replay to the same state."""
        if self._fd is None:
            raise ControllerLogError(f"controllerStorePath: {self.path} is not open")
        assert not self._appends.locked, "compacted between appends (the manager's replay), never during one"
        data = MAGIC + _RECORD.pack(len(snapshot), zlib.crc32(snapshot)) + snapshot
        try:
            write_atomically(self.path, data, "controller log")
        except StoreError as exc:
            if not exc.replaced:
                raise  # the log is as it was, and still open: nothing to do
            # renamed in place, the rename perhaps not durable: either file replays to the same state
        old, self._fd = self._fd, None
        os.close(old)
        try:
            self._fd = open_regular(self.path, os.O_RDWR)
            os.lseek(self._fd, 0, os.SEEK_END)
        except OSError as exc:  # appends must not go to the old, unlinked file: stop here, loudly
            raise ControllerLogError(f"controllerStorePath: cannot reopen {self.path} after compacting it: "
                                     f"{exc.strerror}") from None
        self.records, self.bytes = 1, len(data)

    def close(self) -> defer.Deferred[None]:
        """Refuse further appends; the file is closed once the append being written is done
        (at once when none is): fires then."""
        fd, self._fd = self._fd, None
        if fd is None:
            return defer.succeed(None)
        return self._appends.run(os.close, fd)


class _Written(NamedTuple):
    """What an append's write did: nothing failed, or its error, what became of the file (``what``)
    and the error of a cut back that failed."""

    error: OSError | None = None
    what: str = ""
    cut_error: OSError | None = None


def read_log(store_path: str | os.PathLike[str]) -> list[bytes]:
    """Every committed event of the log under ``store_path``, read only (a torn tail dropped, as a
    start does): for an export while the controller is stopped.  ControllerLogError when there is no
    log or it does not read back."""
    log_file = FileControllerLog(store_path)
    try:
        data = log_file.path.read_bytes()
    except OSError as exc:
        raise ControllerLogError(f"controllerStorePath: cannot read {log_file.path}: {exc.strerror}") from None
    return log_file._parse(data)[0]


def write_log(store_path: str | os.PathLike[str], events: list[bytes]) -> Path:
    """A new controller log under ``store_path`` holding ``events`` (an import), written whole and
    durably; refuses to replace a log that holds events (two histories)."""
    log_file = FileControllerLog(store_path)
    if log_file.path.exists() and read_log(store_path):
        raise ControllerLogError(f"controllerStorePath: {log_file.path} already holds events: move it away first")
    data = MAGIC + b"".join(_RECORD.pack(len(e), zlib.crc32(e)) + e for e in events)
    write_atomically(log_file.path, data, "controller log")
    return log_file.path


def _read_all(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
