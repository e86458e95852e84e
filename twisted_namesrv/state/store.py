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
    written, or the path is a directory), or None.  Creates missing directories, as the first write
    would, so a server finds out at start rather than at its first change."""
    target = Path(path)
    if target.is_dir():
        return f"{target} is a directory"
    existing = next(p for p in (target.parent, *target.parent.parents) if p.exists() or p == p.parent)
    if not existing.is_dir():
        return f"{existing} is not a directory"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(target.with_name(target.name + ".tmp"), os.O_WRONLY | os.O_CREAT, 0o644))
    except OSError as exc:
        return f"cannot write in {target.parent}: {exc.strerror}"
    target.with_name(target.name + ".tmp").unlink()
    return None
