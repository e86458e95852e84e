"""A blocking remoting client for the admin CLI: one TCP connection per NameServer, the
project's codec (FrameDecoder, RemotingCommand), a deadline per request.

Requests go out as a Java 4.9.8 client writes them: JSON header, language JAVA, version 409,
an opaque that increments across the process.  A command line needs no reactor.
"""

from __future__ import annotations

import ipaddress
import itertools
import secrets
import socket
import ssl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..remoting import FrameDecoder, RemotingCommand, RemotingDecodeError, ResponseCode, fastjson
from ..remoting.codes import V4_9_8, code_name
from ..state.acl import ADMIN_CODES, CONTROLLER_ADMIN_CODES, CONTROLLER_ELECT_MASTER, needs_signature, signed_bound
from ..state.config import DEFAULT_LISTEN_PORT as DEFAULT_PORT
from ..state.hosts import host_port, written_as_list

DEFAULT_NAMESRV = f"127.0.0.1:{DEFAULT_PORT}"
DEFAULT_TIMEOUT = 3.0
_OPAQUES = itertools.count(1)
#: seconds of silence after a request before asking, once, whether the peer is an HTTP server
#: (line-based HTTP servers wait for a line end a remoting frame never has, so they never answer)
PROBE_AFTER = 0.5
HTTP_PROBE = b"GET / HTTP/1.0\r\n\r\n"
#: a plain request closed unanswered by a NameServer that then completed a TLS handshake (TlsProbe):
#: its port is tls.server.mode=enforcing
TLS_HINT = "it speaks TLS on that port: the NameServer is enforcing TLS, try --tls"
#: the same closed, and a TLS handshake closed too: the server closes every new connection at once, as
#: it does out of descriptors (fd_reserve, fd_table_full) or at a connection limit; no word of TLS
REFUSING_HINT = ("a new connection was closed at once too, not TLS: the NameServer is refusing connections, "
                 "as it does out of file descriptors (ulimit -n, LimitNOFILE) or at maxConnections; its log "
                 "and namesrv_rejected_total{reason} on its metrics port say which")
#: seconds the probe after an unanswered close gets at most
PROBE_TLS_WITHIN = 2.0


@dataclass(frozen=True)
class TlsOptions:
    """``--tls`` (mqadmin's tls.enable): the CA to verify the NameServer's certificate with (None:
    the system's trust store), and a client certificate and key for ``tls.server.authClient``."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None

    def context(self) -> ssl.SSLContext:
        """The client context; a file that cannot be used raises AdminError naming it."""
        try:
            context = ssl.create_default_context(cafile=self.ca)
        except (OSError, ssl.SSLError) as exc:
            raise AdminError(f"--tls-ca {self.ca}: not a readable PEM CA certificate: {_reason(exc)}") from None
        if self.cert:
            try:
                context.load_cert_chain(self.cert, self.key)
            except (OSError, ssl.SSLError) as exc:
                raise AdminError(f"--tls-cert {self.cert} / --tls-key {self.key}: not a readable PEM certificate and "
                                 f"key: {_reason(exc)}") from None
        return context


def _reason(exc: Exception) -> str:
    return str(getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc)


class AdminError(Exception):
    """Anything that makes a subcommand fail; ``str()`` is the line for stderr."""


class TransportError(AdminError):
    """No usable answer: refused, unreachable, timed out, closed, or undecodable."""


class ResponseError(AdminError):
    """The NameServer answered with a code other than SUCCESS."""

    def __init__(self, addr: str, request_code: int, response: RemotingCommand) -> None:
        self.addr = addr
        self.code = response.code
        self.remark = response.remark
        hint = ""
        if "No accessKey is configured" in (response.remark or "") and not needs_signature(request_code, {}):
            hint = (" (the NameServer wants reads signed, aclReadRequired: set NAMESRV_SIGN_READS=true or pass "
                    "--sign-reads, with NAMESRV_ACCESS_KEY and NAMESRV_SECRET_KEY)")
        super().__init__(f"{addr}: {code_name(request_code)} failed: {code_name(response.code, True)} "
                         f"({response.code}): {response.remark}{hint}")


def split_namesrv_list(text: str) -> list[str]:
    """``host:port;host:port`` as mqadmin's ``-n`` takes it; a bare ``host`` means port 9876.
    Each address comes back as ``host:port``."""
    addrs = [part.strip() for part in text.split(";") if part.strip()]
    if not addrs:
        raise AdminError(f"no NameServer address in {text!r}")
    return [_with_port(addr) for addr in addrs]


def parse_address(addr: str) -> tuple[str, int]:
    """(host, port) of ``host:port``, ``[v6]:port``, or ``host`` / ``[v6]`` on Java's default port.
    A list separated by commas or spaces is refused naming RocketMQ's separator: taken as one host
    it was "connect to [a:9876,b]:9876 failed: Name or service not known"."""
    if written_as_list(addr):
        raise AdminError(f"bad NameServer address {addr!r} (NameServers are separated by ';', as with mqadmin -n)")
    if ":" not in addr or (addr.startswith("[") and addr.endswith("]")):
        host, port = addr, str(DEFAULT_PORT)
    else:
        host, _, port = addr.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or (":" in host and not _is_ipv6(host)):
        raise AdminError(f"bad NameServer address {addr!r} (expected host, host:port or [IPv6]:port)")
    return host, int(port)


def _is_ipv6(host: str) -> bool:
    try:
        ipaddress.IPv6Address(host)
    except ValueError:
        return False
    return True


def _with_port(addr: str) -> str:
    return host_port(*parse_address(addr))


def json_body(addr: str, response: RemotingCommand) -> Any:
    """The response body as JSON (fastjson's unquoted numeric keys accepted)."""
    if not response.body:
        raise TransportError(f"{addr}: answer {code_name(response.code, True)} has no body")
    body = response.body
    try:
        return fastjson.loads(body if isinstance(body, bytes) else bytes(body))  # (a view: only a capture's)
    except ValueError as exc:
        raise TransportError(f"{addr}: answer body is not JSON: {exc}") from None


#: what reading an answer of another shape than a NameServer's raises: a list where an object is
#: (AttributeError), a string for a table (TypeError), a broker id of 5,000 digits (ValueError)
SHAPE_ERRORS = (AttributeError, KeyError, TypeError, ValueError)


@contextmanager
def answer_read(addr: str, what: str) -> Iterator[None]:
    """Reading ``addr``'s answer to ``what``: one not shaped as a NameServer's (a broken one, another
    program on its port, a hostile one) is a TransportError naming the server and the answer, the
    one line the CLI prints (escaped), never a traceback; the peers view counts it as that peer's."""
    try:
        yield
    except SHAPE_ERRORS as exc:
        raise TransportError(f"{addr}: its answer to {what} is not shaped as a NameServer's "
                             f"({type(exc).__name__}: {exc})") from None


class _ClosedUnanswered(TransportError):
    """The NameServer closed the connection before any answer to the request came."""


class NamesrvClient:
    """One NameServer, connected on first use and kept open for the following requests."""

    def __init__(self, addr: str, timeout: float = DEFAULT_TIMEOUT, credentials: tuple[str, str] | None = None,
                 tls: ssl.SSLContext | None = None, sign_reads: bool = False, fan_out: FanOut | None = None) -> None:
        self.addr = addr
        #: the time and nonce of one request sent to every NameServer of the list (Namesrvs), shared
        self.fan_out = fan_out or FanOut()
        self.host, self.port = parse_address(addr)
        self.timeout = timeout
        #: (accessKey, secretKey): brokers' and operators' requests signed, reads only with ``sign_reads``
        #: (a server with aclReadRequired): a signed read could be replayed as another code (ACL 1.0)
        self.credentials = credentials
        self.sign_reads = sign_reads
        self.tls = tls  # None: plain TCP
        self._sock: socket.socket | None = None
        self._decoder = FrameDecoder()

    def close(self) -> None:
        if self._sock is not None:
            sock, self._sock = self._sock, None
            sock.close()
        self._decoder = FrameDecoder()

    def call(self, code: int, ext: dict[str, str] | None = None, body: bytes | None = None,
             version: int = V4_9_8) -> RemotingCommand:
        """Send one request and wait for its answer, whatever its code; ``version`` is the MQVersion
        the request says it comes from (a simulated 5.x broker says so)."""
        if self.credentials and needs_signature(code, ext or {}, self.sign_reads):
            fields = {k: v for k, v in (ext or {}).items() if v is not None}
            stamp_ms, nonce = self.fan_out.stamp(self.addr, code, fields, body)
            ext = signed_bound(fields, code, *self.credentials, body, stamp_ms, nonce)
        header: dict[str, str | None] | None = None if ext is None else dict(ext)  # (the header's own type)
        request = RemotingCommand.request(code, header, body, opaque=next(_OPAQUES), version=version, language="JAVA")
        deadline = time.monotonic() + self.timeout
        while True:
            kept = self._sock is not None
            try:
                sock = self._connect(deadline)
                sock.sendall(request.encode())
                for response in self._responses(sock, deadline, code, kept):
                    if response.opaque == request.opaque:
                        return response
            except _ClosedUnanswered:
                self.close()
                if kept:  # closed while kept (a restart, an idle close): once more on a new connection
                    continue
                raise
            except TransportError:
                self.close()
                raise
            except OSError as exc:
                self.close()
                if kept and isinstance(exc, (ConnectionResetError, BrokenPipeError)):
                    continue
                if isinstance(exc, ConnectionResetError):  # closed unanswered, our request unread
                    raise TransportError(f"{self.addr} reset the connection before answering {code_name(code)}"
                                         f"{self._closed_hint(deadline)}") from None
                raise TransportError(f"{self.addr}: {code_name(code)} failed: {exc.strerror or exc}") from None

    def call_ok(self, code: int, ext: dict[str, str] | None = None, body: bytes | None = None) -> RemotingCommand:
        """``call``, raising ResponseError unless the answer is SUCCESS."""
        response = self.call(code, ext, body)
        if response.code != ResponseCode.SUCCESS:
            raise ResponseError(self.addr, code, response)
        return response

    def _connect(self, deadline: float) -> socket.socket:
        if self._sock is not None:
            return self._sock
        try:
            sock = socket.create_connection((self.host, self.port), timeout=max(deadline - time.monotonic(), 0.001))
        except TimeoutError:
            raise TransportError(f"connect to {self.addr} timed out after {self.timeout:g} s") from None
        except socket.gaierror as exc:
            raise TransportError(f"connect to {self.addr} failed: {exc.strerror}") from None
        except OSError as exc:
            raise TransportError(f"connect to {self.addr} failed: {exc.strerror or exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls is not None:
            sock = self._handshake(sock, deadline)
        self._sock = sock
        return sock

    def _handshake(self, sock: socket.socket, deadline: float) -> ssl.SSLSocket:
        """TLS over the new connection, verifying the NameServer's certificate and address."""
        assert self.tls is not None
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            return self.tls.wrap_socket(sock, server_hostname=self.host)
        except ssl.SSLCertVerificationError as exc:
            sock.close()
            raise TransportError(f"{self.addr}: its TLS certificate is not trusted: {exc.verify_message} "
                                 "(--tls-ca FILE names the CA that signed it)") from None
        except (ssl.SSLError, ConnectionError) as exc:
            sock.close()
            raise TransportError(f"{self.addr}: TLS handshake failed: {_reason(exc)} (does the NameServer serve "
                                 "TLS? tls.server.mode permissive or enforcing; with tls.server.authClient it wants "
                                 "--tls-cert and --tls-key)") from None
        except TimeoutError:
            sock.close()
            raise TransportError(f"{self.addr}: TLS handshake timed out after {self.timeout:g} s") from None

    def _responses(self, sock: socket.socket, deadline: float, code: int, kept: bool) -> Iterator[RemotingCommand]:
        """Responses as they arrive until the deadline; requests from the server are skipped.
        A peer that answers HTTP, or stays silent until it is found to speak HTTP, is named so; one
        that closes a new connection unanswered may want TLS (a ``kept`` one was closed meanwhile)."""
        probe_at: float | None = time.monotonic() + PROBE_AFTER
        received = False
        while True:
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                raise TransportError(f"{self.addr}: no answer to {code_name(code)} within {self.timeout:g} s"
                                     f"{UNKNOWN_OUTCOME if code in CHANGES else ''}")
            if probe_at is not None and now >= probe_at:
                probe_at = None
                if self._speaks_http(min(PROBE_AFTER, remaining / 2)):
                    raise TransportError(self._http_peer())
                continue
            sock.settimeout(remaining if probe_at is None else min(remaining, probe_at - now))
            try:
                data = sock.recv(65536)
            except TimeoutError:
                continue
            probe_at = None
            if not data:
                hint = "" if kept else self._closed_hint(deadline)
                closed = TransportError if received else _ClosedUnanswered
                raise closed(f"{self.addr} closed the connection before answering {code_name(code)}{hint}")
            received = True
            try:
                commands = [RemotingCommand.decode(frame) for frame in self._decoder.feed(data)]
            except RemotingDecodeError as exc:
                if data.startswith(b"HTTP/"):
                    raise TransportError(self._http_peer()) from None
                raise TransportError(f"{self.addr}: undecodable answer to {code_name(code)}: {exc} "
                                     "(is that a RocketMQ NameServer's port?)") from None
            yield from (command for command in commands if command.is_response)

    def _closed_hint(self, deadline: float) -> str:
        """Why a new connection was closed before any answer: asked on a connection of its own.  An
        enforcing TLS port closes a plain request and completes a handshake; a server out of
        descriptors (or at maxConnections) closes both at once.  Only the first blamed TLS, always:
        under ``ulimit -n 64`` with 200 peers, namesrv-admin said 'is the NameServer enforcing TLS?'."""
        if self.tls is not None:
            return ""  # already TLS: the handshake's own errors said what they could
        wait = min(PROBE_TLS_WITHIN, max(deadline - time.monotonic(), 0.2))
        probe = ssl.create_default_context()
        probe.check_hostname = False
        probe.verify_mode = ssl.CERT_NONE  # only whether it speaks TLS, not whom
        try:
            with socket.create_connection((self.host, self.port), timeout=wait) as raw:
                with probe.wrap_socket(raw):
                    return f" ({TLS_HINT})"
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError, ConnectionError):
            return f" ({REFUSING_HINT})"
        except ssl.SSLError:  # a TLS alert: a TLS server that wants more (a client certificate)
            return f" ({TLS_HINT})"
        except OSError:  # refused now (stopped meanwhile), timed out: nothing to tell
            return ""

    def _speaks_http(self, wait: float) -> bool:
        """Whether the peer answers an HTTP request, asked on a connection of its own so the
        remoting one stays as the peer saw it (a slow NameServer closes this one as a bad frame)."""
        try:
            with socket.create_connection((self.host, self.port), timeout=wait) as probe:
                probe.sendall(HTTP_PROBE)
                return probe.recv(64).startswith(b"HTTP/")
        except OSError:
            return False

    def _http_peer(self) -> str:
        return f"{self.addr} answered HTTP, not RocketMQ remoting (is that the status/metrics port?)"


#: requests that change a NameServer's (or its controller's) state: the ACL's admin codes and an election
CHANGES = ADMIN_CODES | CONTROLLER_ADMIN_CODES | {CONTROLLER_ELECT_MASTER}
#: said of such a request sent and not answered (its answer dropped by a firewall, a NameServer
#: stopped while writing): it may have been applied, as one was, found by reading it back
UNKNOWN_OUTCOME = ": it was sent, so it may have been applied; read it back before sending it again"


class FanOut:
    """The time and nonce of NamesrvSignatures (state/acl.py), one for a request sent to every
    NameServer of a list: the same request (code, fields, body) to the next NameServer gets the
    same ones, a new request or the same one to a NameServer that had it gets new ones.  With a
    nonce of its own per NameServer, the copy a listener captured on its way to one could be
    replayed to another within the window, after a later write there: ``updateKvConfig v1`` then
    ``v2`` to both, and A's copy of v1 sent to B put v1 back on B.  With one nonce, B saw it."""

    def __init__(self) -> None:
        self._last: tuple[tuple[object, ...], int, bytes] | None = None
        self._sent_to: set[str] = set()

    def stamp(self, addr: str, code: int, fields: dict[str, str], body: bytes | None) -> tuple[int, bytes]:
        key = (code, tuple(sorted(fields.items())), bytes(body or b""))
        if self._last is None or self._last[0] != key or addr in self._sent_to:
            self._last, self._sent_to = (key, int(time.time() * 1000), secrets.token_bytes(16)), set()
        self._sent_to.add(addr)
        return self._last[1], self._last[2]


class Namesrvs:
    """The ``-n`` list: read requests go to the first NameServer that answers (a transport
    failure moves on to the next, as the Java client picks another channel), writes to each.
    ``skipped``: the failures of those a read passed over before one answered, for the operator
    (the CLI's warnings): a firewalled NameServer was a silent pause of ``--timeout`` before the
    answer, and the list's first NameServer never said unreachable."""

    def __init__(self, addrs: list[str], timeout: float = DEFAULT_TIMEOUT,
                 credentials: tuple[str, str] | None = None, tls: ssl.SSLContext | None = None,
                 sign_reads: bool = False) -> None:
        fan_out = FanOut()  # a write to each signed with one nonce: no copy of it replays to another
        self.clients = [NamesrvClient(addr, timeout, credentials, tls, sign_reads, fan_out) for addr in addrs]
        self.skipped: list[str] = []

    def __enter__(self) -> Namesrvs:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for client in self.clients:
            client.close()

    def ask_any(self, code: int, ext: dict[str, str] | None = None,
                body: bytes | None = None) -> tuple[str, RemotingCommand]:
        failures = []
        for client in self.clients:
            try:
                response = client.call_ok(code, ext, body)
            except TransportError as exc:
                failures.append(str(exc))
                continue
            self.skipped += [f"{failure} (answered by {client.addr})" for failure in failures]
            return client.addr, response
        raise TransportError("; ".join(failures))
