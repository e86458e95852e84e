"""NOTIFY_MIN_BROKER_ID_CHANGE (905): with notifyMinBrokerIdChanged=true the NameServer tells a
broker group when its lowest id changes, oneway, over a connection of its own (5.3.3)."""

from __future__ import annotations

import pytest_twisted
from twisted.internet import defer, reactor

from tests.interop.broker_double import BrokerDouble
from tests.replay.test_replay import wait_until
from tests.support import server_config, start_server
from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig
from twisted_namesrv.remoting import RequestCode, ResponseCode
from twisted_namesrv.remoting.codes import V5_3_3
from twisted_namesrv.state.config import NamesrvConfig
from twisted_namesrv.state.routes import RegisterRequest, RouteInfoManager


def register(routes: RouteInfoManager, broker_id: int, addr: str, acting: bool = True) -> None:
    body = RegisterBrokerBody(topicConfigTable={"A": TopicConfig("A"), "B": TopicConfig("B")})
    routes.register_broker(RegisterRequest("c", addr, "b", broker_id, f"{addr}-ha", body, channel=addr,
                                           enableActingMaster=acting))


def notifying_routes(enabled: bool = True) -> tuple[RouteInfoManager, list[tuple[str, dict]]]:
    sent: list[tuple[str, dict]] = []
    config = NamesrvConfig({"compatVersion": "5.3.3", "notifyMinBrokerIdChanged": enabled})
    routes = RouteInfoManager(config, lambda: 0.0, notifier=lambda addr, header: sent.append((addr, header)))
    return routes, sent


def test_lower_id_joining_notifies_the_others() -> None:
    routes, sent = notifying_routes()
    register(routes, 2, "s2")
    register(routes, 1, "s1")
    assert sent == [("s2", {"minBrokerId": "1", "minBrokerAddr": "s1", "haBrokerAddr": "s1-ha"})]
    sent.clear()
    register(routes, 3, "s3")  # not a new minimum
    assert sent == []


def test_minimum_leaving_notifies_the_rest_when_acting_master() -> None:
    routes, sent = notifying_routes()
    register(routes, 0, "m")
    register(routes, 1, "s1")
    register(routes, 2, "s2")
    sent.clear()
    routes.unregister_broker("c", "m", "b", 0)
    assert sorted(addr for addr, _ in sent) == ["s1", "s2"]
    assert sent[0][1] == {"minBrokerId": "1", "minBrokerAddr": "s1", "offlineBrokerAddr": "m"}
    assert all(q["b"].perm & 2 == 0 for q in routes.topicQueueTable.values())  # no master: read-only


def test_no_notification_unless_enabled() -> None:
    routes, sent = notifying_routes(enabled=False)
    register(routes, 1, "s1")
    register(routes, 0, "m")
    assert sent == []


@pytest_twisted.inlineCallbacks
def test_notification_reaches_the_broker_over_the_wire(tmp_path) -> None:
    service, port = yield start_server(server_config(tmp_path, notifyMinBrokerIdChanged=True))
    slave = BrokerDouble(reactor, broker_id=1, version=V5_3_3)
    master = BrokerDouble(reactor, broker_id=0, version=V5_3_3)
    try:
        answers = yield defer.gatherResults([slave.start(port)])
        answers.append((yield master.start(port)))
        assert all(a.code == ResponseCode.SUCCESS for a in answers)
        yield wait_until(lambda: RequestCode.NOTIFY_MIN_BROKER_ID_CHANGE in slave.codes(), "the 905 notification")
        notify = next(r for r in slave.requests if r.code == RequestCode.NOTIFY_MIN_BROKER_ID_CHANGE)
        assert notify.oneway and notify.ext["minBrokerId"] == "0" and notify.ext["minBrokerAddr"] == master.addr
        assert RequestCode.NOTIFY_MIN_BROKER_ID_CHANGE not in master.codes()
    finally:
        yield master.stop()
        yield slave.stop()
        yield service.stopService()
