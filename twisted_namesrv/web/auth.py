"""The HTTP side under the ACL: with ``aclEnable``, every path but the public ones needs an account
of the ACL file, sent as HTTP Basic (user: accessKey, password: secretKey).

Public (no account, ever): PUBLIC_PATHS and PUBLIC_PREFIXES -- the Prometheus scrape, health
checks, and the address server's ``/rocketmq/nsaddr`` (its clients cannot authenticate, and it
reveals only NameServer addresses).  A new public endpoint is added to these lists, not to its
own resource.  ADMIN_PATHS (KV values) need an ``admin: true`` account.

A request without valid credentials gets 401 with ``WWW-Authenticate`` and an empty body, so a
browser asks for them and an unauthenticated client learns nothing else; a valid account that is
not admin gets 403 for an admin path, also empty.  Without ``aclEnable`` only the public paths
are served beyond this machine: a peer that is not loopback gets 403 (empty) for the status page
and ``/api`` (LoopbackGate), so an image or manifest that binds ``metricsBindAddress`` to every
interface for the probes and the scrape exposes nothing else; the server also warns at start.
"""

from __future__ import annotations

import hmac
import ipaddress
from typing import cast

from twisted.web import resource, server

from ..refusals import Refusals
from ..state.acl import AccessControl, Account

#: paths served to anyone, exactly as written (no trailing slash, no further segments)
PUBLIC_PATHS = frozenset({b"/metrics", b"/healthz", b"/readyz", b"/rocketmq/nsaddr"})
#: public path families: the prefix and one more path segment (``/rocketmq/nsaddr-UNIT``)
PUBLIC_PREFIXES = (b"/rocketmq/nsaddr-",)
#: paths that need an admin account: values an operator writes (KV); below them too
ADMIN_PATHS = frozenset({b"/api/kv"})
REALM = "twisted-namesrv"


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
        request.setHeader(b"cache-control", b"no-store")
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


def host_of(header: bytes) -> str:
    """The host of a Host header (``name``, ``name:port``, ``[v6]:port``), lower case."""
    text = header.decode("latin-1").strip().lower()
    if text.startswith("["):
        return text[1:].partition("]")[0]
    return text.rpartition(":")[0] if text.count(":") == 1 else text


class Gate(resource.Resource):
    """The site's root: what the router will see is decided here, once, for every request.

    The path is normalized (``normalized``) and the request rewritten to it, so the router serves
    exactly the path that was authorized: ``/api/%6bv``, ``/api/./kv``, ``//api//kv`` and
    ``/x/../api/kv`` are all ``/api/kv``, for the account check and for the router.  With
    ``loopback_only`` (the listener is bound to loopback) a Host header that names anything but
    this machine (``localhost``, a loopback address) is refused: a web page whose name was rebound
    to 127.0.0.1 (DNS rebinding) must not read the status page through the operator's browser.
    With an ACL, every path but the public ones needs an account, KV values an admin one."""

    def __init__(self, inner: resource.Resource, acl: AccessControl | None, refusals: Refusals,
                 loopback_only: bool = False, open_beyond_loopback: bool = False) -> None:
        super().__init__()
        self.open_beyond_loopback = open_beyond_loopback
        self.inner = inner
        self.acl = acl
        self.refusals = refusals
        self.loopback_only = loopback_only

    def getChildWithDefault(self, path: bytes, request: server.Request) -> resource.IResource:
        segments = normalized([path, *request.postpath])
        request.prepath[-1:] = segments[:1]
        request.postpath = segments[1:]
        routed = b"/" + b"/".join(segments)
        host = request.getHeader(b"host")
        if self.loopback_only and host is not None and not is_loopback(host_of(host)):
            return self._refused(request, 403, "host", "Host {named} is not this machine (the listener is "
                                 "bound to loopback)", named=host.decode("latin-1")[:100])
        if self.acl is None and not self.open_beyond_loopback and not is_public(routed) \
                and not is_loopback_peer(request):
            return self._refused(request, 403, "not_loopback", "{path} is served to this machine only "
                                 "(aclEnable=false)", path=routed.decode("utf-8", "replace")[:200])
        if self.acl is not None and not is_public(routed):
            account = self.account(request)
            if account is None:
                return self._refused(request, 401, "unauthenticated", "no valid account for {path}",
                                     path=routed.decode("utf-8", "replace")[:200])
            if is_admin_path(routed) and not account.admin:
                return self._refused(request, 403, "not_admin", "{path} needs an admin account, {account} is not",
                                     path=routed.decode("utf-8", "replace")[:200], account=account.access_key)
        return self.inner.getChildWithDefault(segments[0], request)

    def _refused(self, request: server.Request, status: int, reason: str, message: str,
                 **fields: object) -> resource.IResource:
        address = request.getClientAddress()
        peer = f"{getattr(address, 'host', '?')}:{getattr(address, 'port', '?')}"
        self.refusals("http", reason, peer, message + " ({status})", status=status, **fields)
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
            loopback_only: bool = False, open_beyond_loopback: bool = False) -> resource.Resource:
    """``root`` behind the Gate: normalized paths always, the Host check when bound to loopback,
    the ACL's accounts when ACL is on, else the status page and /api for loopback peers only
    (for every peer with ``open_beyond_loopback``: httpOpenBeyondLoopback)."""
    return Gate(root, acl, refusals, loopback_only, open_beyond_loopback)
