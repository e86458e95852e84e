"""The server's own remoting client (client.py: the peers view's reads of other NameServers)
against a peer that is no NameServer: frames no request waits for, and headers no NameServer
writes, end the connection, decoding nothing after them.  Counted in decodes, not timed: before,
every such frame was decoded on the reactor's thread and skipped, for as long as the peer sent."""

from __future__ import annotations

import pytest
from twisted.internet.testing import StringTransport

from twisted_namesrv import client
from twisted_namesrv.admin.client import TransportError
from twisted_namesrv.remoting import RemotingCommand, RequestCode, ResponseCode


def connected(monkeypatch) -> tuple[client.ClientProtocol, StringTransport, list[int]]:
    decoded: list[int] = []
    decode = RemotingCommand.decode

    def counted(frame):
        decoded.append(len(frame))
        return decode(frame)

    monkeypatch.setattr(RemotingCommand, "decode", staticmethod(counted))
    protocol = client.ClientProtocol("127.0.0.1:9999")
    transport = StringTransport()
    protocol.makeConnection(transport)
    return protocol, transport, decoded


def answer(opaque: int, **ext: str) -> bytes:
    asked = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, opaque=opaque)
    return RemotingCommand.response_to(asked, ResponseCode.SUCCESS, ext=ext or None).encode()


def failed_with(deferred) -> str:
    failures = []
    deferred.addErrback(failures.append)
    assert failures, "the request was not failed"
    failures[0].trap(TransportError)
    return str(failures[0].value)


def test_an_answer_reaches_its_request(monkeypatch) -> None:
    protocol, transport, decoded = connected(monkeypatch)
    asked = protocol.request(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, opaque=5))
    got = []
    asked.addCallback(got.append)
    protocol.dataReceived(answer(5))
    assert [command.opaque for command in got] == [5] and not transport.disconnecting


@pytest.mark.parametrize("unsolicited", ["answer", "request"])
def test_frames_no_request_waits_for_end_the_connection_unread(monkeypatch, unsolicited: str) -> None:
    protocol, transport, decoded = connected(monkeypatch)
    asked = protocol.request(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, opaque=5))
    junk = answer(6) if unsolicited == "answer" else RemotingCommand.request(RequestCode.GET_KV_CONFIG,
                                                                             opaque=6).encode()
    protocol.dataReceived(junk * 100 + answer(5))
    assert len(decoded) == 1  # before: 101, the connection kept and its flood read on
    assert transport.disconnecting
    why = failed_with(asked)
    assert ("no request waits for" if unsolicited == "answer" else "sent a request (code 101)") in why, why
    protocol.dataReceived(junk * 100)  # read with it before the close: not looked at
    assert len(decoded) == 1


def test_a_header_no_namesrv_writes_is_refused_before_it_is_parsed(monkeypatch) -> None:
    protocol, transport, decoded = connected(monkeypatch)
    asked = protocol.request(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, opaque=5))
    protocol.dataReceived(answer(5, **{f"k{i}": "v" * 60 for i in range(2000)}))  # a 140 KB header
    assert decoded == [] and transport.disconnecting
    assert "undecodable answer" in failed_with(asked)
