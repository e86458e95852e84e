"""Without ACL the HTTP side serves the status page and /api to this machine only: bound to every
interface (the image and the Kubernetes manifest do, for the probes and the scrape), a peer that is
not loopback gets /metrics, /healthz, /readyz and /rocketmq/nsaddr, and 403 with an empty body for
the rest (web/auth.py's Gate) unless httpOpenBeyondLoopback is set. Over real HTTP from this
machine's own non-loopback address."""

from __future__ import annotations

import os
import socket

import pytest
import pytest_twisted
from twisted.internet import threads

from tests.support import free_port, server_config, start_server
from tests.web.test_auth import get

PUBLIC = ("/metrics", "/healthz", "/readyz", "/rocketmq/nsaddr", "/rocketmq/nsaddr-unit")
PRIVATE = ("/", "/api/overview", "/api/kv", "/api/events", "/api/clusters", "/nosuch")


def own_address() -> str | None:
    """An address of this machine that is not loopback (the source of its default route), if any."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET: no packet is sent by a UDP connect
        except OSError:
            return None
        host = probe.getsockname()[0]
    return None if host.startswith("127.") or host == "0.0.0.0" else host


def outside_address() -> str:
    """This machine's non-loopback address; skipped without one (a failure in CI, which has one)."""
    outside = own_address()
    if outside is None:
        if os.environ.get("CI"):
            pytest.fail("no non-loopback address to reach the HTTP side from")
        pytest.skip("no non-loopback address on this machine")
    return outside


@pytest_twisted.ensureDeferred
async def test_beyond_loopback_only_the_public_paths_are_served_without_acl(tmp_path):
    outside = outside_address()
    config = server_config(tmp_path, metricsPort=free_port(), metricsBindAddress="0.0.0.0")
    service, _ = await start_server(config)
    try:
        port = (await service.web_ready).getHost().port

        def check() -> None:
            for path in PUBLIC:
                assert get(f"http://{outside}:{port}{path}")[0] == 200, path
            for path in PRIVATE:
                assert get(f"http://{outside}:{port}{path}")[::2] == (403, b""), path
                if path != "/nosuch":
                    assert get(f"http://127.0.0.1:{port}{path}")[0] == 200, path  # this machine sees all

        await threads.deferToThread(check)
    finally:
        await service.stopService()


@pytest_twisted.ensureDeferred
async def test_http_open_beyond_loopback_serves_the_page_to_every_peer_without_acl(tmp_path):
    outside = outside_address()
    config = server_config(tmp_path, metricsPort=free_port(), metricsBindAddress="0.0.0.0",
                           httpOpenBeyondLoopback="true")
    service, _ = await start_server(config)
    try:
        port = (await service.web_ready).getHost().port

        def check() -> None:
            for path in ("/api/overview", "/api/clusters", "/"):
                assert get(f"http://{outside}:{port}{path}")[0] == 200, path

        await threads.deferToThread(check)
    finally:
        await service.stopService()
