"""The embedded controller's file log is written off the reactor thread: a slow disk holds the
controller's answer, never the NameServer's lookups beside it on the same reactor; a change is
answered once durable, and a failed write answers an error and changes nothing."""

from __future__ import annotations

import errno
import os
import threading

import pytest_twisted
from twisted.internet import reactor, threads

from tests.support import connect, free_port, server_config
from twisted_namesrv.controller.codes import ControllerRequestCode as Req
from twisted_namesrv.controller.log import FileControllerLog
from twisted_namesrv.remoting import RemotingCommand, RequestCode
from twisted_namesrv.service import NamesrvService

APPLY = {"clusterName": "C", "brokerName": "g", "appliedBrokerId": "1", "registerCheckCode": "127.0.0.1:10911;1"}


class SlowDisk:
    """An fsync that waits until released (a disk stalled for as long as the test says), or fails."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.failing: OSError | None = None
        self.threads: list[int] = []

    def __call__(self, fd: int) -> None:
        self.threads.append(threading.get_ident())
        self.entered.set()
        assert self.release.wait(30), "never released"
        if self.failing is not None:
            raise self.failing
        os.fsync(fd)


def embedded(tmp_path) -> NamesrvService:
    port = free_port()
    config = server_config(tmp_path, enableControllerInNamesrv=True)
    config.extra.update({"controllerDLegerPeers": f"n0-127.0.0.1:{port}", "controllerDLegerSelfId": "n0",
                         "controllerStorePath": str(tmp_path / "store")})
    return NamesrvService.from_config(config, reactor)


@pytest_twisted.inlineCallbacks
def test_lookups_are_answered_while_the_controller_log_waits_for_the_disk(tmp_path) -> None:
    service = embedded(tmp_path)
    file_log = service.controller.file_log
    assert isinstance(file_log, FileControllerLog)
    disk = file_log.fsync = SlowDisk()
    service.startService()
    try:
        namesrv_port = (yield service.port_ready).getHost().port
        yield service.controller.ready
        controller = yield connect(service.controller.port.getHost().port)
        lookups = yield connect(namesrv_port)
        applied = controller.call(RemotingCommand.request(Req.CONTROLLER_APPLY_BROKER_ID, APPLY, opaque=1))
        yield threads.deferToThread(disk.entered.wait, 10)  # the append's fsync has begun, and waits
        for opaque in range(2, 12):  # the NameServer answers meanwhile: the reactor is not the one waiting
            answer = yield lookups.call(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, opaque=opaque))
            assert answer.code == 0
        assert not applied.called and file_log.records == 0  # not answered before it is durable
        assert threading.get_ident() not in disk.threads
        disk.release.set()
        answer = yield applied
        assert answer.code == 0, answer.remark
        assert file_log.records == 1 and FileControllerLog(tmp_path / "store").open() != []
        controller.transport.loseConnection()
        lookups.transport.loseConnection()
    finally:
        disk.release.set()
        yield service.stopService()


@pytest_twisted.inlineCallbacks
def test_a_failed_write_off_the_reactor_answers_an_error_and_changes_nothing(tmp_path) -> None:
    service = embedded(tmp_path)
    file_log = service.controller.file_log
    disk = file_log.fsync = SlowDisk()
    disk.failing = OSError(errno.EIO, "Input/output error")
    service.startService()
    try:
        yield service.controller.ready
        controller = yield connect(service.controller.port.getHost().port)
        applied = controller.call(RemotingCommand.request(Req.CONTROLLER_APPLY_BROKER_ID, APPLY, opaque=1))
        yield threads.deferToThread(disk.entered.wait, 10)
        disk.release.set()
        refused = yield applied
        assert refused.code != 0 and "Input/output error (EIO)" in refused.remark
        assert file_log.records == 0 and service.controller.manager.replicas.replica_info_table == {}
        assert service.controller.controller_metrics.log_append_failures["EIO"] == 1
        disk.failing = None  # the disk is back: the same request goes through, the file holds it alone
        again = yield controller.call(RemotingCommand.request(Req.CONTROLLER_APPLY_BROKER_ID, APPLY, opaque=2))
        assert again.code == 0 and "g" in service.controller.manager.replicas.replica_info_table
        assert len(FileControllerLog(tmp_path / "store").open()) == 1
        controller.transport.loseConnection()
    finally:
        disk.release.set()
        yield service.stopService()
