"""The status page over real HTTP, and in headless Chromium on a night with trouble: brokers
that expired, closed, went idle and unregistered stay greyed with why and when, a broker past half
its heartbeat timeout is highlighted, repeated "changed" events fold into one, the route is a
table, every time is a date with its zone.  The server's clock is a task.Clock (sockets are real),
so every age and countdown the page shows is known.  The screenshot is kept as an artifact."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import defer, reactor, task, utils
from twisted.web.client import Agent, readBody

from tests.support import TIMEOUT, ClockedReactor, connect, free_port, server_config
from twisted_namesrv import __version__
from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body
from twisted_namesrv.bodies.route import DataVersion
from twisted_namesrv.remoting import RemotingCommand, RequestCode, ResponseCode
from twisted_namesrv.remoting.codes import V5_3_3
from twisted_namesrv.service import NamesrvService

CLUSTER = "DefaultCluster"
START = datetime(2026, 11, 25, 1, 58, tzinfo=UTC).timestamp()  # 02:58 in Berlin, where the browser is
START_MS = int(START * 1000)
ARTIFACTS = Path(__file__).resolve().parents[2] / "build" / "artifacts"


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (tools/setup-env.sh installs it)")
        pytest.skip("chromium is not installed")
    return found


class Night:
    """A started service on a fake clock, and brokers registering over their own connections."""

    def __init__(self, tmp_path, **values) -> None:
        self.clock = task.Clock()
        self.clock.advance(START)
        self.service = NamesrvService.from_config(server_config(tmp_path, metricsPort=free_port(), **values),
                                      ClockedReactor(self.clock))
        self.clients = []

    @defer.inlineCallbacks
    def start(self):
        self.service.startService()
        port = yield self.service.port_ready
        web = yield self.service.web_ready
        self.port = port.getHost().port
        self.base = f"http://127.0.0.1:{web.getHost().port}"

    def until(self, seconds_since_start: float) -> None:
        """Advance second by second, so the scan and idle timers due on the way fire in order."""
        while self.clock.seconds() < START + seconds_since_start:
            self.clock.advance(min(1.0, START + seconds_since_start - self.clock.seconds()))

    @defer.inlineCallbacks
    def broker(self, name: str, addr: str, broker_id: int = 0, topics=("TopicTest", "T2"), perm: int = 6,
               **ext):
        client = yield connect(self.port)
        self.clients.append(client)
        yield self.register(client, name, addr, broker_id, topics, perm, 1, **ext)
        return client

    @defer.inlineCallbacks
    def register(self, client, name: str, addr: str, broker_id: int = 0, topics=("TopicTest", "T2"), perm: int = 6,
                 counter: int = 1, **ext):
        body = RegisterBrokerBody(DataVersion(START_MS, counter), {t: TopicConfig(t, perm=perm) for t in topics})
        ext = {"clusterName": CLUSTER, "brokerAddr": addr, "brokerName": name, "brokerId": str(broker_id), **ext}
        request = RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, encode_register_body(body, False, True),
                                          opaque=counter, version=V5_3_3)
        answer = yield client.call(request)
        assert answer.code == ResponseCode.SUCCESS

    def next_event(self, kind: str) -> defer.Deferred:
        """Fires when the service records a route event of ``kind``: a connection's end reaches the
        server in the reactor's own time, not the test's."""
        seen: defer.Deferred = defer.Deferred()

        def watch(event_kind: str, info: dict) -> None:
            if event_kind == kind and not seen.called:
                seen.callback(info)
        self.service.state.routes.listen(watch)  # after the service's own listeners
        return seen.addTimeout(TIMEOUT, reactor)

    @defer.inlineCallbacks
    def stop(self):
        for client in self.clients:
            client.transport.loseConnection()
        yield defer.DeferredList([client.closed for client in self.clients])
        yield self.service.stopService()


@pytest_twisted.inlineCallbacks
def night_of_trouble(tmp_path):
    """Two minutes in which broker-a's slave stops heartbeating and four brokers leave, one each way."""
    night = Night(tmp_path)
    yield night.start()
    master = yield night.broker("broker-a", "127.0.0.1:10911")
    slave = yield night.broker("broker-a", "127.0.0.1:10921", 1)
    read_only = yield night.broker("broker-b", "127.0.0.1:10931", perm=4)
    yield night.broker("broker-c", "127.0.0.1:10941", topics=("T3", "T3-retry"))  # never speaks again: idle
    leaving = yield night.broker("broker-d", "127.0.0.1:10951", topics=("T4", "T4-retry"))
    dropped = yield night.broker("broker-e", "127.0.0.1:10961", topics=("T5", "T5-retry"))
    yield night.broker("broker-f", "127.0.0.1:10971", topics=("T6", "T6-retry"), heartbeatTimeoutMillis="30000")

    night.until(10)
    ext = {"clusterName": CLUSTER, "brokerAddr": "127.0.0.1:10951", "brokerName": "broker-d", "brokerId": "0"}
    answer = yield leaving.call(RemotingCommand.request(RequestCode.UNREGISTER_BROKER, ext, opaque=9, version=V5_3_3))
    assert answer.code == ResponseCode.SUCCESS
    night.until(20)
    closed = night.next_event("closed")
    dropped.transport.loseConnection()
    yield closed
    night.until(40)  # broker-f expired at the scan of +35 s
    for counter in (2, 3):
        yield night.register(slave, "broker-a", "127.0.0.1:10921", 1, counter=counter)
    night.until(100)
    yield night.register(read_only, "broker-b", "127.0.0.1:10931", perm=4)
    night.until(115)
    for counter in (2, 3, 4):
        yield night.register(master, "broker-a", "127.0.0.1:10911", counter=counter)
    idle = night.next_event("idle")
    night.until(120)  # broker-c's connection said nothing for serverChannelMaxIdleTimeSeconds
    yield idle
    return night


@pytest_twisted.inlineCallbacks
def get(url: str):
    response = yield Agent(reactor).request(b"GET", url.encode())
    body = yield readBody(response)
    return response.code, response.headers.getRawHeaders(b"content-type")[0], body


@pytest_twisted.inlineCallbacks
def test_metrics_api_and_page_over_http(tmp_path):
    night = Night(tmp_path)
    yield night.start()
    try:
        yield night.broker("broker-a", "127.0.0.1:10911")
        base = night.base
        code, kind, body = yield get(f"{base}/metrics")
        assert code == 200 and kind.startswith(b"text/plain")
        assert b"namesrv_brokers_live 1.0" in body and b"process_resident_memory_bytes" in body
        code, kind, body = yield get(f"{base}/api/overview")
        assert code == 200 and kind == b"application/json" and json.loads(body)["brokers_live"] == 1
        code, _, body = yield get(f"{base}/api/route?topic=TopicTest")
        assert code == 200 and json.loads(body)["route"]["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911"}
        for path, status, error in [
                ("/api/route?topic=Nope", 404, "topic 'Nope' has no route"),
                ("/api/route", 400, "missing query parameter 'topic' (/api/route?topic=NAME)"),
                ("/api/events?since=soon", 400, "query parameter 'since' must be a whole number >= 0, not 'soon'"),
                ("/api/topics?limit=-1", 400, "query parameter 'limit' must be a whole number >= 0, not '-1'"),
                ("/api/events?since=" + "9" * 5000, 400, "query parameter 'since' has 5000 digits, at most 12"),
                ("/api/nothing", 404, "no endpoint /api/nothing; there are /api/overview, /api/clusters, "
                                      "/api/topics, /api/route, /api/kv, /api/events, /api/peers")]:
            code, kind, body = yield get(base + path)
            assert (code, kind, json.loads(body)) == (status, b"application/json", {"error": error}), path
        code, kind, body = yield get(base + "/")
        assert code == 200 and kind.startswith(b"text/html") and b"<title>NameServer status</title>" in body
    finally:
        yield night.stop()


def row(dom: str, attribute: str, value: str, tag: str = "tr") -> tuple[str, str]:
    """The attributes and the text (spaces collapsed) of the first table row (or ``tag``, not
    nested in its own kind) with ``attribute="value"``."""
    found = re.search(rf'<{tag}([^>]*\b{attribute}="{re.escape(value)}"[^>]*)>(.*?)</{tag}>', dom, re.S)
    assert found, f"no {tag} with {attribute}={value}"
    return found.group(1), " ".join(html.unescape(re.sub(r"<[^>]+>", " ", found.group(2))).split())


@pytest_twisted.inlineCallbacks
def test_status_page_in_headless_chromium(tmp_path):
    browser = chromium()
    night = yield night_of_trouble(tmp_path)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=5000",
             f"--user-data-dir={tmp_path / 'profile'}"]
    env = {**os.environ, "TZ": "Europe/Berlin"}  # the page shows local time with its offset
    page = f"{night.base}/?q=TopicTest"  # the search box takes ?q=, as if typed
    try:
        dom, _, status = yield utils.getProcessOutputAndValue(
            browser, [*flags, "--window-size=1280,900", "--dump-dom", page], env=env)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        screenshot = f"--screenshot={ARTIFACTS / 'status-page.png'}"
        yield utils.getProcessOutputAndValue(browser, [*flags, "--window-size=1280,1300", screenshot, page], env=env)
    finally:
        yield night.stop()
    text = dom.decode()
    assert status == 0, text[-2000:]
    assert "V5_3_3" in text and CLUSTER in text and "server time 2026-11-25 03:00:0" in text
    identity = f"NameServer 127.0.0.1:{night.port} · {__version__} · compat 5.3.3 · since 2026-11-25 02:58:00 UTC+01:00"
    assert f"<title>⚠ {identity}</title>" in text  # which NameServer, in every tab's title
    _, header = row(text, "id", "address", "span")
    assert header == f"127.0.0.1:{night.port}"
    _, started = row(text, "id", "identity", "div")
    assert started == (f"twisted-namesrv {__version__}, emulating Java's V5_3_3 (compat 5.3.3), started "
                       "2026-11-25 02:58:00 UTC+01:00")
    for topic, kind, why in [("T3-retry", "idle", "no request for 120 s"), ("T4", "unregistered", "the broker "
                             "unregistered"), ("T5", "closed", "connection closed"),
                             ("T6", "expired", "no heartbeat for 35 s (timeout 30 s)")]:
        attributes, cells = row(text, "data-topic", topic)
        shade = 'class="gone"' if kind == "unregistered" else 'class="gone crash"'  # a crash is red
        assert shade in attributes and f" {kind} " in f" {cells} " and cells.endswith(why), cells
    assert 'data-topic="TopicTest"' not in text.split('id="lost-topics"')[1].split("</table>")[0]

    for addr, kind, why, at in [("127.0.0.1:10941", "idle", "no request for 120 s", "03:00:00"),
                                ("127.0.0.1:10951", "unregistered", "the broker unregistered", "02:58:10"),
                                ("127.0.0.1:10961", "closed", "connection closed", "02:58:20"),
                                ("127.0.0.1:10971", "expired", "no heartbeat for 35 s (timeout 30 s)", "02:58:35")]:
        attributes, cells = row(text, "data-addr", addr)
        shade = 'class="gone"' if kind == "unregistered" else 'class="gone crash"'
        assert shade in attributes and f'data-departed="{kind}"' in attributes
        assert re.search(rf"{kind} (\d+ m )?\d+ s ago at 2026-11-25 {at} UTC\+01:00 — {re.escape(why)}", cells), cells
    attributes, cells = row(text, "data-addr", "127.0.0.1:10921")  # last heartbeat at +40 s of a 120 s timeout
    assert 'class="near"' in attributes and re.search(r"1 m 2\d s ago +in (3\d|40) s", cells), cells
    attributes, cells = row(text, "data-addr", "127.0.0.1:10911")
    assert "near" not in attributes and "overdue" not in attributes, attributes
    assert re.search(r"V5_3_3 \d s ago in 1 m 5\d s", cells), cells
    assert "#4 · 2026-11-25 02:58:00 UTC+01:00" in cells
    _, status_line = row(text, "id", "status", "div")
    # the worst first: crashes, the topics they took, then the clean stop, then the late heartbeat
    assert re.search(r"3 brokers crashed in the last 10 min \(left without unregistering\): broker-c \(idle\), "
                     r"broker-e \(closed\), broker-f \(expired\); 8 topics lost their last broker: T3, T3-retry, "
                     r"T6, T6-retry, T5 and 3 more; 1 broker stopped cleanly in the last 10 min: broker-d "
                     r"\(unregistered\); 1 live broker is past half of the heartbeat timeout: broker-a "
                     r"127\.0\.0\.1:10921 in 3\d s", status_line), status_line

    assert text.index('id="events"') < text.index('id="topic-search"'), "events come above the topics"
    assert text.count('data-kind="changed"') == 2, "each broker's changed events fold into one row"
    _, cells = row(text, "data-kind", "changed")  # newest first: the master's
    assert re.search(r"changed ×3 .*broker-a #0 +127\.0\.0\.1:10911 +topics=2 · first at 2026-11-25 02:59:55 "
                     r"UTC\+01:00, last at 2026-11-25 02:59:55 UTC\+01:00", cells), cells
    _, cells = row(text, "data-kind", "idle")
    assert "2026-11-25 03:00:00 UTC+01:00" in cells and "idle: no request for 120 s" in cells

    _, cells = row(text, "data-broker", "broker-a")
    assert re.search(r"0: 127\.0\.0\.1:10911\s+1: 127\.0\.0\.1:10921 +16 +16 +RW-", cells), cells
    _, cells = row(text, "data-broker", "broker-b")
    assert "R--" in cells
    assert '"queueDatas"' in text  # the raw TopicRouteData stays one click away
    assert (ARTIFACTS / "status-page.png").stat().st_size > 10_000


@pytest_twisted.inlineCallbacks
def test_brokers_restored_from_a_snapshot_show_as_restored_until_they_heartbeat(tmp_path):
    """After a warm restart with no broker connected yet, the page does not say "all heartbeating"."""
    browser = chromium()
    snapshot = str(tmp_path / "routes.json")
    before = Night(tmp_path, routeSnapshotPath=snapshot)
    yield before.start()
    yield before.broker("broker-a", "127.0.0.1:10911")
    yield before.broker("broker-b", "127.0.0.1:10931")
    yield before.service.stopService()  # a clean stop writes the snapshot; the brokers' connections stay open
    after = Night(tmp_path, routeSnapshotPath=snapshot)
    yield after.start()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
             f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom"]
    try:
        overview = json.loads((yield get(f"{after.base}/api/overview"))[2])
        dom, _, status = yield utils.getProcessOutputAndValue(browser, [*flags, after.base + "/"],
                                                              env={**os.environ, "TZ": "UTC"})
        reborn = yield after.broker("broker-a", "127.0.0.1:10911")  # heartbeats: no longer only restored
        assert reborn is not None
        clusters = json.loads((yield get(f"{after.base}/api/clusters"))[2])
    finally:
        for client in before.clients:
            client.transport.loseConnection()
        yield after.stop()
    text = dom.decode()
    assert status == 0 and overview["brokers_restored"] == 2
    for addr in ("127.0.0.1:10911", "127.0.0.1:10931"):
        attributes, cells = row(text, "data-addr", addr)
        assert 'class="restored"' in attributes and "restored from the route snapshot" in cells, cells
    _, status_line = row(text, "id", "status", "div")
    assert status_line.startswith("2 brokers are only restored from the route snapshot, not heartbeating since the "
                                  "restart: broker-a 127.0.0.1:10911, broker-b 127.0.0.1:10931"), status_line
    assert "all 2 brokers heartbeating" not in text
    members = {m["addr"]: m["restored"] for c in clusters["clusters"] for g in c["broker_groups"] for m in g["members"]}
    assert members == {"127.0.0.1:10911": False, "127.0.0.1:10931": True}


@defer.inlineCallbacks
def rendered_then_stopped(browser: str, tmp_path: Path, night: Night):
    """The page's DOM as headless Chromium renders it from ``night``, which is stopped after."""
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
             f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom"]
    try:
        dom, _, status = yield utils.getProcessOutputAndValue(browser, [*flags, night.base + "/"],
                                                              env={**os.environ, "TZ": "UTC"})
    finally:
        yield night.stop()
    text = dom.decode()
    assert status == 0, text[-2000:]
    return text


@pytest_twisted.inlineCallbacks
def test_right_after_a_restart_the_page_says_brokers_are_re_registering_not_an_outage(tmp_path):
    """Restarted without a route snapshot, the page said in red that every group "is absent: every
    member left" and every cluster "takes no writes" while the brokers were not yet due to register
    (every 30 s).  Now it says, in amber, that the NameServer restarted and its brokers are
    re-registering, with how long until a group not back is an outage."""
    browser = chromium()
    before = Night(tmp_path)
    yield before.start()
    yield before.broker("broker-a", "127.0.0.1:10911")
    yield before.service.stopService()  # writes the topology: broker-a was up
    for client in before.clients:
        client.transport.loseConnection()
    after = Night(tmp_path)
    yield after.start()
    text = yield rendered_then_stopped(browser, tmp_path, after)
    _, status_line = row(text, "id", "status", "div")
    assert re.fullmatch(r"restarted \d+ s ago, brokers re-registering \(every 30 s\): 1 broker group is not back "
                        rf"yet, an outage if not back in \d+ s: {CLUSTER}/broker-a", status_line), status_line
    attributes, _ = row(text, "id", "status", "div")
    assert 'class="warn"' in attributes, attributes
    attributes, _ = row(text, "id", "outages", "div")
    assert "hidden" in attributes, attributes
    _, rejoining = row(text, "data-rejoining", "broker-a")
    assert "broker-a: not registered since the NameServer restarted" in rejoining, rejoining
    attributes, cells = row(text, "data-addr", "127.0.0.1:10911")
    assert 'class="rejoining"' in attributes and "expected back" in cells, (attributes, cells)


@pytest_twisted.inlineCallbacks
def test_a_cluster_stopped_cleanly_is_amber_and_says_so_across_a_restart(tmp_path):
    """Every broker unregistered (mqshutdown broker), then the NameServer restarted: the page was red,
    "DefaultCluster / broker-a is absent: every member left", like a crash.  Now amber: stopped cleanly.
    Its topics are still lost after the restart (kept in events.json), amber too: their last broker
    unregistered, as NamesrvTopicsLost leaves them out (red before, whenever a topic was lost)."""
    browser = chromium()
    before = Night(tmp_path)
    yield before.start()
    client = yield before.broker("broker-a", "127.0.0.1:10911")
    ext = {"clusterName": CLUSTER, "brokerAddr": "127.0.0.1:10911", "brokerName": "broker-a", "brokerId": "0"}
    answer = yield client.call(RemotingCommand.request(RequestCode.UNREGISTER_BROKER, ext, opaque=9, version=V5_3_3))
    assert answer.code == ResponseCode.SUCCESS
    client.transport.loseConnection()
    yield before.service.stopService()
    after = Night(tmp_path)
    yield after.start()
    text = yield rendered_then_stopped(browser, tmp_path, after)
    attributes, status_line = row(text, "id", "status", "div")
    assert 'class="warn"' in attributes and re.fullmatch(
        f"cluster {CLUSTER} stopped cleanly at [0-9-]+ [0-9:]+ UTC by unregistration: every broker unregistered, "
        "nothing can be written to it until its brokers start again; 2 topics lost their last broker: T2, "
        "TopicTest", status_line), status_line
    attributes, _ = row(text, "id", "outages", "div")
    assert "hidden" in attributes, attributes
    _, group = row(text, "data-stopped", "broker-a")
    assert group.startswith("broker-a: stopped cleanly — every member unregistered"), group
    attributes, cells = row(text, "data-addr", "127.0.0.1:10911")
    assert 'class="rejoining"' in attributes and "expected, stopped cleanly" in cells, (attributes, cells)
    _, overview = row(text, "id", "overview", "div")  # the counts say it too (/api/overview)
    assert overview.endswith("1 expected but absent, 1 cluster stopped cleanly"), overview


@pytest_twisted.inlineCallbacks
def test_a_master_stopped_cleanly_while_its_slave_runs_is_amber(tmp_path):
    """A cluster stopped master first (or started again slave first) leaves a group with its slave and
    no master for seconds: the page said in red that it "has no live master (1 slave left, read-only)",
    as for a crash. Now amber, naming the clean stop; a master that crashed stays red (the test below)."""
    browser = chromium()
    night = Night(tmp_path)
    yield night.start()
    master = yield night.broker("broker-a", "127.0.0.1:10911")
    yield night.broker("broker-a", "127.0.0.1:10921", broker_id=1)
    yield night.broker("broker-b", "127.0.0.1:10931")
    ext = {"clusterName": CLUSTER, "brokerAddr": "127.0.0.1:10911", "brokerName": "broker-a", "brokerId": "0"}
    answer = yield master.call(RemotingCommand.request(RequestCode.UNREGISTER_BROKER, ext, opaque=9, version=V5_3_3))
    assert answer.code == ResponseCode.SUCCESS
    master.transport.loseConnection()
    text = yield rendered_then_stopped(browser, tmp_path, night)
    attributes, status_line = row(text, "id", "status", "div")
    assert 'class="warn"' in attributes and status_line.startswith(
        f"{CLUSTER} / broker-a: its master stopped cleanly (unregistered), 1 slave left, read-only: nothing can "
        "be written to it until the master is back"), status_line
    attributes, _ = row(text, "id", "outages", "div")
    assert "hidden" in attributes, attributes


@pytest_twisted.inlineCallbacks
def test_the_page_names_a_group_without_master_and_a_cluster_that_takes_no_writes(tmp_path):
    """Issue 40's outage: broker-a's master killed (its connection closes), broker-b stopped
    (unregistered). The page says so above everything, in red; the slave is read-only; the crash
    ranks above the clean stop; broker-b's own topic and the system topics are not "lost"."""
    browser = chromium()
    night = Night(tmp_path)
    yield night.start()
    system = (CLUSTER, "TBW102", "RMQ_SYS_TRACE_TOPIC", "%RETRY%please_rename_unique_group_name_4")
    master = yield night.broker("broker-a", "127.0.0.1:10911", topics=("broker-a", "TopicTest", *system))
    yield night.broker("broker-a", "127.0.0.1:10921", 1, topics=("broker-a", "TopicTest", *system))
    stopping = yield night.broker("broker-b", "127.0.0.1:10931", topics=("broker-b", "OrdersB", *system))
    night.until(5)
    closed = night.next_event("closed")
    master.transport.loseConnection()  # kill -9
    yield closed
    ext = {"clusterName": CLUSTER, "brokerAddr": "127.0.0.1:10931", "brokerName": "broker-b", "brokerId": "0"}
    answer = yield stopping.call(RemotingCommand.request(RequestCode.UNREGISTER_BROKER, ext, opaque=9,
                                                         version=V5_3_3))
    assert answer.code == ResponseCode.SUCCESS
    night.until(8)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=5000",
             f"--user-data-dir={tmp_path / 'profile'}"]
    try:
        metrics = (yield get(f"{night.base}/metrics"))[2].decode()
        dom, _, status = yield utils.getProcessOutputAndValue(browser, [*flags, "--window-size=1280,900",
                                                                        "--dump-dom", night.base + "/"],
                                                              env={**os.environ, "TZ": "UTC"})
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        yield utils.getProcessOutputAndValue(browser, [*flags, "--window-size=1280,1000",
                                                       f"--screenshot={ARTIFACTS / 'status-page-outage.png'}",
                                                       night.base + "/"], env={**os.environ, "TZ": "UTC"})
    finally:
        yield night.stop()
    assert "namesrv_broker_groups_without_master 1.0" in metrics  # broker-a; broker-b stopped cleanly: no outage
    assert "namesrv_clusters_without_writable_queues 1.0" in metrics
    assert f'namesrv_broker_group_master_live{{broker="broker-a",cluster="{CLUSTER}"}} 0.0' in metrics
    assert f'namesrv_broker_group_absent{{broker="broker-b",cluster="{CLUSTER}"}} 1.0' in metrics
    text = dom.decode()
    assert status == 0, text[-2000:]
    _, outages = row(text, "id", "outages", "div")
    assert re.fullmatch(f"{CLUSTER} / broker-a has no live master \\(1 slave left, read-only\\) cluster {CLUSTER} "
                        "takes no writes: no broker group has a live master with writable queues", outages), outages
    assert text.index('id="outages"') < text.index('id="status"') < text.index('id="brokers"')
    _, status_line = row(text, "id", "status", "div")
    assert status_line.startswith(f"{CLUSTER} / broker-a has no live master"), status_line
    assert status_line.index("1 broker crashed") < status_line.index("1 broker stopped cleanly"), status_line
    assert re.search(f"{CLUSTER} / broker-b stopped cleanly: every member unregistered \\d+ s ago, nothing can be "
                     "written to it", status_line), status_line  # amber, apart from the outages
    attributes, cells = row(text, "data-addr", "127.0.0.1:10921")
    assert 'data-perm="read-only"' in attributes and cells.endswith("read-only (slave)"), cells
    attributes, _ = row(text, "data-addr", "127.0.0.1:10911")
    assert 'class="gone crash"' in attributes and 'data-departed="closed"' in attributes
    attributes, _ = row(text, "data-addr", "127.0.0.1:10931")
    assert 'class="gone"' in attributes and 'data-departed="unregistered"' in attributes
    _, masterless = row(text, "data-masterless", "broker-a")
    assert "broker-a: no live master" in masterless
    lost = text.split('id="lost-topics"')[1].split("</table>")[0]
    assert re.findall(r'data-topic="([^"]+)"', lost) == ["OrdersB"]


@pytest_twisted.inlineCallbacks
def test_a_plain_headless_screenshot_shows_the_brokers_even_when_the_api_is_slow(tmp_path, monkeypatch):
    """Issue 46 item 10: ``chromium --headless --screenshot URL`` takes its picture at the page's load
    event; the page asked /api for everything after it, so a busy machine photographed "loading…".
    The first answers are in the page now: with every /api answer held back, the load-time DOM
    (--dump-dom, no --virtual-time-budget) already shows the broker and the status line."""
    from twisted.web import server

    from twisted_namesrv.web.site import ApiResource

    browser = chromium()
    monkeypatch.setattr(ApiResource, "render_GET", lambda self, request: server.NOT_DONE_YET)  # never answers
    night = Night(tmp_path)
    yield night.start()
    yield night.broker("broker-a", "127.0.0.1:10911")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}"]
    try:
        dom, _, status = yield utils.getProcessOutputAndValue(browser, [*flags, "--dump-dom", night.base + "/"],
                                                              env={**os.environ, "TZ": "UTC"})
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        yield utils.getProcessOutputAndValue(browser, [*flags, f"--screenshot={ARTIFACTS / 'status-page-plain.png'}",
                                                       night.base + "/"], env={**os.environ, "TZ": "UTC"})
    finally:
        yield night.stop()
    text = dom.decode()
    assert status == 0, text[-2000:]
    attributes, cells = row(text, "data-addr", "127.0.0.1:10911")
    assert "broker-a" in cells and 'data-perm="read-write"' in attributes, cells
    _, status_line = row(text, "id", "status", "div")
    assert status_line == "all 1 brokers heartbeating", status_line


@pytest_twisted.inlineCallbacks
def test_names_holding_invisible_characters_show_as_their_escapes(tmp_path):
    """A KV key holding a newline read "Top ic", a value holding U+2028, CR and ESC read without
    them, and a refused config value "a\\u2028b" read "ab", the character it was refused for not
    there to see: the page draws every character escapes.py finds as its escape, as the log and
    namesrv-admin do (the data stays raw: /api/kv still answers the key as it is)."""
    browser = chromium()
    night = Night(tmp_path)
    yield night.start()
    client = yield connect(night.port)
    night.clients.append(client)
    yield night.register(client, "broker\u2028x", "127.0.0.1:10911")
    key, value = "Top\nic", "v\u2028line\rcr\x1b[31mred"
    for opaque, (code, ext) in enumerate([
            (RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": key, "value": value}),
            (RequestCode.UPDATE_NAMESRV_CONFIG, None)], 20):
        request = RemotingCommand.request(code, ext, b"productEnvName=a\\u2028b" if ext is None else None,
                                          opaque=opaque, version=V5_3_3)
        yield client.call(request)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=5000",
             f"--user-data-dir={tmp_path / 'profile'}"]
    try:
        api = json.loads((yield get(f"{night.base}/api/kv"))[2])
        dom, _, status = yield utils.getProcessOutputAndValue(browser, [*flags, "--window-size=1280,900",
                                                                        "--dump-dom", night.base + "/"],
                                                              env={**os.environ, "TZ": "UTC"})
    finally:
        yield night.stop()
    assert api["namespaces"]["NS"] == {key: value}
    text = dom.decode()
    assert status == 0, text[-2000:]
    _, kv = row(text, "id", "kv", "div")
    assert kv == "NS: Top\\nic=v\\u2028line\\rcr\\x1b[31mred", kv
    _, refused = row(text, "data-kind", "audit")  # newest first: the refused config update
    assert 'config={"productEnvName":"a\\u2028b"}' in refused and "refused" in refused, refused
    _, broker = row(text, "data-addr", "127.0.0.1:10911")
    assert broker.startswith("broker\\u2028x 127.0.0.1:10911"), broker
    assert "\\n" not in text.rpartition("</script>")[2]  # the document's own line ends are no peer's
