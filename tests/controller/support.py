"""Helpers for the controller tests: a started ControllerService on an ephemeral port."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from twisted.internet import defer, reactor

from twisted_namesrv.controller.config import ControllerConfig
from twisted_namesrv.controller.service import ControllerService


class RecordingNotifier:
    """Keeps the pushes (address, frame) instead of connecting to brokers' ports."""

    def __init__(self) -> None:
        self.pushes: list[tuple[str, bytes]] = []

    def __call__(self, address: str, frame: bytes) -> None:
        self.pushes.append((address, frame))


@defer.inlineCallbacks
def start_controller(tmp_path: Path, notifier: Any = None, **values: Any):
    """A started ControllerService (single node, file log under tmp_path) and its port."""
    config = ControllerConfig({"controllerDLegerGroup": "refrig-ctl", "controllerDLegerSelfId": "n0",
                               "controllerStorePath": str(tmp_path / "ctl"), **values})
    service = ControllerService(config, reactor, port=0, bind="127.0.0.1")
    if notifier is not None:
        service.manager.notifier = notifier
    service.startService()
    yield service.ready
    return service, service.port.getHost().port


def wait_idle(service: ControllerService) -> defer.Deferred:
    """Fires once every queued controller turn (elections included) has run."""
    return service.manager._serial.run(lambda: None)
