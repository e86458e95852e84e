"""state/files.py's names for what an operator reads: an errno's name (the counters' ``error``
label and the messages) and a file's owner and mode with our uid and gid."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from twisted_namesrv.state import files, store
from twisted_namesrv.state.files import UNKNOWN_ERRNO, errno_name, owner_and_us


def test_one_name_for_an_errno_and_for_none_wherever_it_is_said(tmp_path: Path, monkeypatch) -> None:
    assert errno_name(OSError(errno.EROFS, "Read-only file system")) == "EROFS"
    bare = OSError("no errno")
    assert errno_name(bare) == UNKNOWN_ERRNO
    assert store.StoreError("kvConfigPath", tmp_path / "kv", bare).errno_name == UNKNOWN_ERRNO
    target = tmp_path / "kv.json"
    target.write_text("{}")

    def failing(*args, **kwargs):
        raise bare

    monkeypatch.setattr(store, "opener", failing)
    with pytest.raises(store.LoadRefused) as refused:
        store.read_regular(target, 100)
    assert refused.value.why.endswith(f"({UNKNOWN_ERRNO})")  # was "(?)": another name for the same thing


def test_owner_and_mode_with_our_uid_and_gid(tmp_path: Path) -> None:
    path = tmp_path / "namesrv.lock"
    path.write_text("")
    path.chmod(0o640)
    seen = path.stat()
    us = f"running as uid {os.getuid()} gid {os.getgid()}"
    assert owner_and_us(path) == f"owned by uid {seen.st_uid} gid {seen.st_gid}, mode 0640; {us}"
    assert owner_and_us(tmp_path / "gone") == us
    assert files.FILE_MODE == 0o666  # less the umask: 0644 under 0022, 0664 under the image's 0002
