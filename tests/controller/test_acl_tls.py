"""The controller's port under the NameServer's rules: it follows ``tls.server.mode`` (as Java's
controller does: one TlsSystemConfig for every server) and, with aclEnable, the ACL -- brokers'
own codes signed (or from aclBrokerNetworks), the operators' always signed by an admin account.
Before, ten unsigned plain requests to it claimed a broker id, registered a fake broker, changed
the sync-state set, elected it, turned on unclean election and deleted the group."""

from __future__ import annotations

import ssl

import pytest
import pytest_twisted
from twisted.internet import reactor, threads

from tests.support import server_config
from tests.tls_support import make_pki
from twisted_namesrv.admin.client import NamesrvClient, TransportError
from twisted_namesrv.controller.codes import ControllerRequestCode as Req
from twisted_namesrv.controller.codes import ControllerResponseCode as Code
from twisted_namesrv.remoting.codes import V5_3_3
from twisted_namesrv.service import NamesrvService
from twisted_namesrv.state.acl import ACL_EXCEPTION

ACCOUNTS = """\
accounts:
  - accessKey: ops
    secretKey: ops-secret
    admin: true
  - accessKey: reader
    secretKey: reader-secret
"""
GROUP = {"clusterName": "c1", "brokerName": "fake"}
FAKE = "10.9.9.9:10911"
#: the attack of issue 38, in order: claim an id, register, elect, change the set, unclean election, delete
ATTACK = [
    (Req.CONTROLLER_APPLY_BROKER_ID, {**GROUP, "appliedBrokerId": "1", "registerCheckCode": f"{FAKE};1"}, None),
    (Req.CONTROLLER_REGISTER_BROKER, {**GROUP, "brokerId": "1", "brokerAddress": FAKE}, None),
    (Req.BROKER_HEARTBEAT, {**GROUP, "brokerAddr": FAKE, "brokerId": "1", "heartbeatTimeoutMills": "60000",
                            "epoch": "0", "maxOffset": "0", "confirmOffset": "0", "electionPriority": "0"}, None),
    (Req.CONTROLLER_ELECT_MASTER, {**GROUP, "brokerId": "1", "designateElect": "true"}, None),
    (Req.CONTROLLER_ALTER_SYNC_STATE_SET, {"brokerName": "fake", "masterBrokerId": "1", "masterEpoch": "1"},
     b'{"syncStateSet":[1],"syncStateSetEpoch":1}'),
    (Req.UPDATE_CONTROLLER_CONFIG, {}, b"enableElectUncleanMaster=true\n"),
    (Req.CLEAN_BROKER_DATA, {**GROUP, "isCleanLivingBroker": "true"}, None),
]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest_twisted.async_yield_fixture
async def guarded(tmp_path, pki):
    """A NameServer with its controller, aclEnable and TLS enforcing; yields (service, controller address)."""
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACCOUNTS)
    config = server_config(tmp_path, aclEnable=True, aclAccountsFile=str(acl), **{
        "tls.server.mode": "enforcing", "tls.server.certPath": str(pki.cert), "tls.server.keyPath": str(pki.key)})
    service = NamesrvService.from_config(config, reactor, controller_port=0)
    service.startService()
    await service.port_ready
    await service.controller.ready
    yield service, f"127.0.0.1:{service.controller.port.getHost().port}"
    await service.stopService()


def ask_all(addr: str, tls: ssl.SSLContext | None, credentials: tuple[str, str] | None) -> list:
    client = NamesrvClient(addr, 10, credentials, tls)
    answers = []
    try:
        for code, ext, body in ATTACK:
            try:
                answers.append(client.call(code, ext, body, version=V5_3_3))
            except TransportError as exc:
                answers.append(exc)
    finally:
        client.close()
    return answers


def unchanged(service) -> None:
    manager = service.controller.manager
    assert "fake" not in manager.replicas.replica_info_table
    assert manager.config["enableElectUncleanMaster"] in (False, "false")


@pytest_twisted.ensureDeferred
async def test_plain_peers_are_refused_by_tls_and_unsigned_requests_by_the_acl(guarded, pki):
    service, addr = guarded
    plain = await threads.deferToThread(ask_all, addr, None, None)
    assert all(isinstance(answer, TransportError) for answer in plain), plain  # closed at the first byte
    unchanged(service)
    refusals = service.state.refusals.counts
    assert refusals["controller", "not_tls"] >= 1

    tls = ssl.create_default_context(cafile=str(pki.ca))
    unsigned = await threads.deferToThread(ask_all, addr, tls, None)
    for (code, _, _), answer in zip(ATTACK, unsigned, strict=True):
        assert answer.code == Code.SYSTEM_ERROR and answer.remark.startswith(ACL_EXCEPTION), (code, answer)
    unchanged(service)
    reader = await threads.deferToThread(ask_all, addr, tls, ("reader", "reader-secret"))
    for (code, _, _), answer in zip(ATTACK, reader, strict=True):
        if code in (Req.CONTROLLER_ELECT_MASTER, Req.UPDATE_CONTROLLER_CONFIG, Req.CLEAN_BROKER_DATA):
            assert "Need admin permission" in answer.remark, (code, answer)  # an operator's, not a broker's
    assert service.controller.manager.config["enableElectUncleanMaster"] in (False, "false")
    assert refusals["controller", "acl"] >= len(ATTACK) + 3


@pytest_twisted.ensureDeferred
async def test_a_tls_client_signing_as_an_admin_is_served(guarded, pki):
    service, addr = guarded
    tls = ssl.create_default_context(cafile=str(pki.ca))
    answers = await threads.deferToThread(ask_all, addr, tls, ("ops", "ops-secret"))
    codes = {code: answer.code for (code, _, _), answer in zip(ATTACK, answers, strict=True)}
    assert codes[Req.CONTROLLER_APPLY_BROKER_ID] == Code.SUCCESS
    assert codes[Req.CONTROLLER_REGISTER_BROKER] == Code.SUCCESS
    assert codes[Req.UPDATE_CONTROLLER_CONFIG] == Code.SUCCESS
    assert codes[Req.CLEAN_BROKER_DATA] == Code.SUCCESS
    assert all(not str(answer.remark or "").startswith(ACL_EXCEPTION) for answer in answers)
    assert service.controller.manager.config["enableElectUncleanMaster"] in (True, "true")
