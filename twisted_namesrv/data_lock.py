"""One running NameServer per data directory.

Two NameServers started with the same data directory (a second one "for a test" on another port
of the same host, both with the default ``~/namesrv``; two pods on one shared volume) would each
write the KV store, the topology and the events file over the other's: a KV change made through
one is lost at the other's next write, and each expects the other's brokers back.  Java's
NameServer does not notice.  Here each directory the server writes its stores to is locked
(a POSIX write lock, ``lockf``, on ``namesrv.lock`` in it) while the server runs; a second server waits up to
``WAIT_SECONDS`` for the lock (a predecessor still writing its last files at a restart), then
cannot start, naming the holder.

The lock goes with the process: a killed server's lock is released by the kernel, so a crash
never leaves a directory locked.  A POSIX lock belongs to the process, not to an open file: servers
one process runs (the tests') never wait for each other, and a forked child (the route snapshot's
writer) takes none of it.  A directory where no lock file can be made or written (a read-only
mount the server only reads from, a lock file another user made, a symlink or FIFO planted in its
place) is not locked, and the log says so (naming the lock file's owner and mode and our uid and gid
when permission was refused).  The lock file is made group-writable where the umask lets it (the
image's NAMESRV_UMASK=0002): a restart under another uid of the same group locks it on.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

from twisted.logger import Logger

from . import CannotStart
from .state.files import errno_name, open_regular, owner_and_us

log = Logger()
LOCK_FILE = "namesrv.lock"
#: how long a server waits for another to release a data directory before it gives up
WAIT_SECONDS = 30.0
_POLL_SECONDS = 0.2


class Checked(NamedTuple):
    """What a check of the locks found (``StoreLock.check``)."""

    #: directories whose lock file was gone or replaced
    lost: list[Path]
    #: directories locked again at this check (lost now or at an earlier one)
    relocked: list[Path]


class StoreLock:
    """The locks held on the stores' directories (their open lock files), and what taking them made
    (directories, lock files: a start that fails removes them, leaving nothing behind)."""

    def __init__(self, held: dict[Path, int], made: list[Path] | None = None) -> None:
        self.held = held
        self.made = made or []
        self.noted = ""
        #: directories found without their lock file that could not be locked again yet (a full disk
        #: refused the directory or the lock file, another server holds it): tried again at each check
        self.pending: set[Path] = set()

    def note(self, what: str) -> None:
        """Write who holds the locks (``what``: the pid and address) into each lock file, for the
        next server's message."""
        self.noted = what
        for fd in self.held.values():
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, what.encode() + b"\n", 0)
            except OSError:
                pass  # a full disk: the lock holds all the same, unnamed

    def check(self) -> Checked:
        """The directories whose lock file is no longer the one this server locked (removed with its
        directory by an ``rm -rf``, the directory moved or replaced by a restore), each locked again (a
        new lock file, its directory made again): a second server started on it meanwhile would have
        taken a lock nobody held, and both would write there.  One that cannot be locked again now (a
        full disk refuses the directory or the lock file) is tried again at every check, said once,
        until it is.  Told by the caller: ``lost`` found this check, ``relocked`` locked again (those
        of ``lost`` locked at once among them), whose stores the caller writes again."""
        lost = []
        for directory, fd in list(self.held.items()):
            try:
                there = os.stat(directory / LOCK_FILE, follow_symlinks=False)
                held = os.fstat(fd)
                if (there.st_dev, there.st_ino) == (held.st_dev, held.st_ino):
                    continue
            except (FileNotFoundError, NotADirectoryError):  # gone, or a file put where the directory was
                pass
            except OSError:
                continue  # cannot tell (a permission taken away): left as it is
            lost.append(directory)
            os.close(fd)
            del self.held[directory]
        relocked = [directory for directory in [*lost, *sorted(self.pending - set(lost))]
                    if self._lock_again(directory, said=directory in self.pending)]
        return Checked(lost, relocked)

    def _lock_again(self, directory: Path, said: bool) -> bool:
        """Lock ``directory`` again (its lock file made anew); False, and pending, when it cannot be
        now (``said``: its reason was logged at an earlier check, not again)."""
        again = _open(directory, [], quiet=said)
        if again is None:
            self.pending.add(directory)
            return False
        try:
            fcntl.lockf(again, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _holder(again) if exc.errno in (errno.EACCES, errno.EAGAIN) else exc.strerror
            if not said:
                log.critical("{directory} is locked by another NameServer ({holder}), started there after this "
                             "one's lock file was removed: both write its stores; stop one of them",
                             directory=str(directory), holder=holder)
            os.close(again)
            self.pending.add(directory)
            return False
        self.pending.discard(directory)
        self.held[directory] = again
        if self.noted:
            self.note(self.noted)
        return True

    def release(self, undo: bool = False) -> None:
        """Let the locks go; ``undo``: the start failed, remove what taking them made."""
        for fd in self.held.values():
            os.close(fd)
        self.held = {}
        self.pending = set()
        for path in reversed(self.made if undo else []):
            try:
                path.rmdir() if path.is_dir() else path.unlink()
            except OSError:
                pass  # not empty any more, or gone: leave it
        self.made = []


def lock_stores(directories: Iterable[Path], wait: float | None = None,
                sleep: Callable[[float], None] = time.sleep,
                now: Callable[[], float] = time.monotonic) -> StoreLock:
    """Lock each directory (``namesrv.lock`` in it, made if missing); CannotStart when another
    process holds one of them for longer than ``wait`` seconds (WAIT_SECONDS)."""
    wait = WAIT_SECONDS if wait is None else wait
    lock = StoreLock({})
    try:
        for directory in sorted({Path(d) for d in directories}):
            fd = _open(directory, lock.made)
            if fd is not None:
                lock.held[directory] = fd
                _take(fd, directory, wait, sleep, now)
    except BaseException:
        lock.release(undo=True)
        raise
    return lock


def _open(directory: Path, made: list[Path], quiet: bool = False) -> int | None:
    """``directory``'s lock file opened for writing (the directory made if missing, what was made
    listed in ``made``); None, said unless ``quiet``, when it cannot be."""
    path = directory / LOCK_FILE
    try:
        missing = [d for d in (directory, *directory.parents) if not d.exists()]
        directory.mkdir(parents=True, exist_ok=True)
        made.extend(reversed(missing))
        if not path.exists():
            made.append(path)
        # a write lock needs it open for writing; never through a symlink planted in its place (the pid
        # would be written over its target), nor a FIFO (state/files.open_regular)
        # made FILE_MODE less the umask: group-writable in the image (NAMESRV_UMASK), so that a restart
        # under another uid of the same group (OpenShift's) opens it for writing and locks on
        return open_regular(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW)
    except PermissionError as exc:  # who owns what: a lock file an older image or another group made
        if not quiet:
            _unlockable(directory, exc, owner_and_us(path if path.exists() else directory))
        return None
    except OSError as exc:
        if not quiet:
            _unlockable(directory, exc)
        return None


def _unlockable(directory: Path, exc: OSError, whose: str = "") -> None:
    """Say a directory is left unlocked (the caller returns no fd); ``whose``: the lock file's (or the
    directory's) owner and mode and our uid and gid, when permission was refused."""
    error = exc.strerror or errno_name(exc)
    log.warn("{directory} is not locked ({error}): another NameServer writing there would not be noticed",
             directory=str(directory), error=f"{error}: {whose}" if whose else error)


def _take(fd: int, directory: Path, wait: float, sleep: Callable[[float], None], now: Callable[[], float]) -> None:
    deadline = now() + wait
    said = False
    while True:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EAGAIN):  # no locks there (an NFS mount without them)
                _unlockable(directory, exc)
                return
        holder = _holder(fd)
        if now() >= deadline:
            raise CannotStart(f"{directory} is in use by another NameServer ({holder}): two servers writing one data "
                              f"directory overwrite each other's KV config, topology and events; give this one "
                              f"its own --data-dir, or stop the other")
        if not said:
            log.warn("{directory} is in use by another NameServer ({holder}); waiting up to {wait:.0f} s for it "
                     "to stop", directory=str(directory), holder=holder, wait=wait)
            said = True
        sleep(_POLL_SECONDS)


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    return text or "a process that did not say which"
