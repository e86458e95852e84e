"""The controller's state changes go through the audit trail (audit.py) as the NameServer's do:
an operator's UPDATE_CONTROLLER_CONFIG (1009), CLEAN_BROKER_DATA (1011) and designated election
(1002), and a broker's 1001/1002/1003/1013, each one ``audit`` event -- done or refused, with who
signed it -- in the log, namesrv_admin_requests_total and the status page's events of the NameServer
it runs in.  Before, 1009 left no line at all and none of them an audit event."""

from __future__ import annotations

import pytest_twisted
from twisted.internet import reactor, threads
from twisted.logger import capturedLogs, formatEvent

from tests.controller.test_acl_tls import ACCOUNTS, ATTACK
from tests.support import server_config
from twisted_namesrv.admin.client import NamesrvClient
from twisted_namesrv.controller.audit import CONTROLLER_OPERATIONS
from twisted_namesrv.controller.codes import ControllerRequestCode as Req
from twisted_namesrv.controller.codes import ControllerResponseCode as Code
from twisted_namesrv.remoting.codes import V5_3_3
from twisted_namesrv.service import NamesrvService
from twisted_namesrv.state.hosts import KeptHosts


@pytest_twisted.async_yield_fixture
async def controller(tmp_path):
    """A NameServer with its controller and aclEnable; yields (service, controller address)."""
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACCOUNTS)
    service = NamesrvService.from_config(server_config(tmp_path, aclEnable=True, aclAccountsFile=str(acl)), reactor,
                                         controller_port=0)
    service.startService()
    await service.port_ready
    await service.controller.ready
    yield service, f"127.0.0.1:{service.controller.port.getHost().port}"
    await service.stopService()


def send(addr: str, requests: list, credentials: tuple[str, str] | None) -> list:
    client = NamesrvClient(addr, 10, credentials)
    try:
        return [client.call(code, ext, body, version=V5_3_3) for code, ext, body in requests]
    finally:
        client.close()


async def audited(addr: str, requests: list, credentials: tuple[str, str] | None) -> tuple[list, list[dict]]:
    with capturedLogs() as events:
        answers = await threads.deferToThread(send, addr, requests, credentials)
    return answers, [e for e in events if e.get("log_namespace") == "twisted_namesrv.audit"]


@pytest_twisted.ensureDeferred
async def test_every_state_changing_controller_request_is_one_audit_event(controller):
    service, addr = controller
    answers, events = await audited(addr, ATTACK, ("ops", "ops-secret"))
    assert answers[ATTACK.index(next(r for r in ATTACK if r[0] == Req.UPDATE_CONTROLLER_CONFIG))].code == Code.SUCCESS
    changing = [code for code, _, _ in ATTACK if code in CONTROLLER_OPERATIONS]
    assert [e["audit"]["code"] for e in events] == changing  # the heartbeat (904) only keeps a broker alive
    by_code = {e["audit"]["code"]: e["audit"] for e in events}
    config = by_code[Req.UPDATE_CONTROLLER_CONFIG]
    assert config["operation"] == "update_controller_config" and config["request"] == "UPDATE_CONTROLLER_CONFIG"
    assert config["target"] == {"config": {"enableElectUncleanMaster": "true"}} and config["result"] == "ok"
    assert config["access_key"] == "ops" and config["verified"] is True
    elect = by_code[Req.CONTROLLER_ELECT_MASTER]
    assert elect["target"]["designateElect"] == "true" and elect["target"]["brokerName"] == "fake"
    assert by_code[Req.CLEAN_BROKER_DATA]["target"] == {"clusterName": "c1", "brokerName": "fake",
                                                        "isCleanLivingBroker": "true"}
    assert formatEvent(events[-1]).startswith("audit clean_broker_data CLEAN_BROKER_DATA(1011) from 127.0.0.1:")
    counts = service.seen.audit.counts  # the NameServer's: /metrics and the status page show them
    assert counts["update_controller_config", "ok"] == 1 and counts["clean_broker_data", "ok"] == 1
    shown = [event.info["operation"] for event in service.seen.events.recent if event.kind == "audit"]
    assert "update_controller_config" in shown and "elect_master" in shown


@pytest_twisted.ensureDeferred
async def test_refused_controller_requests_are_audited_too(controller):
    service, addr = controller
    operator_codes = [r for r in ATTACK if r[0] in (Req.UPDATE_CONTROLLER_CONFIG, Req.CLEAN_BROKER_DATA,
                                                    Req.CONTROLLER_ELECT_MASTER)]
    answers, events = await audited(addr, operator_codes, ("reader", "reader-secret"))
    assert all("Need admin permission" in answer.remark for answer in answers)
    assert [(e["audit"]["result"], e["audit"]["access_key"]) for e in events] == [("refused", "reader")] * 3
    assert all(e["log_level"].name == "warn" for e in events)
    blocked = [(Req.UPDATE_CONTROLLER_CONFIG, {}, b"controllerStorePath=/tmp/evil\n"),
               (Req.UPDATE_CONTROLLER_CONFIG, {}, b"metricsExporterType=x\\u2028enableElectUncleanMaster=true\n"),
               (Req.UPDATE_CONTROLLER_CONFIG, {}, b"metricsExporterType=x\n" + b"\n" * 65536)]
    answers, events = await audited(addr, blocked, ("ops", "ops-secret"))
    assert [a.code for a in answers] == [Code.NO_PERMISSION] * 3
    assert "control character (U+2028)" in answers[1].remark and "over 65536" in answers[2].remark
    assert [e["audit"]["result"] for e in events] == ["refused"] * 3
    assert service.state.refusals.counts["controller", "config_value"] == 1
    assert service.state.refusals.counts["controller", "config_size"] == 1
    assert service.controller.manager.config["metricsExporterType"] == "DISABLE"
    counts = service.seen.audit.counts
    assert counts["update_controller_config", "refused"] == 4 and counts["clean_broker_data", "refused"] == 1


def test_a_controller_decision_is_declined_neither_refused_nor_failed():
    """Seen with real 5.3.3 controller-mode brokers started again after the whole group stopped: the
    broker outside the last sync-state set asks CONTROLLER_ELECT_MASTER every 5 s and is answered
    CONTROLLER_MASTER_NOT_AVAILABLE until a member of it is back. Counted "failed", that paged
    NamesrvAdminRequestsFailing (critical: "a state change could not be saved, a full or read-only
    disk?") for five minutes; counted "refused", NamesrvAdminRequestsRefused ("ACL, guarded key")
    warned until five minutes after the group had its master, each answer a warning line. The
    controller's own decisions are declined (info); an error saving is a failure, the ACL's a refusal."""
    from twisted_namesrv.audit import AuditTrail, Trail
    from twisted_namesrv.context import Peer
    from twisted_namesrv.controller.audit import CONTROLLER
    from twisted_namesrv.events import RecentEvents
    from twisted_namesrv.remoting import ResponseCode
    from twisted_namesrv.remoting.command import RemotingCommand

    trail = AuditTrail(RecentEvents(lambda: 0.0, KeptHosts()), (CONTROLLER,))
    observe = Trail(CONTROLLER, lambda: 0.0, None, trail)
    elect = RemotingCommand.request(Req.CONTROLLER_ELECT_MASTER, {"clusterName": "c", "brokerName": "b",
                                                                   "brokerId": "1", "designateElect": "false"})
    with capturedLogs() as events:
        for code, remark in ((Code.CONTROLLER_MASTER_NOT_AVAILABLE, "Failed to elect a new master"),
                             (Code.CONTROLLER_FENCED_MASTER_EPOCH, "fenced"),
                             (Code.SYSTEM_ERROR, "cannot append: ENOSPC"),
                             (ResponseCode.NO_PERMISSION, "AclException: no permission")):
            observe(elect, Peer(None, "127.0.0.1:1"), RemotingCommand.response_to(elect, code, remark))
    assert trail.counts["elect_master", "declined"] == 2
    assert trail.counts["elect_master", "failed"] == 1  # a save that failed still pages
    assert trail.counts["elect_master", "refused"] == 1  # the ACL's
    levels = [event["log_level"].name for event in events if "audit" in event]
    assert levels == ["info", "info", "warn", "warn"]  # a broker's retries every 5 s are no warnings
