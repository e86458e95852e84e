"""What a heartbeat storm costs the server, counted in work (Python calls), never in time, against
what it holds: the scale curve's ten-broker steps hold 1,000 to 19,500 idle client connections while
ten brokers send their tables again within a second and the probe looks a route up throughout.
Nothing of a storm's work is per connection held: no walk of the connections, no timer each, no
kept answer dropped per client (docs/benchmarks.md, the storm's CPU).

The server is a whole NamesrvService on a fake clock (tests/test_renewal.py's), its connections in
memory, its idle watch on as configured."""

from __future__ import annotations

from tests.support import python_calls_run
from tests.test_renewal import Server, storm_frames
from twisted_namesrv.remoting import RemotingCommand, RequestCode

BROKERS = 10
LOOKUPS_BETWEEN = 5  # the probe's lookups between two heartbeats


def storm_calls(tmp_path, clients: int) -> int:
    """The Python calls of a storm (every broker's heartbeat, the probe's lookups between them) on a
    server holding ``clients`` idle client connections, each of which looked the topic up once."""
    server = Server(tmp_path, True)
    brokers = [server.connect() for _ in range(BROKERS)]
    for opaque in (1, 1_000):  # registered, then sent again: each keeps its heartbeat's answer
        for broker, frame in zip(brokers, storm_frames(BROKERS, opaque), strict=True):
            assert RemotingCommand.decode(server.send(broker, frame)[4:]).code == 0

    def lookup(opaque: int) -> bytes:
        return RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Storm"}, opaque=opaque).encode()
    for _ in range(clients):
        assert RemotingCommand.decode(server.send(server.connect(), lookup(1))[4:]).code == 0
    probe = server.connect()
    server.send(probe, lookup(1))
    heartbeats = storm_frames(BROKERS, 2_000)
    lookups = [lookup(opaque) for opaque in range(100, 100 + BROKERS * LOOKUPS_BETWEEN)]

    def storm() -> None:
        for index, (broker, frame) in enumerate(zip(brokers, heartbeats, strict=True)):
            for request in lookups[index * LOOKUPS_BETWEEN:(index + 1) * LOOKUPS_BETWEEN]:
                probe[0].dataReceived(request)
            broker[0].dataReceived(frame)
    for broker in brokers:
        broker[1].clear()
    calls = python_calls_run(storm)
    answers = [RemotingCommand.decode(broker[1].value()[4:]) for broker in brokers]
    assert [(answer.code, answer.opaque) for answer in answers] == [(0, 2_000 + i) for i in range(BROKERS)]
    return calls


def test_a_heartbeat_storms_work_does_not_grow_with_the_client_connections_held(tmp_path):
    """Ten brokers' heartbeats with the probe's lookups between them cost the same Python calls
    whether 10 or 400 idle client connections are held: the curve's storms at 10k and 19.5k
    connections are the same work as at 1k (in process, the curve's own tables and 1,000 lookups:
    20,832 calls at 100, 1,000 and 10,000 connections, ``tools/bench/storm_connections.py``)."""
    few, many = storm_calls(tmp_path / "few", 10), storm_calls(tmp_path / "many", 400)
    assert few == many, (few, many)
