"""A start with an open-file limit below maxConnections warns, naming both and the fix: past the
limit accept() fails with EMFILE and peers are dropped unanswered, which nothing said before."""

from __future__ import annotations

import resource

import pytest_twisted
from twisted.logger import globalLogPublisher

from tests.support import server_config, start_server
from twisted_namesrv.budget import fd_limit_warning


def test_the_warning_names_the_limit_the_key_and_the_fix(monkeypatch):
    monkeypatch.setattr(resource, "getrlimit", lambda which: (1024, 4096))
    text = fd_limit_warning(10_000)
    assert text.startswith("open-file limit (ulimit -n) is 1024, below maxConnections=10000 + 64")
    assert "ulimit -n 10064" in text and "LimitNOFILE=" in text and "hard limit 4096" in text
    assert fd_limit_warning(960) is None  # 960 + 64 fits
    assert fd_limit_warning(0) is None  # no connection limit: nothing to compare
    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert fd_limit_warning(10**9) is None


@pytest_twisted.ensureDeferred
async def test_a_start_below_the_limit_warns(tmp_path):
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    events: list[dict] = []
    globalLogPublisher.addObserver(events.append)
    try:
        service, _ = await start_server(server_config(tmp_path, maxConnections=soft + 1))
        await service.stopService()
    finally:
        globalLogPublisher.removeObserver(events.append)
    (warning,) = [e for e in events if "open-file limit" in str(e.get("warning", ""))]
    assert warning["log_level"].name == "warn" and f"maxConnections={soft + 1}" in warning["warning"]
