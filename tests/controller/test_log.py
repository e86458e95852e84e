"""The single-node controller log: what fsync'd reads back; a torn tail (never acknowledged) is
dropped; corruption before the end, a foreign file or an unwritable path refuse to start,
naming the path."""

from __future__ import annotations

import os

import pytest

from twisted_namesrv.controller.log import ControllerLogError, FileControllerLog


def test_appended_events_read_back_in_order(tmp_path) -> None:
    store = FileControllerLog(tmp_path / "s")
    assert store.open() == []
    store.append([b"one", b"two"])
    store.append([b"three"])
    store.close()
    assert FileControllerLog(tmp_path / "s").open() == [b"one", b"two", b"three"]


@pytest.mark.parametrize("cut", [1, 4, 9, 12])
def test_a_torn_last_record_is_dropped_and_the_file_cut(tmp_path, cut) -> None:
    store = FileControllerLog(tmp_path)
    store.open()
    store.append([b"kept"])
    store.append([b"torn-record"])
    store.close()
    size = store.path.stat().st_size
    os.truncate(store.path, size - cut)
    again = FileControllerLog(tmp_path)
    assert again.open() == [b"kept"]
    again.append([b"next"])
    again.close()
    assert FileControllerLog(tmp_path).open() == [b"kept", b"next"]


def test_a_bad_checksum_before_the_end_refuses_to_start(tmp_path) -> None:
    store = FileControllerLog(tmp_path)
    store.open()
    store.append([b"aaaa", b"bbbb"])
    store.close()
    data = bytearray(store.path.read_bytes())
    data[len(data) - 20] ^= 0xFF  # inside the first record
    store.path.write_bytes(bytes(data))
    with pytest.raises(ControllerLogError, match=f"{store.path} is corrupt at byte"):
        FileControllerLog(tmp_path).open()


def test_a_foreign_file_or_an_unwritable_path_refuses_to_start(tmp_path) -> None:
    (tmp_path / FileControllerLog.FILE_NAME).write_bytes(b'{"not": "ours"}')
    with pytest.raises(ControllerLogError, match="is not a controller log"):
        FileControllerLog(tmp_path).open()
    (tmp_path / "file").write_text("x")
    with pytest.raises(ControllerLogError, match=f"controllerStorePath: cannot open {tmp_path / 'file'}"):
        FileControllerLog(tmp_path / "file" / "store").open()
