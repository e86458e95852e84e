"""One leader or none (issue 38, item 1): a Java-style multi-peer controller config
(``controllerDLegerPeers=n0-...;n1-...;n2-...`` with the default controllerType, DLedger) has no
consensus engine under it here: each node would lead alone with its own log.  Every launcher refuses
it at start, exit non-zero, in one line naming the key and the way to run several controllers
(etcd).  Before this, each of the three nodes answered 1005 "isLeader=true" for itself."""

from __future__ import annotations

import pytest

from tests.support import free_port
from tests.test_launch_options import FOREGROUND
from tests.test_launchers import BIN, run
from twisted_namesrv import CannotStart
from twisted_namesrv.controller.config import ControllerConfig, ControllerConfigError


def three_peers() -> str:
    return ";".join(f"n{i}-127.0.0.1:{free_port()}" for i in range(3))


def java_style(tmp_path, self_id: str = "n0", **extra: str) -> str:
    path = tmp_path / "namesrv.properties"
    lines = {"enableControllerInNamesrv": "true", "controllerDLegerGroup": "G1", "controllerDLegerPeers": three_peers(),
             "controllerDLegerSelfId": self_id, "controllerStorePath": str(tmp_path / f"store-{self_id}"), **extra}
    path.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
    return str(path)


def assert_refused_in_one_line(result) -> None:
    assert result.returncode != 0, result
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "controllerDLegerPeers" in lines[0] and "controllerType=etcd" in lines[0], lines[0]
    assert "docs/controller.md" in lines[0]


@pytest.mark.parametrize("name", list(FOREGROUND))
def test_a_java_style_three_peer_dledger_config_refuses_to_start_in_one_line(tmp_path, name):
    result = run(FOREGROUND[name] + ["-c", java_style(tmp_path), "--port", "0", "--data-dir", str(tmp_path / "d")],
                 tmp_path)
    assert_refused_in_one_line(result)
    assert not (tmp_path / "store-n0" / "controller.log").exists()  # no log of its own was started


def test_the_standalone_controller_refuses_several_peers_too(tmp_path):
    path = tmp_path / "controller.properties"
    path.write_text(f"controllerDLegerGroup=G1\ncontrollerDLegerPeers={three_peers()}\ncontrollerDLegerSelfId=n1\n"
                    f"controllerStorePath={tmp_path / 'store'}\n")
    result = run([str(BIN / "twistd"), "-n", "namesrv-controller", "-c", str(path)], tmp_path)
    assert_refused_in_one_line(result)


def test_one_peer_or_an_etcd_group_is_accepted():
    ControllerConfig({"controllerDLegerPeers": "n0-127.0.0.1:9878", "controllerDLegerSelfId": "n0"}).refuse_lone_peers()
    with pytest.raises(ControllerConfigError, match="controllerDLegerPeers: 2 peers"):
        ControllerConfig({"controllerDLegerPeers": "n0-127.0.0.1:1;n1-127.0.0.1:2"}).refuse_lone_peers()


def test_the_service_refuses_several_peers_without_a_consensus(tmp_path):
    from twisted.internet import reactor

    from twisted_namesrv.controller.service import ControllerService

    config = ControllerConfig({"controllerDLegerPeers": three_peers(), "controllerDLegerSelfId": "n2"})
    with pytest.raises(CannotStart, match="controllerDLegerPeers: 3 peers"):
        ControllerService(config, reactor, store_path=str(tmp_path))
