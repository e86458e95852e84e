"""The HTTP side under the ACL: with ``aclEnable``, every path but the public ones needs an account
of the ACL file, sent as HTTP Basic (user: accessKey, password: secretKey).

Public (no account, ever): PUBLIC_PATHS and PUBLIC_PREFIXES -- the Prometheus scrape, health
checks, and the address server's ``/rocketmq/nsaddr`` (its clients cannot authenticate, and it
reveals only NameServer addresses).  A new public endpoint is added to these lists, not to its
own resource.  ADMIN_PATHS (KV values) need an ``admin: true`` account.

A request without valid credentials gets 401 with ``WWW-Authenticate`` and an empty body, so a
browser asks for them and an unauthenticated client learns nothing else; a valid account that is
not admin gets 403 for an admin path, also empty.  Without ``aclEnable`` only the public paths
are served beyond this machine: a peer that is not loopback, or a loopback peer whose Host is not
loopback, gets 403 (empty) for the status page and ``/api`` (the Gate), so an image or manifest
that binds ``metricsBindAddress`` to every interface for the probes and the scrape exposes nothing
else; the server also warns at start.  On every bind and every path, a Host that names neither
this machine nor a configured name is refused (DNS rebinding: state/hosts.py).  Every answer,
whatever its path, says ``Cache-Control: no-store`` (CACHE_CONTROL: the one rule, set by the Gate).
"""

from __future__ import annotations

import hmac
import ipaddress
from typing import cast
from urllib.parse import unquote_to_bytes as unquote

from twisted.web import resource, server

from ..refusals import Refusals, peer_text
from ..state.acl import AccessControl, Account
from ..state.hosts import AllowedHosts, is_loopback_host, parse_host

#: paths served to anyone, exactly as written (no trailing slash, no further segments)
PUBLIC_PATHS = frozenset({b"/metrics", b"/healthz", b"/readyz", b"/rocketmq/nsaddr"})
#: public path families: the prefix and one more path segment (``/rocketmq/nsaddr-UNIT``)
PUBLIC_PREFIXES = (b"/rocketmq/nsaddr-",)
#: paths that need an admin account: values an operator writes (KV); below them too
ADMIN_PATHS = frozenset({b"/api/kv"})
REALM = "twisted-namesrv"
#: every answer's Cache-Control, set by the Gate, the one place (no resource sets its own).  Per
#: endpoint, the same decision: ``/api/*`` and the status page (its first answers inline) hold
#: broker, client and peer addresses and, for an admin, KV values; ``/metrics`` names brokers by
#: their addresses; ``/readyz`` names broker groups; ``/rocketmq/nsaddr`` is the NameServers'
#: addresses; a refusal or a 404 says what this server serves.  None of it may be kept by a browser's
#: disk cache or a proxy between (``no-cache`` allowed storing it, revalidated; this server gives no
#: validator to revalidate with, so storing bought nothing), and an old copy of any is a wrong answer.
CACHE_CONTROL = b"no-store"


def is_public(path: bytes) -> bool:
    return path in PUBLIC_PATHS or any(
        path.startswith(prefix) and len(path) > len(prefix) and b"/" not in path[len(prefix):]
        for prefix in PUBLIC_PREFIXES)


def is_admin_path(path: bytes) -> bool:
    return any(path == admin or path.startswith(admin + b"/") for admin in ADMIN_PATHS)


def is_loopback(host: str) -> bool:
    """Whether a bind address serves this machine only."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


class Refusal(resource.Resource):
    """401 (ask for credentials) or 403 (not an admin): status and headers, nothing else."""

    isLeaf = True

    def __init__(self, status: int) -> None:
        super().__init__()
        self.status = status

    def render(self, request: server.Request) -> bytes:
        request.setResponseCode(self.status)
        if self.status == 401:
            request.setHeader(b"www-authenticate", f'Basic realm="{REALM}", charset="UTF-8"'.encode())
        request.setHeader(b"content-length", b"0")
        return b""


class ServerWide(resource.Resource):
    """The request target ``*`` (asterisk form), past the Gate: ``OPTIONS *`` says which methods the
    server serves (200, ``Allow: GET, HEAD``; RFC 9110 9.3.7), any other method 405 (``*`` is for
    OPTIONS only), as Twisted answered them, but only once the Gate let the request in: Twisted
    answered them before any resource, so ``OPTIONS *`` was 200 under ACL without an account, to
    any Host, without Cache-Control, and no refusal was said (web/connections.py: HeadRequest)."""

    isLeaf = True

    def render(self, request: server.Request) -> bytes:
        if request.method == b"OPTIONS":
            request.setHeader(b"allow", b"GET, HEAD")
        else:
            request.setResponseCode(405)
            request.setHeader(b"allow", b"OPTIONS")
        request.setHeader(b"content-length", b"0")
        return b""


def refusal(status: int) -> resource.IResource:
    return cast(resource.IResource, Refusal(status))  # a Resource provides IResource (zope, unseen by mypy)


def normalized(segments: list[bytes]) -> list[bytes]:
    """Path segments (each already percent-decoded, as Twisted's router takes them) with dot
    segments resolved and empty ones dropped, as RFC 3986 and every proxy and browser read them;
    a trailing slash stays (``/api/kv/`` is not ``/api/kv`` to the router).  Case is kept: the
    router matches children exactly."""
    out: list[bytes] = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == b"..":
            if out:
                out.pop()
        elif segment not in (b".", b""):
            out.append(segment)
            continue
        if last:
            out.append(b"")
    return out or [b""]


def absolute_form(request: server.Request) -> tuple[bytes, list[bytes]] | None:
    """For a request line with an absolute URI (``GET http://host/path``, RFC 9112 3.2.2): its
    authority, which stands for the Host header, and its path's segments, percent-decoded as
    Twisted decodes a path (Twisted splits such a line as if it were a path); None otherwise."""
    path = request.path
    scheme, sep, rest = path.partition(b"://")
    if not sep or scheme.lower() not in (b"http", b"https"):
        return None
    authority, slash, tail = rest.partition(b"/")
    return authority, [unquote(segment) for segment in (slash + tail)[1:].split(b"/")]


class Gate(resource.Resource):
    """The site's root: what the router will see is decided here, once, for every request.

    The path is normalized (``normalized``) and the request rewritten to it, so the router serves
    exactly the path that was authorized: ``/api/%6bv``, ``/api/./kv``, ``//api//kv`` and
    ``/x/../api/kv`` are all ``/api/kv``, for the account check and for the router (an absolute URI
    on the request line is its path, its authority the Host).  On every bind, the Host must name
    this server (state/hosts.py: ``AllowedHosts``): a web page whose name was rebound to this
    server's address or to 127.0.0.1 (DNS rebinding) must not read the status page, the routes or
    the KV values through the operator's browser.  Without ACL the status page and /api are this
    machine's only: a loopback peer with a loopback Host (or none).  With an ACL, every path but
    the public ones needs an account, KV values an admin one."""

    def __init__(self, inner: resource.Resource, acl: AccessControl | None, refusals: Refusals,
                 hosts: AllowedHosts | None = None, open_beyond_loopback: bool = False) -> None:
        super().__init__()
        self.open_beyond_loopback = open_beyond_loopback
        self.inner = inner
        self.acl = acl
        self.refusals = refusals
        self.hosts = hosts or AllowedHosts()

    def getChildWithDefault(self, path: bytes, request: server.Request) -> resource.IResource:
        request.setHeader(b"cache-control", CACHE_CONTROL)  # every answer, refusals included
        absolute = absolute_form(request)
        server_wide = request.path == b"*"  # ``OPTIONS *`` (RFC 9110 9.3.7): the server, no path of it
        segments = normalized(absolute[1] if absolute else [path, *request.postpath])
        request.prepath[-1:] = segments[:1]
        request.postpath = segments[1:]
        routed = b"*" if server_wide else b"/" + b"/".join(segments)
        headers = request.requestHeaders.getRawHeaders(b"host") or []
        written = absolute[0] if absolute else headers[0] if len(headers) == 1 else None
        host = parse_host(written.decode("latin-1")) if written is not None else None
        if len(headers) > 1 and absolute is None:
            return self._refused(request, 400, "host", "{count} Host headers", count=len(headers))
        if written is not None and host is None:
            return self._refused(request, 400, "host", "Host {named} is not a host[:port]", named=_shown(written))
        if host is not None and not self.hosts.allows(host, getattr(request.getHost(), "host", None)):
            return self._refused(request, 403, "host", "Host {named} names neither this machine nor a name or "
                                 "address configured for it (httpAllowedHosts)", named=_shown(written))
        if self.acl is None and not self.open_beyond_loopback and not is_public(routed):
            if not is_loopback_peer(request):
                return self._refused(request, 403, "not_loopback", "{path} is served to this machine only "
                                     "(aclEnable=false)", path=routed.decode("utf-8", "replace")[:200])
            if host is not None and not is_loopback_host(host):
                return self._refused(request, 403, "host", "{path} is served to this machine only (aclEnable="
                                     "false), asked for with Host {named}: only a loopback Host proves the page "
                                     "is this machine's", path=routed.decode("utf-8", "replace")[:200],
                                     named=_shown(written))
        if self.acl is not None and not is_public(routed):
            credentials = request.requestHeaders.getRawHeaders(b"authorization") or []
            if len(credentials) > 1:  # one account a request: a proxy checking the first and this the last differ
                return self._refused(request, 400, "unauthenticated", "{count} Authorization headers for {path}",
                                     count=len(credentials), path=routed.decode("utf-8", "replace")[:200])
            account = self.account(request)
            if account is None:
                return self._refused(request, 401, "unauthenticated", "no valid account for {path}",
                                     path=routed.decode("utf-8", "replace")[:200])
            if is_admin_path(routed) and not account.admin:
                return self._refused(request, 403, "not_admin", "{path} needs an admin account, {account} is not",
                                     path=routed.decode("utf-8", "replace")[:200], account=account.access_key)
        if server_wide:
            return cast(resource.IResource, ServerWide())
        return self.inner.getChildWithDefault(segments[0], request)

    def _refused(self, request: server.Request, status: int, reason: str, message: str,
                 **fields: object) -> resource.IResource:
        address = request.getClientAddress()
        self.refusals("http", reason, peer_text(address), message + " ({status})", status=status, **fields)
        return refusal(status)

    def account(self, request: server.Request) -> Account | None:
        """The account whose accessKey and secretKey the request's Basic credentials are, or None."""
        assert self.acl is not None
        try:
            access_key, secret_key = request.getUser().decode("utf-8"), request.getPassword().decode("utf-8")
        except UnicodeDecodeError:
            return None
        account = self.acl.accounts.get(access_key)
        if account is None or not hmac.compare_digest(secret_key.encode(), account.secret_key.encode()):
            return None
        return account


def _shown(header: bytes) -> str:
    """A Host as the log shows it: at most 100 characters, escapes for what is not printable ASCII."""
    return header[:100].decode("latin-1").encode("unicode_escape").decode("ascii")


def is_loopback_peer(request: server.Request) -> bool:
    """Whether the request's connection comes from this machine (IPv4-mapped loopback included);
    a unix socket peer is local too."""
    host = getattr(request.getClientAddress(), "host", None)
    if host is None:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def guarded(root: resource.Resource, acl: AccessControl | None, refusals: Refusals,
            hosts: AllowedHosts | None = None, open_beyond_loopback: bool = False) -> resource.Resource:
    """``root`` behind the Gate: normalized paths and the Host check always, the ACL's accounts when
    ACL is on, else the status page and /api for loopback peers only (for every peer with
    ``open_beyond_loopback``: httpOpenBeyondLoopback)."""
    return Gate(root, acl, refusals, hosts, open_beyond_loopback)
