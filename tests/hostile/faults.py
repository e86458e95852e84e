"""Real disk and fd faults for the store tests (issue 38): a full file system, a closed fd table and
a failing device, each a context manager around the one request that meets it.

- ENOSPC: the store's directory is a tmpfs of 64 KiB (``mount -t tmpfs``, root only) filled up
  with one file; leaving the block removes the filler.
- EMFILE: RLIMIT_NOFILE's soft limit lowered to the lowest free descriptor, so every open fails
  as with a full table (restored on leaving).
- EIO: a device that fails: ``fsync`` (where a failed write-back reports) and ``write`` on the
  store's files raise OSError(EIO), as a disk's error does; the test process's other files are
  untouched.
- EROFS (``READ_ONLY``): the tmpfs remounted read-only, as a Kubernetes ConfigMap volume is; or one
  file bind-mounted read-only over itself, as a ConfigMap mounted with ``subPath`` is (``ro_bind``).
"""

from __future__ import annotations

import errno
import os
import resource
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

FAULTS = ("ENOSPC", "EMFILE", "EIO")
#: the read-only ways a file is mounted in Kubernetes: the volume (a directory) or one file (subPath)
READ_ONLY = ("ro_volume", "ro_bind")
TINY = "64k"


@contextmanager
def tiny_tmpfs(where: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs mounted at ``where`` (skips without the right to mount), unmounted after."""
    where.mkdir(parents=True, exist_ok=True)
    if not shutil.which("mount") or os.geteuid() != 0:
        pytest.skip("a tiny tmpfs needs root (mount -t tmpfs)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TINY}", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@contextmanager
def disk_full(directory: Path) -> Iterator[None]:
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as handle, suppress(OSError):
        while True:
            handle.write(b"\0" * 512)
    try:
        yield
    finally:
        filler.unlink()


@contextmanager
def fd_table_full() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowest_free = os.dup(0)
    os.close(lowest_free)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@contextmanager
def device_fails(directory: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """write/fsync on files under ``directory`` (and on the directory itself) raise EIO."""
    real_write, real_fsync = os.write, os.fsync
    root = directory.resolve()

    def ours(fd: int) -> bool:
        try:
            target = Path(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            return False
        return target == root or root in target.parents

    def write(fd: int, data) -> int:
        if ours(fd):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_write(fd, data)

    def fsync(fd) -> None:
        number = fd if isinstance(fd, int) else fd.fileno()
        if ours(number):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real_fsync(fd)

    with monkeypatch.context() as patch:
        patch.setattr(os, "write", write)
        patch.setattr(os, "fsync", fsync)
        yield


@contextmanager
def fault(kind: str, directory: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if kind == "ENOSPC":
        with disk_full(directory):
            yield
    elif kind == "EMFILE":
        with fd_table_full():
            yield
    else:
        with device_fails(directory, monkeypatch):
            yield


def _mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"mount {' '.join(args)}: {done.stderr.strip()}")


@contextmanager
def bind_mounted(source: Path, file: Path) -> Iterator[None]:
    """``source`` bind-mounted over ``file`` (which must exist), writable, as ``podman -v`` mounts one file."""
    _mount("--bind", str(source), str(file))
    try:
        yield
    finally:
        subprocess.run(["umount", str(file)], check=True)


@contextmanager
def read_only(kind: str, directory: Path, file: Path) -> Iterator[None]:
    """``directory`` (a tiny_tmpfs) remounted read-only, or ``file`` (which must exist) bind-mounted
    read-only over itself; writable again on leaving."""
    if kind == "ro_volume":
        _mount("-o", "remount,ro", str(directory))
        try:
            yield
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(directory)], check=True)
    else:
        _mount("--bind", str(file), str(file))
        try:
            _mount("-o", "remount,bind,ro", str(file))
            yield
        finally:
            subprocess.run(["umount", str(file)], check=True)
