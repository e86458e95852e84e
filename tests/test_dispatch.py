"""Dispatcher without sockets: request frames in, answer frames out, channels closed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from twisted.internet import defer, task
from twisted.internet.testing import StringTransport

from tests import built
from twisted_namesrv import processor
from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body
from twisted_namesrv.bodies.route import DataVersion
from twisted_namesrv.budget import MemoryBudget
from twisted_namesrv.context import Peer
from twisted_namesrv.dispatch import Dispatcher, HandlerTable
from twisted_namesrv.metrics import OTHER_CODE, Metrics
from twisted_namesrv.refusals import Refusals
from twisted_namesrv.remoting import FrameDecoder, RemotingCommand, RemotingDecodeError, RequestCode, ResponseCode
from twisted_namesrv.remoting.codes import V5_3_3
from twisted_namesrv.schema import SERVER_SCHEMA
from twisted_namesrv.server import RemotingFactory
from twisted_namesrv.state.config import NamesrvConfig

BROKER = Peer(7, "10.0.0.1:50000")
CLIENT = Peer(8, "10.0.0.2:50000")


@pytest.fixture
def dispatcher(tmp_path) -> Dispatcher:
    config = NamesrvConfig({"kvConfigPath": str(tmp_path / "kv.json"),
                            "configStorePath": str(tmp_path / "ns.properties")}, schema=SERVER_SCHEMA)
    return built.dispatcher(config, task.Clock(), count_requests=True)


def frame(code: int, ext: dict | None = None, body: bytes | None = None, opaque: int = 1, **kwargs) -> bytes:
    """A request frame as the protocol hands it over: length prefix stripped."""
    return RemotingCommand.request(code, ext, body, opaque=opaque, version=V5_3_3, **kwargs).encode()[4:]


def answer(reply: bytes | None) -> RemotingCommand:
    assert reply is not None
    return RemotingCommand.decode(reply[4:])


def register(dispatcher: Dispatcher, peer: Peer = BROKER) -> RemotingCommand:
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), {"T1": TopicConfig("T1"),
                                                                       "T2": TopicConfig("T2")}), False, True)
    ext = {"clusterName": "c1", "brokerAddr": "10.0.0.1:10911", "brokerName": "broker-a", "brokerId": "0"}
    return answer(dispatcher.handle(frame(RequestCode.REGISTER_BROKER, ext, body), peer))


def test_a_request_frame_gets_its_answer_frame(dispatcher) -> None:
    assert register(dispatcher).code == ResponseCode.SUCCESS
    route = answer(dispatcher.handle(frame(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}, opaque=5), CLIENT))
    assert route.is_response and route.opaque == 5 and route.code == ResponseCode.SUCCESS
    assert b"10.0.0.1:10911" in route.body


def test_a_repeated_lookup_is_answered_from_memory_with_its_own_opaque(dispatcher) -> None:
    register(dispatcher)
    first = dispatcher.handle(frame(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}, opaque=5), CLIENT)
    second = dispatcher.handle(frame(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}, opaque=6), CLIENT)
    assert dispatcher.metrics.answered_from_memory_count == 1
    assert second == first.replace(b'"opaque":5', b'"opaque":6')
    assert answer(second).opaque == 6


def test_oneway_requests_and_responses_get_no_answer(dispatcher) -> None:
    oneway = frame(RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v"}, oneway=True)
    assert dispatcher.handle(oneway, CLIENT) is None
    assert dispatcher.state.kv.get("ns", "k") == "v"  # done all the same
    response = RemotingCommand.response_to(RemotingCommand.request(RequestCode.GET_KV_CONFIG), ResponseCode.SUCCESS)
    assert dispatcher.handle(response.encode()[4:], BROKER) is None
    assert sum(dispatcher.metrics.requests.values()) == 1  # the oneway; a response is not a request


def test_a_frame_that_is_not_a_command_raises_for_the_caller_to_close(dispatcher) -> None:
    with pytest.raises(RemotingDecodeError):
        dispatcher.handle(b"\x00\x00\x00\x05{nope", CLIENT)


def test_unknown_codes_are_answered_and_counted_under_one_series(dispatcher) -> None:
    reply = answer(dispatcher.handle(frame(9999), CLIENT))
    assert reply.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert dispatcher.metrics.requests[OTHER_CODE, ResponseCode.REQUEST_CODE_NOT_SUPPORTED] == 1


def test_a_failing_handler_costs_one_error_answer(dispatcher, monkeypatch) -> None:
    def broken(state, request, peer):
        raise KeyError("boom")

    monkeypatch.setitem(processor.HANDLERS, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, broken)
    reply = answer(dispatcher.handle(frame(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER), CLIENT))
    assert reply.code == ResponseCode.SYSTEM_ERROR and "KeyError" in reply.remark


def test_a_closed_channel_takes_its_brokers_along(dispatcher) -> None:
    register(dispatcher)
    dispatcher.channel_closed(CLIENT.channel)
    assert "broker-a" in dispatcher.state.routes.brokerAddrTable
    dispatcher.channel_closed(BROKER.channel)
    assert dispatcher.state.routes.brokerAddrTable == {}
    route = answer(dispatcher.handle(frame(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}), CLIENT))
    assert route.code == ResponseCode.TOPIC_NOT_EXIST


def test_channels_closed_in_one_reactor_turn_leave_together_at_the_next(tmp_path, monkeypatch) -> None:
    clock = task.Clock()
    config = NamesrvConfig({"kvConfigPath": str(tmp_path / "kv.json"),
                            "configStorePath": str(tmp_path / "ns.properties")}, schema=SERVER_SCHEMA)
    dispatcher = built.dispatcher(config, clock, call_later=clock.callLater)
    register(dispatcher)
    register(dispatcher, Peer(9, "10.0.0.3:50000"))
    batches = []
    routes = dispatcher.state.routes
    monkeypatch.setattr(routes, "on_channels_destroy", lambda closed, destroy=routes.on_channels_destroy: (
        batches.append(dict(closed)), destroy(closed)))
    dispatcher.channel_closed(BROKER.channel)
    dispatcher.channel_closed(9, "idle: no request for 120 s")
    assert "broker-a" in routes.brokerAddrTable and batches == []  # this turn still answers as before
    clock.advance(0)
    assert batches == [{BROKER.channel: "connection closed", 9: "idle: no request for 120 s"}]
    assert routes.brokerAddrTable == {}
    dispatcher.channel_closed(CLIENT.channel)
    clock.advance(0)
    assert batches[1:] == [{CLIENT.channel: "connection closed"}]


def waiting_table(answers: dict[int, defer.Deferred]) -> HandlerTable:
    """A listener whose handlers answer with a Deferred (as the controller's wait for its log)."""
    def handler(state, request, peer):
        return answers[request.code]

    def error_reply(state, request, code, remark):
        return RemotingCommand.response_to(request, code, remark)

    return HandlerTable(dict.fromkeys(answers, handler), {}, lambda state, request, peer: None, error_reply,
                        lambda state, closed: None, keeps_answers=False, subject="test request")


def served(table: HandlerTable):
    factory = RemotingFactory(Dispatcher(object(), Metrics(), table=table), task.Clock(), 1 << 20, 0, Refusals(),
                              MemoryBudget(8 << 20))
    protocol, transport = factory.buildProtocol(None), StringTransport()
    protocol.makeConnection(transport)
    return protocol, transport


def test_a_handler_answering_later_holds_the_frames_after_it() -> None:
    """A handler's Deferred that has not fired: the answers before it go in one write, the frames
    after it wait for it, and are answered in order once it fires."""
    later: defer.Deferred = defer.Deferred()
    requests = [RemotingCommand.request(code, opaque=opaque) for code, opaque in ((7, 1), (1, 2), (7, 3))]
    now = iter([RemotingCommand.response_to(requests[0]), RemotingCommand.response_to(requests[2])])
    table = waiting_table({1: later})
    table = HandlerTable({1: table.handlers[1], 7: lambda state, request, peer: defer.succeed(next(now))}, {},
                         table.refusal, table.error_reply, table.closed, keeps_answers=False)
    protocol, transport = served(table)
    protocol.dataReceived(b"".join(r.encode() for r in requests))
    assert [c.opaque for c in decode_all(transport.value())] == [1]  # the third waits for the second
    later.callback(RemotingCommand.response_to(requests[1]))
    assert [c.opaque for c in decode_all(transport.value())] == [1, 2, 3]


def test_a_deferred_that_has_fired_is_answered_in_the_same_write() -> None:
    """The file log answers in the same turn: no Later, so pipelined requests do not nest."""
    requests = [RemotingCommand.request(5, opaque=opaque) for opaque in (1, 2, 3)]
    fired = iter([RemotingCommand.response_to(r) for r in requests])
    table = waiting_table({})
    table = HandlerTable({5: lambda state, request, peer: defer.succeed(next(fired))}, {},
                         table.refusal, table.error_reply, table.closed, keeps_answers=False)
    out: list[bytes] = []
    dispatcher = Dispatcher(object(), Metrics(), table=table)
    assert dispatcher.answer([r.encode()[4:] for r in requests], CLIENT, out) is None
    assert [answer(o).opaque for o in out] == [1, 2, 3]


def test_a_failed_deferred_and_an_unknown_code_cost_one_error_answer_each() -> None:
    """The same refusal and failure path for a handler's Deferred as for a handler that raises."""
    requests = [RemotingCommand.request(code, opaque=opaque) for code, opaque in ((5, 1), (6, 2), (99, 3))]
    table = waiting_table({5: defer.fail(processor.BadRequest("the custom field <x> is null")),
                           6: defer.fail(ZeroDivisionError("bug"))})
    out: list[bytes] = []
    state = SimpleNamespace(refusals=Refusals())  # a bad request is a refusal, counted and logged by its host
    assert Dispatcher(state, Metrics(), table=table).answer([r.encode()[4:] for r in requests], CLIENT, out) is None
    assert state.refusals.counts == {("remoting", "bad_request"): 1}
    assert [(answer(o).code, answer(o).remark) for o in out] == [
        (ResponseCode.SYSTEM_ERROR, "the custom field <x> is null"),
        (ResponseCode.SYSTEM_ERROR, "ZeroDivisionError: bug"),
        (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, " request type 99 not supported")]


def decode_all(data: bytes) -> list[RemotingCommand]:
    return [RemotingCommand.decode(f) for f in FrameDecoder().feed(data)]
