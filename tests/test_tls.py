"""tls.server.mode: permissive serves TLS and plain on one port, enforcing only TLS; a TLS
client (Python's ssl, verifying our certificate) asks over the same remoting protocol."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import struct
import sys

import pytest
import pytest_twisted
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from twisted.internet import threads

from tests.support import server_config, start_server
from twisted_namesrv import CannotStart
from twisted_namesrv.remoting import FrameDecoder, RemotingCommand, RequestCode, ResponseCode
from twisted_namesrv.service import NamesrvService
from twisted_namesrv.state.config import ConfigError

ASK = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "NoSuchTopic"}, opaque=7, version=409)


def self_signed(directory):
    """A self-signed certificate for 127.0.0.1 in ``directory`` (cert.pem, key.pem), made for this run
    (no key is ever committed)."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .sign(key, hashes.SHA256()))
    (directory / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()))
    return directory / "cert.pem", directory / "key.pem"


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    return self_signed(tmp_path_factory.mktemp("tls"))


def ask(port: int, cafile=None, client_pair=None) -> RemotingCommand | None:
    """One route lookup, over TLS when ``cafile`` is given (presenting ``client_pair``, a
    certificate and key, if given); None when the server closes on us."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if cafile is not None:
        context = ssl.create_default_context(cafile=str(cafile))
        if client_pair:
            context.load_cert_chain(*map(str, client_pair))
        try:
            sock = context.wrap_socket(sock, server_hostname="127.0.0.1")
        except (ConnectionError, ssl.SSLError):
            return None
    with sock:
        sock.sendall(ASK.encode())
        decoder, data = FrameDecoder(), b""
        while True:
            try:
                data = sock.recv(65536)
            except (ConnectionError, ssl.SSLError):
                return None
            if not data:
                return None
            frames = decoder.feed(data)
            if frames:
                return RemotingCommand.decode(frames[0])


def tls_config(tmp_path, certificate, mode: str):
    cert, key = certificate
    return server_config(tmp_path, **{"tls.server.mode": mode, "tls.server.certPath": str(cert),
                                      "tls.server.keyPath": str(key)})


@pytest.mark.parametrize(("mode", "plain_answered"), [("permissive", True), ("enforcing", False)])
@pytest_twisted.inlineCallbacks
def test_tls_modes(tmp_path, certificate, mode, plain_answered):
    service, port = yield start_server(tls_config(tmp_path, certificate, mode))
    try:
        over_tls = yield threads.deferToThread(ask, port, certificate[0])
        plain = yield threads.deferToThread(ask, port)
    finally:
        yield service.stopService()
    assert over_tls.code == ResponseCode.TOPIC_NOT_EXIST and over_tls.opaque == ASK.opaque
    if plain_answered:
        assert plain.code == ResponseCode.TOPIC_NOT_EXIST and plain.opaque == ASK.opaque
    else:
        assert plain is None


@pytest_twisted.inlineCallbacks
def test_auth_client_requires_a_trusted_client_certificate(tmp_path, certificate):
    config = tls_config(tmp_path, certificate, "enforcing")
    config.values.update({"tls.server.authClient": True, "tls.server.trustCertPath": str(certificate[0])})
    service, port = yield start_server(config)
    try:
        anonymous = yield threads.deferToThread(ask, port, certificate[0])
        trusted = yield threads.deferToThread(ask, port, certificate[0], certificate)
    finally:
        yield service.stopService()
    assert anonymous is None
    assert trusted.code == ResponseCode.TOPIC_NOT_EXIST


def test_permissive_peer_that_never_speaks_is_closed_when_idle(tmp_path, certificate):
    from twisted.internet import address, task
    from twisted.internet.testing import StringTransport

    clock = task.Clock()
    service = NamesrvService.from_config(tls_config(tmp_path, certificate, "permissive"), reactor=clock)
    silent = service.remoting.factory.buildProtocol(address.IPv4Address("TCP", "127.0.0.1", 1))
    transport = StringTransport()
    silent.makeConnection(transport)
    clock.advance(service.config["serverChannelMaxIdleTimeSeconds"])
    assert transport.disconnecting


@pytest.mark.parametrize(("values", "key"), [
    ({"tls.server.mode": "enforcing"}, "tls.server.certPath: required"),
    ({"tls.server.mode": "permissive", "tls.server.certPath": "/nonexistent/cert.pem",
      "tls.server.keyPath": "/nonexistent/key.pem"}, "tls.server.certPath: cannot read"),
])
def test_bad_tls_settings_stop_the_start_naming_the_key(tmp_path, values, key):
    with pytest.raises(CannotStart, match=f"^{key}"):
        NamesrvService.from_config(server_config(tmp_path, **values))


def test_an_unknown_tls_mode_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="^tls.server.mode: 'on' is not one of"):
        server_config(tmp_path, **{"tls.server.mode": "on"})


def test_garbage_key_file_is_refused(tmp_path, certificate):
    (tmp_path / "bad.pem").write_bytes(struct.pack(">I", 7) * 10)
    values = {"tls.server.mode": "enforcing", "tls.server.certPath": str(certificate[0]),
              "tls.server.keyPath": str(tmp_path / "bad.pem")}
    with pytest.raises(CannotStart, match="^tls.server.certPath/keyPath: not a PEM"):
        NamesrvService.from_config(server_config(tmp_path, **values))


#: files opened while _OPENS_WATCHED[0] is set (an audit hook: Python allows no removing one)
_OPENS_WATCHED: list = [None]


def _record_opens(event: str, args: tuple) -> None:
    if event == "open" and _OPENS_WATCHED[0] is not None and not str(args[0]).endswith((".py", ".pyc")):
        _OPENS_WATCHED[0].append(str(args[0]))


def opened_by(build):
    """``build()``'s result and the files it opened (imports aside)."""
    if _record_opens not in getattr(opened_by, "hooked", ()):
        sys.addaudithook(_record_opens)
        opened_by.hooked = (_record_opens,)
    _OPENS_WATCHED[0] = []
    try:
        return build(), _OPENS_WATCHED[0]
    finally:
        _OPENS_WATCHED[0] = None


def test_files_are_read_by_load_and_the_service_is_built_reading_none(tmp_path, certificate):
    """The TLS keys (once, for both ports), the KV store and the page's events are read by ``load``
    (from_config; twistd's makeService); building the service and its controller opens no file."""
    from twisted.internet import task

    from twisted_namesrv.service import load

    config = tls_config(tmp_path, certificate, "enforcing")
    (tmp_path / "kvConfig.json").write_text('{"configTable": {}}')
    clock = task.Clock()
    loaded, read = opened_by(lambda: load(config, clock))
    assert str(certificate[0]) in read and str(certificate[1]) in read and str(tmp_path / "kvConfig.json") in read
    service, opened = opened_by(lambda: NamesrvService(config, loaded, clock, controller_port=0))
    assert opened == []
    assert service.controller.listener.factory.tls is not None and service.remoting.factory.enforcing


@pytest_twisted.inlineCallbacks
def test_the_embedded_controllers_port_follows_tls_server_mode(tmp_path, certificate):
    """The controller listens through the same tls.listen_with as the remoting port: with
    enforcing, a plain peer is closed and a TLS one answered (105 is no controller code: refused)."""
    from twisted.internet import reactor

    service = NamesrvService.from_config(tls_config(tmp_path, certificate, "enforcing"), reactor, controller_port=0)
    service.startService()
    try:
        yield service.controller.ready
        port = service.controller.port.getHost().port
        over_tls = yield threads.deferToThread(ask, port, certificate[0])
        plain = yield threads.deferToThread(ask, port)
    finally:
        yield service.stopService()
    assert (over_tls.code, over_tls.opaque) == (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, ASK.opaque)
    assert plain is None


@pytest_twisted.inlineCallbacks
def test_every_tls_refusal_is_a_log_line_with_the_peer_and_a_count(tmp_path, certificate):
    """An enforcing port closing a plain peer, and a handshake without the client certificate
    authClient requires, each say so once in the log (with the peer) and count in
    namesrv_refusals_total{listener="remoting",reason=...}; both were silent."""
    from twisted.logger import globalLogPublisher

    config = tls_config(tmp_path, certificate, "enforcing")
    config.values.update({"tls.server.authClient": True, "tls.server.trustCertPath": str(certificate[0])})
    events: list[dict] = []
    globalLogPublisher.addObserver(events.append)
    service, port = yield start_server(config)
    try:
        plain = yield threads.deferToThread(ask, port)
        anonymous = yield threads.deferToThread(ask, port, certificate[0])
        trusted = yield threads.deferToThread(ask, port, certificate[0], certificate)
    finally:
        yield service.stopService()
        globalLogPublisher.removeObserver(events.append)
    assert plain is None and anonymous is None and trusted.code == ResponseCode.TOPIC_NOT_EXIST
    counts = service.state.refusals.counts
    assert (counts["remoting", "not_tls"], counts["remoting", "tls_handshake"]) == (1, 1)
    refused = {e["refused"]: e for e in events if "refused" in e}
    assert set(refused) == {"not_tls", "tls_handshake"}
    for event in refused.values():
        assert event["log_level"].name == "warn" and event["peer"].startswith("127.0.0.1:")
        assert event["listener"] == "remoting"
    assert "certificate" in refused["tls_handshake"]["why"]


@pytest_twisted.inlineCallbacks
def test_a_plain_java_broker_refused_by_an_enforcing_port_is_told_what_to_do(tmp_path, certificate):
    """A Java broker without -Dtls.enable=true logs only 'send request failed' and prints 'boot
    success' (seen with the reference rig): our one log line must name what it sent and the fix."""
    from twisted.logger import formatEvent, globalLogPublisher

    events: list[dict] = []
    globalLogPublisher.addObserver(events.append)
    service, port = yield start_server(tls_config(tmp_path, certificate, "enforcing"))
    register = RemotingCommand.request(RequestCode.REGISTER_BROKER, {"brokerName": "broker-a"}, b"{}", opaque=1,
                                       version=479)
    try:
        answer = yield threads.deferToThread(send_plain, port, register.encode())
    finally:
        yield service.stopService()
        globalLogPublisher.removeObserver(events.append)
    assert answer == b""  # closed without an answer, as before
    lines = [formatEvent(e) for e in events if e.get("refused") == "not_tls"]
    assert len(lines) == 1
    assert "its first request: REGISTER_BROKER (103) from a JAVA client" in lines[0]
    assert "start it with -Dtls.enable=true" in lines[0] and "tls.server.mode=permissive" in lines[0]


@pytest_twisted.inlineCallbacks
def test_an_http_probe_refused_by_an_enforcing_port_is_told_where_http_is(tmp_path, certificate):
    """A load balancer's or Kubernetes' HTTP check on the remoting port: with tls.server.mode
    enforcing it is refused before the remoting protocol sees it, and the line said only 'first byte
    0x47' and how to start a broker with TLS; it says the bytes are HTTP and where HTTP is served,
    as the plain port's refusal does (remoting/foreign.py)."""
    from twisted.logger import formatEvent, globalLogPublisher

    events: list[dict] = []
    globalLogPublisher.addObserver(events.append)
    service, port = yield start_server(tls_config(tmp_path, certificate, "enforcing"))
    try:
        answer = yield threads.deferToThread(send_plain, port, b"GET /healthz HTTP/1.1\r\nHost: ns\r\n\r\n")
    finally:
        yield service.stopService()
        globalLogPublisher.removeObserver(events.append)
    assert answer == b""
    [line] = [formatEvent(e) for e in events if e.get("refused") == "not_tls"]
    assert "first byte 0x47; its first bytes are HTTP: this port speaks RocketMQ remoting" in line, line


def send_plain(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        return sock.recv(100)


def test_what_a_plain_peer_sent_is_named_only_when_it_is_a_whole_frame():
    from twisted_namesrv.tls import plain_request

    assert plain_request(b"GET / HTTP/1.1\r\n") == "first byte 0x47"
    assert plain_request(ASK.encode()[:10]) == "first byte 0x00"
    assert plain_request(ASK.encode()) == "its first request: GET_ROUTEINFO_BY_TOPIC (105) from a JAVA client"


@pytest.mark.parametrize("mode", ["permissive", "enforcing"])
def test_a_handshake_cut_short_is_a_refusal_and_gives_its_place_back(tmp_path, certificate, mode):
    """A peer that sends the first bytes of a ClientHello and closes: OpenSSL's error is then a
    SysCallError ``(-1, 'Unexpected EOF')``, whose reasons the refusal read as a list -- a TypeError
    in connectionLost, a traceback a connection, no count, and the remoting protocol never told the
    connection was lost: it kept its place, and 100 such connections (maxConnections=100) left the
    TLS port refusing every client until a restart."""
    from OpenSSL.SSL import SysCallError
    from twisted.internet import address, task
    from twisted.internet.error import ConnectionDone
    from twisted.internet.testing import StringTransport
    from twisted.python.failure import Failure

    from twisted_namesrv.tls import _ssl_reason

    assert _ssl_reason(SysCallError(-1, "Unexpected EOF")) == "Unexpected EOF"

    class Socket(StringTransport):
        def setTcpNoDelay(self, enabled: bool) -> None:
            """What the remoting protocol sets on a TCP transport."""

    clock = task.Clock()
    service = NamesrvService.from_config(tls_config(tmp_path, certificate, mode), reactor=clock)
    remoting = service.remoting.factory.buildProtocol(address.IPv4Address("TCP", "127.0.0.1", 1))
    remoting.makeConnection(Socket())
    remoting.dataReceived(b"\x16\x03\x01")  # a ClientHello begins
    remoting.connectionLost(Failure(ConnectionDone()))
    assert service.state.refusals.counts["remoting", "tls_handshake"] == 1
    assert not service.remoting.factory.remoting.connections  # its place is free again


@pytest.mark.parametrize("mode", ["permissive", "enforcing"])
def test_max_connections_counts_peers_that_never_send_a_byte(tmp_path, certificate, mode):
    """A TLS port holds each connection until its first byte (SniffingProtocol); only then was the
    remoting factory asked, so peers that sent nothing were never counted against maxConnections
    (with maxConnections=100 an attack run kept 300 silent sockets open, up to the descriptor
    reserve), and a TLS peer refused at its first byte was a traceback (Twisted's TLS wrapper
    around the None the remoting factory answered), two lines a connection."""
    from twisted.internet import address, task
    from twisted.internet.error import ConnectionDone
    from twisted.internet.testing import StringTransport
    from twisted.python.failure import Failure

    class Socket(StringTransport):
        def setTcpNoDelay(self, enabled: bool) -> None:
            """What the remoting protocol sets on a TCP transport."""

    clock = task.Clock()
    config = tls_config(tmp_path, certificate, mode)
    config.values["maxConnections"] = 2
    service = NamesrvService.from_config(config, reactor=clock)
    factory = service.remoting.factory

    def connect(port: int):
        proto = factory.buildProtocol(address.IPv4Address("TCP", "127.0.0.1", port))
        if proto is not None:
            proto.makeConnection(Socket())
        return proto

    first, second = connect(1), connect(2)
    assert first is not None and second is not None
    assert connect(3) is None  # two silent peers hold both places
    assert service.state.refusals.counts["remoting", "max_connections"] == 1
    first.dataReceived(b"\x16\x03\x01")  # one speaks (a ClientHello begins): still one place each
    second.dataReceived(b"\x16\x03\x01")
    assert connect(4) is None
    first.connectionLost(Failure(ConnectionDone()))
    assert connect(5) is not None  # a place came free
    assert connect(6) is None
    assert service.state.refusals.counts["remoting", "max_connections"] == 3


def renegotiate(port: int) -> str:
    """A TLS 1.2 client that renegotiates after its handshake (pyOpenSSL: Python's ssl cannot);
    what it was answered."""
    import select

    from OpenSSL import SSL

    context = SSL.Context(SSL.TLS_METHOD)
    context.set_max_proto_version(SSL.TLS1_2_VERSION)
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    connection = SSL.Connection(context, sock)
    connection.set_connect_state()

    def waiting(step):  # the socket has a timeout, so pyOpenSSL's calls do not wait: waited here
        while True:
            try:
                return step()
            except SSL.WantReadError:
                if not select.select([sock], [], [], 10)[0]:
                    raise TimeoutError from None

    try:
        waiting(connection.do_handshake)
        connection.renegotiate()
        waiting(connection.do_handshake)
        waiting(lambda: connection.recv(100))
    except SSL.Error as exc:
        return str(exc)
    finally:
        sock.close()
    return "renegotiated"


@pytest_twisted.inlineCallbacks
def test_a_refused_renegotiation_is_a_log_line_with_the_peer_and_a_count(tmp_path, certificate):
    """OpenSSL refuses a client's renegotiation (a no_renegotiation alert): that refusal was neither
    logged nor counted, a peer trying it again and again invisible to the operator."""
    from twisted.logger import globalLogPublisher

    events: list[dict] = []
    globalLogPublisher.addObserver(events.append)
    service, port = yield start_server(tls_config(tmp_path, certificate, "enforcing"))
    try:
        answered = yield threads.deferToThread(renegotiate, port)
        again = yield threads.deferToThread(renegotiate, port)
    finally:
        yield service.stopService()
        globalLogPublisher.removeObserver(events.append)
    assert "no renegotiation" in answered and "no renegotiation" in again
    assert service.state.refusals.counts["remoting", "tls_renegotiation"] == 2
    refused = [e for e in events if e.get("refused") == "tls_renegotiation"]
    assert [e["log_level"].name for e in refused] == ["warn", "debug"]  # once per host, as every refusal
    assert refused[0]["peer"].startswith("127.0.0.1:") and refused[0]["listener"] == "remoting"


def stalled_client_hello(size: int) -> bytes:
    """The first ``size`` bytes of a ClientHello announcing about 128 KiB (OpenSSL's largest), in
    16 KiB records: OpenSSL keeps them until the message is whole, which it never is."""
    body = b"\x01" + (131000).to_bytes(3, "big") + b"\x03\x03" + b"\x11" * 32 + b"\x00"
    body += b"\x00" * (size - len(body))
    return b"".join(b"\x16\x03\x01" + len(body[i:i + 16384]).to_bytes(2, "big") + body[i:i + 16384]
                    for i in range(0, len(body), 16384))


@pytest.mark.parametrize("mode", ["permissive", "enforcing"])
def test_a_stalled_handshake_holds_against_the_memory_budget(tmp_path, certificate, mode):
    """A peer that sends most of a ClientHello and stalls: OpenSSL keeps what it sent (twice it,
    measured) until the idle timeout, and it was not in receiveMemoryBudget: 500 such peers (of
    maxConnections' 10,000) took a server from 52 to 172 MB.  Now it holds against the budget,
    and over it the handshake holding the most is closed, logged and counted (memory_budget), once:
    no tls_handshake refusal beside it; a handshake done gives its bytes back."""
    from OpenSSL import SSL
    from twisted.internet import address, task
    from twisted.internet.error import ConnectionDone
    from twisted.internet.testing import StringTransport
    from twisted.python.failure import Failure

    class Socket(StringTransport):
        def setTcpNoDelay(self, enabled: bool) -> None:
            """What the remoting protocol sets on a TCP transport."""

    clock = task.Clock()
    config = tls_config(tmp_path, certificate, mode)
    config.values.update({"frameMaxLength": 100_000, "receiveMemoryBudget": 200_000})
    service = NamesrvService.from_config(config, reactor=clock)
    factory, budget = service.remoting.factory, service.remoting.factory.remoting.budget
    refusals = service.state.refusals.counts

    def connect(port: int):
        proto = factory.buildProtocol(address.IPv4Address("TCP", "127.0.0.1", port))
        proto.makeConnection(Socket())
        return proto

    hello = stalled_client_hello(60_000)
    first, second = connect(1), connect(2)
    first.dataReceived(hello)
    assert budget.held == 2 * len(hello)
    second.dataReceived(hello)  # 240,120 bytes held: over 200,000, the first (as large, held longer) goes
    assert first.transport.disconnecting and not second.transport.disconnecting
    assert refusals["remoting", "memory_budget"] == 1 and budget.held == 2 * len(hello)
    first.connectionLost(Failure(ConnectionDone()))
    second.connectionLost(Failure(ConnectionDone()))
    assert budget.held == 0 and not budget.holders
    assert refusals["remoting", "tls_handshake"] == 1  # the second's Unexpected EOF; the first's was the budget's

    client = SSL.Connection(SSL.Context(SSL.TLS_METHOD), None)
    client.set_connect_state()
    done = connect(3)
    for _ in range(10):  # a whole handshake, pumped by hand
        try:
            client.do_handshake()
            break
        except SSL.WantReadError:
            done.dataReceived(client.bio_read(65536))
            client.bio_write(done.transport.value())
            done.transport.clear()
    assert budget.held > 0  # its handshake under way
    done.dataReceived(client.bio_read(65536))  # the client's Finished
    assert done.delegate._handshakeDone and budget.held == 0 and not budget.holders
