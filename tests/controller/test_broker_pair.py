"""Two controller-mode brokers (Python doubles speaking what a 5.3.3 broker speaks) against our
NameServer with its embedded controller: start, election, sync-state changes, the master's
kill, failover with the push of NOTIFY_BROKER_ROLE_CHANGED, and the killed broker's rejoin as
slave - in the route and at the controller."""

from __future__ import annotations

import pytest_twisted
from twisted.internet import defer, reactor

from tests.support import TIMEOUT, server_config
from twisted_namesrv.controller.codes import ControllerRequestCode as Req
from twisted_namesrv.remoting import RemotingCommand, RequestCode, fastjson
from twisted_namesrv.service import NamesrvService

from .broker_pair import ControllerModeBroker


@defer.inlineCallbacks
def start_namesrv_with_controller(tmp_path):
    config = server_config(tmp_path)
    service = NamesrvService.from_config(config, reactor, controller_port=0)
    service.startService()
    port = yield service.port_ready
    yield service.controller.ready
    return service, port.getHost().port, service.controller.port.getHost().port


@defer.inlineCallbacks
def route_of(broker: ControllerModeBroker, topic: str = "CtlTopic"):
    request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, opaque=9000 + len(
        broker.registrations))
    answer = yield broker.namesrv_link.call(request)
    assert answer.code == 0, answer.header
    data = fastjson.loads(bytes(answer.body))
    return {int(k): v for k, v in data["brokerDatas"][0]["brokerAddrs"].items()}


@pytest_twisted.inlineCallbacks
def test_two_brokers_elect_sync_fail_over_and_rejoin(tmp_path) -> None:
    service, namesrv_port, controller_port = yield start_namesrv_with_controller(tmp_path)
    c0, c1 = ControllerModeBroker(reactor), ControllerModeBroker(reactor)
    try:
        # start: c0 gets id 1 and is elected (first election: the broker that asked), c1 gets id 2, slave
        yield c0.start_in_controller_mode(namesrv_port, controller_port)
        assert (c0.controller_id, c0.master_id, c0.master_epoch) == (1, 1, 1)
        yield c1.start_in_controller_mode(namesrv_port, controller_port)
        assert (c1.controller_id, c1.master_id, c1.master_epoch, c1.is_master) == (2, 1, 1, False)
        assert (yield route_of(c1)) == {0: c0.addr, 2: c1.addr}

        # sync-state changes: the master adds the slave; unchanged, stale, or from a non-master is refused
        answer = yield c0.alter_sync_state_set([1, 2])
        assert (answer.code, answer.ext["newSyncStateSetEpoch"]) == (0, "2")
        c0.sync_state_set_epoch = 2
        assert (yield c0.alter_sync_state_set([1, 2])).code == 2013
        assert (yield c0.alter_sync_state_set([1], epoch=1)).code == 2001
        assert (yield c1.alter_sync_state_set([2])).code == 2002  # the set is checked first (Java)
        taken = yield c1.call(Req.CONTROLLER_APPLY_BROKER_ID, {
            "clusterName": "CtlCluster", "brokerName": "broker-ctl", "appliedBrokerId": "1",
            "registerCheckCode": f"{c1.addr};1"})
        assert (taken.code, taken.remark) == (2014, "Fail to apply brokerId: 1 in broker-set: broker-ctl")

        # kill -9 of the master: its controller connection closes, the controller elects c1 and tells it
        c1.role_changed = defer.Deferred()
        pushed = c1.role_changed
        yield c0.kill()
        push = yield pushed.addTimeout(TIMEOUT, reactor)
        assert push.ext == {"masterAddress": c1.addr, "masterBrokerId": "2", "masterEpoch": "2",
                            "syncStateSetEpoch": "3"}
        assert fastjson.loads(bytes(push.body)) == {"syncStateSet": [2], "syncStateSetEpoch": 3}
        assert c1.is_master
        yield c1.register_as_role(namesrv_port)
        assert (yield route_of(c1)) == {0: c1.addr}
        election = service.controller.manager.elections["broker-ctl"]
        assert (election["trigger"], election["oldMaster"], election["candidates"], election["newMaster"]) == (
            "controller", 1, [2], 2)

        # rejoin: c0 restarts with the id it kept, is told c1 is master, registers as slave; c1 adds it back
        yield c0.start_in_controller_mode(namesrv_port, controller_port)
        assert (c0.controller_id, c0.master_id, c0.is_master) == (1, 2, False)
        assert (yield route_of(c0)) == {0: c1.addr, 1: c0.addr}
        answer = yield c1.alter_sync_state_set([1, 2])
        assert (answer.code, answer.ext["newSyncStateSetEpoch"]) == (0, "4")
        data = yield c1.call(Req.CONTROLLER_GET_SYNC_STATE_DATA, body=b'["broker-ctl"]')
        info = fastjson.loads(bytes(data.body))["replicasInfoTable"]["broker-ctl"]
        assert (info["masterBrokerId"], info["masterEpoch"], info["syncStateSetEpoch"]) == (2, 2, 4)
        assert sorted(r["brokerId"] for r in info["inSyncReplicas"]) == [1, 2]
        assert all(r["alive"] for r in info["inSyncReplicas"])
    finally:
        yield c0.kill()
        yield c1.kill()
        yield service.stopService()


@pytest_twisted.inlineCallbacks
def test_metrics_and_status_api_show_the_controller(tmp_path) -> None:
    import json

    from twisted.web.client import Agent, readBody

    from tests.support import free_port

    web_port = free_port()
    config = server_config(tmp_path, metricsPort=web_port)
    service = NamesrvService.from_config(config, reactor, controller_port=0)
    service.startService()
    port = (yield service.port_ready).getHost().port
    yield service.controller.ready
    broker = ControllerModeBroker(reactor)
    try:
        yield broker.start_in_controller_mode(port, service.controller.port.getHost().port)

        @defer.inlineCallbacks
        def get(path: str):
            response = yield Agent(reactor).request(b"GET", f"http://127.0.0.1:{web_port}{path}".encode())
            body = yield readBody(response)
            return response.code, body.decode()

        code, text = yield get("/metrics")
        assert code == 200
        assert 'rocketmq_controller_role{role="leader"} 1.0' in text
        assert 'rocketmq_controller_active_broker_num{broker_set="broker-ctl",cluster="CtlCluster"} 1.0' in text
        assert ('rocketmq_controller_election_total{broker_set="broker-ctl",cluster="CtlCluster",'
                'election_result="new_master_elected"} 1.0') in text
        assert ('rocketmq_controller_request_total{request_handle_status="success",'
                'request_type="controller_apply_broker_id"} 1.0') in text
        assert 'rocketmq_controller_request_latency_us_count{request_type="controller_register_broker"} 1.0' in text
        code, text = yield get("/api/controller")
        group = json.loads(text)["groups"][0]
        assert (group["brokerName"], group["masterBrokerId"], group["masterEpoch"], group["syncStateSet"]) == (
            "broker-ctl", 1, 1, [1])
        assert group["brokers"]["1"] == {"address": broker.addr, "alive": True}
        assert (group["lastElection"]["trigger"], group["lastElection"]["newMaster"]) == ("broker", 1)
    finally:
        yield broker.kill()
        yield service.stopService()


@pytest_twisted.inlineCallbacks
def test_admin_commands_against_the_controller(tmp_path) -> None:
    """namesrv-admin's controller subcommands (run in a thread: the admin client is blocking)."""
    import io

    from twisted.internet import threads

    from twisted_namesrv.admin.cli import main

    service, namesrv_port, controller_port = yield start_namesrv_with_controller(tmp_path)
    c0, c1 = ControllerModeBroker(reactor), ControllerModeBroker(reactor)
    address = f"127.0.0.1:{controller_port}"

    def admin(*argv):
        out, err = io.StringIO(), io.StringIO()
        code = main([*argv, "-a", address], out, err)
        return code, out.getvalue(), err.getvalue()

    try:
        yield c0.start_in_controller_mode(namesrv_port, controller_port)
        yield c1.start_in_controller_mode(namesrv_port, controller_port)
        code, out, err = yield threads.deferToThread(admin, "getControllerMetaData")
        assert code == 0 and f"#ControllerLeaderAddress\t{address}" in out, (out, err)
        code, out, err = yield threads.deferToThread(admin, "getSyncStateSet", "-b", "broker-ctl")
        assert code == 0 and "#MasterBrokerId\t1" in out and "NotInSyncReplica:\tReplicaIdentity{brokerName=" \
            f"'broker-ctl', brokerId=2, brokerAddress='{c1.addr}', alive=true}}" in out, out
        code, out, err = yield threads.deferToThread(admin, "reElectMaster", "-c", "CtlCluster", "-b", "broker-ctl",
                                                     "-i", "2")
        assert code == 1  # 2 is not in the sync-state set yet
        assert "CONTROLLER_ELECT_MASTER failed: CONTROLLER_ELECT_MASTER_FAILED (2012)" in err
        yield c0.alter_sync_state_set([1, 2])
        c1.role_changed = pushed = defer.Deferred()
        code, out, err = yield threads.deferToThread(admin, "reElectMaster", "-c", "CtlCluster", "-b", "broker-ctl",
                                                     "-i", "2")
        assert code == 0 and "masterBrokerId=2" in out and "masterEpoch=2" in out, (out, err)
        push = yield pushed.addTimeout(TIMEOUT, reactor)
        assert push.ext["masterBrokerId"] == "2"
        assert service.controller.manager.elections["broker-ctl"]["trigger"] == "admin"
        code, out, err = yield threads.deferToThread(admin, "cleanBrokerMetadata", "-b", "broker-ctl")
        assert code == 1 and "Broker broker-ctl is still alive, clean up failure" in err
        code, out, err = yield threads.deferToThread(admin, "updateControllerConfig", "-k",
                                                     "enableElectUncleanMaster", "-v", "true")
        assert code == 0, err
        code, out, err = yield threads.deferToThread(admin, "getControllerConfig")
        assert code == 0 and "enableElectUncleanMaster" in out and "true" in out
        yield c0.kill()
        yield c1.kill()
        code, out, err = yield threads.deferToThread(admin, "cleanBrokerMetadata", "-b", "broker-ctl", "-c",
                                                     "CtlCluster", "-l")
        assert code == 0, err
        assert "broker-ctl" not in service.controller.manager.replicas.replica_info_table
    finally:
        yield c0.kill()
        yield c1.kill()
        yield service.stopService()
