"""A NameServer whose answers are not shaped as a NameServer's (a broken one, something else on its
port, a hostile one): namesrv-admin says which server and which answer, in one escaped error line,
and exits 1; the status page's peers view (the same reading, admin/compare.py) counts it as that
peer's error and still compares the others.  Before, each shape below was a Python traceback in
the CLI, and in the server a critical traceback every comparison with no peer compared at all."""

from __future__ import annotations

import io
import json
import socket
import struct
import threading

import pytest
from twisted.internet import defer, task

from tests.test_processor import Namesrv
from twisted_namesrv import peers as peers_module
from twisted_namesrv.admin import compare as compare_module
from twisted_namesrv.admin.cli import main
from twisted_namesrv.admin.client import AdminError
from twisted_namesrv.admin.compare import Ask, snapshot_asks
from twisted_namesrv.remoting import RemotingCommand, RequestCode

#: answer bodies, by request code, of shapes no NameServer sends
SHAPES = {
    "a list for an object": {RequestCode.GET_BROKER_CLUSTER_INFO: b"[1, 2, 3]",
                             RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: b"[1]",
                             RequestCode.GET_KVLIST_BY_NAMESPACE: b"[1]"},
    "a string for a table": {RequestCode.GET_BROKER_CLUSTER_INFO: b'{"clusterAddrTable": "x", "brokerAddrTable": [1]}',
                             RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: b'{"topicList": {"a": 1}}',
                             RequestCode.GET_KVLIST_BY_NAMESPACE: b'{"table": [1]}'},
    "a broker id of 5,000 digits": {
        RequestCode.GET_BROKER_CLUSTER_INFO: b'{"clusterAddrTable": {"c": ["b"]}, "brokerAddrTable": {"b": {"cluster": '
                                             b'"c", "brokerName": "b", "brokerAddrs": {"' + b"9" * 5000 + b'": "x"}}}}',
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: b'{"topicList": ["T", 1, null]}',
        RequestCode.GET_KVLIST_BY_NAMESPACE: b'{"table": {"k": {"nested": ["v"]}, "1": 2}}'},
    "names of every type": {
        RequestCode.GET_BROKER_CLUSTER_INFO: b'{"clusterAddrTable": {"c": ["b", 1, null, {}]}, "brokerAddrTable": {}}',
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: b'{"topicList": [{"a": 1}, "T"]}',
        RequestCode.GET_KVLIST_BY_NAMESPACE: b'{"table": 7}'},
}


def _serve(listener: socket.socket, bodies: dict[int, bytes], ext: dict[str, str | None] | None = None) -> None:
    """Answer every request of every connection SUCCESS with ``bodies[code]`` (and ``ext``), until closed."""
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            try:
                while header := conn.recv(4, socket.MSG_WAITALL):
                    (length,) = struct.unpack(">i", header)
                    request = RemotingCommand.decode(conn.recv(length, socket.MSG_WAITALL))
                    answer = RemotingCommand.response_to(request, ext=ext, body=bodies.get(request.code, b"{}"))
                    conn.sendall(answer.encode())
            except OSError:
                pass


@pytest.fixture
def liar():
    """Start a lying NameServer: ``liar(bodies)`` returns its address."""
    listeners = []

    def start(bodies: dict[int, bytes], ext: dict[str, str | None] | None = None) -> str:
        listener = socket.create_server(("127.0.0.1", 0))
        listeners.append(listener)
        threading.Thread(target=_serve, args=(listener, bodies, ext), daemon=True).start()
        return f"127.0.0.1:{listener.getsockname()[1]}"

    yield start
    for listener in listeners:
        listener.close()


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out, err), out.getvalue(), err.getvalue()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("argv", [("clusterList",), ("topicList",), ("getKvList", "-s", "ns"),
                                  ("wipeWritePerm", "-b", "b")])
def test_an_answer_of_another_shape_is_an_error_line_naming_the_server(liar, shape, argv):
    addr = liar(SHAPES[shape])
    code, out, err = run("-n", addr, "--timeout", "5", *argv)
    if code == 0:  # read as a NameServer's (an empty table read as empty): nothing to say
        assert err == ""
        return
    assert code == 1 and "Traceback" not in err, err
    assert err.startswith(f"error: {addr}: ") and "not shaped as a NameServer's" in err and err.count("\n") == 1, err


@pytest.mark.parametrize("count", ["\u00b2", "\U0001d7ce", "1_0", "99999999999"])
def test_a_write_perm_count_that_is_no_integer_is_no_traceback(liar, count):
    """WIPE_WRITE_PERM_OF_BROKER's wipeTopicCount read as Java reads an Integer: ``²`` passed
    str.isdigit and int() raised out of the CLI, a traceback; now that server's error, one line."""
    addr = liar({}, {"wipeTopicCount": count})
    code, out, err = run("-n", addr, "--timeout", "5", "wipeWritePerm", "-b", "b")
    assert code == 1 and "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith(f"error: {addr}: its answer is not shaped as a NameServer's: wipeTopicCount"), err


@pytest.mark.parametrize("shape", SHAPES)
def test_compare_names_the_server_whose_answers_are_of_another_shape(liar, shape):
    honest = liar({RequestCode.GET_BROKER_CLUSTER_INFO: b'{"clusterAddrTable": {}, "brokerAddrTable": {}}',
                   RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: b'{"topicList": []}'})
    addr = liar(SHAPES[shape])
    code, out, err = run("compare", "--timeout", "5", honest, addr)
    assert code == 1 and "Traceback" not in err, err
    assert err.startswith(f"error: {addr}: ") and "not shaped as a NameServer's" in err, err


def _read(answers: dict[int, bytes]) -> object:
    """snapshot_asks driven with ``answers`` (SUCCESS, by request code); routes answered empty."""
    asks = snapshot_asks("10.0.0.9:9876")
    ask: Ask = next(asks)
    try:
        while True:
            request = RemotingCommand.request(ask.code, ask.ext)
            ask = asks.send(RemotingCommand.response_to(request, body=answers.get(ask.code, b"{}")))
    except StopIteration as done:
        return done.value


@pytest.mark.parametrize("answers", [
    *SHAPES.values(),
    {RequestCode.GET_BROKER_CLUSTER_INFO: json.dumps({"brokerAddrTable": {"b": {"cluster": {"x": 1}}}}).encode()},
    {RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: b'{"topicList": ["T"]}',
     RequestCode.GET_ROUTEINFO_BY_TOPIC: b'{"queueDatas": [{"brokerName": "b", "perm": [6]}], "brokerDatas": 1}'},
    {RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: b'{"topicList": ["T"]}',
     RequestCode.GET_ROUTEINFO_BY_TOPIC: b'{"orderTopicConf": {"a": 1}, "filterServerTable": {"x": [1, "a"]}}'},
])
def test_a_reading_of_another_shape_is_an_admin_error_and_its_paths_compare(answers):
    """What the CLI's compare and the server's peers view read: either an AdminError naming the
    server, or paths that sort and values that compare (differences() hashes and orders them)."""
    try:
        snapshot = _read(answers)
    except AdminError as exc:
        assert str(exc).startswith("10.0.0.9:9876: ") and "not shaped as a NameServer's" in str(exc)
        return
    sorted(snapshot.paths, key=lambda path: tuple((isinstance(part, str), part) for part in path))
    assert len(set(snapshot.paths.values())) >= 0


class _Answering:
    """A peer for the peers view (peers.read_remote's client): every request answered SUCCESS with
    ``answers[code]`` at once."""

    def __init__(self, answers: dict[int, bytes]) -> None:
        self.answers = answers

    def call(self, code: int, ext: dict | None = None, body: bytes | None = None):
        request = RemotingCommand.request(code, ext, body)
        return defer.succeed(RemotingCommand.response_to(request, body=self.answers.get(code, b"{}")))

    def close(self) -> None:
        pass


@pytest.mark.parametrize("shape", SHAPES)
def test_the_peers_view_counts_a_lying_peer_as_its_error_and_compares_the_others(tmp_path, monkeypatch, shape):
    """The status page's peers view reads every peer of namesrvAddr with compare's reading: one peer
    answering of another shape raised out of the whole comparison (a critical traceback every
    interval), and no peer, however honest, was ever compared."""
    honest = {RequestCode.GET_BROKER_CLUSTER_INFO: b'{"clusterAddrTable": {}, "brokerAddrTable": {}}',
              RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: b'{"topicList": []}'}
    peers = {"10.0.0.8:9876": _Answering(SHAPES[shape]), "10.0.0.9:9876": _Answering(honest)}
    cooperator = task.Cooperator(scheduler=lambda step: step(), started=True)
    state = Namesrv(tmp_path).state
    original = peers_module.read_in_process
    monkeypatch.setattr(peers_module, "read_in_process", lambda state, asks: original(state, asks, cooperator))
    done = peers_module.compare_with_peers("10.0.0.1:9876", state, list(peers), peers.__getitem__)
    report = done.result
    liar, other = report.results
    assert (liar.up, other.up, other.differences) == (False, True, 0)
    assert liar.error.startswith("10.0.0.8:9876: ") and "not shaped as a NameServer's" in liar.error


class _Counting(_Answering):
    """An _Answering peer that counts the requests it was asked."""

    def __init__(self, answers: dict[int, bytes]) -> None:
        super().__init__(answers)
        self.asked = 0

    def call(self, code: int, ext: dict | None = None, body: bytes | None = None):
        self.asked += 1
        return super().call(code, ext, body)


def test_the_peers_view_reads_no_more_of_a_peer_than_its_bound_of_fields(tmp_path, monkeypatch):
    """A peer of namesrvAddr answering a topic list of 2,000 topics, each routed by 2,000 groups
    (355 KB a route): the view read and kept every field of every route, 16,000 a route at about
    150 bytes each (in the server, 700 MB after 40 s, on towards 6 GB).  Now a reading stops past
    compare.PATHS_MAX fields, the peer's error, and the other peers are compared.  Here the same at a
    smaller size (200 topics of 500 groups, a bound of 10,000), so that the code before, which
    reads them all, fails in 120 MB rather than gigabytes."""
    groups = 500
    route = json.dumps({"brokerDatas": [{"brokerAddrs": {"0": f"10.0.{i // 250}.{i % 250}:10911"},
                                         "brokerName": f"b{i}", "cluster": "c"} for i in range(groups)],
                        "queueDatas": [{"brokerName": f"b{i}", "perm": 6, "readQueueNums": 8, "writeQueueNums": 8,
                                        "topicSysFlag": 0} for i in range(groups)]}).encode()
    hostile = _Counting({RequestCode.GET_BROKER_CLUSTER_INFO: b'{"clusterAddrTable": {}, "brokerAddrTable": {}}',
                         RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER:
                             json.dumps({"topicList": [f"T{j}" for j in range(200)]}).encode(),
                         RequestCode.GET_ROUTEINFO_BY_TOPIC: route})
    honest = _Answering({RequestCode.GET_BROKER_CLUSTER_INFO: b'{"clusterAddrTable": {}, "brokerAddrTable": {}}',
                         RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: b'{"topicList": []}'})
    peers = {"10.0.0.8:9876": hostile, "10.0.0.9:9876": honest}
    monkeypatch.setattr(compare_module, "PATHS_MAX", 10_000)
    cooperator = task.Cooperator(scheduler=lambda step: step(), started=True)
    state = Namesrv(tmp_path).state
    original = peers_module.read_in_process
    monkeypatch.setattr(peers_module, "read_in_process", lambda state, asks: original(state, asks, cooperator))
    report = peers_module.compare_with_peers("10.0.0.1:9876", state, list(peers), peers.__getitem__).result
    liar, other = report.results
    assert (liar.up, other.up, other.differences) == (False, True, 0)
    assert liar.error.startswith("10.0.0.8:9876: its answer to a route holds about 4000 values, 8005 fields kept "
                                 "before it, more than 10000 fields to compare")
    # the cluster info, the topic list and 3 routes of 4,002 fields each: the reading stopped at the
    # route that would pass the bound, not decoded (12,006 fields), where it read all 200 (800,400 fields)
    assert hostile.asked == 2 + 3


def test_an_answer_past_the_bound_is_refused_before_it_is_decoded(monkeypatch):
    """A route of 16 MiB (a hostile peer's, or another program's) decoded whole is millions of
    objects, made only to be refused after: its values are counted over its bytes first, and past
    the reading's bound it is refused undecoded, naming the answer."""
    decoded: list[int] = []
    real = compare_module.json_body
    monkeypatch.setattr(compare_module, "json_body", lambda addr, answer: decoded.append(answer.code) or
                        real(addr, answer))
    route = b'{"queueDatas": [' + b",".join([b'{"brokerName": "b", "perm": 6}'] * 200_000) + b"]}"
    asks = snapshot_asks("10.0.0.9:9876", max_paths=100_000)
    answers = {RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: b'{"topicList": ["T"]}',
               RequestCode.GET_ROUTEINFO_BY_TOPIC: route}
    ask = next(asks)
    with pytest.raises(compare_module.TooBig, match=r"^10\.0\.0\.9:9876: its answer to a route holds about "
                                                    r"400000 values, 1 fields kept before it, more than 100000"):
        while True:
            request = RemotingCommand.request(ask.code, ask.ext)
            ask = asks.send(RemotingCommand.response_to(request, body=answers.get(ask.code, b"{}")))
    assert RequestCode.GET_ROUTEINFO_BY_TOPIC not in decoded and len(decoded) == 2  # the cluster info, the topics


def test_compare_stops_at_max_fields_with_one_error_line(liar):
    """``namesrv-admin compare`` read without a bound; now at most --max-fields (default
    compare.PATHS_MAX) a server, one error line naming it, exit 1."""
    topics = json.dumps({"topicList": [f"T{j}" for j in range(50)]}).encode()
    route = json.dumps({"queueDatas": [{"brokerName": "b", "perm": 6, "readQueueNums": 8, "writeQueueNums": 8,
                                        "topicSysFlag": 0}], "brokerDatas": []}).encode()
    answers = {RequestCode.GET_BROKER_CLUSTER_INFO: b'{"clusterAddrTable": {}, "brokerAddrTable": {}}',
               RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: topics, RequestCode.GET_ROUTEINFO_BY_TOPIC: route}
    one, two = liar(answers), liar(answers)
    assert run("compare", "--timeout", "5", one, two)[0] == 0
    code, out, err = run("compare", "--timeout", "5", "--max-fields", "100", one, two)
    assert code == 1 and err.count("\n") == 2 and "more than 100 fields to compare" in err, err
    assert run("compare", "--max-fields", "0", one, two)[0] == 2
