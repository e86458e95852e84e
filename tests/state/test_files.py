"""state/files.py's names for what an operator reads: a file's owner and mode with our uid and gid."""

from __future__ import annotations

import os
from pathlib import Path

from twisted_namesrv.state import files
from twisted_namesrv.state.files import owner_and_us


def test_owner_and_mode_with_our_uid_and_gid(tmp_path: Path) -> None:
    path = tmp_path / "namesrv.lock"
    path.write_text("")
    path.chmod(0o640)
    seen = path.stat()
    us = f"running as uid {os.getuid()} gid {os.getgid()}"
    assert owner_and_us(path) == f"owned by uid {seen.st_uid} gid {seen.st_gid}, mode 0640; {us}"
    assert owner_and_us(tmp_path / "gone") == us
    assert files.FILE_MODE == 0o666  # less the umask: 0644 under 0022, 0664 under the image's 0002
