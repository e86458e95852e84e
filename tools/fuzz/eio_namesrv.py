#!/usr/bin/env python3
"""``python tools/fuzz/eio_namesrv.py FLAG DIR [namesrv options]``: the NameServer on a failing device.

While the file FLAG exists, every ``write`` and ``fsync`` on a file under DIR (the stores) raises
OSError(EIO), as a disk's error does; when FLAG is gone they work again.  The kill -9 harness
(crash_kv.py, crash_controller.py ``--fault EIO``) toggles FLAG at random moments (squeeze.py), for
a device-mapper ``error`` target is not available everywhere.  Only for the harness: nothing in the
server knows of it.
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path


def install(flag: Path, directory: Path) -> None:
    real_write, real_fsync = os.write, os.fsync
    root = str(directory.resolve())

    def failing(fd: int) -> bool:
        if not os.path.exists(flag):
            return False
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return False
        return target == root or target.startswith(root + os.sep)

    def write(fd: int, data: bytes) -> int:  # type: ignore[no-untyped-def]
        if failing(fd):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_write(fd, data)

    def fsync(fd) -> None:  # type: ignore[no-untyped-def]
        if failing(fd if isinstance(fd, int) else fd.fileno()):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real_fsync(fd)

    os.write, os.fsync = write, fsync  # type: ignore[assignment]


if __name__ == "__main__":
    flag, directory, *rest = sys.argv[1:]
    install(Path(flag), Path(directory))
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from twisted_namesrv.__main__ import main

    main(rest)
