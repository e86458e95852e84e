"""Replay conformance of the controller: the controller conversation of the shared capture
v5_controller_failover (two real 5.3.3 brokers, Java's NameServer with its embedded controller,
a kill -9 of the master) is sent to ours in captured order - per connection, oneway heartbeats
included, connections closed where the capture closes them - and every answer is compared with
Java's: code, flag, opaque, version, language, remark, extFields, body.  The controller's own
push of NOTIFY_BROKER_ROLE_CHANGED after the master's connection closed is compared with the
one Java sent to the surviving broker's port.

Nothing is masked: epochs and ids follow from the same sequence of events and come out equal.
The capture's periodic 1005 requests from the brokers are compared too (isLeader, peers, group:
the test's controller is configured like the capturing one)."""

from __future__ import annotations

import pytest_twisted

from spark_analysis.capture.conversation import read_conversations
from tests.replay.test_replay import Tally, differences, timeline, wait_until
from tests.support import capture, connect
from twisted_namesrv.controller.config import ControllerPeer
from twisted_namesrv.remoting import RemotingCommand

from .support import RecordingNotifier, start_controller, wait_idle

CAPTURE = "v5_controller_failover.pcapng"
CONTROLLER_PORT = 28878
BROKER_PORTS = (28911, 28921)


def controller_conversations():
    path = capture(CAPTURE)
    return [c for c in read_conversations(path, server_port=CONTROLLER_PORT)
            if c.connection.server.endswith(f":{CONTROLLER_PORT}")]


def captured_pushes() -> list[tuple[str, bytes]]:
    pushes = []
    for port in BROKER_PORTS:
        for conv in read_conversations(capture(CAPTURE), server_port=port):
            if conv.connection.server.endswith(f":{port}"):
                pushes += [(conv.connection.server, cmd.frame) for cmd in conv.commands]
    return pushes


@pytest_twisted.inlineCallbacks
def test_controller_replay_matches_java(tmp_path) -> None:
    conversations = controller_conversations()
    notifier = RecordingNotifier()
    service, port = yield start_controller(tmp_path, notifier)
    # the capture's controller address, so that 1005's controllerLeaderAddress and peers compare
    service.manager.address = f"127.0.0.1:{CONTROLLER_PORT}"
    service.manager.peers = [ControllerPeer("n0", "127.0.0.1", CONTROLLER_PORT)]
    tally = Tally()
    clients: dict[int, object] = {}
    try:
        for _ts, index, kind, item in timeline(conversations):
            client = clients.get(index)
            if client is None:
                client = clients[index] = yield connect(port)
            conversation = conversations[index]
            if kind == "request":
                request: RemotingCommand = item.command
                client.send(item.frame)
                if request.is_oneway:
                    yield wait_idle(service)
                    continue
                expected = conversation.responses_by_opaque().get(request.opaque)
                actual = yield client.answer(request.opaque)
                if expected is None:
                    continue
                tally.compared += 1
                problems = differences(request, expected.command, actual)
                if problems:
                    tally.failures.append(f"request {request.code} opaque {request.opaque} ext {request.ext}: "
                                          + "; ".join(problems))
                else:
                    tally.equal += 1
                    tally.byte_identical += client.frames[request.opaque] == expected.frame
            elif kind == "close":
                client_address = f"127.0.0.1:{client.transport.getHost().port}"
                client.transport.loseConnection()
                yield client.closed
                yield wait_until(lambda gone=client_address: all(p.peer.address != gone
                                                                 for p in service.factory.connections.values()),
                                 "the controller to see the close")
                yield wait_idle(service)
        for client in clients.values():
            client.transport.loseConnection()
    finally:
        yield service.stopService()
    print(f"\ncontroller replay: {tally.equal}/{tally.compared} answers equal to Java's "
          f"({tally.byte_identical} byte-identical)")
    for line in tally.failures:
        print("  ", line)
    assert not tally.failures, "\n".join(tally.failures[:20])
    assert tally.equal == tally.compared > 30
    # the push after the master's connection closed: what Java sent to the survivor
    want = captured_pushes()
    assert len(want) == 1
    got = [(address, frame) for address, frame in notifier.pushes]
    assert [a for a, _ in got] == ["127.0.0.1:28921"]
    java = RemotingCommand.decode(want[0][1][4:])
    ours = RemotingCommand.decode(got[0][1][4:])
    assert ours.code == java.code == 1008 and ours.is_oneway and java.is_oneway
    assert ours.ext == java.ext
    assert bytes(ours.body) == bytes(java.body)
