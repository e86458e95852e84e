"""Replay conformance: every request in the shared captures of real Java NameServer traffic is
sent to our server in captured order - per connection, closing where the capture closes - and
every answer is compared with Java's captured answer.

4.9.8 captures run with --compat 4.9.8, v5_probe in the default (5.3.3) mode.  Compared: code,
flag, opaque, version, language, header type, remark, extFields, body (JSON semantically with
list order aside, plus the numeric-key style), and we count byte-identical answers too.

Intended differences, each where Java is wrong or the environment differs:
- UNKNOWN_CODE_4_9_8: Java 4.9.8 never answers an unknown code (the client times out); we
  answer 3 " request type N not supported" as 5.3.3 does.
- the GET_NAMESRV_CONFIG body: rocketmqHome/kvConfigPath/configStorePath are paths of the
  capturing machine, listenPort is the ephemeral port this test listens on, and 4.9.8 lists keys
  in its Properties' hash order: compared as key/value sets with those four values masked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pytest
import pytest_twisted
from twisted.internet import defer, reactor, task

from spark_analysis.capture.conversation import Conversation, read_conversations
from tests.support import TIMEOUT, capture, connect, server_config, start_server
from twisted_namesrv.remoting import RemotingCommand, RequestCode, ResponseCode, fastjson

MACHINE_KEYS = ("rocketmqHome", "kvConfigPath", "configStorePath", "listenPort")
BARRIER_OPAQUE = 2_000_000_000
CASES = [
    ("json_lifecycle.pcap", "4.9.8", "/opt/rocmq"),
    ("binary_lifecycle.pcap", "4.9.8", "/opt/rocmq"),
    ("compressed_bulk.pcap", "4.9.8", "/opt/rocmq"),
    ("v5_probe.pcap", "5.3.3", "/opt/rocmq5"),
]
_BARE_KEY = re.compile(rb"[{,]-?\d+:")


@dataclass
class Tally:
    compared: int = 0
    equal: int = 0
    byte_identical: int = 0
    intended: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def _canonical(value):
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return sorted((_canonical(v) for v in value), key=lambda v: fastjson.dumps(v, standard=True))
    return value


def _properties(body: bytes) -> dict[str, str]:
    pairs = dict(line.split("=", 1) for line in body.decode().splitlines() if line)
    return {k: "<masked>" if k in MACHINE_KEYS else v for k, v in pairs.items()}


def body_differences(code: int, expected: bytes | memoryview | None, actual: bytes | None) -> list[str]:
    expected = None if expected is None else bytes(expected)  # a captured body is a view of its stream
    if not expected and not actual:
        return []
    if not expected or not actual:
        return [f"body: expected {expected!r:.200} got {actual!r:.200}"]
    if code == RequestCode.GET_NAMESRV_CONFIG:
        want, got = _properties(expected), _properties(actual)
        return [f"config {k}: expected {want.get(k)} got {got.get(k)}" for k in sorted(want.keys() | got.keys())
                if want.get(k) != got.get(k)]
    try:
        want, got = fastjson.loads(expected), fastjson.loads(actual)
    except ValueError:
        return [] if expected == actual else [f"body: expected {expected!r:.300} got {actual!r:.300}"]
    problems = []
    if _canonical(want) != _canonical(got):
        problems.append(f"body: expected {expected.decode()[:600]} got {actual.decode()[:600]}")
    if bool(_BARE_KEY.search(expected)) != bool(_BARE_KEY.search(actual)):
        problems.append("numeric-key style differs")
    return problems


def differences(request: RemotingCommand, expected: RemotingCommand, actual: RemotingCommand) -> list[str]:
    problems = []
    for name in ("code", "flag", "opaque", "version", "language", "remark"):
        want, got = getattr(expected.header, name), getattr(actual.header, name)
        if want != got:
            problems.append(f"{name}: expected {want!r} got {got!r}")
    if expected.serialize_type != actual.serialize_type:
        problems.append(f"header type: expected {expected.serialize_type} got {actual.serialize_type}")
    if (expected.header.ext_fields or {}) != (actual.header.ext_fields or {}) or (
            (expected.header.ext_fields is None) != (actual.header.ext_fields is None)):
        problems.append(f"extFields: expected {expected.header.ext_fields} got {actual.header.ext_fields}")
    return problems + body_differences(request.code, expected.body, actual.body)


def timeline(conversations: list[Conversation]) -> list[tuple[float, int, str, object]]:
    """Every client action in captured order: requests, undecodable bytes, client closes."""
    events = []
    for index, conv in enumerate(conversations):
        for captured in conv.requests():
            events.append((captured.ts, index, "request", captured))
        if conv.undecodable_ts is not None:
            events.append((conv.undecodable_ts, index, "raw", conv.undecodable))
        connection = conv.connection
        if connection.closed_ts is not None and connection.first_close_by == "client":
            events.append((connection.closed_ts, index, "close", connection.close_kind))
    events.sort(key=lambda e: e[0])
    return events


@defer.inlineCallbacks
def wait_until(condition, what: str):
    """Poll a condition on real sockets (a fake clock cannot drive the kernel), bounded."""
    for _ in range(TIMEOUT * 1000):
        if condition():
            return
        yield task.deferLater(reactor, 0.001, lambda: None)
    raise AssertionError(f"timed out waiting for {what}")


@defer.inlineCallbacks
def replay(conversations: list[Conversation], service, port: int, tally: Tally):
    clients: dict[int, object] = {}
    for _ts, index, kind, item in timeline(conversations):
        client = clients.get(index)
        if client is None:
            client = clients[index] = yield connect(port)
        if kind == "request":
            yield check_request(conversations[index], client, item, tally)
        elif kind == "raw":
            client.send(item)
            yield client.closed.addTimeout(TIMEOUT, reactor)  # Java closes such a channel; so must we
        else:
            yield close_like_capture(service, client, item)
    for client in clients.values():
        client.transport.loseConnection()


def close_like_capture(service, client, kind: str) -> defer.Deferred:
    """Close as the captured client did, then wait until the server has seen it go."""
    local = f"127.0.0.1:{client.transport.getHost().port}"
    client.transport.abortConnection() if kind == "rst" else client.transport.loseConnection()
    return wait_until(lambda: all(p.peer.address != local for p in service.factory.connections.values()),
                      f"the server to drop {local}")


@defer.inlineCallbacks
def check_request(conversation: Conversation, client, captured, tally: Tally):
    request: RemotingCommand = captured.command
    expected = conversation.responses_by_opaque().get(request.opaque)
    client.send(captured.frame)
    if expected is None:
        if request.is_oneway:
            # barrier: once this read-only request is answered, the oneway one was processed
            barrier = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, opaque=BARRIER_OPAQUE)
            yield client.call(barrier)
            assert request.opaque not in client.received, f"answered a oneway request {request.header}"
            return
        answer = yield client.answer(request.opaque)
        assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED, answer.header
        tally.intended.append(f"UNKNOWN_CODE_4_9_8: code {request.code} answered 3, Java 4.9.8 is silent")
        return
    actual = yield client.answer(request.opaque)
    tally.compared += 1
    problems = differences(request, expected.command, actual)
    if problems:
        what = f"request {request.code} opaque {request.opaque} ext {request.ext}"
        tally.failures.append(f"{what}: " + "; ".join(problems))
    else:
        tally.equal += 1
        tally.byte_identical += client.frames[request.opaque] == expected.frame


@pytest.mark.parametrize(("name", "compat", "home"), CASES, ids=[c[0] for c in CASES])
@pytest_twisted.inlineCallbacks
def test_replay_matches_java(name: str, compat: str, home: str, tmp_path) -> None:
    conversations = read_conversations(capture(name))
    config = server_config(tmp_path, compatVersion=compat, rocketmqHome=home)
    if compat == "5.3.3":  # the capturing NameServer's -c file set these
        config.apply({"scanAvailableNameSrv": "false"})
        config.file_keys.update({"bindAddress", "scanAvailableNameSrv"})
    service, port = yield start_server(config)
    tally = Tally()
    try:
        yield replay(conversations, service, port, tally)
    finally:
        yield service.stopService()
    print(f"\n{name}: {tally.equal}/{tally.compared} answers equal to Java's "
          f"({tally.byte_identical} byte-identical); intended differences: {len(tally.intended)}")
    for line in tally.intended + tally.failures:
        print("  ", line)
    assert not tally.failures, "\n".join(tally.failures)
    assert tally.equal == tally.compared > 0
