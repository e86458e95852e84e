"""The status page over real HTTP, and in headless Chromium: it loads, shows a registered
broker, and topic search finds a topic's route.  The screenshot is kept as an artifact."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor, utils
from twisted.web.client import Agent, readBody

from tests.support import connect, free_port, server_config, start_server
from twisted_namesrv.protocol.register import RegisterBrokerBody, TopicConfig, encode_register_body
from twisted_namesrv.protocol.route import DataVersion
from twisted_namesrv.remoting import RemotingCommand, RequestCode, ResponseCode
from twisted_namesrv.remoting.codes import V5_3_3

BROKER = "127.0.0.1:10911"
ARTIFACTS = Path(__file__).resolve().parents[2] / "build" / "artifacts"


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (tools/setup-env.sh installs it)")
        pytest.skip("chromium is not installed")
    return found


@pytest_twisted.inlineCallbacks
def served_with_a_broker(tmp_path):
    """A service with its status page, and a broker registered over a connection kept open."""
    service, _ = yield start_server(server_config(tmp_path, metricsPort=free_port()))
    web = yield service.web_ready
    broker = yield connect(service.port.getHost().port)
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), {t: TopicConfig(t) for t in ("TopicTest", "T2")}),
                                False, True)
    ext = {"clusterName": "DefaultCluster", "brokerAddr": BROKER, "brokerName": "broker-a", "brokerId": "0"}
    request = RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, opaque=1, version=V5_3_3)
    answer = yield broker.call(request)
    assert answer.code == ResponseCode.SUCCESS
    return service, broker, f"http://127.0.0.1:{web.getHost().port}"


@pytest_twisted.inlineCallbacks
def stop(service, broker):
    broker.transport.loseConnection()
    yield broker.closed
    yield service.stopService()


@pytest_twisted.inlineCallbacks
def get(url: str):
    response = yield Agent(reactor).request(b"GET", url.encode())
    body = yield readBody(response)
    return response.code, response.headers.getRawHeaders(b"content-type")[0], body


@pytest_twisted.inlineCallbacks
def test_metrics_api_and_page_over_http(tmp_path):
    service, broker, base = yield served_with_a_broker(tmp_path)
    try:
        code, kind, body = yield get(f"{base}/metrics")
        assert code == 200 and kind.startswith(b"text/plain")
        assert b"namesrv_brokers_live 1.0" in body and b"process_resident_memory_bytes" in body
        code, kind, body = yield get(f"{base}/api/overview")
        assert code == 200 and kind == b"application/json" and json.loads(body)["brokers_live"] == 1
        code, _, body = yield get(f"{base}/api/route?topic=TopicTest")
        assert code == 200 and json.loads(body)["route"]["brokerDatas"][0]["brokerAddrs"] == {"0": BROKER}
        for missing in ("/api/nothing", "/api/route?topic=missing"):
            code, _, _ = yield get(base + missing)
            assert code == 404
        code, kind, body = yield get(base + "/")
        assert code == 200 and kind.startswith(b"text/html") and b"<title>NameServer status</title>" in body
    finally:
        yield stop(service, broker)


@pytest_twisted.inlineCallbacks
def test_status_page_in_headless_chromium(tmp_path):
    browser = chromium()
    service, broker, base = yield served_with_a_broker(tmp_path)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,900",
             "--virtual-time-budget=5000", f"--user-data-dir={tmp_path / 'profile'}"]
    page = f"{base}/?q=TopicTest"  # the search box takes ?q=, as if typed
    try:
        dom, _, status = yield utils.getProcessOutputAndValue(browser, [*flags, "--dump-dom", page], env=os.environ)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        yield utils.getProcessOutputAndValue(
            browser, [*flags, f"--screenshot={ARTIFACTS / 'status-page.png'}", page], env=os.environ)
    finally:
        yield stop(service, broker)
    text = dom.decode()
    assert status == 0, text[-2000:]
    assert f'data-addr="{BROKER}"' in text and "V5_3_3" in text and "DefaultCluster" in text
    assert "1 match" in text and '"queueDatas"' in text and '"brokerName": "broker-a"' in text
    assert re.search(r"<td[^>]*>\d+ s ago</td>", text), "no heartbeat age: tick() did not run"
    assert (ARTIFACTS / "status-page.png").stat().st_size > 10_000
