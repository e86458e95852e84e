"""Secrets never leave the process: a unique secret is planted in every key of SECRET_KEYS (and
one unknown key named like a secret), in the ACL file's secretKeys and in a config update, and
every output channel is scanned for them -- remoting answers, ``namesrv-admin`` output, ``-p``,
the server's stdout and stderr, its log file, every HTTP endpoint, and the errors of a start
that fails on a broken ACL file."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from base64 import b64encode
from pathlib import Path

import pytest

from tests.support import free_port
from tests.tls_support import make_pki
from twisted_namesrv import properties
from twisted_namesrv.admin.cli import main as admin_main
from twisted_namesrv.admin.client import NamesrvClient
from twisted_namesrv.remoting import RequestCode, ResponseCode
from twisted_namesrv.state.config import MASK, SECRET_KEYS

BIN = Path(sys.executable).parent
HTTP_PATHS = ["/", "/metrics", "/api/overview", "/api/clusters", "/api/topics", "/api/route?topic=T",
              "/api/kv", "/api/events", "/api/nosuch", "/nosuch"]


def planted(what: str) -> str:
    return f"PLANTED-{what}-{uuid.uuid4().hex}"


def wait_for_port(port: int, process: subprocess.Popen, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the server exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"nothing listens on {port} after {seconds} s")


def http_get(url: str, credentials: tuple[str, str] | None) -> str:
    request = urllib.request.Request(url)
    if credentials:
        request.add_header("Authorization", "Basic " + b64encode(":".join(credentials).encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return f"{response.status} {dict(response.headers)} {response.read().decode('utf-8', 'replace')}"
    except urllib.error.HTTPError as error:
        return f"{error.code} {dict(error.headers)} {error.read().decode('utf-8', 'replace')}"


@pytest.fixture
def planted_setup(tmp_path):
    secrets = {name: planted(name) for name in sorted(SECRET_KEYS)}
    secrets["db.password"] = planted("unknown-key")  # a key no table knows, named like a secret
    acl_secrets = {"operator": planted("acl-operator"), "reader": planted("acl-reader")}
    pki = make_pki(tmp_path, key_password=secrets["tls.server.keyPassword"])
    acl = tmp_path / "plain_acl.yml"
    acl.write_text("accounts:\n" + "".join(
        f"  - accessKey: {name}\n    secretKey: {secret}\n    admin: {str(name == 'operator').lower()}\n"
        for name, secret in acl_secrets.items()))
    port, web = free_port(), free_port()
    config = tmp_path / "ns.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in {
        "listenPort": port, "metricsPort": web, "kvConfigPath": tmp_path / "kv.json",
        "tls.server.mode": "permissive", "tls.server.certPath": pki.cert, "tls.server.keyPath": pki.key,
        "aclEnable": "true", "aclAccountsFile": acl, **secrets}.items()))
    return tmp_path, config, port, web, secrets, acl_secrets


LAUNCHERS = {
    # the log in a file (twistd), and on stdout as JSON lines, every event's fields included
    "twistd --logfile": lambda config, log: [str(BIN / "twistd"), "-n", "--pidfile=", "--logfile", str(log),
                                             "namesrv", "-c", str(config)],
    "python -m --log-format json": lambda config, log: [sys.executable, "-m", "twisted_namesrv", "-c", str(config),
                                                        "--log-format", "json"],
}


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_no_planted_secret_reaches_any_output(planted_setup, launcher):
    tmp_path, config, port, web, secrets, acl_secrets = planted_setup
    seen: dict[str, str] = {}  # channel -> what it showed

    printed = subprocess.run([sys.executable, "-m", "twisted_namesrv", "-c", str(config), "-p"],
                             capture_output=True, text=True, timeout=60)
    seen["-p stdout"], seen["-p stderr"] = printed.stdout, printed.stderr
    assert printed.returncode == 0
    assert properties.load(printed.stdout)["tls.server.keyPassword"] == MASK

    out, err = tmp_path / "stdout", tmp_path / "stderr"
    log_file = tmp_path / "namesrv.log" if launcher.startswith("twistd") else out
    with out.open("w") as stdout, err.open("w") as stderr:
        server = subprocess.Popen(LAUNCHERS[launcher](config, log_file), stdout=stdout, stderr=stderr)
    try:
        wait_for_port(port, server)
        wait_for_port(web, server)
        operator = ("operator", acl_secrets["operator"])
        client = NamesrvClient(f"127.0.0.1:{port}", 10, operator)
        try:
            answer = client.call(RequestCode.GET_NAMESRV_CONFIG)
            assert answer.code == ResponseCode.SUCCESS
            listed = properties.load(answer.body.decode())
            assert listed["listenPort"] == str(port) and not set(listed) & set(secrets)
            seen["GET_NAMESRV_CONFIG"] = repr(answer) + answer.body.decode()
            # a refused update naming a secret key, an accepted one of the unknown secret key, a bad signature
            for body in (f"tls.server.keyPassword={planted('update')}", f"db.password={planted('update')}"):
                secrets[body] = body.split("=", 1)[1]
                seen[f"update {body}"] = repr(client.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=body.encode()))
            unsigned = NamesrvClient(f"127.0.0.1:{port}", 10, ("operator", "wrong"))
            put = {"namespace": "n", "key": "k", "value": "v"}
            seen["refused"] = repr(unsigned.call(RequestCode.PUT_KV_CONFIG, put))
            unsigned.close()
            for code in (RequestCode.GET_NAMESRV_CONFIG, RequestCode.GET_BROKER_CLUSTER_INFO,
                         RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, RequestCode.GET_KVLIST_BY_NAMESPACE):
                answer = client.call(code, {"namespace": "n"})
                seen[f"answer {code}"] = repr(answer) + bytes(answer.body or b"").decode("utf-8", "replace")
            # the KV reads answer any peer, as Java's do (docs/security.md): no secret the server
            # holds is a KV value, under any namespace or key a peer may guess
            anyone, names = NamesrvClient(f"127.0.0.1:{port}", 10), [*sorted(SECRET_KEYS), "db.password"]
            try:
                for namespace in ("ORDER_TOPIC_CONFIG", "n", "NAMESRV_CONFIG", *names):
                    answer = anyone.call(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": namespace})
                    seen[f"KV list {namespace}"] = repr(answer) + bytes(answer.body or b"").decode("utf-8", "replace")
                    for key in ("k", *names):
                        answer = anyone.call(RequestCode.GET_KV_CONFIG, {"namespace": namespace, "key": key})
                        seen[f"KV {namespace} {key}"] = repr(answer)
            finally:
                anyone.close()
        finally:
            client.close()
        admin_out, admin_err = io.StringIO(), io.StringIO()
        os.environ.update(NAMESRV_ACCESS_KEY=operator[0], NAMESRV_SECRET_KEY=operator[1])
        try:
            assert admin_main(["-n", f"127.0.0.1:{port}", "getNamesrvConfig"], admin_out, admin_err) == 0
        finally:
            del os.environ["NAMESRV_ACCESS_KEY"], os.environ["NAMESRV_SECRET_KEY"]
        seen["namesrv-admin"] = admin_out.getvalue() + admin_err.getvalue()
        for path in HTTP_PATHS:
            for who in (operator, ("reader", acl_secrets["reader"]), None):
                seen[f"GET {path} as {who and who[0]}"] = http_get(f"http://127.0.0.1:{web}{path}", who)
        assert seen["GET /api/overview as operator"].startswith("200")
    finally:
        server.terminate()
        server.wait(timeout=30)
    seen["stdout"], seen["stderr"], seen["log file"] = out.read_text(), err.read_text(), log_file.read_text()
    assert "updateNamesrvConfig from" in seen["log file"] and "audit update_namesrv_config" in seen["log file"]
    stored = properties.load(config.read_text())  # the operator's own file keeps what it had
    assert stored["tls.server.keyPassword"] == secrets["tls.server.keyPassword"]

    every_secret = [*secrets.values(), *acl_secrets.values()]
    leaks = [(channel, secret) for channel, text in seen.items() for secret in every_secret if secret in text]
    assert leaks == []


def test_a_broken_acl_file_is_reported_without_its_lines(tmp_path):
    """PyYAML's message quotes the offending line: a secretKey must not reach stderr or the log."""
    secret = planted("broken-yaml")
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(f"accounts:\n  - accessKey: a\n    secretKey: {secret}\n   admin: [true\n")
    result = start(tmp_path, aclEnable="true", aclAccountsFile=acl)
    assert result.returncode == 1
    assert "aclAccountsFile: cannot read" in result.stderr and "not valid YAML" in result.stderr
    assert secret not in result.stderr + result.stdout


def test_a_wrong_key_password_is_reported_without_it(tmp_path):
    secret = planted("wrong-key-password")
    pki = make_pki(tmp_path, key_password="the-right-one")
    result = start(tmp_path, **{"tls.server.mode": "enforcing", "tls.server.certPath": pki.cert,
                                "tls.server.keyPath": pki.key, "tls.server.keyPassword": secret})
    assert result.returncode == 1 and "cannot start: tls.server.certPath/keyPath" in result.stderr
    assert secret not in result.stderr + result.stdout


def start(tmp_path: Path, **values: object) -> subprocess.CompletedProcess:
    """A start with these -c file values (expected to fail), its output captured."""
    return subprocess.run([sys.executable, "-m", "twisted_namesrv", "--port", "0", "--data-dir", str(tmp_path),
                           "-c", str(_properties(tmp_path, **values))], capture_output=True, text=True, timeout=60)


def _properties(tmp_path: Path, **values: object) -> Path:
    path = tmp_path / "ns.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path
