"""The HTTP side under the ACL: with aclEnable, every path but the public ones asks for an account
of the ACL file (HTTP Basic), KV values for an admin one; refusals say nothing but 401 (or 403);
the listener has its own bind address, loopback by default, and warns when open without ACL.
Over real HTTP, and in headless Chromium (the page asks for credentials, then shows)."""

from __future__ import annotations

import os
import re
import urllib.error
import urllib.request
from base64 import b64encode

import pytest
import pytest_twisted
from twisted.internet import reactor, threads, utils
from twisted.logger import globalLogPublisher

from tests.support import free_port, server_config, start_server
from tests.web.test_status_page import chromium
from twisted_namesrv.admin.client import NamesrvClient
from twisted_namesrv.remoting import RequestCode
from twisted_namesrv.service import NamesrvService
from twisted_namesrv.web.auth import is_loopback, is_public

ACCOUNTS = """\
accounts:
  - accessKey: operator
    secretKey: operator-secret
    admin: true
  - accessKey: reader
    secretKey: reader-secret
"""
OPERATOR, READER = ("operator", "operator-secret"), ("reader", "reader-secret")


def get(url: str, credentials: tuple[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url)
    if credentials:
        request.add_header("Authorization", "Basic " + b64encode(":".join(credentials).encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()

async def refusals_counted(web: str, **at_least: int) -> None:
    """The HTTP listener's refusals of each reason counted at least so many times (/metrics)."""
    _, _, metrics = await threads.deferToThread(get, web + "/metrics")
    for reason, least in at_least.items():
        found = re.search(rb'namesrv_refusals_total\{listener="http",reason="%s"\} ([0-9.]+)' % reason.encode(),
                          metrics)
        assert found and float(found.group(1)) >= least, (reason, least)



@pytest.fixture
def acl_file(tmp_path):
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACCOUNTS)
    return str(path)


@pytest_twisted.async_yield_fixture
async def web(tmp_path, acl_file):
    """A server with ACL and the HTTP side; yields the HTTP base URL, with a KV entry in place."""
    config = server_config(tmp_path, metricsPort=free_port(), aclEnable=True, aclAccountsFile=acl_file)
    service, port = await start_server(config)
    client = NamesrvClient(f"127.0.0.1:{port}", 10, OPERATOR)
    put = {"namespace": "ns", "key": "k", "value": "kv-value"}
    answer = await threads.deferToThread(client.call, RequestCode.PUT_KV_CONFIG, put)  # an audited change
    client.close()
    assert answer.code == 0, answer.remark
    site = await service.web_ready
    yield f"http://127.0.0.1:{site.getHost().port}"
    await service.stopService()


def test_public_paths_are_exactly_the_listed_ones():
    for path in (b"/metrics", b"/healthz", b"/readyz", b"/rocketmq/nsaddr", b"/rocketmq/nsaddr-unit1"):
        assert is_public(path), path
    for path in (b"/", b"/api/kv", b"/metrics/", b"/metrics/x", b"/rocketmq/nsaddr-", b"/rocketmq/nsaddr-a/b",
                 b"//metrics", b"/rocketmq/nsaddrx", b"/METRICS"):
        assert not is_public(path), path


def test_loopback_addresses():
    assert all(map(is_loopback, ["127.0.0.1", "127.1.2.3", "::1", "localhost", "[::1]"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "10.0.0.1", "example.org"]))


@pytest_twisted.ensureDeferred
async def test_refusals_say_nothing_but_401_and_accounts_see_what_they_may(web):
    def check() -> None:
        for path in ("/", "/api/overview", "/api/kv", "/api/events", "/api/nosuch", "/nosuch", "/metrics/"):
            for credentials in (None, ("operator", "wrong"), ("nobody", "operator-secret"), ("operator", "")):
                status, headers, body = get(web + path, credentials)
                assert (status, body) == (401, b""), (path, credentials)
                assert headers["www-authenticate"] == 'Basic realm="twisted-namesrv", charset="UTF-8"'
        status, _, body = get(web + "/metrics")
        assert status == 200 and b"namesrv_admin_requests_total" in body
        for path in ("/healthz", "/readyz", "/rocketmq/nsaddr", "/rocketmq/nsaddr-unit"):  # issue 33 serves them
            assert get(web + path)[0] != 401, path
        status, _, body = get(web + "/api/overview", READER)
        assert status == 200 and b"kv_entries" in body
        assert get(web + "/", READER)[0] == 200
        assert get(web + "/api/kv", READER)[:3:2] == (403, b"")  # KV values: admin accounts only
        status, _, body = get(web + "/api/kv", OPERATOR)
        assert status == 200 and b"kv-value" in body

    await threads.deferToThread(check)


@pytest_twisted.ensureDeferred
async def test_no_answer_may_be_stored_by_a_cache(web):
    """Cache-Control is one rule (web/auth.py: CACHE_CONTROL, set by the Gate): ``no-store`` on every
    answer -- the page and /api (addresses, KV values), /metrics (addresses in its labels), the probes,
    the address server, a refusal and a 404, for GET and HEAD; /api said ``no-cache`` (stored,
    revalidated) and /metrics nothing."""
    def check() -> None:
        for path, credentials, status in (
                ("/", READER, 200), ("/api/overview", READER, 200), ("/api/clusters", READER, 200),
                ("/api/kv", OPERATOR, 200), ("/api/nosuch", READER, 404), ("/metrics", None, 200),
                ("/healthz", None, 200), ("/readyz", None, None), ("/rocketmq/nsaddr", None, 200),
                ("/api/kv", None, 401), ("/api/kv", READER, 403), ("/nosuch", READER, 404)):
            answered, headers, _ = get(web + path, credentials)
            assert status is None or answered == status, (path, answered)
            assert headers.get("cache-control") == "no-store", (path, headers)
        request = urllib.request.Request(web + "/metrics", method="HEAD")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.headers["cache-control"] == "no-store"

    await threads.deferToThread(check)


@pytest_twisted.ensureDeferred
async def test_without_acl_the_site_is_open_and_the_listener_on_its_own_loopback_address(tmp_path):
    config = server_config(tmp_path, metricsPort=free_port())
    assert config["metricsBindAddress"] == "127.0.0.1"
    service, _ = await start_server(config)
    try:
        site = await service.web_ready
        assert site.getHost().host == "127.0.0.1"
        status, _, _ = await threads.deferToThread(get, f"http://127.0.0.1:{site.getHost().port}/api/kv")
        assert status == 200
    finally:
        await service.stopService()


def test_an_open_http_side_without_acl_is_warned_of(tmp_path, acl_file):
    """Not started (nothing listens on every interface in a test): the warning is what startService says."""
    events: list[dict] = []
    globalLogPublisher.addObserver(events.append)
    try:
        for values in ({"metricsBindAddress": "0.0.0.0"}, {"metricsBindAddress": "0.0.0.0", "aclEnable": True,
                                                           "aclAccountsFile": acl_file},
                       {"bindAddress": "0.0.0.0"}):
            service = NamesrvService.from_config(server_config(tmp_path, metricsPort=free_port(), **values), reactor)
            service._warn_of_open_web()
    finally:
        globalLogPublisher.removeObserver(events.append)
    warned = [e for e in events if "to this machine only" in e.get("log_format", "")]
    assert [e["host"] for e in warned] == ["0.0.0.0"]  # only the first: ACL on, or --bind alone, is no warning


@pytest_twisted.ensureDeferred
async def test_the_status_page_asks_for_an_account_in_headless_chromium(web, tmp_path):
    browser = chromium()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
             f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom"]
    anonymous, _, _ = await utils.getProcessOutputAndValue(browser, [*flags, web + "/"], env=dict(os.environ))
    assert b"<title>NameServer" not in anonymous  # a 401 shows no page
    host = web.removeprefix("http://")
    dom = {}
    for name, secret in (OPERATOR, READER):
        out, _, status = await utils.getProcessOutputAndValue(
            browser, [*flags, f"http://{name}:{secret}@{host}/"], env=dict(os.environ))
        assert status == 0
        dom[name] = out.decode()
    title = re.search(r"<title>(.*?)</title>", dom["operator"])
    assert title and title.group(1).startswith("NameServer ")  # every fetch answered: no ⚠
    assert "<div>ns: k=kv-value</div>" in dom["operator"]
    audit_row = re.search(r'<tr data-kind="audit" data-result="ok">(.*?)</tr>', dom["operator"])
    assert audit_row and re.search(r"put_kv_config.*namespace=ns · key=k.*127\.0\.0\.1:\d+ \(operator\).*"
                                   r"PUT_KV_CONFIG \(100\): ok", audit_row.group(1)), audit_row
    title = re.search(r"<title>(.*?)</title>", dom["reader"])
    assert title and title.group(1).startswith("NameServer ")
    assert ">KV values are shown to admin accounts only<" in dom["reader"] and "kv-value" not in dom["reader"]


def raw_get(base: str, path: str, credentials: tuple[str, str] | None = None,
            host: str | None = None) -> tuple[int, bytes]:
    """A GET of ``path`` exactly as written (no client normalizes it), with a chosen Host header."""
    import http.client

    address = base.removeprefix("http://")
    connection = http.client.HTTPConnection(address, timeout=10)
    headers = {"Host": host or address}
    if credentials:
        headers["Authorization"] = "Basic " + b64encode(":".join(credentials).encode()).decode()
    connection.request("GET", path, headers=headers)
    response = connection.getresponse()
    try:
        return response.status, response.read()
    finally:
        connection.close()


#: every spelling of /api/kv a router, a proxy or a browser may read as /api/kv
KV_SPELLINGS = ("/api/%6bv", "/api/k%76", "/%61pi/kv", "/api/%6B%76", "/api/./kv", "//api//kv", "/api//kv",
                "/x/../api/kv", "/./api/kv", "/api/%2e/kv", "/api/x/%2e%2e/kv")


@pytest_twisted.ensureDeferred
async def test_a_non_admin_cannot_read_kv_values_by_any_spelling_of_the_path(web):
    """The account check and the router see the same, normalized path: /api/%6bv is /api/kv to both."""
    def check() -> None:
        for path in (*KV_SPELLINGS, "/api/kv/", "/api/kv/x/..", "/API/KV", "/Api/kv", "/api/KV"):
            status, body = raw_get(web, path, READER)
            assert b"kv-value" not in body, path
            if path in KV_SPELLINGS:
                assert (status, body) == (403, b""), path
            status, body = raw_get(web, path)
            assert (status, body) == (401, b""), path
        for path in KV_SPELLINGS:  # the admin gets what the router serves for the path it authorized
            status, body = raw_get(web, path, OPERATOR)
            assert status == 200 and b"kv-value" in body, path
        assert raw_get(web, "/metric%73")[0] == 200  # a public path is public however spelled
        assert raw_get(web, "/metrics/../api/kv")[0] == 401  # ... and only it

    await threads.deferToThread(check)
    await refusals_counted(web, not_admin=1, unauthenticated=1)


@pytest_twisted.ensureDeferred
async def test_a_loopback_page_answers_only_hosts_that_name_this_machine(tmp_path):
    """DNS rebinding: a page from attacker.example whose name now resolves to 127.0.0.1 sends
    Host: attacker.example; the loopback-bound status page refuses it (ACL or not), logged and counted."""
    events: list[dict] = []
    globalLogPublisher.addObserver(events.append)
    service, _ = await start_server(server_config(tmp_path, metricsPort=free_port()))
    try:
        site = await service.web_ready
        base = f"http://127.0.0.1:{site.getHost().port}"

        def check() -> None:
            port = site.getHost().port
            for host in ("attacker.example", f"attacker.example:{port}", "10.0.0.1", "127.0.0.1.nip.io",
                         "localhost.attacker.example"):
                for path in ("/api/kv", "/", "/metrics"):
                    assert raw_get(base, path, host=host) == (403, b""), (host, path)
            for host in (f"127.0.0.1:{port}", "localhost", f"localhost:{port}", "127.0.0.2", f"[::1]:{port}",
                         "LOCALHOST"):
                assert raw_get(base, "/api/kv", host=host)[0] == 200, host

        await threads.deferToThread(check)
        _, _, metrics = await threads.deferToThread(get, base + "/metrics")
        assert b'namesrv_refusals_total{listener="http",reason="host"} 15.0' in metrics
    finally:
        globalLogPublisher.removeObserver(events.append)
        await service.stopService()
    refused = [e for e in events if e.get("refused") == "host"]
    assert refused and refused[0]["log_level"].name == "warn" and refused[0]["peer"].startswith("127.0.0.1:")
    assert "attacker.example" in refused[0]["named"]


@pytest_twisted.ensureDeferred
async def test_a_request_with_two_authorization_headers_is_refused_whichever_comes_first(web):
    """Twisted reads the last Authorization header: a reader's account after a wrong admin one was
    the reader (403 on /api/kv), the same two the other way round a 401, so a proxy in front that
    checks the first and this server the last judged two different accounts.  Authorization is one
    header (RFC 9110): two are now a 400, a refusal (``unauthenticated``), as two Hosts are."""
    import http.client

    def two(first: tuple[str, str], second: tuple[str, str]) -> int:
        address = web.removeprefix("http://")
        connection = http.client.HTTPConnection(address, timeout=10)
        connection.putrequest("GET", "/api/overview", skip_host=True)
        connection.putheader("Host", address)
        for user in (first, second):
            connection.putheader("Authorization", "Basic " + b64encode(":".join(user).encode()).decode())
        connection.endheaders()
        try:
            return connection.getresponse().status
        finally:
            connection.close()

    wrong = ("operator", "wrong")
    statuses = await threads.deferToThread(lambda: [two(wrong, READER), two(READER, wrong), two(READER, READER)])
    assert statuses == [400, 400, 400]
    assert (await threads.deferToThread(raw_get, web, "/api/overview", READER))[0] == 200
    await refusals_counted(web, unauthenticated=1)


def server_wide(base: str, method: str = "OPTIONS", credentials: tuple[str, str] | None = None,
                host: str | None = None) -> tuple[int, dict[str, str], bytes]:
    """A request whose target is ``*`` (asterisk form, RFC 9112 3.2.4), as written."""
    import http.client

    address = base.removeprefix("http://")
    connection = http.client.HTTPConnection(address, timeout=10)
    connection.putrequest(method, "*", skip_host=True)
    connection.putheader("Host", host or address)
    if credentials:
        connection.putheader("Authorization", "Basic " + b64encode(":".join(credentials).encode()).decode())
    connection.endheaders()
    response = connection.getresponse()
    try:
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


@pytest_twisted.ensureDeferred
async def test_options_star_passes_the_gate_as_every_request_does(web):
    """Twisted answered ``OPTIONS *`` 200 (another method 405) before any resource: under ACL without
    an account, to a foreign Host, without Cache-Control, no refusal said. It is the Gate's now: 401
    without an account (a refusal, ``unauthenticated``), 403 for a Host that is not this server's; an
    account gets 200 with what the server serves (``Allow: GET, HEAD``), and ``GET *`` is 405, never
    the status page the empty path routes to."""
    def check() -> None:
        assert server_wide(web) == (401, server_wide(web)[1], b"")
        status, headers, body = server_wide(web, credentials=READER)
        assert (status, headers.get("allow"), headers.get("cache-control"), body) == (200, "GET, HEAD", "no-store", b"")
        assert server_wide(web, credentials=READER, host="attacker.example")[0] == 403
        assert server_wide(web, "HEAD")[0] == 401
        status, headers, body = server_wide(web, "GET", READER)
        assert (status, headers.get("allow"), body) == (405, "OPTIONS", b"")

    await threads.deferToThread(check)
    await refusals_counted(web, unauthenticated=2, host=1)


@pytest_twisted.ensureDeferred
async def test_options_star_without_acl_is_this_machine_s_as_the_page_is(tmp_path):
    """Without ACL ``*`` is no public path: a loopback peer naming a loopback Host gets the 200, a
    rebinding name 403 (``host``), as for the status page."""
    service, _ = await start_server(server_config(tmp_path, metricsPort=free_port()))
    try:
        site = await service.web_ready
        base = f"http://127.0.0.1:{site.getHost().port}"
        status, headers, _ = await threads.deferToThread(server_wide, base)
        assert (status, headers.get("allow"), headers.get("cache-control")) == (200, "GET, HEAD", "no-store")
        assert (await threads.deferToThread(server_wide, base, "OPTIONS", None, "attacker.example"))[0] == 403
    finally:
        await service.stopService()
