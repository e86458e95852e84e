"""NamesrvController without sockets: request frames in, answer frames out, channels closed."""

from __future__ import annotations

import pytest
from twisted.internet import task

from twisted_namesrv import processor
from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body
from twisted_namesrv.bodies.route import DataVersion
from twisted_namesrv.context import Peer
from twisted_namesrv.controller import NamesrvController
from twisted_namesrv.metrics import OTHER_CODE
from twisted_namesrv.remoting import RemotingCommand, RemotingDecodeError, RequestCode, ResponseCode
from twisted_namesrv.remoting.codes import V5_3_3
from twisted_namesrv.service import build_state
from twisted_namesrv.state.config import NamesrvConfig

BROKER = Peer(7, "10.0.0.1:50000")
CLIENT = Peer(8, "10.0.0.2:50000")


@pytest.fixture
def controller(tmp_path) -> NamesrvController:
    config = NamesrvConfig({"kvConfigPath": str(tmp_path / "kv.json"),
                            "configStorePath": str(tmp_path / "ns.properties")})
    return NamesrvController(build_state(config, task.Clock()), count_requests=True)


def frame(code: int, ext: dict | None = None, body: bytes | None = None, opaque: int = 1, **kwargs) -> bytes:
    """A request frame as the protocol hands it over: length prefix stripped."""
    return RemotingCommand.request(code, ext, body, opaque=opaque, version=V5_3_3, **kwargs).encode()[4:]


def answer(reply: bytes | None) -> RemotingCommand:
    assert reply is not None
    return RemotingCommand.decode(reply[4:])


def register(controller: NamesrvController, peer: Peer = BROKER) -> RemotingCommand:
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), {"T1": TopicConfig("T1"),
                                                                       "T2": TopicConfig("T2")}), False, True)
    ext = {"clusterName": "c1", "brokerAddr": "10.0.0.1:10911", "brokerName": "broker-a", "brokerId": "0"}
    return answer(controller.handle(frame(RequestCode.REGISTER_BROKER, ext, body), peer))


def test_a_request_frame_gets_its_answer_frame(controller) -> None:
    assert register(controller).code == ResponseCode.SUCCESS
    route = answer(controller.handle(frame(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}, opaque=5), CLIENT))
    assert route.is_response and route.opaque == 5 and route.code == ResponseCode.SUCCESS
    assert b"10.0.0.1:10911" in route.body


def test_a_repeated_lookup_is_answered_from_memory_with_its_own_opaque(controller) -> None:
    register(controller)
    first = controller.handle(frame(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}, opaque=5), CLIENT)
    second = controller.handle(frame(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}, opaque=6), CLIENT)
    assert controller.metrics.answered_from_memory_count == 1
    assert second == first.replace(b'"opaque":5', b'"opaque":6')
    assert answer(second).opaque == 6


def test_oneway_requests_and_responses_get_no_answer(controller) -> None:
    oneway = frame(RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v"}, oneway=True)
    assert controller.handle(oneway, CLIENT) is None
    assert controller.state.kv.get("ns", "k") == "v"  # done all the same
    response = RemotingCommand.response_to(RemotingCommand.request(RequestCode.GET_KV_CONFIG), ResponseCode.SUCCESS)
    assert controller.handle(response.encode()[4:], BROKER) is None
    assert sum(controller.metrics.requests.values()) == 1  # the oneway; a response is not a request


def test_a_frame_that_is_not_a_command_raises_for_the_caller_to_close(controller) -> None:
    with pytest.raises(RemotingDecodeError):
        controller.handle(b"\x00\x00\x00\x05{nope", CLIENT)


def test_unknown_codes_are_answered_and_counted_under_one_series(controller) -> None:
    reply = answer(controller.handle(frame(9999), CLIENT))
    assert reply.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert controller.metrics.requests[OTHER_CODE, ResponseCode.REQUEST_CODE_NOT_SUPPORTED] == 1


def test_a_failing_handler_costs_one_error_answer(controller, monkeypatch) -> None:
    def broken(state, request, peer):
        raise KeyError("boom")

    monkeypatch.setitem(processor.HANDLERS, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, broken)
    reply = answer(controller.handle(frame(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER), CLIENT))
    assert reply.code == ResponseCode.SYSTEM_ERROR and "KeyError" in reply.remark


def test_a_closed_channel_takes_its_brokers_along(controller) -> None:
    register(controller)
    controller.channel_closed(CLIENT.channel)
    assert "broker-a" in controller.state.routes.brokerAddrTable
    controller.channel_closed(BROKER.channel)
    assert controller.state.routes.brokerAddrTable == {}
    route = answer(controller.handle(frame(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}), CLIENT))
    assert route.code == ResponseCode.TOPIC_NOT_EXIST


def test_channels_closed_in_one_reactor_turn_leave_together_at_the_next(tmp_path, monkeypatch) -> None:
    clock = task.Clock()
    config = NamesrvConfig({"kvConfigPath": str(tmp_path / "kv.json"),
                            "configStorePath": str(tmp_path / "ns.properties")})
    controller = NamesrvController(build_state(config, clock), call_later=clock.callLater)
    register(controller)
    register(controller, Peer(9, "10.0.0.3:50000"))
    batches = []
    routes = controller.state.routes
    monkeypatch.setattr(routes, "on_channels_destroy", lambda closed, destroy=routes.on_channels_destroy: (
        batches.append(dict(closed)), destroy(closed)))
    controller.channel_closed(BROKER.channel)
    controller.channel_closed(9, "idle: no request for 120 s")
    assert "broker-a" in routes.brokerAddrTable and batches == []  # this turn still answers as before
    clock.advance(0)
    assert batches == [{BROKER.channel: "connection closed", 9: "idle: no request for 120 s"}]
    assert routes.brokerAddrTable == {}
    controller.channel_closed(CLIENT.channel)
    clock.advance(0)
    assert batches[1:] == [{CLIENT.channel: "connection closed"}]
