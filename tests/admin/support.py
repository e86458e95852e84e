"""Running the admin CLI against in-process NameServers.

The servers live on the reactor of the test process, so the CLI (blocking sockets) runs in a
reactor thread (``deferToThread``) with its own stdout/stderr, or as a real subprocess.
"""

from __future__ import annotations

import io
import os
import socket
import sys
from dataclasses import dataclass, field

from twisted.internet import defer, protocol, reactor, threads
from twisted.internet.utils import getProcessOutputAndValue

from tests.interop.broker_double import HOST, BrokerDouble
from tests.support import RemotingClient, connect, server_config, start_server
from twisted_namesrv.admin.cli import main


@dataclass
class Run:
    code: int
    out: str
    err: str


def run_cli(*argv: str) -> defer.Deferred:
    """``main(argv)`` in a thread; fires with a Run."""
    def run() -> Run:
        out, err = io.StringIO(), io.StringIO()
        code = main(list(argv), out, err)
        return Run(code, out.getvalue(), err.getvalue())

    return threads.deferToThread(run)


@defer.inlineCallbacks
def run_module(*argv: str):
    """``python -m twisted_namesrv.admin argv`` as a subprocess; fires with a Run."""
    env = {key: value for key, value in os.environ.items() if key != "NAMESRV_ADDR"}
    out, err, code = yield getProcessOutputAndValue(sys.executable, ["-m", "twisted_namesrv.admin", *argv], env=env)
    return Run(code, out.decode(), err.decode())


def refused_addr() -> str:
    """An address nothing listens on (a port the kernel just handed out, then closed)."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return f"{HOST}:{sock.getsockname()[1]}"


@dataclass
class Namesrv:
    """An in-process NameServer and what was registered with it."""

    service: object
    port: int
    brokers: list[BrokerDouble] = field(default_factory=list)
    links: list[RemotingClient] = field(default_factory=list)

    @property
    def addr(self) -> str:
        return f"{HOST}:{self.port}"

    @defer.inlineCallbacks
    def stop(self):
        for broker in self.brokers:
            yield broker.stop()
        for link in self.links:
            link.transport.loseConnection()
            yield link.closed
        yield self.service.stopService()


@defer.inlineCallbacks
def namesrv(tmp_path, name: str = "ns", **config):
    directory = tmp_path / name
    directory.mkdir()
    service, port = yield start_server(server_config(directory, **config))
    return Namesrv(service, port)


@defer.inlineCallbacks
def start_broker(server: Namesrv, name: str, topics: dict[str, int], broker_id: int = 0):
    """A broker double registered with ``server`` (it stays registered until server.stop())."""
    broker = BrokerDouble(reactor, broker_name=name, topics=topics, broker_id=broker_id)
    server.brokers.append(broker)
    answer = yield broker.start(server.port)
    assert answer.code == 0, answer.remark
    return broker


@defer.inlineCallbacks
def register_everywhere(servers: list[Namesrv], broker: BrokerDouble):
    """The same REGISTER_BROKER bytes (same data version) to each server, as a broker sends
    them to every NameServer of its list; the broker listens but keeps no link of its own."""
    broker.port = reactor.listenTCP(0, broker, interface=HOST)
    broker.listen_port = broker.port.getHost().port
    servers[0].brokers.append(broker)
    request = broker.register_request(opaque=1)
    for server in servers:
        link = yield connect(server.port)
        server.links.append(link)
        answer = yield link.call(request)
        assert answer.code == 0, answer.remark


def silent_server() -> object:
    """A listening port that accepts connections and never answers (stopListening() it)."""
    return reactor.listenTCP(0, protocol.Factory.forProtocol(protocol.Protocol), interface=HOST)
