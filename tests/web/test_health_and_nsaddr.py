"""``/healthz``, ``/readyz`` and the built-in address server (``/rocketmq/nsaddr``) on a started
server, fetched over HTTP with Twisted's own client."""

from __future__ import annotations

import json

import pytest
import pytest_twisted
from twisted.internet import defer, reactor
from twisted.logger import formatEvent, globalLogPublisher
from twisted.web.client import Agent, readBody

from tests.support import free_port, server_config, start_server
from twisted_namesrv.state.config import ConfigError, NamesrvConfig


@defer.inlineCallbacks
def get(url: str):
    response = yield Agent(reactor).request(b"GET", url.encode())
    body = yield readBody(response)
    return response.code, response.headers.getRawHeaders(b"content-type", [b""])[0], body


@defer.inlineCallbacks
def started(tmp_path, **values):
    values.setdefault("metricsPort", free_port())
    service, port = yield start_server(server_config(tmp_path, **values))
    web = yield service.web_ready
    return service, port, f"http://127.0.0.1:{web.getHost().port}"


@pytest_twisted.inlineCallbacks
def test_probes_answer_ok_with_their_checks_while_serving(tmp_path):
    service, _, base = yield started(tmp_path)
    try:
        code, kind, body = yield get(base + "/healthz")
        assert (code, kind) == (200, b"application/json")
        assert json.loads(body) == {"status": "ok", "failing": [],
                                    "checks": {"listenPort_bound": True, "metricsPort_bound": True}}
        code, _, body = yield get(base + "/readyz")
        assert code == 200
        ready = json.loads(body)
        assert ready["status"] == "ok" and ready["checks"]["kv_loaded"] and ready["checks"]["not_stopping"]
    finally:
        yield service.stopService()


@pytest_twisted.inlineCallbacks
def test_readyz_works_out_the_route_health_once(tmp_path):
    """Its checks (broker_groups_back) and its details ("N of M known broker groups back") read one
    computation of the route health, which walks every broker group: it was made twice a probe."""
    service, _, base = yield started(tmp_path)
    watch, made = service.health, []
    health = watch.health
    watch.health = lambda: made.append(1) or health()
    try:
        code, _, body = yield get(base + "/readyz")
        assert code == 200 and json.loads(body)["broker_groups"]["summary"] == "0 of 0 known broker groups back"
        assert len(made) == 1
    finally:
        del watch.health
        yield service.stopService()


@pytest_twisted.inlineCallbacks
def test_readyz_fails_naming_the_check_once_stopping_and_healthz_when_a_listener_is_gone(tmp_path):
    service, _, base = yield started(tmp_path)
    try:
        service.stopping = True
        code, _, body = yield get(base + "/readyz")
        assert code == 503 and json.loads(body)["failing"] == ["not_stopping"]
        service.stopping = False
        yield service.remoting.unbind()
        code, _, body = yield get(base + "/healthz")
        assert code == 503 and json.loads(body)["failing"] == ["listenPort_bound"]
        code, _, body = yield get(base + "/readyz")
        assert code == 503 and "listenPort_bound" in json.loads(body)["failing"]
    finally:
        yield service.stopService()


@pytest_twisted.inlineCallbacks
def test_readyz_is_not_ready_while_route_lookups_are_held_after_the_start(tmp_path):
    """needWaitForService=true (5.x) answers every route lookup "name server not ready" for
    waitSecondsForService after the start. /readyz said 200 meanwhile: in a rolling restart of three
    NameServers (the 5.3.3 proxy and broker of ../shared/refrig), each was "ready" 20-23 s before it
    answered a route, so an operator waiting for /readyz went on to the next one while the last still
    answered none, and a Service sent clients to it."""
    service, _, base = yield started(tmp_path, needWaitForService=True, waitSecondsForService=45)
    try:
        code, _, body = yield get(base + "/readyz")
        assert code == 503 and json.loads(body)["failing"] == ["route_lookups_answered"]
        service.state.uptime = lambda: 45.0  # the wait is over: lookups answered, ready
        code, _, body = yield get(base + "/readyz")
        assert code == 200 and json.loads(body)["checks"]["route_lookups_answered"]
    finally:
        yield service.stopService()


@pytest_twisted.inlineCallbacks
def test_nsaddr_answers_the_servers_own_address_by_default_in_both_forms(tmp_path):
    service, port, base = yield started(tmp_path)
    try:
        for path in ("/rocketmq/nsaddr", "/rocketmq/nsaddr-unit1?nofix=1"):
            code, kind, body = yield get(base + path)
            assert (code, kind, body) == (200, b"text/plain; charset=utf-8", f"127.0.0.1:{port}".encode())
        for path in ("/rocketmq/", "/rocketmq/nsaddr-", "/rocketmq/other", "/rocketmq/nsaddr/x"):
            code, _, _ = yield get(base + path)
            assert code == 404, path
    finally:
        yield service.stopService()


@pytest_twisted.inlineCallbacks
def test_nsaddr_answers_the_configured_list_as_clients_split_it(tmp_path):
    listed = "10.0.0.1:9876;10.0.0.2:9876"
    service, _, base = yield started(tmp_path, nsaddrList=listed)
    try:
        code, _, body = yield get(base + "/rocketmq/nsaddr")
        assert (code, body) == (200, listed.encode())
    finally:
        yield service.stopService()


@pytest_twisted.inlineCallbacks
def test_nsaddr_answers_the_list_as_it_was_checked_without_the_white_space_around_entries(tmp_path):
    """A -c file's nsaddrList holding a line separator (U+2028), a CR or spaces around an entry was
    checked without them and answered with them: Java's clients split the answer at ``;`` and read
    ``10.0.0.1:9876\u2028`` as a port that is no number.  The answer is the entries as checked."""
    service, _, base = yield started(tmp_path, nsaddrList=" 10.0.0.1:9876\u2028; 10.0.0.2:9876\r;;")
    try:
        code, _, body = yield get(base + "/rocketmq/nsaddr")
        assert (code, body) == (200, b"10.0.0.1:9876;10.0.0.2:9876")
    finally:
        yield service.stopService()


@pytest_twisted.inlineCallbacks
def test_nsaddr_bound_to_every_interface_answers_the_address_the_poller_reached(tmp_path):
    service, port, base = yield started(tmp_path, bindAddress="0.0.0.0")
    try:
        _, _, body = yield get(base + "/rocketmq/nsaddr")
        assert body == f"127.0.0.1:{port}".encode()
    finally:
        yield service.stopService()


@pytest_twisted.inlineCallbacks
def test_a_server_on_ipv6_names_its_address_in_brackets(tmp_path):
    """Bound to ``::1`` the boot line said ``address ::1:9876`` (an address with no port, read as
    written) while ``/rocketmq/nsaddr`` said ``[::1]:9876``: one formatter now writes them all."""
    lines: list[str] = []

    def observe(event: dict) -> None:
        lines.append(formatEvent(event))

    globalLogPublisher.addObserver(observe)
    try:
        service, port, base = yield started(tmp_path, bindAddress="::1")
    finally:
        globalLogPublisher.removeObserver(observe)
    try:
        assert service.state.listen_address == f"[::1]:{port}"
        assert any(f"address [::1]:{port}," in line for line in lines), lines
        _, _, body = yield get(base + "/rocketmq/nsaddr")
        assert body == f"[::1]:{port}".encode()
    finally:
        yield service.stopService()


@pytest.mark.parametrize("key", ["nsaddrList", "namesrvAddr"])
@pytest.mark.parametrize("value", ["10.0.0.1", "10.0.0.1:x", ":9876", "a:9876;b:70000", "a:9876,b:9876",
                                   "a:9876 b:9876", "a:\u00b2"])
def test_a_malformed_nsaddr_list_is_refused_naming_the_key(key, value):
    # ("a:²": str.isdigit took it and int() raised, a start's one line said "invalid literal for int()")
    with pytest.raises(ConfigError, match=rf"{key}: .* is not host:port"):
        NamesrvConfig({key: value})


def test_nsaddr_list_is_guarded_from_remote_updates():
    assert "nsaddrList" in NamesrvConfig().blocked_keys()


@pytest_twisted.inlineCallbacks
def test_nsaddr_answers_the_advertised_address_clients_can_reach(tmp_path):
    """Bound to every interface inside a container, the poller's view of the server is the
    container's own IP: advertisedAddress (the pod IP, a Service name) is what clients can reach."""
    service, port, base = yield started(tmp_path, bindAddress="0.0.0.0", advertisedAddress="namesrv.mq.svc")
    try:
        _, _, body = yield get(base + "/rocketmq/nsaddr")
        assert body == f"namesrv.mq.svc:{port}".encode()  # no port named: the listen port
    finally:
        yield service.stopService()
    service, _, base = yield started(tmp_path, bindAddress="0.0.0.0", advertisedAddress="[fd00::7]:19876")
    try:
        _, _, body = yield get(base + "/rocketmq/nsaddr-unit1")
        assert body == b"[fd00::7]:19876"
    finally:
        yield service.stopService()


def test_the_advertised_address_comes_from_the_environment_unless_flag_or_file_say_otherwise(tmp_path, monkeypatch):
    monkeypatch.setenv("NAMESRV_ADVERTISED_ADDRESS", "10.1.2.3:9876")
    base = {"kvConfigPath": str(tmp_path / "kv.json"), "configStorePath": str(tmp_path / "ns.properties")}
    config = NamesrvConfig.from_file(None, base)
    assert config["advertisedAddress"] == "10.1.2.3:9876"
    assert config.sources["advertisedAddress"] == "$NAMESRV_ADVERTISED_ADDRESS"
    assert NamesrvConfig.from_file(None, {**base, "advertisedAddress": "ns.example"})["advertisedAddress"] == \
        "ns.example"
    properties = tmp_path / "file.properties"
    properties.write_text("advertisedAddress=from-file:9876\n")
    assert NamesrvConfig.from_file(str(properties), base)["advertisedAddress"] == "from-file:9876"
    monkeypatch.setenv("NAMESRV_ADVERTISED_ADDRESS", "a:1;b:2")
    with pytest.raises(ConfigError, match=r"\$NAMESRV_ADVERTISED_ADDRESS: advertisedAddress: 'a:1;b:2' is one "
                                          "address"):
        NamesrvConfig.from_file(None, base)


@pytest.mark.parametrize("value", ["h:0", "h:99999", "h:x", ":9876", "[::1]:x", "h\u2028x:9876", "h:98\r76",
                                   "h\tx", "h:\u00b2"])
def test_a_malformed_advertised_address_is_refused_naming_the_key(value):
    with pytest.raises(ConfigError, match=r"advertisedAddress: .* is not host or host:port"):
        NamesrvConfig({"advertisedAddress": value})


@pytest_twisted.inlineCallbacks
def test_metrics_text_is_written_in_a_thread(tmp_path, monkeypatch):
    """/metrics is public and peers make most of its series (about six a broker of a group of its own,
    labels up to maxNameLength): written in the reactor's thread, 2,000 such brokers held every
    lookup 1.7-2.4 s a scrape.  Its series are read in the reactor's turn, the text made in a thread
    of the reactor's pool (apart.py; scrapes asked while one waits share it)."""
    import threading

    from twisted_namesrv.web import site

    made_in = []
    real = site.generate_latest

    def recorded(read):
        made_in.append(threading.current_thread() is threading.main_thread())
        return real(read)

    monkeypatch.setattr(site, "generate_latest", recorded)
    service, _, base = yield started(tmp_path)
    try:
        answers = yield defer.gatherResults([get(base + "/metrics") for _ in range(5)])
    finally:
        yield service.stopService()
    assert all(code == 200 and b"namesrv_refusals_total" in body for code, _, body in answers)
    assert made_in and not any(made_in), made_in  # True: made in the reactor's thread
