"""Crash-safe file replacement: a reader never sees a half-written file, and a failed write
leaves the file as it was.

temp file in the same directory -> write -> the target's owner and permissions -> fsync -> rename over
the target -> fsync the directory.
(Java 4.9.8 deletes then renames, 5.3.3 writes in place; both can lose the file on a crash.)
The directory is opened first, so a closed fd table (EMFILE) fails before anything changed; a
failure before the rename removes the temp file.  A failure after it (the directory's fsync: a
failing device) puts the old file back: it is kept as a hard link (``<file>.old``) until the new
one is durable, and renamed back over it - a rename needs no write to take effect, so the file a
restart reads is the old one even while the device fails.  A file mounted on its own (a bind
mount, a Kubernetes subPath) can be neither linked nor replaced: it is written in place
(``_write_in_place``, not atomic).
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

from . import files

#: os.open, replaceable by tests and the fault-injection tools (a failing disk: EIO)
opener: Callable[..., int] = os.open
#: a file system without hard links: no ``.old`` kept (the old content cannot be put back then)
_NO_LINKS = (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK)


#: how every StoreError's text begins: an answer whose remark holds it is a change the disk refused
#: (the audit trail's ``failed``, which pages), never a request's own fault
CANNOT_SAVE = "cannot save "


class StoreError(OSError):
    """A change that could not be made durable; the file holds what it held (``replaced``: the new
    content is in place, not durable, and the old could not be put back: the caller writes it)."""

    def __init__(self, what: str, path: str | os.PathLike[str], cause: OSError, replaced: bool = False) -> None:
        self.errno_name = files.errno_name(cause)
        self.message = f"{CANNOT_SAVE}{what} {path}: {cause.strerror or cause} ({self.errno_name})"
        super().__init__(cause.errno, self.message)
        self.what, self.path, self.cause, self.replaced = what, str(path), cause, replaced

    def __str__(self) -> str:
        return self.message


def write_atomically(path: str | os.PathLike[str], data: bytes, what: str = "file") -> None:
    """Replace ``path`` by ``data`` durably, or raise StoreError leaving it as it was (see above)."""
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")  # fixed, like Java's: a crash leaves one, replaced next time
    old = target.with_name(target.name + ".old")  # the same: a leftover is replaced at the next write
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        dir_fd = opener(target.parent, os.O_RDONLY)
    except OSError as exc:
        raise StoreError(what, target, exc) from None
    try:
        try:
            kept = _keep_old(target, old)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise StoreError(what, target, exc) from None
            _write_in_place(target, data, what)  # a file mounted on its own: no link, no rename over it
            return
        try:
            with suppress(FileNotFoundError):  # a crash's leftover; or a FIFO put there, whose open would block
                tmp.unlink()
            before = _owner_and_mode(target)  # a file replaced keeps its mode and owner; a new one FILE_MODE
            fd = opener(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, files.FILE_MODE if before is None else 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                if before is not None:
                    _take_owner_and_mode(handle.fileno(), before)
                os.fsync(handle.fileno())
            os.replace(tmp, target)
        except OSError as exc:
            with suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise StoreError(what, target, exc) from None
        try:
            os.fsync(dir_fd)
        except OSError as exc:
            raise StoreError(what, target, exc, replaced=not _put_back(target, old, kept)) from None
        with suppress(OSError):
            old.unlink(missing_ok=True)
    finally:
        os.close(dir_fd)


def fsync_directory(directory: Path) -> None:
    """A rename or a new file in ``directory`` made durable (OSError when the directory cannot be
    opened or synced: the caller decides whether that fails its write)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _owner_and_mode(target: Path) -> os.stat_result | None:
    """The file about to be replaced (its owner and permissions go to the new one), or None."""
    try:
        return os.stat(target)
    except FileNotFoundError:
        return None


def _take_owner_and_mode(fd: int, before: os.stat_result) -> None:
    """The replaced file's permissions (and, where this process may give them, its owner and group) on
    the new one, before it takes the name: the ``-c`` file may hold secrets (``tls.server.keyPassword``)
    and its operator made it 0600, and a rename keeps the new file's own (0644: any user of the machine
    read the key password after one UPDATE_NAMESRV_CONFIG, which any peer may send without ACL).  The
    temporary file is made 0600, so the content is never readable by others on its way in; a file
    system that keeps no permissions (vfat, some network mounts) may refuse them, and the file stays so."""
    with suppress(OSError):  # another owner or group: only root may give them; the permissions still apply
        os.fchown(fd, before.st_uid, before.st_gid)
    with suppress(OSError):
        os.fchmod(fd, stat.S_IMODE(before.st_mode))


def _write_in_place(target: Path, data: bytes, what: str) -> None:
    """A file mounted on its own (a bind mount: ``podman -v ns.properties:/etc/...``, a Kubernetes
    subPath) can be neither linked nor renamed over (EXDEV, EBUSY): it is rewritten in place and
    fsync'd, as Java 5.3.3 writes every file.  Read-only, it fails before anything changed (EROFS).
    Not atomic: a crash in the middle can leave it short; a failed write puts the old bytes back
    (``replaced`` when even that failed)."""
    try:
        before = files.read_regular(target, None)  # our own store file, as big as we wrote it
        fd = files.open_regular(target, os.O_WRONLY)
    except OSError as exc:
        raise StoreError(what, target, exc) from None
    try:
        try:
            _rewrite(fd, data)
        except OSError as exc:
            try:
                _rewrite(fd, before)
            except OSError:
                raise StoreError(what, target, exc, replaced=True) from None
            raise StoreError(what, target, exc) from None
    finally:
        os.close(fd)


def _rewrite(fd: int, data: bytes) -> None:
    os.ftruncate(fd, 0)
    view = memoryview(data)
    offset = 0
    while offset < len(view):
        offset += os.pwrite(fd, view[offset:], offset)
    os.fsync(fd)


def _keep_old(target: Path, old: Path) -> bool:
    """Hard-link the current file as ``old``; False when there is none (or no links here)."""
    with suppress(FileNotFoundError):
        old.unlink()
    try:
        os.link(target, old)
    except FileNotFoundError:
        return False
    except OSError as exc:
        if exc.errno in _NO_LINKS:
            return False
        raise
    return True


def _put_back(target: Path, old: Path, kept: bool) -> bool:
    """The old file back in place (or no file, as before); True when done."""
    try:
        if kept:
            os.replace(old, target)
        else:
            target.unlink()
    except OSError:
        return False
    return True


#: told once a save is durable (None) or could not be made so (the StoreError)
Saved = Callable[[StoreError | None], None]
#: ``save(make, saved)``: replace a file by ``make()``'s bytes durably, then call ``saved`` (now or
#: later); ``make`` runs where the write is made (a thread: a store's encoding can take long)
Save = Callable[[Callable[[], bytes], Saved], None]


def at_once(write: Callable[[bytes], None]) -> Save:
    """A ``Save`` of a ``write(data)`` that is done when it returns (raising StoreError if not)."""
    def save(make: Callable[[], bytes], saved: Saved) -> None:
        try:
            write(make())
        except StoreError as exc:
            saved(exc)
            return
        saved(None)
    return save


class SavesOfNewest:
    """Saves of a file whose newest content is all there is to save (the saved config): one
    write in flight at a time, and the saves asked for meanwhile share the next, which writes
    ``content()`` as it is then; each asker is told once a write begun after its ask is over."""

    def __init__(self, save: Save, content: Callable[[], bytes]) -> None:
        self._save, self._content = save, content
        self._in_flight = False
        self._waiting: list[Saved] = []

    def save(self, saved: Saved) -> None:
        self._waiting.append(saved)
        if not self._in_flight:
            self._write()

    def _write(self) -> None:
        waiting, self._waiting = self._waiting, []
        self._in_flight = True
        data = self._content()  # here: what it reads may change once this turn is over
        self._save(lambda: data, lambda error: self._written(waiting, error))

    def _written(self, waiting: list[Saved], error: StoreError | None) -> None:
        self._in_flight = False
        for saved in waiting:
            saved(error)  # may ask again at once (a peer's next update): that begins the next write
        if self._waiting and not self._in_flight:
            self._write()


class AtomicFile:
    """One store file (the KV store, the saved config) under its key: ``save(data)`` replaces it
    durably, or tells ``refused`` (the service logs the line and counts it) and raises StoreError."""

    def __init__(self, what: str, path: str | os.PathLike[str],
                 refused: Callable[[StoreError], None] = lambda error: None) -> None:
        self.what, self.path, self.refused = what, Path(path), refused

    def save(self, data: bytes) -> None:
        try:
            write_atomically(self.path, data, self.what)
        except StoreError as exc:
            self.refused(exc)
            raise


def unwritable(path: str | os.PathLike[str]) -> str | None:
    """Why write_atomically could not replace ``path`` (its directory is a file, cannot be created or
    written, or the path is a directory), or None.  Creates nothing that was not there: a server
    that then fails to start (a port taken) leaves no empty data directory behind; the first write
    creates the missing directories; a directory on the way we may not search is named with its owner."""
    target = Path(path)
    try:
        return _unwritable(target)
    except OSError as exc:  # a stat refused: another user's directory, mode 0700
        return files.cannot_look(target, exc)


def _unwritable(target: Path) -> str | None:
    if target.is_dir():
        return f"{target} is a directory"
    existing = next(p for p in (target.parent, *target.parent.parents) if p.exists() or p == p.parent)
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if existing != target.parent:
        if os.access(existing, os.W_OK | os.X_OK):
            return None
        if os.statvfs(existing).f_flag & os.ST_RDONLY:  # access(2) says EROFS as "no": chmod would not help
            return f"cannot create {target.parent}: {existing} is on a read-only file system"
        return f"cannot create {target.parent}: no write permission in {existing}"
    probe = target.with_name(target.name + ".tmp")
    if probe.exists():  # a crash's leftover, removed at the next write (write_atomically): whoever owns it
        return None if _removable(probe) else (f"cannot write in {target.parent}: cannot remove {probe} "
                                               f"left there ({files.owner_and_us(target.parent)})")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT, files.FILE_MODE))
    except PermissionError as exc:
        return f"cannot write in {target.parent}: {exc.strerror} ({files.owner_and_us(target.parent)})"
    except OSError as exc:
        return f"cannot write in {target.parent}: {exc.strerror}"
    probe.unlink()
    return None


def _removable(path: Path) -> bool:
    """Whether we may unlink ``path``: its directory's to write in (a file of another uid too: an
    image run under another arbitrary uid of group 0 after a crash), unless the directory is sticky
    (/tmp) and neither it nor the file is ours."""
    directory = path.parent
    if not os.access(directory, os.W_OK | os.X_OK):
        return False
    seen = directory.stat()
    return (not seen.st_mode & stat.S_ISVTX or os.geteuid() in (0, seen.st_uid)
            or path.lstat().st_uid == os.geteuid())


class LoadRefused(OSError):
    """A store file that is not read: ``reason`` is the counter's label (not_regular: a FIFO, a
    device, a directory or a symlink; too_big; unreadable), the message names the file and why."""

    def __init__(self, path: str | os.PathLike[str], reason: str, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path, self.reason, self.why = str(path), reason, why


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes | None:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes; None when there is none.
    Never blocks and never follows a link: a FIFO planted in its place would hold the reactor in
    ``open()`` (O_NONBLOCK), a symlink could point the server at a file it must not read
    (O_NOFOLLOW); either raises LoadRefused, as do a file over ``limit`` and one that cannot be read."""
    try:
        fd = opener(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LoadRefused(path, "not_regular", "a symbolic link, not a regular file") from None
        raise LoadRefused(path, "unreadable", f"{exc.strerror} ({files.errno_name(exc)})") from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise LoadRefused(path, "not_regular", "not a regular file (a FIFO, a device or a directory)")
        if status.st_size > limit:
            raise LoadRefused(path, "too_big", f"{status.st_size} bytes, over the limit of {limit}")
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > limit:  # it grew while read
                raise LoadRefused(path, "too_big", f"over {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
    except LoadRefused:
        raise
    except OSError as exc:
        raise LoadRefused(path, "unreadable", f"{exc.strerror} ({files.errno_name(exc)})") from None
    finally:
        os.close(fd)


class DocumentError(ValueError):
    """A store file this server did not write (or a damaged one): the message says what is wrong."""


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is no number this server writes")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: a double's overflow, read as inf
        raise ValueError(f"{text[:40]} is out of a double's range")
    return value


def load_document(data: bytes) -> Any:
    """A JSON store file this server wrote (the page's events, the remembered topology, the route
    snapshot), or DocumentError naming what is wrong.  Its writers never write NaN, Infinity or a
    number past a double's range, nor nest past a few levels: a file swapped in that does is not
    theirs.  Python's json took the first two (a NaN event time made /api/events no JSON a browser
    parses), ``int()`` of an Infinity raised OverflowError, and a file of 100,000 ``[`` a
    RecursionError: neither was caught, so the start failed with a traceback."""
    try:
        return json.loads(data, parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DocumentError(f"not JSON: {exc}") from None
    except RecursionError:
        raise DocumentError("not JSON this server writes: nested too deeply") from None


def document_items(data: bytes, fmt: int, key: str, what: str) -> list[Any]:
    """The list under ``key`` of a JSON store file ``{"format": fmt, key: [...]}`` (the page's
    events, the remembered topology); anything else raises DocumentError naming what is wrong."""
    document = load_document(data)
    if not isinstance(document, dict) or document.get("format") != fmt or not isinstance(document.get(key), list):
        raise DocumentError(f"not {what} of format {fmt}")
    items: list[Any] = document[key]
    return items


def set_aside(path: Path) -> Path:
    """A file that could not be used, renamed ``<name>.corrupt`` so that the next write does not
    destroy what went wrong; where it now is (``path`` itself when it could not be renamed)."""
    kept = path.with_name(path.name + ".corrupt")
    try:
        path.replace(kept)
    except OSError:
        return path
    return kept
