"""One running NameServer per data directory (data_lock.py): a second one on the same directory waits
for the first to stop, then cannot start, naming it; a killed server's lock goes with it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from twisted.logger import capturedLogs

from tests.support import LiveServer, free_port
from twisted_namesrv import CannotStart
from twisted_namesrv.data_lock import LOCK_FILE, lock_stores

HOLD = """
import sys, time
from pathlib import Path
from twisted_namesrv.data_lock import lock_stores
lock = lock_stores([Path(sys.argv[1])])
lock.note("pid 4242, listening on 127.0.0.1:9876")
print("held", flush=True)
time.sleep(60)
"""


class FakeTime:
    """The waiting's clock: each sleep moves it on."""

    def __init__(self) -> None:
        self.t = 0.0
        self.sleeps = 0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds
        self.sleeps += 1


def holder(directory: Path) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(directory)], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    return process


def test_a_second_server_waits_then_cannot_start_naming_the_first(tmp_path: Path) -> None:
    first = holder(tmp_path)
    try:
        clock = FakeTime()
        with capturedLogs() as logged, pytest.raises(CannotStart) as refused:
            lock_stores([tmp_path, tmp_path / "elsewhere"], wait=30, sleep=clock.sleep, now=clock.now)
        assert "in use by another NameServer (pid 4242, listening on 127.0.0.1:9876)" in str(refused.value)
        assert "--data-dir" in str(refused.value)
        assert 30 <= clock.t < 31 and clock.sleeps > 1  # it waited the whole time, polling
        assert [e["log_level"].name for e in logged] == ["warn"]  # "waiting up to 30 s", said once
    finally:
        first.kill()
        first.wait()
    lock = lock_stores([tmp_path], wait=0)  # the killed holder's lock went with it
    lock.note("pid 1, listening on x")
    assert (tmp_path / LOCK_FILE).read_text() == "pid 1, listening on x\n"
    lock.release()


def test_a_server_stopping_meanwhile_lets_the_next_one_start(tmp_path: Path) -> None:
    first = holder(tmp_path)
    clock = FakeTime()

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if clock.sleeps == 3:  # the predecessor finishes its last writes and exits
            first.send_signal(signal.SIGTERM)
            first.wait()

    lock = lock_stores([tmp_path], wait=30, sleep=sleep, now=clock.now)
    assert clock.sleeps >= 3
    lock.release()


def test_a_directory_no_lock_file_can_be_made_in_is_said_and_left(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")  # where a directory should be: nothing can be made under it
    with capturedLogs() as logged:
        lock = lock_stores([tmp_path / "file" / "data"])
    assert lock.held == {} and "is not locked" in logged[0]["log_format"]


def test_a_start_that_fails_leaves_no_lock_file_or_directory_behind(tmp_path: Path) -> None:
    lock = lock_stores([tmp_path / "home" / "namesrv"])
    assert (tmp_path / "home" / "namesrv" / LOCK_FILE).exists()
    lock.release(undo=True)  # the port was taken
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "kept").mkdir()
    lock = lock_stores([tmp_path / "kept"])
    lock.release()  # a clean stop keeps the lock file: removing it would race the next server's lock
    assert (tmp_path / "kept" / LOCK_FILE).exists()


def test_two_real_servers_on_one_data_dir(tmp_path: Path) -> None:
    """As an operator meets it: a second `python -m twisted_namesrv` on another port but the same
    --data-dir says which server holds it, exits 1 and listens nowhere; the first serves on."""
    first_port, second_port = free_port(), free_port()
    data = tmp_path / "data"
    first = LiveServer(tmp_path, first_port, "--port", str(first_port), "--data-dir", str(data)).wait_ready()
    try:
        second = subprocess.run(
            [sys.executable, "-c", "import sys; from twisted_namesrv import data_lock; data_lock.WAIT_SECONDS = 1; "
             "from twisted_namesrv.__main__ import main; main(sys.argv[1:])",
             "--port", str(second_port), "--data-dir", str(data)],
            capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert second.returncode == 1
        assert f"in use by another NameServer (pid {first.process.pid}, listening on 127.0.0.1:{first_port})" \
            in second.stderr
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", second_port), timeout=1).close()
        socket.create_connection(("127.0.0.1", first_port), timeout=1).close()
    finally:
        assert first.stop() == 0


def test_a_symlink_or_fifo_planted_as_the_lock_file_is_never_written_through(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / LOCK_FILE).symlink_to(target)
    (tmp_path / "b").mkdir()
    os.mkfifo(tmp_path / "b" / LOCK_FILE)
    with capturedLogs() as logged:
        lock = lock_stores([tmp_path / "a", tmp_path / "b"])
    lock.note("pid 1, listening on x")
    assert lock.held == {} and target.read_text() == "keep me\n"
    assert sum("is not locked" in e["log_format"] for e in logged) == 2


def test_the_lock_file_is_made_group_writable_under_the_images_umask(tmp_path: Path) -> None:
    previous = os.umask(0o002)  # what NAMESRV_UMASK=0002 sets in the image (launch.umask_from)
    try:
        lock = lock_stores([tmp_path / "data"])
        lock.release()
    finally:
        os.umask(previous)
    assert (tmp_path / "data" / LOCK_FILE).stat().st_mode & 0o777 == 0o664


#: one server's start and stop as OpenShift runs the image: as ``uid`` of group 0, NAMESRV_UMASK as given;
#: it locks the data directory, saves the KV store, and says what it held and what the log said
AS_UID = """
import json, os, sys
from pathlib import Path
from twisted.logger import capturedLogs
from twisted_namesrv.data_lock import lock_stores
from twisted_namesrv.launch import umask_from
from twisted_namesrv.state.store import write_atomically
directory, uid, umask, value = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
os.setgroups([]); os.setgid(0); os.setuid(uid)
umask_from({"NAMESRV_UMASK": umask})
with capturedLogs() as logged:
    lock = lock_stores([directory], wait=0)
saved = ""
try:
    write_atomically(directory / "kvConfig.json", value.encode(), "kvConfigPath")
    saved = (directory / "kvConfig.json").read_text()
except OSError as exc:
    saved = str(exc)
print(json.dumps({"held": bool(lock.held), "saved": saved,
                  "logged": [e["log_format"].format(**e) for e in logged]}))
lock.release()
"""


def as_uid(directory: Path, uid: int, umask: str, value: str) -> dict:
    import json

    done = subprocess.run([sys.executable, "-c", AS_UID, str(directory), str(uid), umask, value],
                          capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(os.geteuid() != 0, reason="runs servers as two other uids: needs root")
def test_a_restart_under_another_uid_of_group_0_locks_and_writes_on(tmp_path: Path) -> None:
    """OpenShift runs the image under an arbitrary uid of group 0, another at every redeploy: what
    one uid made in the data directory (10001:0, 0770) the next locks and writes, with the image's
    umask; with the runtime's default umask (an image before NAMESRV_UMASK) the lock file is 0644
    and the next uid's warning names its owner and mode and the uid and gid it runs as."""
    import tempfile

    for umask, locks_on in (("0002", True), ("0022", False)):
        data = Path(tempfile.mkdtemp(prefix="namesrv-uid-"))  # pytest's own is root's alone (0700)
        try:
            os.chown(data, 10001, 0)
            os.chmod(data, 0o770)
            first = as_uid(data, 10001, umask, '{"first": 1}')
            assert first["held"] and first["saved"] == '{"first": 1}', first
            second = as_uid(data, 1000680000, umask, '{"second": 2}')
            assert second["saved"] == '{"second": 2}', second  # the directory is group 0's: replaced
            assert second["held"] is locks_on, second
            if locks_on:
                assert second["logged"] == [], second
                assert (data / LOCK_FILE).stat().st_mode & 0o777 == 0o664
                assert (data / "kvConfig.json").stat().st_mode & 0o777 == 0o664
            else:
                assert f"{data} is not locked (Permission denied: owned by uid 10001 gid 0, mode 0644; running " \
                       f"as uid 1000680000 gid 0)" in second["logged"][0], second
        finally:
            subprocess.run(["rm", "-rf", str(data)], check=True)


def test_namesrv_umask_is_taken_when_set_and_a_bad_one_cannot_start() -> None:
    from twisted_namesrv.launch import umask_from

    previous = os.umask(0o022)
    try:
        umask_from({})
        assert os.umask(0o022) == 0o022  # unset: left as it was
        umask_from({"NAMESRV_UMASK": "0002"})
        assert os.umask(0o022) == 0o002
        for bad in ("rw", "0999", "01000", "-2"):
            with pytest.raises(SystemExit) as refused:
                umask_from({"NAMESRV_UMASK": bad})
            assert "NAMESRV_UMASK" in str(refused.value.code) and "not a umask" in str(refused.value.code)
        assert os.umask(0o022) == 0o022  # a refused one changed nothing
    finally:
        os.umask(previous)


TRY_LOCK = """
import sys
from pathlib import Path
from twisted_namesrv import CannotStart
from twisted_namesrv.data_lock import lock_stores
try:
    lock_stores([Path(sys.argv[1])], wait=0)
except CannotStart as exc:
    print(exc)
else:
    print("locked")
"""


def test_a_data_dir_removed_while_running_is_locked_again_and_its_stores_written_again(tmp_path: Path) -> None:
    """rm -rf of a running server's data directory: nothing said so, the KV store came back only at the
    next KV change (a restart meanwhile started with no KV config), and a second server started on the
    directory took a lock nobody held, both writing there. Now the next check locks it again, says so,
    counts it and writes every store kept there from memory."""
    import shutil

    from twisted.internet import task

    from tests.support import server_config
    from twisted_namesrv.service import NamesrvService, store_directories

    data = tmp_path / "data"
    config = server_config(data)
    service = NamesrvService.from_config(config, reactor=task.Clock())
    service.data_lock = lock_stores(store_directories(config))
    service.data_lock.note("pid 4242, listening on 127.0.0.1:9876")
    service.state.kv.put("ns", "k1", "v1")
    service.check_data_dirs()
    assert service.metrics.store_failures["dataDirectory", "removed"] == 0  # still there: nothing done
    shutil.rmtree(data)
    with capturedLogs() as logged:
        service.check_data_dirs()
    assert (data / "kvConfig.json").read_text() == '{"configTable":{"ns":{"k1":"v1"}}}'
    assert service.metrics.store_failures["dataDirectory", "removed"] == 1
    assert [e for e in logged if "lost its lock file" in e.get("text", "")]
    assert service.seen.events.recent[-1].kind == "data_dir_removed"
    second = subprocess.run([sys.executable, "-c", TRY_LOCK, str(data)], capture_output=True, text=True, timeout=60)
    assert "in use by another NameServer (pid 4242, listening on 127.0.0.1:9876)" in second.stdout
    service.check_data_dirs()  # once
    assert service.metrics.store_failures["dataDirectory", "removed"] == 1
    service.data_lock.release()


def test_a_data_dir_removed_on_a_full_disk_has_its_kv_written_once_space_is_freed(tmp_path: Path) -> None:
    """rm -rf of the data directory while its disk is full: the KV store's rewrite failed and was left
    so, and a restart after the disk was freed started with no KV config. Now the file is written again
    at every check until it can be, each failure counted, one error line at the start of the spell
    and one line once written; namesrv_kv_unwritten says so meanwhile."""
    import shutil

    from twisted.internet import task

    from tests.hostile.faults import disk_full, tiny_tmpfs
    from tests.support import server_config
    from twisted_namesrv.service import NamesrvService, store_directories

    with tiny_tmpfs(tmp_path / "mnt") as mnt:
        data = mnt / "data"
        config = server_config(data)
        service = NamesrvService.from_config(config, reactor=task.Clock())
        service.data_lock = lock_stores(store_directories(config))
        service.state.kv.put("ns", "k1", "v1")
        failures = service.metrics.store_failures
        shutil.rmtree(data)
        with disk_full(mnt):
            with capturedLogs() as logged:
                for _ in range(3):
                    service.check_data_dirs()
            assert not (data / "kvConfig.json").exists()
            assert service.state.kv.missing and "No space left on device" in service.state.kv.unwritten
            assert failures["dataDirectory", "removed"] == 1
            assert failures["kvConfigPath", "ENOSPC"] == 3  # every try counted
            said = [e["log_format"].format(**e) for e in logged]
            assert len([line for line in said if "is not on disk" in line]) == 1, said  # once a spell
            assert not [line for line in said if "the change is refused" in line], said  # no change was
            assert service.state.kv.get("ns", "k1") == "v1"  # still served
            assert unwritten(service) == 1
        with capturedLogs() as logged:
            service.check_data_dirs()
        assert (data / "kvConfig.json").read_text() == '{"configTable":{"ns":{"k1":"v1"}}}'
        assert not service.state.kv.missing and service.state.kv.unwritten is None and unwritten(service) == 0
        assert [e for e in logged if "written again" in e["log_format"]]
        with capturedLogs() as logged:
            service.check_data_dirs()
        assert failures["kvConfigPath", "ENOSPC"] == 3 and not logged  # nothing more to do
        service.data_lock.release()


def unwritten(service) -> float:
    """namesrv_kv_unwritten as /metrics serves it."""
    from twisted_namesrv.web.collector import NamesrvCollector

    collector = NamesrvCollector(service.state, service.factory, service.seen, service.health)
    return next(family.samples[0].value for family in collector._kv() if family.name == "namesrv_kv_unwritten")


def test_a_directory_that_cannot_be_locked_again_is_tried_at_every_check(tmp_path: Path) -> None:
    """A lost directory whose lock file cannot be made now (here: a file where the directory was) is
    kept pending, said once, and locked again at the first check that can."""
    data = tmp_path / "data"
    lock = lock_stores([data])
    try:
        (data / LOCK_FILE).unlink()
        data.rmdir()
        data.write_bytes(b"in the way")
        with capturedLogs() as logged:
            first, second = lock.check(), lock.check()
        assert first.lost == [data] and first.relocked == [] and second == ([], [])
        assert lock.pending == {data} and len([e for e in logged if "is not locked" in e["log_format"]]) == 1
        data.unlink()
        third = lock.check()
        assert third.lost == [] and third.relocked == [data] and (data / LOCK_FILE).exists()
        assert lock.pending == set() and data in lock.held
    finally:
        lock.release()


def test_a_directory_another_server_locked_meanwhile_gets_no_kv_written_until_it_is_ours_again(
        tmp_path: Path) -> None:
    """rm -rf of the data directory, and a second server started on it before the next check: this one
    cannot lock it again, says so once, and writes no KV config over the other's, the KV missing from
    disk meanwhile; once the other stops, the next check locks it and writes it."""
    import shutil

    from twisted.internet import task

    from tests.support import server_config
    from twisted_namesrv.service import NamesrvService, store_directories

    data = tmp_path / "data"
    config = server_config(data)
    service = NamesrvService.from_config(config, reactor=task.Clock())
    service.data_lock = lock_stores(store_directories(config))
    service.state.kv.put("ns", "k1", "v1")
    shutil.rmtree(data)
    other = holder(data)
    try:
        with capturedLogs() as logged:
            service.check_data_dirs()
            service.check_data_dirs()
        assert service.data_lock.pending == {data} and not (data / "kvConfig.json").exists()
        assert service.state.kv.missing and unwritten(service) == 1
        said = [e["log_format"].format(**e) for e in logged]
        assert len([line for line in said if "is locked by another NameServer" in line]) == 1, said
    finally:
        other.kill()
        other.wait()
    service.check_data_dirs()
    assert service.data_lock.pending == set() and data in service.data_lock.held
    assert (data / "kvConfig.json").read_text() == '{"configTable":{"ns":{"k1":"v1"}}}'
    assert not service.state.kv.missing
    service.data_lock.release()


def test_the_removed_data_dirs_count_is_served_at_zero_from_the_first_scrape(tmp_path: Path) -> None:
    """Born at its first count, the series was read by increase() as no increase at all: NamesrvStoreNotWritten
    did not fire for a data directory removed (seen with Prometheus and the shipped rules)."""
    from tests.web.test_metrics_and_api import Served, value

    samples = Served(tmp_path).scrape()
    assert value(samples, "namesrv_store_write_failures_total", store="dataDirectory", error="removed") == 0
