"""DNS rebinding on every bind: the HTTP side serves a request only when its Host names this server
(state/hosts.py), whatever metricsBindAddress says, and trusts a loopback peer without ACL only with
a loopback Host. The image and the manifest bind 0.0.0.0: there, before, ``Host: attacker.example``
from 127.0.0.1 read /api/kv. Over real HTTP, with raw request lines (no client normalizes them)."""

from __future__ import annotations

import re
import socket

import pytest
import pytest_twisted
from twisted.internet import reactor, threads
from twisted.logger import globalLogPublisher

from tests.support import free_port, server_config
from twisted_namesrv.service import NamesrvService
from twisted_namesrv.state.config import ConfigError
from twisted_namesrv.state.hosts import AllowedHosts, is_loopback_host, parse_host

#: names a page an attacker serves could carry, rebound to this server (none may be served)
FOREIGN = ("attacker.example", "attacker.example:{port}", "attacker.example.", "127.0.0.1.attacker.example",
           "localhost.attacker.example", "127.0.0.1.nip.io", "127.1", "0x7f.0.0.1",
           "2130706433", "0177.0.0.1", "10.0.0.1", "10.0.0.1:{port}", "[fe80::1]", "namesrv.evil.example")
#: what names this machine (a loopback Host also gets the loopback trust)
LOOPBACK = ("127.0.0.1:{port}", "127.0.0.1", "localhost", "localhost:{port}", "LOCALHOST", "localhost.",
            "127.0.0.1.", "127.0.0.2", "[::1]", "[::1]:{port}", "[::ffff:127.0.0.1]:{port}")
#: malformed Host values: 400, counted as host
MALFORMED = ("user@localhost", "localhost:", "localhost:99999", "localhost:x", "[::1]x", "[127.0.0.1]", "a b",
             "local\\host", "localhost/x", "..", "localhost..", "[::1].attacker.example")


def test_host_values_as_read():
    assert parse_host("LocalHost.:9877") == parse_host("localhost:9877")
    assert parse_host("[::1]:80").port == 80 and is_loopback_host(parse_host("[::1]"))
    assert is_loopback_host(parse_host("[::ffff:127.0.0.1]")) and is_loopback_host(parse_host("127.0.0.1."))
    for text in ("127.1", "0x7f.0.0.1", "127.0.0.1.attacker.example", "localhost.attacker.example"):
        assert parse_host(text).address is None and not is_loopback_host(parse_host(text)), text
    for text in MALFORMED:
        assert parse_host(text) is None, text


def test_the_allowed_hosts_are_the_configured_names_and_addresses():
    allowed = AllowedHosts.from_values("0.0.0.0", "ns.example.org:9876", ["namesrv-0.namesrv:9876;10.0.0.9:9876"],
                                       "box", "namesrv, *.namesrv.ops.svc, 10.96.0.0/12, [fd00::7]")
    for text in ("ns.example.org", "namesrv-0.namesrv:9877", "10.0.0.9", "box", "BOX.", "namesrv",
                 "a.namesrv.ops.svc", "10.96.3.4:9877", "[fd00::7]", "localhost", "127.0.0.1"):
        assert allowed.allows(parse_host(text)), text
    for text in ("namesrv.ops.svc", "evil.example", "10.0.0.8", "box.evil.example", "namesrv.attacker.example"):
        assert not allowed.allows(parse_host(text)), text
    assert allowed.allows(parse_host("192.0.2.7:9877"), local="192.0.2.7")  # the address the connection reached
    assert allowed.allows(parse_host("192.0.2.7"), local="::ffff:192.0.2.7")  # ... on a dual-stack bind
    assert not allowed.allows(parse_host("192.0.2.8"), local="192.0.2.7")
    bound = AllowedHosts.from_values("192.0.2.5")
    assert bound.allows(parse_host("192.0.2.5:9877")) and not bound.allows(parse_host("192.0.2.6"))


def test_a_bad_allowed_host_stops_the_start_naming_the_key(tmp_path):
    for bad in ("10.0.0.0/33", "*.", "a b", "host:80", "*x.example", "a..b"):
        with pytest.raises(ConfigError, match="^httpAllowedHosts: "):
            server_config(tmp_path, httpAllowedHosts=bad)


def raw(port: int, request: bytes) -> tuple[int, bytes]:
    """One request as written (request line and headers), its status and body."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(request)
        data = b""
        while chunk := connection.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def get(port: int, path: str, host: str | None) -> tuple[int, bytes]:
    header = f"Host: {host}\r\n" if host is not None else ""
    return raw(port, f"GET {path} HTTP/1.1\r\n{header}Connection: close\r\n\r\n".encode("latin-1"))


@pytest_twisted.async_yield_fixture
async def wildcard_site(tmp_path):
    """A server configured as the image and the manifest are, metricsBindAddress=0.0.0.0, its HTTP
    side listening on 127.0.0.1 (no test listens beyond this machine), a KV value in place."""
    config = server_config(tmp_path, metricsPort=free_port(), metricsBindAddress="0.0.0.0",
                           httpAllowedHosts="namesrv.example")
    (tmp_path / "kvConfig.json").write_text('{"configTable":{"ns":{"k":"kv-value"}}}')
    service = NamesrvService.from_config(config, reactor)
    service.web.interface = "127.0.0.1"
    events: list[dict] = []
    globalLogPublisher.addObserver(events.append)
    service.startService()
    try:
        site = await service.web_ready
        yield site.getHost().port, events
    finally:
        globalLogPublisher.removeObserver(events.append)
        await service.stopService()


@pytest_twisted.ensureDeferred
async def test_on_every_interface_a_foreign_host_is_refused_on_every_path(wildcard_site):
    port, events = wildcard_site

    def check() -> None:
        for template in FOREIGN:
            host = template.format(port=port)
            for path in ("/api/kv", "/", "/api/overview", "/metrics", "/healthz", "/rocketmq/nsaddr"):
                assert get(port, path, host) == (403, b""), (host, path)
        for host in MALFORMED:
            assert get(port, "/api/kv", host) == (400, b""), host
        for template in LOOPBACK:
            host = template.format(port=port)
            status, body = get(port, "/api/kv", host)
            assert status == 200 and b"kv-value" in body, host
        assert get(port, "/api/kv", None)[0] == 200  # no Host: HTTP/1.0 tools; browsers always send one

    await threads.deferToThread(check)
    _, metrics = await threads.deferToThread(get, port, "/metrics", "127.0.0.1")
    counted = int(re.search(rb'namesrv_refusals_total\{listener="http",reason="host"\} (\d+)', metrics).group(1))
    assert counted == len(FOREIGN) * 6 + len(MALFORMED)
    refused = [e for e in events if e.get("refused") == "host"]
    assert refused[0]["log_level"].name == "warn" and refused[0]["peer"].startswith("127.0.0.1:")
    assert refused[0]["named"] == "attacker.example" and "httpAllowedHosts" in refused[0]["log_format"]


@pytest_twisted.ensureDeferred
async def test_loopback_trust_needs_a_loopback_host(wildcard_site):
    """A configured name (or this machine's hostname) is served the public paths, but the status page
    and /api without ACL only with a loopback Host: the name proves nothing about where the page is."""
    port, events = wildcard_site

    def check() -> None:
        for host in ("namesrv.example", f"namesrv.example:{port}", socket.gethostname(), f"127.0.0.1:{port}"):
            assert get(port, "/metrics", host)[0] == 200, host
        for host in ("namesrv.example", socket.gethostname()):
            for path in ("/api/kv", "/", "/api/clusters"):
                assert get(port, path, host) == (403, b""), (host, path)

    await threads.deferToThread(check)
    refused = [e for e in events if e.get("refused") == "host"]
    assert len(refused) == 6 and "loopback Host" in refused[0]["log_format"]


@pytest_twisted.ensureDeferred
async def test_an_absolute_uri_is_its_own_host(wildcard_site):
    """``GET http://attacker.example/api/kv``: the URI's authority stands for Host (RFC 9112), and its path
    is what is routed; two Host headers are refused."""
    port, _ = wildcard_site

    def check() -> None:
        for authority in ("attacker.example", f"attacker.example:{port}", "127.0.0.1.attacker.example"):
            for scheme in ("http", "HTTP", "https"):
                request = f"GET {scheme}://{authority}/api/kv HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                assert raw(port, request.encode()) == (403, b""), (scheme, authority)
        request = (f"GET http://127.0.0.1:{port}/api/%6bv HTTP/1.1\r\nHost: attacker.example\r\n"
                   "Connection: close\r\n\r\n")
        status, body = raw(port, request.encode())
        assert status == 200 and b"kv-value" in body
        two = b"GET /api/kv HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: attacker.example\r\nConnection: close\r\n\r\n"
        assert raw(port, two) == (400, b"")

    await threads.deferToThread(check)
