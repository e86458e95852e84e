"""An error answer changes nothing (issue 38, items 2 and 3): every write code under each fault.

A full file system (a real 64 KiB tmpfs), a full fd table (a real RLIMIT_NOFILE) and a failing
device (EIO from fsync/write on the store's files), met by the one request under test:

- the NameServer's PUT_KV_CONFIG, DELETE_KV_CONFIG: answered SYSTEM_ERROR
  naming the file and the error; memory as before; the files byte for byte as before; a restart
  on them loads the state before; a log line and a count in namesrv_store_write_failures;
- UPDATE_NAMESRV_CONFIG is Java's exception (issue 46 item 4): applied in memory only, until the
  restart, answered SUCCESS with a remark naming the file and the error, under these faults and a
  read-only file (the volume or the file alone mounted read-only, as a ConfigMap is): the file as
  before, a log line, the count, and ``unsaved`` until a save succeeds;
- the controller's writes (APPLY_BROKER_ID, REGISTER_BROKER, ELECT_MASTER, ALTER_SYNC_STATE_SET,
  CLEAN_BROKER_DATA): answered SYSTEM_ERROR, the state as before, controller.log cut back to its
  last good record (the issue's case: a half record followed by the next good append made the
  restart say "corrupt at byte N").  EMFILE cannot touch an append (the log's descriptor is open):
  there the write succeeds and is durable, which is also "the answer tells the truth".

Then the fault is gone, the same request succeeds, and a restart loads every acknowledged change.
Before this change the NameServer's writes answered an error with memory changed, and the
controller log refused to start after an ENOSPC.
"""

from __future__ import annotations

import copy
import itertools
from collections import Counter
from pathlib import Path

import pytest
from twisted.internet import task
from twisted.logger import LogLevel, formatEvent, globalLogPublisher

from tests import built
from tests.hostile.faults import FAULTS, READ_ONLY, bind_mounted, fault, read_only, tiny_tmpfs
from twisted_namesrv.context import Peer
from twisted_namesrv.controller.codes import ControllerRequestCode as Req
from twisted_namesrv.controller.config import ControllerConfig
from twisted_namesrv.controller.events import ApplyBrokerIdEvent, decode_event, encode_event
from twisted_namesrv.controller.log import FileControllerLog, SoleLeader
from twisted_namesrv.controller.manager import ControllerManager
from twisted_namesrv.controller.metrics import ControllerMetrics
from twisted_namesrv.controller.processor import CONTROLLER_TABLE
from twisted_namesrv.controller.replicas import MAX_TEXT_LENGTH, ReplicasInfoManager
from twisted_namesrv.dispatch import Dispatcher
from twisted_namesrv.metrics import Metrics
from twisted_namesrv.remoting import RemotingCommand, RequestCode, ResponseCode
from twisted_namesrv.remoting.codes import V5_3_3
from twisted_namesrv.schema import SERVER_SCHEMA
from twisted_namesrv.state.config import OURS, ConfigError, ConfigKey, ConfigSchema, NamesrvConfig

PAGE = 4096
ERRNO = {"ENOSPC": "ENOSPC", "EMFILE": "EMFILE", "EIO": "EIO"}


@pytest.fixture
def store_dir(tmp_path):
    """Where the stores live: a tiny tmpfs (so ENOSPC is a real full disk), unmounted after."""
    with tiny_tmpfs(tmp_path / "fs") as directory:
        yield directory


def request(code: int, ext: dict | None = None, body: bytes | None = None, opaque: int = 1) -> RemotingCommand:
    return RemotingCommand.decode(RemotingCommand.request(code, ext or {}, body, opaque=opaque,
                                                          version=V5_3_3).encode()[4:])


# -- the NameServer's writes ----------------------------------------------------------------------

class Namesrv:
    def __init__(self, directory: Path, schema: ConfigSchema = SERVER_SCHEMA) -> None:
        self.directory = directory
        self.config = NamesrvConfig.from_file(None, self.overrides(), schema=schema)
        self.dispatcher = built.dispatcher(self.config, task.Clock())
        self.state = self.dispatcher.state
        self.failures: Counter = self.dispatcher.metrics.store_failures

    def overrides(self) -> dict:
        return {"kvConfigPath": str(self.directory / "kvConfig.json"),
                "configStorePath": str(self.directory / "namesrv.properties")}

    def call(self, command: RemotingCommand) -> RemotingCommand:
        return self.dispatcher.dispatch(command, Peer("ch", "127.0.0.1:40000"))

    def memory(self) -> tuple:
        return copy.deepcopy(self.state.kv.configTable), dict(self.config.values), dict(self.config.extra)

    def disk(self) -> dict:
        return {name: (self.directory / name).read_bytes() if (self.directory / name).exists() else None
                for name in ("kvConfig.json", "namesrv.properties")}

    def restarted(self) -> tuple:
        config = NamesrvConfig.from_file(None, self.overrides(), schema=SERVER_SCHEMA)
        state = built.owners(config, task.Clock()).state
        return state.kv.configTable, config["orderMessageEnable"]


NAMESRV_WRITES = {
    "PUT_KV_CONFIG": (request(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "k3", "value": "v3"}),
                      lambda kv, order: kv["NS"].get("k3") == "v3"),
    "DELETE_KV_CONFIG": (request(RequestCode.DELETE_KV_CONFIG, {"namespace": "NS", "key": "k1"}),
                         lambda kv, order: "k1" not in kv["NS"]),
}


@pytest.mark.parametrize("kind", FAULTS)
@pytest.mark.parametrize("code", list(NAMESRV_WRITES))
def test_a_namesrv_write_that_fails_answers_an_error_and_changes_nothing(store_dir, monkeypatch, code, kind):
    namesrv = Namesrv(store_dir)
    for key in ("k1", "k2"):
        assert namesrv.call(request(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": key, "value": "v"})).code == 0
    command, changed = NAMESRV_WRITES[code]
    memory, disk = namesrv.memory(), namesrv.disk()
    logged: list[str] = []

    def observer(event: dict) -> None:
        if event.get("log_level") == LogLevel.error:
            logged.append(formatEvent(event))

    globalLogPublisher.addObserver(observer)
    try:
        with fault(kind, store_dir, monkeypatch):
            answer = namesrv.call(command)
    finally:
        globalLogPublisher.removeObserver(observer)
    assert answer.code == ResponseCode.SYSTEM_ERROR, (answer.code, answer.remark)
    assert ERRNO[kind] in answer.remark and "not applied" in answer.remark
    assert namesrv.memory() == memory, "an error answer changed memory"
    assert namesrv.disk() == disk, "an error answer changed the files"
    assert not changed(*namesrv.restarted()), "the refused change is there after a restart"
    assert namesrv.failures == {("kvConfigPath", ERRNO[kind]): 1}
    assert [line for line in logged if ERRNO[kind] in line and "refused" in line], logged
    # the fault gone, the same request succeeds and survives a restart
    assert namesrv.call(command).code == ResponseCode.SUCCESS
    assert changed(*namesrv.restarted())
    assert sorted(p.name for p in store_dir.iterdir()) == sorted(n for n, b in namesrv.disk().items() if b)


@pytest.mark.parametrize("kind", [*FAULTS, *READ_ONLY])
def test_a_config_update_its_file_cannot_take_is_applied_in_memory_until_the_restart(store_dir, monkeypatch, kind):
    """Java's Configuration.update applies the values, then logs 'persist string2File error' and
    answers SUCCESS; a read-only ConfigMap must not turn a runtime change into an error."""
    namesrv = Namesrv(store_dir)
    update = request(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true\n")
    assert namesrv.call(request(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=false\n")).code == 0
    disk = namesrv.disk()
    logged: list[tuple[LogLevel, str]] = []

    def observer(event: dict) -> None:
        logged.append((event.get("log_level"), formatEvent(event)))

    globalLogPublisher.addObserver(observer)
    try:
        if kind in READ_ONLY:
            with read_only(kind, store_dir, store_dir / "namesrv.properties"):
                answer = namesrv.call(update)
        else:
            with fault(kind, store_dir, monkeypatch):
                answer = namesrv.call(update)
    finally:
        globalLogPublisher.removeObserver(observer)
    error = ERRNO.get(kind, "EROFS")
    assert answer.code == ResponseCode.SUCCESS
    assert answer.remark.startswith("applied in memory only, until the restart: cannot save configStorePath ")
    assert f"({error})" in answer.remark
    assert namesrv.config["orderMessageEnable"] is True and error in namesrv.config.unsaved
    assert namesrv.disk() == disk, "the file changed"
    assert namesrv.restarted()[1] is False, "a restart on the file goes back to it"
    assert namesrv.failures == {("configStorePath", error): 1}
    assert [line for level, line in logged if level == LogLevel.error and error in line
            and "applied in memory only, until the restart" in line], logged
    assert [line for level, line in logged if level == LogLevel.warn and "updateNamesrvConfig from 127.0.0.1:40000"
            in line and "orderMessageEnable" in line and error in line], logged
    # the file writable again, the next update saves everything and says nothing more
    again = namesrv.call(update)
    assert (again.code, again.remark, namesrv.config.unsaved) == (ResponseCode.SUCCESS, None, "")
    assert namesrv.restarted()[1] is True


def test_a_file_mounted_on_its_own_is_saved_in_place(store_dir, tmp_path):
    """``podman -v ./namesrv.properties:/etc/namesrv/namesrv.properties``: the file can be neither
    linked nor renamed over (EXDEV), so every save failed where Java 5.3.3 (which writes in place)
    saves; now it is rewritten in place, and what the mount shows is what the source file holds."""
    source = tmp_path / "namesrv.properties"
    source.write_text("orderMessageEnable=false\n")
    namesrv = Namesrv(store_dir)
    (store_dir / "namesrv.properties").write_text("")
    with bind_mounted(source, store_dir / "namesrv.properties"):
        answer = namesrv.call(request(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true\n"))
        assert (answer.code, answer.remark, namesrv.failures) == (ResponseCode.SUCCESS, None, Counter())
        assert namesrv.restarted()[1] is True
    assert "orderMessageEnable=true\n" in source.read_text()
    assert sorted(p.name for p in store_dir.iterdir()) == ["namesrv.properties"]  # no .tmp, no .old left


def test_an_update_that_fails_validation_changes_no_value(tmp_path):
    """apply is all or none: before, a value refused by _validate stayed set beside the error."""
    def no_negative_retries(values) -> None:
        if values["moduleRetries"] < 0:
            raise ConfigError(f"moduleRetries: {values['moduleRetries']} is out of range (at least 0)")
    # every numeric key of the server's own is guarded: a module's key that updates may change, and its check
    namesrv = Namesrv(tmp_path, SERVER_SCHEMA.with_keys((ConfigKey("moduleRetries", 3, OURS),), no_negative_retries))
    memory = namesrv.memory()
    answer = namesrv.call(request(RequestCode.UPDATE_NAMESRV_CONFIG,
                                  body=b"orderMessageEnable=true\nmoduleRetries=-1\n"))
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert namesrv.memory() == memory


# -- the controller's writes ----------------------------------------------------------------------

class Controller:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.clock = task.Clock()
        self.metrics = ControllerMetrics()
        self.log = FileControllerLog(directory)
        self.log.open()
        self.manager = ControllerManager(ControllerConfig(), self.log, SoleLeader("127.0.0.1:1"), self.clock.seconds,
                                         metrics=self.metrics)
        self.manager.start()
        self.dispatcher = Dispatcher(self.manager, Metrics(), count_requests=True, table=CONTROLLER_TABLE)
        self.opaque = 0

    def call(self, code: int, ext: dict, body: bytes | None = None) -> RemotingCommand:
        self.opaque += 1
        answer = self.dispatcher.dispatch(RemotingCommand.decode(RemotingCommand.request(
            code, ext, body, opaque=self.opaque, version=V5_3_3).encode()[4:]), Peer("ch"))
        assert answer is not None  # the file log answers in the same turn
        return answer

    def join(self, broker_id: int) -> None:
        address = f"127.0.0.1:{10000 + broker_id}"
        ids = {"clusterName": "C", "brokerName": "g"}
        assert self.call(Req.CONTROLLER_APPLY_BROKER_ID, {**ids, "appliedBrokerId": str(broker_id),
                                                          "registerCheckCode": f"{address};1"}).code == 0
        self.manager.heartbeats.on_broker_heartbeat("C", "g", address, broker_id, 60_000, f"ch{broker_id}", 0, 0, 0,
                                                    0)

    def state(self) -> dict:
        return copy.deepcopy(self.manager.replicas.snapshot())

    def restarted(self) -> dict:
        self.log.close()
        again = FileControllerLog(self.directory)
        replicas = ReplicasInfoManager()
        for entry in again.open():
            replicas.apply_event(decode_event(entry))
        again.close()
        self.log.open()
        return replicas.snapshot()


def group_of_three(controller: Controller) -> None:
    """Brokers 1, 2, 3 of group g, 1 master, sync-state set {1, 2}."""
    for broker_id in (1, 2, 3):
        controller.join(broker_id)
    elected = controller.call(Req.CONTROLLER_ELECT_MASTER, {"clusterName": "C", "brokerName": "g", "brokerId": "1",
                                                            "designateElect": "false"})
    assert elected.code == 0, elected.remark
    altered = controller.call(Req.CONTROLLER_ALTER_SYNC_STATE_SET,
                              {"brokerName": "g", "masterBrokerId": "1", "masterEpoch": "1"},
                              b'{"syncStateSet":[1,2],"syncStateSetEpoch":1}')
    assert altered.code == 0, altered.remark


def pad_to_a_page_end(controller: Controller, room: int = 10) -> None:
    """Grow the log (good records of other groups, each register check code within MAX_TEXT_LENGTH)
    to ``room`` bytes short of a page: a tmpfs file's last page has space a full disk does not take,
    so the next append then writes ``room`` bytes and meets ENOSPC - the half record of the issue."""
    log = controller.directory / "controller.log"
    target = (log.stat().st_size // PAGE + 1) * PAGE - room
    for count in itertools.count():
        name, gap = f"pad{count}", target - log.stat().st_size
        sizes = {8 + len(encode_event(ApplyBrokerIdEvent("C", name, "a", 1, "a;" + "x" * length))): length
                 for length in range(1, MAX_TEXT_LENGTH - 1)}
        smallest = min(sizes)
        if gap < smallest:  # no record fits: a page further
            target += PAGE
            gap += PAGE
        # the one record that fills the gap, else one that leaves room for another (a name a digit longer)
        size = gap if gap in sizes else max(size for size in sizes if gap - size >= smallest + 2)
        assert controller.call(Req.CONTROLLER_APPLY_BROKER_ID, {
            "clusterName": "C", "brokerName": name, "appliedBrokerId": "1",
            "registerCheckCode": "a;" + "x" * sizes[size]}).code == 0
        if size == gap:
            assert log.stat().st_size == target
            return


CONTROLLER_WRITES = {
    "APPLY_BROKER_ID": (Req.CONTROLLER_APPLY_BROKER_ID, {"clusterName": "C", "brokerName": "g", "appliedBrokerId": "4",
                                                         "registerCheckCode": "127.0.0.1:10004;1"}, None),
    "REGISTER_BROKER": (Req.CONTROLLER_REGISTER_BROKER, {"clusterName": "C", "brokerName": "g", "brokerId": "3",
                                                         "brokerAddress": "127.0.0.1:20003"}, None),
    "ELECT_MASTER": (Req.CONTROLLER_ELECT_MASTER, {"clusterName": "C", "brokerName": "g", "brokerId": "2",
                                                   "designateElect": "true"}, None),
    "ALTER_SYNC_STATE_SET": (Req.CONTROLLER_ALTER_SYNC_STATE_SET, {"brokerName": "g", "masterBrokerId": "1",
                                                                   "masterEpoch": "1"},
                             b'{"syncStateSet":[1],"syncStateSetEpoch":2}'),
    "CLEAN_BROKER_DATA": (Req.CLEAN_BROKER_DATA, {"clusterName": "C", "brokerName": "g",
                                                  "brokerControllerIdsToClean": "3", "isCleanLivingBroker": "true"},
                          None),
}


@pytest.mark.parametrize("kind", FAULTS)
@pytest.mark.parametrize("code", list(CONTROLLER_WRITES))
def test_a_controller_write_that_fails_answers_an_error_and_changes_nothing(store_dir, monkeypatch, code, kind):
    controller = Controller(store_dir)
    group_of_three(controller)
    if kind == "ENOSPC":
        pad_to_a_page_end(controller)
    before, size = controller.state(), (store_dir / "controller.log").stat().st_size
    request_code, ext, body = CONTROLLER_WRITES[code]
    events: list[dict] = []
    globalLogPublisher.addObserver(events.append)
    try:
        with fault(kind, store_dir, monkeypatch):
            answer = controller.call(request_code, ext, body)
    finally:
        globalLogPublisher.removeObserver(events.append)
    if kind == "EMFILE":  # the log's descriptor is open: an append opens nothing, so it succeeds, durably
        assert answer.code == 0, answer.remark
        after = controller.state()
        assert after != before and controller.restarted() == after
        return
    assert answer.code == ResponseCode.SYSTEM_ERROR, (answer.code, answer.remark)
    assert kind in answer.remark and "refused" in answer.remark
    assert controller.state() == before, "an error answer changed the controller's state"
    assert controller.manager.elections["g"]["newMaster"] == 1  # a refused election is not shown as the last
    assert (store_dir / "controller.log").stat().st_size == size, "the failed append left bytes behind"
    assert controller.metrics.log_append_failures == {kind: 1}
    errors = [formatEvent(e) for e in events if e.get("log_level") == LogLevel.error]
    assert any(kind in line and "refused" in line for line in errors), errors  # one line says so,
    assert not any("log_failure" in e for e in events)  # and no traceback
    assert controller.restarted() == before
    # the fault gone: the same request lands right after the last good record, and replays
    answer = controller.call(request_code, ext, body)
    assert answer.code == 0, answer.remark
    after = controller.state()
    assert after != before and controller.restarted() == after


def test_an_append_whose_cut_fails_too_refuses_until_the_cut_succeeds(tmp_path, monkeypatch):
    """EIO on write and on ftruncate: the half record stays, so nothing may land after it; once the
    device answers again the next append cuts first, and the log replays every acknowledged event."""
    import errno
    import os

    controller = Controller(tmp_path)
    controller.join(1)
    size = (tmp_path / "controller.log").stat().st_size
    real_write = os.write

    def half_then_eio(fd, data):
        real_write(fd, bytes(data)[:5])
        raise OSError(errno.EIO, "Input/output error")

    def no_truncate(fd, length):
        raise OSError(errno.EIO, "Input/output error")

    apply2 = {"clusterName": "C", "brokerName": "g", "appliedBrokerId": "2", "registerCheckCode": "127.0.0.1:2;1"}
    with monkeypatch.context() as patch:
        patch.setattr(os, "write", half_then_eio)
        patch.setattr(os, "ftruncate", no_truncate)
        assert controller.call(Req.CONTROLLER_APPLY_BROKER_ID, apply2).code == ResponseCode.SYSTEM_ERROR
    assert (tmp_path / "controller.log").stat().st_size == size + 5  # the half record is there
    with monkeypatch.context() as patch:
        patch.setattr(os, "ftruncate", no_truncate)
        answer = controller.call(Req.CONTROLLER_APPLY_BROKER_ID, apply2)
        assert answer.code == ResponseCode.SYSTEM_ERROR and "not writable until it is cut back" in answer.remark
    assert controller.call(Req.CONTROLLER_APPLY_BROKER_ID, apply2).code == 0
    assert controller.restarted() == controller.state()
    assert set(controller.manager.replicas.replica_info_table["g"].broker_id_info) == {1, 2}


def test_a_directory_fsync_that_fails_after_the_rename_puts_the_old_file_back(tmp_path, monkeypatch):
    """The last step of a save (fsync of the directory, after the rename) fails with EIO: the old
    file is renamed back from its hard link, so the file a restart reads is the old one even while
    the device fails (putting it back by writing it again would need the failing device)."""
    import errno
    import os

    namesrv = Namesrv(tmp_path)
    assert namesrv.call(request(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "k1", "value": "v1"})).code == 0
    memory, disk = namesrv.memory(), namesrv.disk()
    real_fsync = os.fsync

    def directory_fails(fd) -> None:
        if os.path.isdir(os.readlink(f"/proc/self/fd/{fd}")):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real_fsync(fd)

    with monkeypatch.context() as patch:
        patch.setattr(os, "fsync", directory_fails)
        answer = namesrv.call(request(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "k2", "value": "v2"}))
        assert answer.code == ResponseCode.SYSTEM_ERROR and "EIO" in answer.remark
        assert namesrv.disk() == disk and namesrv.memory() == memory  # while the device still fails
    assert namesrv.restarted()[0] == memory[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kvConfig.json"]
