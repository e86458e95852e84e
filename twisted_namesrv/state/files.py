"""Opening a file the server was told to read -- the ``-c`` file, configStorePath, the KV store,
the ACL accounts (at start and at every reload), the route snapshot, the page's events, the TLS
certificates and key, the controller's store and the standalone controller's ``-c`` file --
regular files only, and never blocking.

``open()`` of a FIFO blocks until a writer comes, and the reactor with it: every port stops
answering (issue 44: the accounts file swapped for a symlink to a FIFO).  A character device may
block too, or never end (``/dev/zero``), or act on being opened; a directory is no file.  So each
of those files is opened here with ``O_NONBLOCK`` (a FIFO then opens at once; a regular file ignores
the flag) and ``fstat``-ed before a byte is read: anything but a regular file is ``NotRegularFile``
(an OSError whose ``strerror`` says what it is), which each caller turns into its own refusal --
the CannotStart line naming the key at start, the old accounts kept at a reload.  A symlink is
followed (Kubernetes mounts ConfigMaps and Secrets as symlinks); what it ends at must be a
regular file.  Reads keep ``O_NONBLOCK``: a regular file that would block (a pseudo-file of /proc)
fails with EAGAIN instead.

Each caller also says how big the file may be (``limit``): a configuration file, the accounts
file or a certificate bigger than TEXT_FILE_LIMIT is refused (``FileTooBig``) before it is read,
and a file that grows while read is read no further.  A 4 GB sparse file swapped in for the
accounts file was read whole by the reload every 5 s, on the reactor thread; under a memory limit
the MemoryError ended the reload timer, so no later change of the accounts was ever read.  The
stores the server writes itself are read at start up to their own bounds (the KV store 2 GiB - 1,
as Java's; the page's events 64 MiB); the route snapshot as big as it is.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

#: what a file that is not a regular one is, by its st_mode
_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"), (stat.S_ISSOCK, "a socket"))


#: the mode every file the server makes is created with, less the process's umask: the image sets
#: ``NAMESRV_UMASK=0002`` (launch.py), so its files are group 0's to write as its data directory is,
#: and a restart under another uid of group 0 (OpenShift's restricted policy) writes them on; under
#: the usual umask 0022 they are 0644
FILE_MODE = 0o666

#: the most a configuration file (``-c``, configStorePath), the accounts file or a certificate may hold:
#: each is a few kilobytes; ten thousand accounts are about 1 MB
TEXT_FILE_LIMIT = 4 * 1024 * 1024


class FileTooBig(OSError):
    """A file bigger than its caller's limit: refused before it is read (or once a read passes it)."""

    def __init__(self, path: str | os.PathLike[str], size: int, limit: int) -> None:
        super().__init__(errno.EFBIG, f"{size} bytes or more, over the {limit} this file may hold", str(path))


class NotRegularFile(OSError):
    """A path that names a FIFO, a device, a directory or a socket: refused before any read."""

    def __init__(self, path: str | os.PathLike[str], kind: str) -> None:
        super().__init__(errno.EINVAL, f"{kind}, not a regular file", str(path))
        self.kind = kind


def kind_of(mode: int) -> str | None:
    """What a file of ``mode`` is when it is not a regular file (``a FIFO (named pipe)``), else None."""
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def open_regular(path: str | os.PathLike[str], flags: int = os.O_RDONLY, mode: int = FILE_MODE) -> int:
    """An fd of ``path`` opened without blocking (``flags`` plus O_NONBLOCK, O_NOCTTY, O_CLOEXEC),
    or NotRegularFile (closed again) when it is not a regular file; other OSErrors as os.open's."""
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, mode)
    try:
        kind = kind_of(os.fstat(fd).st_mode)
    except OSError:
        os.close(fd)
        raise
    if kind is not None:
        os.close(fd)
        raise NotRegularFile(path, kind)
    return fd


#: an OSError's errno name when it has none (a hand-made OSError, a wrapped cause)
UNKNOWN_ERRNO = "EUNKNOWN"


def errno_name(exc: OSError) -> str:
    """``EROFS``, ``ENOSPC``...: the name a refused write's counter (``error=`` label) and message
    carry; UNKNOWN_ERRNO for an error without an errno."""
    return errno.errorcode.get(exc.errno or 0, UNKNOWN_ERRNO)


def owner_and_us(path: str | os.PathLike[str]) -> str:
    """Who owns ``path`` (its uid, gid and mode) and who we are: what an operator needs to mend a
    file or directory the server may not write (an image run under another uid, as OpenShift runs
    every container; a file an older image made 0644)."""
    us = f"running as uid {os.getuid()} gid {os.getgid()}"
    try:
        seen = os.stat(path)
    except OSError:
        return us
    return f"owned by uid {seen.st_uid} gid {seen.st_gid}, mode {seen.st_mode & 0o7777:04o}; {us}"


def cannot_look(path: str | os.PathLike[str], exc: OSError) -> str:
    """Why ``path`` could not even be looked for (``exc`` from a stat): the nearest directory above
    it that we can see but not search, its owner and mode and who we are (another user's data dir,
    mode 0700: a start by hand under another account than the unit's)."""
    closed = next((above for above in Path(path).parents if _seen(above)), Path(path).parent)
    return f"cannot look in {closed}: {exc.strerror} ({owner_and_us(closed)})"


def _seen(path: Path) -> bool:
    try:
        os.stat(path)
    except OSError:
        return False
    return True


def read_regular(path: str | os.PathLike[str], limit: int | None) -> bytes:
    """The bytes of ``path``, a regular file (NotRegularFile otherwise; OSError when unreadable) of at
    most ``limit`` bytes (FileTooBig otherwise; None: any size)."""
    with os.fdopen(open_regular(path), "rb") as handle:
        if limit is None:
            data = handle.read()
        else:
            size = os.fstat(handle.fileno()).st_size
            if size > limit:
                raise FileTooBig(path, size, limit)
            data = handle.read(limit + 1)
            if data is not None and len(data) > limit:  # it grew while read
                raise FileTooBig(path, len(data), limit)
    if data is None:  # O_NONBLOCK and nothing to read yet: a file that behaves like a pipe
        raise BlockingIOError(errno.EAGAIN, "would block reading it", str(path))
    return data


def read_regular_text(path: str | os.PathLike[str], limit: int | None, encoding: str = "utf-8") -> str:
    """``read_regular`` decoded (UnicodeDecodeError when it is not ``encoding``)."""
    return read_regular(path, limit).decode(encoding)
