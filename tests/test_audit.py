"""The audit trail: every state-changing request, done or refused, is one ``audit`` event -- in the
log (text, and JSON with the event's fields), in namesrv_admin_requests_total (every series from
the start) and among the status page's events -- through the service's own wiring."""

from __future__ import annotations

import json

import pytest
from twisted.logger import capturedLogs, formatEvent

from tests.web.test_metrics_and_api import Served, value
from twisted_namesrv import processor
from twisted_namesrv.audit import OPERATIONS, RESULTS
from twisted_namesrv.controller.audit import CONTROLLER_OPERATIONS
from twisted_namesrv.escapes import CONTROLS
from twisted_namesrv.logs import event_as_json_line
from twisted_namesrv.remoting import FrameDecoder, RemotingCommand, RequestCode, ResponseCode
from twisted_namesrv.remoting.codes import V5_3_3
from twisted_namesrv.state.acl import signed
from twisted_namesrv.state.config import MASK

ACCOUNTS = """\
accounts:
  - accessKey: broker
    secretKey: broker-secret
    whiteRemoteAddress: 127.0.0.1

  - accessKey: operator
    secretKey: operator-secret
    admin: true
  - accessKey: reader
    secretKey: reader-secret
"""
QUEUES = b'{"queueDatas":[{"brokerName":"broker-a","readQueueNums":4,"writeQueueNums":4,"perm":6,"topicSysFlag":0}]}'


@pytest.fixture
def served(tmp_path):
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACCOUNTS)
    return Served(tmp_path, aclEnable=True, aclAccountsFile=str(acl))


def ask(served: Served, code: int, ext: dict[str, str], body: bytes | None = None,
        account: tuple[str, str] | None = ("operator", "operator-secret")) -> tuple[RemotingCommand, list[dict]]:
    """One request over its own connection (ports 40000 and up): its answer and the audit events logged."""
    proto, transport = served.connect()
    if account:
        ext = signed(ext, *account, body)
    with capturedLogs() as events:
        proto.dataReceived(RemotingCommand.request(code, ext, body, opaque=1, version=V5_3_3).encode())
    (frame,) = FrameDecoder().feed(transport.value())
    transport.loseConnection()
    return RemotingCommand.decode(frame), [e for e in events if e.get("log_namespace") == "twisted_namesrv.audit"]


def audit_of(events: list[dict]) -> dict:
    (event,) = events
    return event["audit"]


@pytest.mark.parametrize(("code", "ext", "body", "target"), [
    (RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "the value"}, None,
     {"namespace": "ns", "key": "k"}),  # a KV value is no target: it stays out of the trail
    (RequestCode.DELETE_KV_CONFIG, {"namespace": "ns", "key": "k"}, None, {"namespace": "ns", "key": "k"}),
    (RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}, None,
     {"brokerName": "broker-a", "wipeTopicCount": "2"}),
    (RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}, None,
     {"brokerName": "broker-a", "addTopicCount": "2"}),
    (RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T1", "clusterName": "c1"}, None,
     {"topic": "T1", "clusterName": "c1"}),
    (RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": "T9"}, QUEUES, {"topic": "T9"}),
    (RequestCode.UPDATE_NAMESRV_CONFIG, {}, b"orderMessageEnable=true\ndb.password=hunter2\n",
     {"config": {"orderMessageEnable": "true", "db.password": MASK}}),
])
def test_each_operation_is_one_audit_event_in_log_metric_and_status_page(served, code, ext, body, target):
    served.broker(extra={"AccessKey": "broker"})  # broker-a with T1, T2 (its account's whitelist: no signature)

    answer, events = ask(served, code, dict(ext), body)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    audit = audit_of(events)
    operation = OPERATIONS[code]
    assert audit == {"operation": operation, "request": RequestCode(code).name, "code": int(code),
                     "peer": "127.0.0.1:40001", "access_key": "operator", "verified": True,
                     "claimed_access_key": None, "target": target, "result": "ok", "reason": None}
    text = formatEvent(events[0])
    assert text.startswith(f"audit {operation} {RequestCode(code).name}({int(code)}) from 127.0.0.1:40001 "
                           "accessKey=operator (verified): ") and text.endswith(" -> ok")
    assert "hunter2" not in text and "the value" not in text
    record = json.loads(event_as_json_line(events[0]))
    assert record["audit"] == audit and record["namespace"] == "twisted_namesrv.audit" and record["level"] == "info"
    assert record["message"] == text

    samples = served.scrape()
    assert value(samples, "namesrv_admin_requests_total", operation=operation, result="ok") == 1
    shown = served.api.events()["events"][-1]
    assert shown["kind"] == "audit" and shown["operation"] == operation and shown["target"] == target


def test_refusals_and_failures_are_audited_too(served):
    put = {"namespace": "ns", "key": "k", "value": "v"}
    answer, events = ask(served, RequestCode.PUT_KV_CONFIG, put, account=None)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert audit_of(events)["result"] == "refused" and audit_of(events)["reason"] == "No accessKey is configured"
    assert events[0]["log_level"].name == "warn"

    answer, events = ask(served, RequestCode.PUT_KV_CONFIG, put, account=("reader", "reader-secret"))
    assert audit_of(events)["result"] == "refused" and audit_of(events)["access_key"] == "reader"
    assert "Need admin permission" in audit_of(events)["reason"]

    answer, events = ask(served, RequestCode.UPDATE_NAMESRV_CONFIG, {}, b"listenPort=1\ntls.server.keyPassword=pw\n")
    assert answer.code == ResponseCode.NO_PERMISSION
    assert audit_of(events)["result"] == "refused"
    assert audit_of(events)["target"] == {"config": {"listenPort": "1", "tls.server.keyPassword": MASK}}

    answer, events = ask(served, RequestCode.PUT_KV_CONFIG, {"key": "k"})  # no namespace: Java's answer, refused
    assert answer.code == ResponseCode.SYSTEM_ERROR and audit_of(events)["result"] == "refused"

    samples = served.scrape()
    assert value(samples, "namesrv_admin_requests_total", operation="put_kv_config", result="refused") == 3
    assert value(samples, "namesrv_admin_requests_total", operation="update_namesrv_config", result="refused") == 1
    assert value(samples, "namesrv_admin_requests_total", operation="put_kv_config", result="failed") == 0


def test_reads_leave_no_trail_and_every_series_is_there_from_the_start(served):
    for code, ext in ((RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k"}),
                      (RequestCode.GET_BROKER_CLUSTER_INFO, {}), (RequestCode.GET_NAMESRV_CONFIG, {})):
        _, events = ask(served, code, ext)
        assert events == []
    samples = served.scrape()
    series = {labels for (name, labels) in samples if name == "namesrv_admin_requests_total"}
    operations = {*OPERATIONS.values(), *CONTROLLER_OPERATIONS.values()}  # the controller's too, run or not
    assert series == {(("operation", o), ("result", r)) for o in operations for r in RESULTS}
    assert len(series) == 56 and not any(samples[("namesrv_admin_requests_total", s)] for s in series)


def test_a_claimed_access_key_that_nothing_verified_is_no_identity(served, tmp_path):
    """Only a signature checked against the account's secret makes an identity; a request that
    merely names an accessKey (unsigned, wrongly signed, or to a server without ACL) is recorded as
    claimed and unverified."""
    served.broker(extra={"AccessKey": "broker"})
    forged = {**signed({"brokerName": "broker-a"}, "operator", "operator-secret"), "Signature": "Zm9yZ2Vk"}
    answer, events = ask(served, RequestCode.WIPE_WRITE_PERM_OF_BROKER, forged, account=None)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    audit = audit_of(events)
    assert (audit["access_key"], audit["verified"], audit["claimed_access_key"]) == (None, False, "operator")
    assert "claimed accessKey=operator (unverified)" in formatEvent(events[0])

    open_server = Served(tmp_path / "open")  # no ACL: nothing checks a signature
    answer, events = ask(open_server, RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v"},
                         account=("operator", "anything"))
    assert answer.code == ResponseCode.SUCCESS
    audit = audit_of(events)
    assert (audit["access_key"], audit["verified"], audit["claimed_access_key"]) == (None, False, "operator")
    assert "accessKey=operator (verified)" not in formatEvent(events[0])


def test_an_event_keeps_at_most_a_few_hundred_characters_of_each_target(served):
    """A request's header fields and body may hold 64 KiB each, and each audited request, done or
    refused, was one log line, one JSON event and one of the status page's 200 recent events holding
    them whole: an unsigned DELETE_KV_CONFIG of a key no one had (nothing changed) wrote a 60,122-character
    line. Now each value keeps 256 characters and says how long it was; a config update 64 keys."""
    answer, events = ask(served, RequestCode.DELETE_KV_CONFIG, {"namespace": "N" * 30_000, "key": "K" * 30_000},
                         account=None)
    target = audit_of(events)["target"]
    assert target == {"namespace": "N" * 256 + "...(30000 characters)", "key": "K" * 256 + "...(30000 characters)"}
    assert len(formatEvent(events[0])) < 1000
    body = "".join(f"key{i}=v\n" for i in range(100)).encode()
    answer, events = ask(served, RequestCode.UPDATE_NAMESRV_CONFIG, {}, body, account=None)
    config = audit_of(events)["target"]["config"]
    assert len(config) == 65 and config["..."] == "36 more keys" and config["key0"] == "v"
    answer, events = ask(served, RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v",
                                                             "AccessKey": "A" * 5000}, account=None)
    assert audit_of(events)["claimed_access_key"] == "A" * 256 + "...(5000 characters)"


def test_a_peer_s_names_and_values_are_quoted_and_forge_no_field_result_or_line(served):
    """Names, keys, values and the accessKey a peer claims are its choice: unquoted, a KV key
    ``k -> ok`` made a refused put's line read as done, a config value ``x, aclEnable=false`` a second
    key, and a CR, LF, U+2028, U+2029, U+0085 or ESC a line of its own (or a recoloured terminal)
    wherever the message is written without logs.py (formatEvent, a syslog observer).  Now any value
    but a plain token is a JSON string, its control characters escapes; plain tokens stay as they are."""
    forged = "k -> ok\r\n2026-11-28T00:00:00+0000 [twisted_namesrv.audit#info] audit \u2028\u2029\x85\x1b[31m"
    answer, events = ask(served, RequestCode.PUT_KV_CONFIG,
                         {"namespace": "ns", "key": forged, "value": "v", "AccessKey": "op (verified)"}, account=None)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    text = formatEvent(events[0])
    assert audit_of(events)["target"]["key"] == forged  # the event's fields keep it exact
    assert text.endswith(' claimed accessKey="op (verified)" (unverified): namespace=ns key="k -> ok\\r\\n'
                         '2026-11-28T00:00:00+0000 [twisted_namesrv.audit#info] audit \\u2028\\u2029\\u0085'
                         '\\u001b[31m" -> refused ("No acl config for op (verified)")')
    assert not CONTROLS.search(text) and len(text.splitlines()) == 1

    body = b"productEnvName=x, aclEnable=false\norderMessageEnable=true\n"
    answer, events = ask(served, RequestCode.UPDATE_NAMESRV_CONFIG, {}, body)
    assert answer.code == ResponseCode.SUCCESS
    assert formatEvent(events[0]).endswith(
        ': config={productEnvName="x, aclEnable=false", orderMessageEnable=true} -> ok')


def test_only_a_change_the_disk_refused_is_failed_never_a_request_s_own_fault(served, tmp_path, monkeypatch):
    """``failed`` pages (NamesrvAdminRequestsFailing, critical: "could not be saved, a full disk?").
    Java answers SYSTEM_ERROR to a request of its own fault, and so do our limits: any peer without ACL
    sent a put without a namespace, a config body that is no properties text or a put past maxKvBytes
    in a loop, each counted failed, and paged whoever was on call for a disk that was fine.  Those
    are refused now; a save the disk refused, or a handler that raised (a bug), is still failed."""
    open_server = Served(tmp_path / "open", maxKvBytes=300)
    for code, ext, body in [
            (RequestCode.PUT_KV_CONFIG, {"key": "k", "value": "v"}, None),
            (RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v" * 400}, None),
            (RequestCode.UPDATE_NAMESRV_CONFIG, {}, b"productEnvName=\\uZZZZ\n")]:
        answer, events = ask(open_server, code, ext, body, account=None)
        assert answer.code != ResponseCode.SUCCESS and audit_of(events)["result"] == "refused", answer.remark
    samples = open_server.scrape()
    assert not any(value(samples, "namesrv_admin_requests_total", operation=o, result="failed")
                   for o in OPERATIONS.values())

    kv_path = tmp_path / "open" / "kv.json"
    kv_path.unlink(missing_ok=True)
    kv_path.mkdir(parents=True)  # a directory where the file belongs: the save fails
    answer, events = ask(open_server, RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v"},
                         account=None)
    assert answer.code == ResponseCode.SYSTEM_ERROR and "cannot save" in answer.remark
    assert audit_of(events)["result"] == "failed"

    def broken(state, request, peer):
        raise RuntimeError("a bug")
    monkeypatch.setitem(processor.HANDLERS, RequestCode.DELETE_KV_CONFIG, broken)
    buggy = Served(tmp_path / "buggy")
    answer, events = ask(buggy, RequestCode.DELETE_KV_CONFIG, {"namespace": "ns", "key": "k"}, account=None)
    assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, "RuntimeError: a bug")
    assert audit_of(events)["result"] == "failed"
