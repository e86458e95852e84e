"""Issue 44's first attack, as it was run: UPDATE_NAMESRV_CONFIG of an allowed key whose value
holds a line separator (U+2028, U+2029, U+0085, \\x0b, \\x0c, \\x1c..\\x1e, raw and as the
properties escape ``\\u2028``), against a live server started with ``-c``, signed by an admin
under ACL; then a restart.  Before: each was answered 0, saved raw in the ``-c`` file, and the next
start read ``aclEnable=false``, ``kvConfigPath``, ``listenPort``... from it.  Now each is refused
and the restarted server holds what its file held, ACL on.  A file already holding such a value
(written by an older version) reads as that one value, with a warning, and is written back escaped."""

from __future__ import annotations

import stat
from contextlib import closing

import pytest

from tests.support import LiveServer, free_port
from twisted_namesrv import properties
from twisted_namesrv.admin.client import NamesrvClient
from twisted_namesrv.escapes import CONTROLS
from twisted_namesrv.remoting import RequestCode, ResponseCode

SEPARATORS = ["\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]
ADMIN = ("operator", "operator-secret")
SMUGGLED = ["aclEnable=false", "kvConfigPath=/tmp/evil-kv.json", "listenPort=1", "bindAddress=0.0.0.0",
            "nsaddrList=6.6.6.6:9876", "enableElectUncleanMaster=true"]


def attack_value(separator: str) -> str:
    return separator.join(["x", *SMUGGLED])


@pytest.fixture
def setup(tmp_path):
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(f"accounts:\n  - accessKey: {ADMIN[0]}\n    secretKey: {ADMIN[1]}\n    admin: true\n")
    port = free_port()
    config = tmp_path / "ns.properties"
    config.write_text(f"listenPort={port}\nkvConfigPath={tmp_path / 'kv.json'}\naclEnable=true\n"
                      f"aclAccountsFile={acl}\nproductEnvName=center\n")
    return tmp_path, config, port


def start(tmp_path, config, port, name: str) -> LiveServer:
    return LiveServer(tmp_path, port, "-c", str(config), name=name).wait_ready()


def assert_as_configured(port: int, tmp_path, product: str = "center") -> dict[str, str]:
    """The restarted server: its own port, kv path and product name, nothing smuggled, ACL still on."""
    with closing(NamesrvClient(f"127.0.0.1:{port}", 10, ADMIN)) as client:
        listed = properties.load(client.call_ok(RequestCode.GET_NAMESRV_CONFIG).body.decode())
    assert listed["listenPort"] == str(port) and listed["kvConfigPath"] == str(tmp_path / "kv.json")
    assert listed["productEnvName"] == product and listed["aclEnable"] == "true"
    assert "nsaddrList" not in listed and "enableElectUncleanMaster" not in listed
    with closing(NamesrvClient(f"127.0.0.1:{port}", 10)) as unsigned:
        refused = unsigned.call(RequestCode.PUT_KV_CONFIG, {"namespace": "n", "key": "k", "value": "v"})
    assert refused.code != ResponseCode.SUCCESS and "AclException" in (refused.remark or "")
    return listed


def test_the_attack_of_issue_44_is_refused_and_the_restart_reads_the_file_as_it_was(setup):
    tmp_path, config, port = setup
    config.chmod(0o600)  # it may hold secrets (tls.server.keyPassword): a rewrite made it 0644
    server = start(tmp_path, config, port, "first")
    answers = {}
    try:
        with closing(NamesrvClient(f"127.0.0.1:{port}", 10, ADMIN)) as client:
            for separator in SEPARATORS:
                for form, body in (("raw", ("productEnvName=" + attack_value(separator) + "\n").encode("utf-8")),
                                   ("escaped", ("productEnvName=" + attack_value(f"\\u{ord(separator):04x}")
                                                + "\n").encode("ascii"))):
                    answer = client.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=body)
                    answers[separator, form] = (answer.code, answer.remark)
            assert client.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true\n").code == 0
    finally:
        server.stop()
    assert {key: code for key, (code, _) in answers.items() if code == ResponseCode.SUCCESS} == {}
    assert all("holds a control character" in remark for _, remark in answers.values())
    saved = config.read_text(encoding="utf-8")
    assert not CONTROLS.search(saved.replace("\n", "")) and "evil" not in saved and "6.6.6.6" not in saved
    assert properties.load(saved)["orderMessageEnable"] == "true"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert server.output().count("refused on remoting from 127.0.0.1") >= 1  # further hits counted, not logged

    restarted = start(tmp_path, config, port, "second")
    try:
        assert assert_as_configured(port, tmp_path)["orderMessageEnable"] == "true"
    finally:
        restarted.stop()


@pytest.mark.parametrize("form", ["raw", "escaped"])
def test_a_file_an_older_version_wrote_reads_as_one_value_and_is_written_back_escaped(setup, form):
    tmp_path, config, port = setup
    value = attack_value("\u2028")
    written = value if form == "raw" else value.replace("\u2028", "\\u2028").replace("=", "\\=")
    config.write_text(config.read_text().replace("productEnvName=center", f"productEnvName={written}"),
                      encoding="utf-8")
    server = start(tmp_path, config, port, "upgraded")
    try:
        assert_as_configured(port, tmp_path, product=value)
        with closing(NamesrvClient(f"127.0.0.1:{port}", 10, ADMIN)) as client:
            assert client.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true\n").code == 0
    finally:
        server.stop()
    assert "productEnvName: holds a control character (U+2028)" in server.output()
    saved = config.read_text(encoding="utf-8")
    assert "\u2028" not in saved and "productEnvName=x\\u2028aclEnable=false\\u2028" in saved

    again = start(tmp_path, config, port, "again")
    try:
        assert_as_configured(port, tmp_path, product=value)
    finally:
        again.stop()
