"""Faults for the kill -9 harness (issue 38, item 2): a disk that keeps filling up and a server
whose fd table keeps running full, toggled at random moments while it writes.

- ``tiny_disk(path)``: a 64 KiB tmpfs mounted at ``path`` (root), unmounted after.
- ``DiskSqueezer(path)``: a thread that fills that file system to the last byte with one file,
  holds it full for a few milliseconds, frees it, and again: some saves meet ENOSPC, some not.
- ``FdSqueezer(pid)``: a thread that lowers the running server's RLIMIT_NOFILE (prlimit) to its
  lowest free descriptor, so every open fails with EMFILE, then gives the limit back, and again.

- ``EioSqueezer(flag)``: creates and removes the flag file that eio_namesrv.py (the server on a
  failing device) reads: while it exists, writes and fsyncs of the stores fail with EIO.  (A
  device-mapper ``error`` target would be the real thing; it needs a kernel driver not everywhere.)
"""

from __future__ import annotations

import os
import random
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path


@contextmanager
def tiny_disk(path: Path, size: str = "64k") -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True,
                   capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


class Squeezer(threading.Thread):
    """Alternates ``squeeze()`` and ``release()``, each held for 5-40 ms, until ``stop()``."""

    def __init__(self, seed: int) -> None:
        super().__init__(daemon=True)
        self.rng = random.Random(seed)
        self.halt = threading.Event()
        self.squeezes = 0

    def run(self) -> None:
        while not self.halt.is_set():
            with suppress(OSError):
                self.squeeze()
                self.squeezes += 1
            time.sleep(self.rng.uniform(0.005, 0.04))
            with suppress(OSError):
                self.release()
            time.sleep(self.rng.uniform(0.005, 0.04))

    def stop(self) -> None:
        self.halt.set()
        self.join(5)
        with suppress(OSError):
            self.release()

    def squeeze(self) -> None:
        raise NotImplementedError

    def release(self) -> None:
        raise NotImplementedError


class DiskSqueezer(Squeezer):
    def __init__(self, directory: Path, seed: int = 0) -> None:
        super().__init__(seed)
        self.filler = directory / ".filler"

    def squeeze(self) -> None:
        with open(self.filler, "ab", buffering=0) as handle, suppress(OSError):
            while True:
                handle.write(b"\0" * 512)

    def release(self) -> None:
        self.filler.unlink(missing_ok=True)


class FdSqueezer(Squeezer):
    def __init__(self, pid: int, seed: int = 0) -> None:
        super().__init__(seed)
        self.pid = pid
        self.limits = resource.prlimit(pid, resource.RLIMIT_NOFILE)

    def squeeze(self) -> None:
        try:
            used = {int(name) for name in os.listdir(f"/proc/{self.pid}/fd")}
        except FileNotFoundError:
            return  # the process is gone: nothing to squeeze
        if not used:
            return  # a process being reaped holds no descriptor (and max() of nothing raised)
        lowest_free = min(set(range(max(used) + 2)) - used)
        resource.prlimit(self.pid, resource.RLIMIT_NOFILE, (lowest_free, self.limits[1]))

    def release(self) -> None:
        resource.prlimit(self.pid, resource.RLIMIT_NOFILE, self.limits)


class EioSqueezer(Squeezer):
    def __init__(self, flag: Path, seed: int = 0) -> None:
        super().__init__(seed)
        self.flag = flag

    def squeeze(self) -> None:
        self.flag.touch()

    def release(self) -> None:
        self.flag.unlink(missing_ok=True)


def eio_launcher(flag: Path, directory: Path) -> list[str]:
    """The command that starts the server with its stores under ``directory`` on a failing device."""
    return [sys.executable, str(Path(__file__).with_name("eio_namesrv.py")), str(flag), str(directory)]
