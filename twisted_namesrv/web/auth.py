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

from ..state.acl import AccessControl, Account

#: paths served to anyone, exactly as written (no trailing slash, no further segments)
PUBLIC_PATHS = frozenset({b"/metrics", b"/healthz", b"/readyz", b"/rocketmq/nsaddr"})
#: public path families: the prefix and one more path segment (``/rocketmq/nsaddr-UNIT``)
PUBLIC_PREFIXES = (b"/rocketmq/nsaddr-",)
#: paths that need an admin account: values an operator writes (KV)
ADMIN_PATHS = frozenset({b"/api/kv"})
REALM = "twisted-namesrv"


def is_public(path: bytes) -> bool:
    return path in PUBLIC_PATHS or any(
        path.startswith(prefix) and len(path) > len(prefix) and b"/" not in path[len(prefix):]
        for prefix in PUBLIC_PREFIXES)


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


class AccountGate(resource.Resource):
    """The site's root behind the ACL file's accounts (the first path segment passes here)."""

    def __init__(self, inner: resource.Resource, acl: AccessControl) -> None:
        super().__init__()
        self.inner = inner
        self.acl = acl

    def getChildWithDefault(self, path: bytes, request: server.Request) -> resource.IResource:
        if is_public(request.path):
            return self.inner.getChildWithDefault(path, request)
        account = self.account(request)
        if account is None:
            return refusal(401)
        if request.path in ADMIN_PATHS and not account.admin:
            return refusal(403)
        return self.inner.getChildWithDefault(path, request)

    def account(self, request: server.Request) -> Account | None:
        """The account whose accessKey and secretKey the request's Basic credentials are, or None."""
        try:
            access_key, secret_key = request.getUser().decode("utf-8"), request.getPassword().decode("utf-8")
        except UnicodeDecodeError:
            return None
        account = self.acl.accounts.get(access_key)
        if account is None or not hmac.compare_digest(secret_key.encode(), account.secret_key.encode()):
            return None
        return account


class LoopbackGate(resource.Resource):
    """Without ACL: the public paths for anyone, the rest for loopback peers only (403 otherwise)."""

    def __init__(self, inner: resource.Resource) -> None:
        super().__init__()
        self.inner = inner

    def getChildWithDefault(self, path: bytes, request: server.Request) -> resource.IResource:
        if is_public(request.path) or is_loopback_peer(request):
            return self.inner.getChildWithDefault(path, request)
        return refusal(403)


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


def guarded(root: resource.Resource, acl: AccessControl | None) -> resource.Resource:
    """``root`` behind the ACL's accounts when ACL is on, else behind the loopback gate."""
    return LoopbackGate(root) if acl is None else AccountGate(root, acl)
