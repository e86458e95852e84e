"""state/store.py's write_atomically: what a replaced file keeps besides its content."""

from __future__ import annotations

import os
import stat

import pytest

from twisted_namesrv.state.store import write_atomically


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("kept", [0o600, 0o640, 0o400, 0o664])
def test_a_replaced_file_keeps_its_permissions(tmp_path, monkeypatch, kept):
    """The ``-c`` file may hold secrets (``tls.server.keyPassword``), and its operator made it 0600: one
    UPDATE_NAMESRV_CONFIG (any peer's without ACL) replaced it by a new file of 0644, secrets and all,
    readable by every user of the machine. The new file takes the old one's permissions, and the
    temporary file holds none of the content where others may read it."""
    path = tmp_path / "ns.properties"
    path.write_bytes(b"tls.server.keyPassword=old\n")
    path.chmod(kept)
    seen: list[int] = []
    real_replace = os.replace

    def replace(source, target) -> None:
        seen.append(mode(source))  # the temporary file, full, just before it takes the name
        real_replace(source, target)
    monkeypatch.setattr(os, "replace", replace)
    write_atomically(path, b"tls.server.keyPassword=new\n")
    assert path.read_bytes() == b"tls.server.keyPassword=new\n"
    assert mode(path) == kept and seen == [kept]


def test_a_new_file_is_made_as_before(tmp_path):
    """Without a file to replace: 0644 as the umask leaves it (the KV store, a first config save)."""
    umask = os.umask(0o022)
    try:
        write_atomically(tmp_path / "kvConfig.json", b"{}")
    finally:
        os.umask(umask)
    assert mode(tmp_path / "kvConfig.json") == 0o644


def test_a_file_system_that_refuses_permissions_still_takes_the_write(tmp_path, monkeypatch):
    """vfat and some network mounts refuse chmod (EPERM): the save still succeeds, the new file as
    closed as it was made (0600), never a failed KV put for a permission the mount does not keep."""
    import errno

    path = tmp_path / "kvConfig.json"
    path.write_bytes(b"{}")
    path.chmod(0o644)

    def refused(fd, mode) -> None:
        raise OSError(errno.EPERM, os.strerror(errno.EPERM))
    monkeypatch.setattr(os, "fchmod", refused)
    write_atomically(path, b'{"configTable":{}}')
    assert path.read_bytes() == b'{"configTable":{}}' and mode(path) == 0o600


def test_a_data_dir_to_make_on_a_read_only_file_system_is_said_so(tmp_path, monkeypatch):
    """``--data-dir ro/x`` with ``ro`` a read-only mount (a ``podman run --read-only`` without a
    volume there) said "no write permission in ro": an operator chmods and nothing changes."""
    from types import SimpleNamespace

    from twisted_namesrv.state import store

    monkeypatch.setattr(store.os, "access", lambda path, mode: False)  # as access(2) answers on a read-only mount
    monkeypatch.setattr(store.os, "statvfs", lambda path: SimpleNamespace(f_flag=os.ST_RDONLY))
    assert store.unwritable(tmp_path / "x" / "kvConfig.json") == (
        f"cannot create {tmp_path / 'x'}: {tmp_path} is on a read-only file system")
    monkeypatch.setattr(store.os, "statvfs", lambda path: SimpleNamespace(f_flag=0))
    assert store.unwritable(tmp_path / "x" / "kvConfig.json").startswith(
        f"cannot create {tmp_path / 'x'}: no write permission in {tmp_path}")
