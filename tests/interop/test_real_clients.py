"""Real RocketMQ clients against OUR NameServer.

Three producers installed from package registries (tools/install_clients.sh):

- cpp1:    PyPI rocketmq==0.4.4              (rocketmq-client-cpp 1.x, sends version 63)
- cpp2:    PyPI rocketmq-python-cvs==2.1.0.3  (rocketmq-client-cpp 2.1, version 333)
- ali-ons: npm  ali-ons@3.12.0                (Node.js, version 121)

Each runs as a subprocess (hard timeout) against our server, started in-process in each
compatibility mode; it must fetch TopicTest's route from our server and complete a send of one
message to the broker double (tests/interop/broker_double.py, the only fake: it stands in for
the broker and registers with our server like one, so the route is our server's answer).

All three send versions < V4_9_4 (401), so our server answers the route with bare numeric
brokerAddrs keys, ``{0:"127.0.0.1:port"}``, as Java does; the test checks that too.

Missing clients skip the test (run tools/install_clients.sh), or fail it when
NAMESRV_REQUIRE_CLIENTS=1 (CI).  The C++ bindings ship only a linux x86_64 library.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import defer, error, protocol, reactor

from tests.interop.broker_double import BrokerDouble
from tests.support import server_config, start_server
from twisted_namesrv.remoting import RequestCode, ResponseCode, fastjson
from twisted_namesrv.remoting.codes import V4_9_4, code_name

HERE = Path(__file__).resolve().parent
CLIENT_TIMEOUT = 60  # seconds; a C++ client that cannot decode an answer retries forever
REQUIRE = os.environ.get("NAMESRV_REQUIRE_CLIENTS") == "1"
INSTALL_HINT = "run tools/install_clients.sh (or point NAMESRV_CLIENTS_DIR at its directory)"


@dataclass(frozen=True)
class Client:
    name: str
    package: str
    marker: str  # installed-version marker, relative to the clients dir
    native: bool  # ships a linux x86_64 shared library

    def command(self, clients_dir: Path, namesrv: str, group: str, body: str) -> tuple[str, list[str], dict]:
        if self.native:
            args = [sys.executable, str(HERE / "send_cpp.py"), namesrv, group, body]
            return sys.executable, args, {"PYTHONPATH": str(clients_dir / self.name), "PYTHONNOUSERSITE": "1"}
        node = shutil.which("node") or "node"
        return node, [node, str(HERE / "send_ons.js"), namesrv, group, body], {}


CLIENTS = {
    "cpp1": Client("cpp1", "PyPI rocketmq==0.4.4", "cpp1/rocketmq-0.4.4.dist-info", native=True),
    "cpp2": Client("cpp2", "PyPI rocketmq-python-cvs==2.1.0.3", "cpp2/rocketmq_python_cvs-2.1.0.3.dist-info",
                   native=True),
    "ali-ons": Client("ali-ons", "npm ali-ons@3.12.0", "node/node_modules/ali-ons/package.json", native=False),
}
COMPATS = ("5.3.3", "4.9.8")


def require_client(client: Client, clients_dir: Path) -> None:
    if client.native and (sys.platform != "linux" or platform.machine() != "x86_64"):
        pytest.skip(f"{client.name} ({client.package}) ships only a Linux x86_64 librocketmq.so; "
                    f"this machine is {sys.platform} {platform.machine()}")
    problem = None
    if not (clients_dir / client.marker).exists():
        problem = f"{client.name} ({client.package}) is not installed in {clients_dir}"
    elif not client.native and shutil.which("node") is None:
        problem = f"{client.name} needs node on PATH"
    elif not client.native:
        manifest = json.loads((clients_dir / client.marker).read_text())
        if manifest.get("version") != "3.12.0":
            problem = f"{client.name}: {clients_dir / client.marker} is version {manifest.get('version')}, not 3.12.0"
    if problem:
        if REQUIRE:
            pytest.fail(f"{problem}; NAMESRV_REQUIRE_CLIENTS=1 makes this a failure: {INSTALL_HINT}")
        pytest.skip(f"{problem}: {INSTALL_HINT}")


class Collect(protocol.ProcessProtocol):
    """Gathers a child's output; kills it after ``timeout`` seconds."""

    def __init__(self, timeout: float) -> None:
        self.out, self.err = bytearray(), bytearray()
        self.done: defer.Deferred = defer.Deferred()
        self.timed_out = False
        self.timer = reactor.callLater(timeout, self._kill)

    def _kill(self) -> None:
        self.timed_out = True
        try:
            self.transport.signalProcess("KILL")
        except error.ProcessExitedAlready:
            pass

    def outReceived(self, data: bytes) -> None:
        self.out += data

    def errReceived(self, data: bytes) -> None:
        self.err += data

    def processEnded(self, reason) -> None:
        if self.timer.active():
            self.timer.cancel()
        self.done.callback(reason.value.exitCode)


@dataclass
class Run:
    exit_code: int | None
    timed_out: bool
    stdout: str
    stderr: str
    seconds: float

    def result(self) -> dict | None:
        found = re.search(r"^SEND_RESULT (.*)$", self.stdout, re.M)
        return json.loads(found.group(1)) if found else None

    def describe(self) -> str:
        return (f"exit {self.exit_code}{' (killed after timeout)' if self.timed_out else ''} in {self.seconds:.2f}s\n"
                f"--- stdout\n{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-3000:]}")


@defer.inlineCallbacks
def run_client(executable: str, args: list[str], env: dict[str, str], cwd: Path):
    collect = Collect(CLIENT_TIMEOUT)
    started = time.monotonic()
    reactor.spawnProcess(collect, executable, args, env=env, path=str(cwd))
    exit_code = yield collect.done
    return Run(exit_code, collect.timed_out, collect.out.decode("utf-8", "replace"),
               collect.err.decode("utf-8", "replace"), time.monotonic() - started)


def client_env(tmp_path: Path, clients_dir: Path, extra: dict[str, str]) -> dict[str, str]:
    home = tmp_path / "home"
    logs = tmp_path / "client-logs"
    home.mkdir()
    logs.mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
           "HOME": str(home),  # rocketmq-client-cpp 1.x logs to $HOME/logs
           "ROCKETMQ_CLIENT_LOG_DIR": str(logs),  # 2.x logs there, default /logs
           "NAMESRV_CLIENTS_DIR": str(clients_dir)}
    env.update(extra)
    return env


def summarize(exchanges, broker_link: str) -> list[str]:
    lines = []
    for x in exchanges:
        if x.peer == broker_link:
            continue
        req = x.request
        ext = {k: v for k, v in req.ext.items() if k != "Signature"}
        answer = "no answer" if x.response is None else (
            f"-> {code_name(x.response.code, response=True)} body {x.response.body!r}")
        lines.append(f"{code_name(req.code)} v{req.version} {req.header.language} ext={ext} {answer}")
    return lines


@pytest.mark.parametrize("compat", COMPATS)
@pytest.mark.parametrize("client_name", list(CLIENTS))
@pytest_twisted.inlineCallbacks
def test_real_client_sends_through_our_namesrv(client_name, compat, tmp_path, clients_dir, namesrv_exchanges):
    client = CLIENTS[client_name]
    require_client(client, clients_dir)
    service, port = yield start_server(server_config(tmp_path, compatVersion=compat))
    double = BrokerDouble(reactor)
    try:
        registered = yield double.start(port)
        assert registered.code == ResponseCode.SUCCESS, registered.header
        broker_link = f"127.0.0.1:{double.namesrv_link.transport.getHost().port}"

        namesrv = f"127.0.0.1:{port}"
        group = f"PG_INTEROP_{client.name.replace('-', '_').upper()}"
        body = f"interop {client.name} compat {compat} {uuid.uuid4().hex}"
        executable, args, extra = client.command(clients_dir, namesrv, group, body)
        run = yield run_client(executable, args, client_env(tmp_path, clients_dir, extra), tmp_path)
    finally:
        yield double.stop()
        yield service.stopService()

    client_requests = [x for x in namesrv_exchanges if x.peer != broker_link]
    print(f"\n[{client.name} / compat {compat}] client ran {run.seconds:.2f}s, exit {run.exit_code}")
    for line in summarize(namesrv_exchanges, broker_link):
        print(f"  namesrv <- {line}")
    for r in double.requests:
        print(f"  broker  <- {code_name(r.code)} v{r.version} {r.language} ext={r.ext} body {r.body!r}")

    # the client finished on its own and reported a successful send
    assert not run.timed_out, run.describe()
    assert run.exit_code == 0, run.describe()
    result = run.result()
    assert result is not None and result["ok"], run.describe()
    if client.native:
        assert str(clients_dir / client.name) in run.stdout, f"imported the wrong rocketmq package\n{run.describe()}"

    # its route came from our server: a 105 for TopicTest, answered SUCCESS with the double's address
    routes = [x for x in client_requests
              if x.request.code == RequestCode.GET_ROUTEINFO_BY_TOPIC and x.request.ext.get("topic") == "TopicTest"]
    assert routes, f"no GET_ROUTEINFO_BY_TOPIC for TopicTest reached our server: {summarize(namesrv_exchanges, '')}"
    for x in routes:
        assert x.response is not None and x.response.code == ResponseCode.SUCCESS, x.response
        route = fastjson.loads(x.response.body)
        assert [b["brokerName"] for b in route["brokerDatas"]] == ["broker-a"], route
        assert [(q["brokerName"], q["writeQueueNums"]) for q in route["queueDatas"]] == [("broker-a", 4)], route
        if x.request.version < V4_9_4:  # Java's plain fastjson: bare numeric map keys
            assert f'"brokerAddrs":{{0:"{double.addr}"}}'.encode() in x.response.body, x.response.body
        else:
            assert f'"brokerAddrs":{{"0":"{double.addr}"}}'.encode() in x.response.body, x.response.body

    # the broker double got exactly one send for TopicTest, carrying the message body
    sends = double.sends("TopicTest")
    assert len(sends) == 1, [(r.code, r.ext) for r in double.requests]
    assert sends[0].body == body.encode(), sends[0].body
    assert len(double.sends()) == 1
    assert double.errors == []
    stored = double.messages[0]
    assert stored.topic == "TopicTest" and 0 <= stored.queue_id < 4, stored
    # the client read the double's send response: the queue offset it reports is the double's;
    # ali-ons reports the broker's msgId, the C++ clients their own client-side unique id
    assert result["offset"] == stored.queue_offset, (result, stored)
    assert re.fullmatch(r"[0-9A-F]{32}", result["msgId"] or ""), result
    if not client.native:
        assert result["msgId"] == stored.msg_id, (result, stored)


ACL_ACCOUNTS = "accounts:\n  - accessKey: producer\n    secretKey: producer-secret\n    admin: false\n"


@pytest.mark.parametrize("secret", ["producer-secret", "wrong-secret"])
@pytest.mark.parametrize("client_name", ["cpp1", "cpp2"])
@pytest_twisted.inlineCallbacks
def test_cpp_client_signs_its_route_lookups_for_our_acl(client_name, secret, tmp_path, clients_dir,
                                                        namesrv_exchanges):
    """aclReadRequired: the C++ client's signed lookups pass with its secret, fail without."""
    client = CLIENTS[client_name]
    require_client(client, clients_dir)
    (tmp_path / "plain_acl.yml").write_text(ACL_ACCOUNTS)
    config = server_config(tmp_path, aclEnable=True, aclReadRequired=True,
                           aclAccountsFile=str(tmp_path / "plain_acl.yml"))
    service, port = yield start_server(config)
    double = BrokerDouble(reactor, credentials=("producer", "producer-secret"))
    try:
        registered = yield double.start(port)
        assert registered.code == ResponseCode.SUCCESS, registered.header
        broker_link = f"127.0.0.1:{double.namesrv_link.transport.getHost().port}"
        executable, args, extra = client.command(clients_dir, f"127.0.0.1:{port}", "PG_ACL", "signed")
        extra.update(ROCKETMQ_ACCESS_KEY="producer", ROCKETMQ_SECRET_KEY=secret)
        run = yield run_client(executable, args, client_env(tmp_path, clients_dir, extra), tmp_path)
    finally:
        yield double.stop()
        yield service.stopService()
    lookups = [x for x in namesrv_exchanges if x.peer != broker_link
               and x.request.code == RequestCode.GET_ROUTEINFO_BY_TOPIC and x.request.ext.get("topic") == "TopicTest"]
    assert lookups, summarize(namesrv_exchanges, broker_link)
    assert all(x.request.ext.get("AccessKey") == "producer" and x.request.ext.get("Signature") for x in lookups)
    if secret == "producer-secret":
        assert not run.timed_out and run.exit_code == 0, run.describe()
        assert all(x.response.code == ResponseCode.SUCCESS for x in lookups)
        assert len(double.sends("TopicTest")) == 1
    else:
        assert run.exit_code != 0 and double.sends() == [], run.describe()
        assert {x.response.remark for x in lookups} == {
            "org.apache.rocketmq.acl.common.AclException: Check signature failed for accessKey=producer"}
