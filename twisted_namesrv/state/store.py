"""Crash-safe file replacement: a reader never sees a half-written file.

temp file in the same directory -> write -> fsync -> rename over the target -> fsync the directory.
(Java 4.9.8 deletes then renames, 5.3.3 writes in place; both can lose the file on a crash.)
"""

from __future__ import annotations

import os
from pathlib import Path


def write_atomically(path: str | os.PathLike[str], data: bytes) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")  # fixed, like Java's: a crash leaves one, reused next time
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def unwritable(path: str | os.PathLike[str]) -> str | None:
    """Why write_atomically could not replace ``path`` (its directory is a file, cannot be created or
    written, or the path is a directory), or None.  Creates nothing that was not there: a server
    that then fails to start (a port taken) leaves no empty data directory behind; the first write
    creates the missing directories."""
    target = Path(path)
    if target.is_dir():
        return f"{target} is a directory"
    existing = next(p for p in (target.parent, *target.parent.parents) if p.exists() or p == p.parent)
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if existing != target.parent:
        return None if os.access(existing, os.W_OK | os.X_OK) else f"cannot create {target.parent}: no write " \
            f"permission in {existing}"
    probe = target.with_name(target.name + ".tmp")
    if probe.exists():  # a crash's leftover, replaced at the next write
        return None if os.access(probe, os.W_OK) else f"cannot write in {target.parent}: {probe} is read-only"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT, 0o644))
    except OSError as exc:
        return f"cannot write in {target.parent}: {exc.strerror}"
    probe.unlink()
    return None
