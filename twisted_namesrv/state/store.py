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
