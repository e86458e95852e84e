"""receiveMemoryBudget: unfinished frames and inflating bodies of all peers together stay within
one budget; over it, the peers holding the largest unfinished frames are closed first (logged with
the peer, counted), and an inflation that would pass it is refused.  Behaviour, not timings: the
peak memory figures come from tools/memory_peak.py (docs/benchmarks.md)."""

from __future__ import annotations

import struct
import zlib

import pytest
from twisted.internet import address, task
from twisted.internet.testing import StringTransport
from twisted.logger import capturedLogs

from tests.support import server_config
from twisted_namesrv.bodies.register import RegisterBodyError, decode_register_body
from twisted_namesrv.budget import AUTO_MAX, AUTO_MIN, MemoryBudget, default_budget
from twisted_namesrv.remoting import FrameDecoder, RemotingCommand, RequestCode, ResponseCode
from twisted_namesrv.remoting.codes import V5_3_3
from twisted_namesrv.service import NamesrvService
from twisted_namesrv.state.config import ConfigError

KiB, MiB = 1024, 1024 * 1024


def start_of_frame(size: int) -> bytes:
    """All but the last byte of a frame of ``size`` bytes (its prefix not counted): a stalled peer."""
    return struct.pack(">iI", size, 2) + b"{}" + bytes(size - 4 - 2 - 1)


@pytest.fixture
def service(tmp_path):
    config = server_config(tmp_path, frameMaxLength=MiB, receiveMemoryBudget=2 * MiB)
    return NamesrvService.from_config(config, reactor=task.Clock())


def connect(service, port: int):
    proto = service.factory.buildProtocol(address.IPv4Address("TCP", "10.0.0.9", port))
    transport = StringTransport(peerAddress=address.IPv4Address("TCP", "10.0.0.9", port))
    proto.makeConnection(transport)
    return proto, transport


def test_over_the_budget_the_largest_stalled_peer_goes_first_logged_and_counted(service):
    small, small_wire = connect(service, 1)
    big, big_wire = connect(service, 2)
    middle, middle_wire = connect(service, 3)
    small.dataReceived(start_of_frame(300 * KiB))
    big.dataReceived(start_of_frame(1000 * KiB))
    with capturedLogs() as events:
        middle.dataReceived(start_of_frame(950 * KiB)[:800 * KiB])  # the total passes 2 MiB here
        assert not (small_wire.disconnecting or middle_wire.disconnecting)
        assert big_wire.disconnecting
        middle.dataReceived(start_of_frame(950 * KiB)[800 * KiB:])  # now it holds the most, but fits
    assert not middle_wire.disconnecting
    budget = service.state.budget
    assert budget.held == small.held + middle.held <= budget.limit and big.held == 0
    assert service.state.refusals.counts["remoting", "memory_budget"] == 1
    assert service.metrics.rejected["memory_budget"] == 1
    (event,) = [e for e in events if e.get("refused") == "memory_budget"]
    assert event["peer"] == "10.0.0.9:2" and event["log_level"].name == "warn" and event["held"] > 1000 * KiB

    ask = RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {}, opaque=5, version=V5_3_3)
    small.dataReceived(b"\0" + ask.encode())  # its frame's last byte, then a request: it is served
    *_, answer = FrameDecoder().feed(small_wire.value())  # (its stalled frame was answered first)
    assert RemotingCommand.decode(answer).opaque == 5
    assert small.held == 0
    middle.connectionLost()  # a peer that goes gives its bytes back
    big.connectionLost()
    assert budget.held == 0 and budget.holders == {}


def test_the_budget_spans_every_peer_not_each(service):
    """Twenty peers each far below frameMaxLength, together over the budget: some are closed."""
    peers = [connect(service, port) for port in range(100, 120)]
    for proto, _ in peers:
        proto.dataReceived(start_of_frame(200 * KiB))
    closed = [transport for _, transport in peers if transport.disconnecting]
    assert len(closed) >= 10 and service.state.budget.held <= 2 * MiB


def test_an_inflation_that_would_pass_the_budget_is_refused_and_gives_everything_back():
    budget = MemoryBudget(8 * MiB)
    bomb = zlib.compress(bytes(64 * MiB), 9)
    with pytest.raises(RegisterBodyError, match="receiveMemoryBudget"):
        decode_register_body(bomb, True, V5_3_3, 256 * MiB, budget=budget)
    assert budget.held == 0 and budget.refused_inflations == 1
    with pytest.raises(RegisterBodyError, match="inflates beyond 4194304 bytes"):
        decode_register_body(bomb, True, V5_3_3, 4 * MiB, budget=budget)  # inflateMaxLength still applies
    assert budget.held == 0


def test_a_zip_bomb_registration_is_answered_with_an_error_within_the_budget(tmp_path):
    config = server_config(tmp_path, frameMaxLength=MiB, receiveMemoryBudget=4 * MiB)
    service = NamesrvService.from_config(config, reactor=task.Clock())
    proto, transport = connect(service, 7)
    ext = {"clusterName": "c", "brokerAddr": "10.0.0.9:10911", "brokerName": "b", "brokerId": "0",
           "compressed": "true"}
    proto.dataReceived(RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, zlib.compress(bytes(32 * MiB), 9),
                                              opaque=3, version=V5_3_3).encode())
    (frame,) = FrameDecoder().feed(transport.value())
    answer = RemotingCommand.decode(frame)
    assert answer.code == ResponseCode.SYSTEM_ERROR and "receiveMemoryBudget" in answer.remark
    assert service.state.budget.held == 0 and service.state.routes.brokerAddrTable == {}


def test_the_default_budget_is_a_quarter_of_the_machine_within_bounds(monkeypatch):
    import twisted_namesrv.budget as budget

    for limit, expected in ((None, AUTO_MAX), (64 * 1024 * MiB, AUTO_MAX), (512 * MiB, 128 * MiB),
                            (100 * MiB, AUTO_MIN)):
        monkeypatch.setattr(budget, "machine_limit", lambda limit=limit: limit)
        assert default_budget(16 * MiB) == expected
    assert default_budget(200 * MiB) == 400 * MiB  # two of the largest frames always fit


def test_a_budget_below_one_frame_stops_the_start_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match="receiveMemoryBudget: 1000 is below frameMaxLength"):
        server_config(tmp_path, receiveMemoryBudget=1000)
