"""TLS for the remoting port, with RocketMQ's modes (TlsSystemConfig ``tls.server.mode``):

- ``disabled``: plain TCP only (our default; Java's is permissive with a self-signed certificate);
- ``permissive``: each connection's first byte decides: 0x16 (a TLS handshake record) is served
  over TLS, anything else in plain, on the same port, as Java's HandshakeHandler does;
- ``enforcing``: TLS only; a peer whose first byte is no TLS handshake record is closed at once.

Every refusal -- a plain peer on an enforcing port, a handshake that fails (no client certificate
with ``authClient``, a broken or foreign peer) -- is a log line with the peer and a count in
``namesrv_refusals_total{listener,reason}`` (``not_tls``, ``tls_handshake``; refusals.py).  The
controller's port follows the same mode with the same certificate, as Java's NettyRemotingServer
reads TlsSystemConfig in every server.

Twisted's TLSMemoryBIOFactory does the TLS; the remoting protocol above it is unchanged.
TLS needs the ``tls`` extra (pyOpenSSL): once installed, Twisted's TCP transport imports it in every
process (its memory cost: docs/benchmarks.md), so installs without TLS leave it out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from twisted.internet import interfaces, protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from .budget import MemoryBudget
from .refusals import peer_text
from .remoting.codes import code_name
from .remoting.command import RemotingCommand
from .remoting.foreign import HTTP, foreign_protocol
from .server import RemotingFactory
from .state.config import ConfigError, NamesrvConfig
from .state.files import TEXT_FILE_LIMIT, read_regular

if TYPE_CHECKING:
    from twisted.internet.ssl import CertificateOptions, PrivateCertificate
    from twisted.protocols.tls import TLSMemoryBIOFactory

log = Logger()

TLS_HANDSHAKE = 0x16


def own_certificate(config: NamesrvConfig) -> PrivateCertificate:
    """The server's certificate and key (PEM); unreadable files are a ConfigError naming the key."""
    from OpenSSL import crypto
    from twisted.internet import ssl as twisted_ssl

    pem = {key: _read(config, key) for key in ("tls.server.certPath", "tls.server.keyPath")}
    password = config["tls.server.keyPassword"].encode() or None
    try:
        key = twisted_ssl.KeyPair(crypto.load_privatekey(crypto.FILETYPE_PEM, pem["tls.server.keyPath"], password))
        return twisted_ssl.PrivateCertificate.load(pem["tls.server.certPath"], key, crypto.FILETYPE_PEM)
    except Exception as exc:  # OpenSSL's errors name no file
        raise ConfigError(f"tls.server.certPath/keyPath: not a PEM certificate and its key: {exc}") from None


def context_factory(config: NamesrvConfig) -> CertificateOptions:
    """The server's certificate and key (PEM), and with ``tls.server.authClient`` the CA that
    client certificates must chain to.  Unreadable files are a ConfigError naming the key."""
    from twisted.internet import ssl as twisted_ssl

    certificate = own_certificate(config)
    if not config["tls.server.authClient"]:
        return certificate.options()
    trust = _read(config, "tls.server.trustCertPath")
    try:
        return certificate.options(twisted_ssl.Certificate.loadPEM(trust))
    except Exception as exc:
        raise ConfigError(f"tls.server.trustCertPath: not a PEM certificate: {exc}") from None


def _read(config: NamesrvConfig, key: str) -> bytes:
    path = config[key]
    if not path:
        raise ConfigError(f"{key}: required with tls.server.mode={config['tls.server.mode']}")
    try:
        return read_regular(path, TEXT_FILE_LIMIT)
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path}: {exc.strerror}") from None


def refusing_tls_factory(context: CertificateOptions, remoting: RemotingFactory) -> TLSMemoryBIOFactory:
    """Twisted's TLS under ``remoting``, with a failed handshake refused loudly (logged, counted)."""
    from twisted.protocols.tls import BufferingTLSTransport, TLSMemoryBIOFactory

    class RefusingTLSProtocol(BufferingTLSTransport):
        def _tlsShutdownFinished(self, reason: Failure | None) -> None:
            # Twisted's one hook for a failed handshake (_checkHandshakeStatus, _flushReceiveBIO);
            # whatever the refusal does, the close goes on: it is what tells the remoting protocol
            # the connection is lost (and gives its place of maxConnections back)
            try:
                if reason is not None and not self._handshakeDone and not self.handshake_dropped:
                    peer = self.transport.getPeer()
                    remoting.refuse("tls_handshake", peer_text(peer),
                                    "TLS handshake failed, closing the connection: {why}",
                                    why=_ssl_reason(reason.value))
            finally:
                super()._tlsShutdownFinished(reason)

        #: what this connection's handshake holds against the memory budget (HANDSHAKE_HELD_PER_BYTE
        #: a byte received before it was done), and whether the budget closed it for that
        handshake_held = 0
        handshake_dropped = False

        def makeConnection(self, transport: Any) -> None:
            super().makeConnection(transport)
            self._tlsConnection.set_app_data(self)  # the way back here from OpenSSL's info callback

        def dataReceived(self, data: bytes) -> None:
            if self.handshake_dropped:
                return
            if not self._handshakeDone:
                # OpenSSL keeps a handshake message until it is whole (a ClientHello up to 128 KiB, a
                # client's certificates up to 100 KB): uncounted, 500 peers each stalled 131 KB into
                # a ClientHello held 120 MB, outside receiveMemoryBudget
                self._hold(self.handshake_held + HANDSHAKE_HELD_PER_BYTE * len(data))
                if self.handshake_dropped:
                    return
            super().dataReceived(data)
            if self._handshakeDone and self.handshake_held:
                self._hold(0)  # done: what it sends now is the remoting protocol's to count

        def _hold(self, size: int) -> None:
            self.handshake_held = size
            remoting.budget.hold(self, size)

        def over_budget(self, held: int, budget: MemoryBudget) -> None:
            """The memory budget is spent and this handshake holds the most: it goes."""
            self.handshake_held = 0
            self.handshake_dropped = True
            remoting.refuse("memory_budget", peer_text(self.transport.getPeer()),
                            "closing it: its TLS handshake holds the most ({held} bytes: twice what it sent "
                            "before its handshake was done) and peers hold {total} bytes, over "
                            "receiveMemoryBudget ({budget_bytes})",
                            held=held, total=budget.held + held, budget_bytes=budget.limit)
            self.transport.abortConnection()

        def connectionLost(self, reason: Failure) -> None:
            if self.handshake_held:
                self._hold(0)
            super().connectionLost(reason)

        def renegotiation_refused(self) -> None:
            remoting.refuse("tls_renegotiation", peer_text(self.transport.getPeer()),
                            "TLS renegotiation refused (a no_renegotiation alert), the connection kept")

    context.getContext().set_info_callback(_alert_written)
    factory = TLSMemoryBIOFactory(context, False, remoting)
    factory.protocol = RefusingTLSProtocol
    return factory


#: what a byte received before the handshake is done holds against receiveMemoryBudget: OpenSSL's
#: cost, measured (500 peers stalled 300, 16,000, 65,000 and 131,000 bytes into a ClientHello grew a
#: server by 22, 39, 105 and 120 MB: 44 KB a connection, bounded by maxConnections, and about twice
#: the bytes past it)
HANDSHAKE_HELD_PER_BYTE = 2


#: TLS's no_renegotiation alert (RFC 5246, 7.2.2): what OpenSSL answers a client's renegotiation
NO_RENEGOTIATION = 100


def _alert_written(connection: Any, where: int, value: int) -> None:
    """OpenSSL's info callback (one per context, so the connection's protocol is found by its app
    data): an alert refusing a client's renegotiation is a refusal, logged and counted; before,
    OpenSSL refused it without a trace here.  Never raises into OpenSSL's handshake."""
    from OpenSSL import SSL

    if where & SSL.SSL_CB_WRITE_ALERT != SSL.SSL_CB_WRITE_ALERT or value & 0xFF != NO_RENEGOTIATION:
        return
    protocol = connection.get_app_data()
    try:
        protocol.renegotiation_refused()
    except Exception:  # noqa: BLE001 -- a connection without our protocol, a refusal that failed
        log.failure("counting a refused TLS renegotiation")


def _ssl_reason(error: BaseException) -> str:
    """OpenSSL's error list as its reasons (``no certificate returned``), else the exception's text.
    An ``SSL.Error`` holds the list; a ``SysCallError`` (a peer that closed mid-handshake) holds
    ``(errno, text)``: its text."""
    args = getattr(error, "args", ())
    entries = args[0] if args and isinstance(args[0], list) else []
    reasons = [entry[-1] for entry in entries if isinstance(entry, tuple) and entry]
    if not reasons and len(args) == 2 and isinstance(args[1], str):
        reasons = [args[1]]
    return ", ".join(str(r) for r in reasons) or str(error) or type(error).__name__


#: the not_tls refusal's log line: a Java broker or client without TLS sees only "send request failed"
#: in its own log, so this one names what it sent and what to do
NOT_TLS = ("a plain (non-TLS) peer on a port with tls.server.mode=enforcing, closing the connection ({request}): "
           "start it with -Dtls.enable=true (a broker: or useTLS=true in its -c file; producers, consumers, mqadmin "
           "and the proxy alike: docs/security.md#tls-from-the-java-side), or take plain peers too with "
           "tls.server.mode=permissive")


def plain_request(data: bytes) -> str:
    """What a plain peer's first bytes are: a RocketMQ request (its code, name and language) when
    they hold a whole frame, else the first byte."""
    if len(data) >= 8:
        length = int.from_bytes(data[:4], "big")
        if 4 <= length <= len(data) - 4:
            try:
                command = RemotingCommand.decode(data[4:4 + length])
            except Exception:  # noqa: BLE001 -- anything undecodable is shown as its first byte
                pass
            else:
                return (f"its first request: {code_name(command.code)} ({command.code}) from a "
                        f"{command.header.language or '?'} client")
    return f"first byte 0x{data[0]:02x}"


class SniffingProtocol(protocol.Protocol):
    """Holds a new connection until its first byte, then hands it to the TLS or (permissive mode)
    the plain remoting protocol; enforcing, a plain peer is refused there.  A peer that never
    sends is closed after the idle timeout; until its first byte it counts against maxConnections
    as one waiting (``SniffingFactory.sniffing``), else silent peers were never counted."""

    def __init__(self, factory: SniffingFactory, addr: interfaces.IAddress) -> None:
        self.factory = factory
        self.addr = addr
        self.delegate: protocol.Protocol | None = None
        self._idle = None

    def connectionMade(self) -> None:
        self.factory.sniffing.add(self)
        remoting = self.factory.remoting
        if remoting.idle_timeout:
            self._idle = remoting.clock.callLater(remoting.idle_timeout, self.transport.abortConnection)

    def dataReceived(self, data: bytes) -> None:
        if self.delegate is None:
            if self._idle is not None and self._idle.active():
                self._idle.cancel()
            plain = data[0] != TLS_HANDSHAKE
            if plain and self.factory.enforcing:
                peer = peer_text(self.addr)
                request = plain_request(data)
                if foreign_protocol(data) == HTTP:  # a probe or browser: no broker to start with TLS
                    request += "; " + self.factory.remoting.first_bytes(HTTP)
                self.factory.remoting.refuse("not_tls", peer, NOT_TLS, request=request)
                self.transport.loseConnection()  # an orderly close: the client can tell "try TLS"
                return
            self.factory.sniffing.discard(self)  # its place is the remoting factory's to count now
            if not plain and self.factory.remoting.refused_full(self.addr):
                # (its place was kept for it; asked here all the same: Twisted's TLS wraps the None
                # a full remoting factory answers, and raises on it, a traceback a connection)
                self.transport.loseConnection()
                return
            inner = self.factory.remoting if plain else self.factory.tls
            self.delegate = inner.buildProtocol(self.addr)
            if self.delegate is None:  # maxConnections
                self.transport.loseConnection()
                return
            self.delegate.makeConnection(self.transport)
        self.delegate.dataReceived(data)

    def connectionLost(self, reason: object = protocol.connectionDone) -> None:
        self.factory.sniffing.discard(self)
        if self._idle is not None and self._idle.active():
            self._idle.cancel()
        if self.delegate is not None:
            self.delegate.connectionLost(reason)


class SniffingFactory(protocol.Factory):
    def __init__(self, remoting: RemotingFactory, tls: TLSMemoryBIOFactory, enforcing: bool = False) -> None:
        self.remoting = remoting
        self.tls = tls
        self.enforcing = enforcing
        #: connections accepted that have sent no byte yet (counted against maxConnections)
        self.sniffing: set[SniffingProtocol] = set()

    def buildProtocol(self, addr: interfaces.IAddress) -> SniffingProtocol | None:
        """None (closed at once) when maxConnections are open, silent peers included."""
        if self.remoting.refused_full(addr, len(self.sniffing)):
            return None
        return SniffingProtocol(self, addr)


def listen_with(config: NamesrvConfig) -> Callable[[RemotingFactory], protocol.Factory]:
    """What a remoting port (the NameServer's, the controller's) listens with, by ``tls.server.mode``:
    the certificate and key are read here, once for every port (a ConfigError naming the key)."""
    mode = config["tls.server.mode"]
    if mode == "disabled":
        return lambda remoting: remoting
    try:
        import OpenSSL  # noqa: F401 -- Twisted's TLS needs it
    except ImportError:
        raise ConfigError(f"tls.server.mode: {mode} needs pyOpenSSL: pip install 'twisted-namesrv[tls]'") from None
    context = context_factory(config)
    return lambda remoting: SniffingFactory(remoting, refusing_tls_factory(context, remoting), mode == "enforcing")


def connect_with(config: NamesrvConfig) -> Callable[[str, protocol.ClientFactory], protocol.ClientFactory] | None:
    """What this server's own connections to other NameServers (the peers view) go over: None (plain
    TCP) with ``tls.server.mode=disabled``, else TLS, as the cluster's NameServers serve it.  The
    peer's certificate must chain to ``tls.server.trustCertPath`` (the CA of the cluster's
    certificates; else the system's trust store) and name the address it is reached at; this
    server's own certificate is shown, for peers with ``tls.server.authClient``.  The files are read
    here, once (a ConfigError naming the key)."""
    if config["tls.server.mode"] == "disabled":
        return None
    from twisted.internet import ssl as twisted_ssl
    from twisted.protocols.tls import TLSMemoryBIOFactory

    certificate = own_certificate(config)
    trust: Any = None
    if config["tls.server.trustCertPath"]:
        try:
            trust = twisted_ssl.Certificate.loadPEM(_read(config, "tls.server.trustCertPath"))
        except Exception as exc:
            raise ConfigError(f"tls.server.trustCertPath: not a PEM certificate: {exc}") from None

    def wrap(host: str, factory: protocol.ClientFactory) -> protocol.ClientFactory:
        creator = twisted_ssl.optionsForClientTLS(host, trustRoot=trust, clientCertificate=certificate)
        return TLSMemoryBIOFactory(creator, True, factory)  # type: ignore[return-value]
    return wrap
