"""Issue 44's fifth attack, against live servers under ACL, in every log format and place (text and
JSON, stdout and ``--log-file``, ``python -m`` and ``twistd`` with and without its ``--logfile``):
KV names holding ESC, OSC and CR, a namespace holding a lone surrogate (``"\\ud800"`` in the JSON
header), a refused attempt whose AccessKey is a lone surrogate, a broker and topic named with ESC and
CR.  Before: the surrogate's audit line was missing from the text log, the refused attempt (signed,
the signature check raised) left no line at all, and ESC, OSC and CR went raw into the text log.
Now every change and every refusal is one line, each control character shown as an escape."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest

from tests.hostile.scene import register_body, register_ext
from tests.support import LiveServer, answer_to, free_port
from twisted_namesrv.escapes import CONTROLS
from twisted_namesrv.remoting import RemotingCommand, RequestCode, ResponseCode
from twisted_namesrv.state.acl import signed

TWISTD = str(Path(sys.executable).parent / "twistd")
ADMIN = ("operator", "operator-secret")
SURROGATE_NS = "ns\ud800"
OSC_NS, CR_KEY = "ns\x1b]0;pwned\x07\x1b[2J", "k\r2026-11-28T00:00:00+0000 [twisted_namesrv.audit#info] forged"
EVIL_BROKER, EVIL_TOPIC = "broker\x1b[31mred", "T\rforged"
LAUNCHERS = {
    "python -m, text, --log-file": (("--log-file", "{log}"), "log"),
    "python -m, text, stdout": ((), "stdout"),
    "python -m, json, stdout": (("--log-format", "json"), "stdout"),
    "twistd -n --logfile": ((), "log"),
    "twistd -n, stdout": ((), "stdout"),
}


def frame(code: int, ext: dict, body: bytes = b"") -> bytes:
    """A JSON-header request as a Java client writes it, lone surrogates as JSON escapes."""
    header = json.dumps({"code": code, "language": "JAVA", "version": 479, "opaque": 1, "flag": 0,
                         "extFields": ext}).encode()
    return struct.pack(">II", 4 + len(header) + len(body), len(header)) + header + body


def ask(port: int, data: bytes) -> RemotingCommand:
    return answer_to(port, data)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_every_change_and_refusal_is_one_escaped_line(tmp_path, launcher):
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(f"accounts:\n  - accessKey: {ADMIN[0]}\n    secretKey: {ADMIN[1]}\n    admin: true\n")
    port, log = free_port(), tmp_path / "namesrv.log"
    config = tmp_path / "ns.properties"
    config.write_text(f"listenPort={port}\nkvConfigPath={tmp_path / 'kv.json'}\naclEnable=true\n"
                      f"aclAccountsFile={acl}\naclBrokerNetworks=127.0.0.0/8\n")
    extra, where = LAUNCHERS[launcher]
    args = ["-c", str(config), *(arg.format(log=log) for arg in extra)]
    run = (TWISTD, "-n", "--pidfile=", *(("--logfile", str(log)) if "--logfile" in launcher else ()), "namesrv") \
        if launcher.startswith("twistd") else (sys.executable, "-m", "twisted_namesrv")
    server = LiveServer(tmp_path, port, *args, launcher=run).wait_ready()
    try:
        answers = [
            ask(port, frame(RequestCode.PUT_KV_CONFIG, signed({"namespace": SURROGATE_NS, "key": "k", "value": "v"},
                                                              *ADMIN))),
            ask(port, frame(RequestCode.PUT_KV_CONFIG, signed({"namespace": OSC_NS, "key": CR_KEY, "value": "v"},
                                                              *ADMIN))),
            ask(port, frame(RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v",
                                                        "AccessKey": "\ud800", "Signature": "eA=="})),
            ask(port, frame(RequestCode.PUT_KV_CONFIG, {"namespace": "n\ud800s", "key": "k", "value": "v",
                                                        "AccessKey": ADMIN[0], "Signature": "eA=="})),
        ]
        body = register_body(topics=(EVIL_TOPIC, "T2"))  # a first registration of one topic is refused
        answers.append(ask(port, frame(RequestCode.REGISTER_BROKER, register_ext(body, name=EVIL_BROKER), body)))
    finally:
        server.stop()
    assert [a.code for a in answers] == [ResponseCode.SUCCESS, ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR,
                                         ResponseCode.SYSTEM_ERROR, ResponseCode.SUCCESS]

    raw = (log if where == "log" else server.stdout).read_bytes()
    text = raw.decode("utf-8")  # strict: a lone surrogate could not have been written
    assert not CONTROLS.search(text.replace("\n", "").replace("\t", ""))  # no raw ESC, BEL, CR, surrogate
    lines = text.splitlines()
    if "json" in launcher:
        records = [json.loads(line) for line in lines]
        audits = [r["audit"] for r in records if "audit" in r]
        assert [(a["target"].get("namespace"), a["result"]) for a in audits] == [
            (SURROGATE_NS, "ok"), (OSC_NS, "ok"), ("ns", "refused"), ("n\ud800s", "refused")]
        assert audits[1]["target"]["key"] == CR_KEY and audits[2]["claimed_access_key"] == "\ud800"
        assert sum("refused" in r for r in records) == 1  # the first ACL refusal of this host; the rest counted
        assert any(r.get("route_info", {}).get("broker") == EVIL_BROKER for r in records)
        return
    audit = [line for line in lines if "audit put_kv_config" in line]
    assert len(audit) == 4
    # a name beyond a plain token quoted (audit.py), its control characters escaped there already
    assert 'namespace="ns\\ud800" key=k -> ok' in audit[0]
    assert 'namespace="ns\\u001b]0;pwned\\u0007\\u001b[2J" key="k\\r2026-11-28T00:00:00+0000 ' \
           '[twisted_namesrv.audit#info] forged" -> ok' in audit[1]
    assert 'claimed accessKey="\\ud800" (unverified)' in audit[2] and audit[2].endswith(
        '-> refused ("No acl config for \\ud800")')
    assert 'namespace="n\\ud800s"' in audit[3] and "Check signature failed for accessKey=operator" in audit[3]
    # the refusal's own line: the first of this peer host's ACL refusals (later ones are counted; each
    # refused change still has its audit line above)
    (refused,) = [line for line in lines if "refused on remoting from 127.0.0.1" in line]
    assert "No acl config for \\ud800" in refused
    assert any("broker registered" in line and "broker=broker\\x1b[31mred" in line for line in lines)
    assert not any(line.startswith("forged") or line.startswith("2026-11-28T00:00:00") for line in lines)
