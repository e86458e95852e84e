"""ACL 1.0's signature (Java's, which every RocketMQ client sends) covers the values of the extFields
in key order and the body: not the request code, not the fields' names or boundaries, not the time.
A captured signed request can be replayed as another code or re-cut into other fields. Java clients
must keep working, so that stays (docs/security.md says so, with TLS as the answer); beside it,
NamesrvSignature (state/acl.py: bound_signature) binds the code, each field by name and the body,
and is accepted once within a window; aclNamesrvSignatureRequired makes operators' requests carry
it, and namesrv-admin sends it and signs reads only when asked."""

from __future__ import annotations

import os
import sys

import pytest
import pytest_twisted
from twisted.internet import threads
from twisted.internet.utils import getProcessOutputAndValue

from tests.support import server_config, start_server
from tests.test_acl import ACCOUNTS, register_ext
from tests.test_housekeeping import START
from tests.test_processor import Namesrv
from twisted_namesrv.admin.client import NamesrvClient
from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body
from twisted_namesrv.bodies.route import DataVersion
from twisted_namesrv.remoting import RequestCode, ResponseCode
from twisted_namesrv.state.acl import (
    ADMIN,
    NAMESRV_SIGNATURE,
    NONCE_LIMIT,
    AccessControl,
    NonceCache,
    needs_signature,
    signed,
    signed_bound,
)

OPERATOR = ("operator", "operator-secret")
NOW_MS = int(START * 1000)


@pytest.fixture
def accounts_file(tmp_path):
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACCOUNTS)
    return str(path)


def bound(ext: dict, code: int, stamp_ms: int = NOW_MS, nonce: bytes = b"n" * 16, body: bytes | None = None) -> dict:
    return signed_bound(ext, code, *OPERATOR, body, stamp_ms, nonce)


def recut(ext: dict, **fields: str) -> dict:
    """The same signed request with its field values re-cut: every value's text, in key order, unchanged."""
    return {**ext, **fields}


def test_acl_1_0_covers_neither_the_code_nor_the_field_boundaries(tmp_path, accounts_file):
    """The limit, as Java has it: without aclNamesrvSignatureRequired both attacks still work on
    Java-signed requests (Java's mqadmin and every broker send nothing else)."""
    ns = Namesrv(tmp_path, aclEnable=True, aclAccountsFile=accounts_file)
    ns.state.kv.put("ns", "k", "kept")
    read = signed({"namespace": "ns", "key": "k"}, *OPERATOR)  # mqadmin signs every request
    assert ns.call(RequestCode.GET_KV_CONFIG, read).code == ResponseCode.SUCCESS
    assert ns.call(RequestCode.DELETE_KV_CONFIG, read).code == ResponseCode.SUCCESS  # replayed as a delete
    assert ns.state.kv.get("ns", "k") is None
    put = signed({"namespace": "P", "key": "xSWA"}, *OPERATOR)  # values in key order: "xSWA" + "P"
    moved = recut(put, namespace="SWAP", key="x")  # "x" + "SWAP": the same text, the same signature
    assert ns.call(RequestCode.DELETE_KV_CONFIG, moved).code == ResponseCode.SUCCESS


def test_with_namesrv_signatures_required_replays_and_re_cuts_are_refused(tmp_path, accounts_file):
    ns = Namesrv(tmp_path, aclEnable=True, aclAccountsFile=accounts_file, aclNamesrvSignatureRequired=True)
    ns.state.kv.put("ns", "k", "kept")
    ns.state.kv.put("SWAP", "x", "kept")

    def refused(code: int, ext: dict, why: str) -> None:
        answer = ns.call(code, ext)
        assert answer.code == ResponseCode.SYSTEM_ERROR and why in answer.remark, (code, answer.remark)

    # a Java-signed read replayed as a delete: operators' codes need a NamesrvSignature now
    read = signed({"namespace": "ns", "key": "k"}, *OPERATOR)
    assert ns.call(RequestCode.GET_KV_CONFIG, read).code == ResponseCode.SUCCESS  # reads: Java's signature does
    refused(RequestCode.DELETE_KV_CONFIG, read, "needs a NamesrvSignature (aclNamesrvSignatureRequired=true)")
    # namesrv-admin's request re-cut: Java's signature still holds, the NamesrvSignature does not
    put = bound({"namespace": "P", "key": "xSWA", "value": "v"}, RequestCode.PUT_KV_CONFIG)
    refused(RequestCode.PUT_KV_CONFIG, recut(put, namespace="SWAP", key="x"), "NamesrvSignature of accessKey="
            "operator check failed")
    refused(RequestCode.DELETE_KV_CONFIG, put, "check failed")  # ... or sent as another code
    assert ns.call(RequestCode.PUT_KV_CONFIG, put).code == ResponseCode.SUCCESS  # as signed: once
    refused(RequestCode.PUT_KV_CONFIG, put, "was seen before: a replayed request")
    assert ns.state.kv.configTable == {"ns": {"k": "kept"}, "SWAP": {"x": "kept"}, "P": {"xSWA": "v"}}
    # wipe and add write permission take the same field: the code is what tells them apart
    wipe = bound({"brokerName": "broker-a"}, RequestCode.WIPE_WRITE_PERM_OF_BROKER, nonce=b"w" * 16)
    refused(RequestCode.ADD_WRITE_PERM_OF_BROKER, wipe, "check failed")
    # the time: within aclSignatureWindowSeconds (300) either way, nonces remembered that long
    stale = bound({"namespace": "ns", "key": "k"}, RequestCode.DELETE_KV_CONFIG, NOW_MS - 301_000, b"s" * 16)
    refused(RequestCode.DELETE_KV_CONFIG, stale, "is 301 s behind the server's time, beyond "
            "aclSignatureWindowSeconds=300")
    ahead = bound({"namespace": "ns", "key": "k"}, RequestCode.DELETE_KV_CONFIG, NOW_MS + 299_000, b"a" * 16)
    assert ns.call(RequestCode.DELETE_KV_CONFIG, ahead).code == ResponseCode.SUCCESS
    malformed = {**put, NAMESRV_SIGNATURE: "1:x:y:z"}
    refused(RequestCode.PUT_KV_CONFIG, signed({k: v for k, v in malformed.items() if k != "Signature"}, *OPERATOR),
            "is malformed")
    assert ns.state.kv.configTable == {"ns": {}, "SWAP": {"x": "kept"}, "P": {"xSWA": "v"}}  # Java keeps it empty
    assert ns.state.refusals.counts["remoting", "acl"] == 7  # each refusal above, logged and counted


def test_brokers_and_java_reads_keep_working_with_namesrv_signatures_required(tmp_path, accounts_file):
    """What Java clients send, Java's signature alone, still does all but operators' codes."""
    ns = Namesrv(tmp_path, aclEnable=True, aclAccountsFile=accounts_file, aclNamesrvSignatureRequired=True,
                 aclReadRequired=True)
    topics = {t: TopicConfig(t) for t in ("T1", "T2")}  # (5.3.3 refuses a first registration of one topic)
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), topics), False, True)
    answer = ns.call(RequestCode.REGISTER_BROKER, signed(register_ext(body), "broker", "broker-secret", body), body)
    assert answer.code == ResponseCode.SUCCESS and list(ns.routes.topicQueueTable) == ["T1", "T2"]
    answer = ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, signed({"topic": "T1"}, "broker", "broker-secret"))
    assert answer.code == ResponseCode.SUCCESS


def test_the_nonce_cache_is_bounded_and_never_lets_a_replay_in():
    cache = NonceCache(window=300, limit=3)
    for number in range(3):
        assert cache.refusal(bytes([number]) * 16, 1000 + number, now=1010) is None
    assert cache.refusal(b"\x00" * 16, 1000, now=1010) == "was seen before: a replayed request"
    assert cache.refusal(b"\x09" * 16, 1005, now=1010) is None  # full: the oldest (1000) forgotten early ...
    assert len(cache.seen) == 3 and cache.floor == 1000
    assert cache.refusal(b"\x00" * 16, 1000, now=1010).startswith("is older than the replay cache remembers")
    assert cache.refusal(b"\x08" * 16, 1000, now=1010) is not None  # ... and nothing at or before it either
    assert cache.refusal(b"\x01" * 16, 1001, now=1400) .startswith("is 399 s behind")  # out of the window: its time
    assert cache.refusal(b"\x0a" * 16, 1399, now=1400) is None
    assert len(cache.seen) == 1  # the expired ones went with it, raising the floor to the newest of them:
    assert cache.floor == 1005 and NONCE_LIMIT == 16_384  # a clock set back lets none of them in again
    assert cache.refusal(b"\x05" * 16, 1005, now=1010).startswith("is older than the replay cache remembers")


def test_clients_sign_what_the_server_checks_and_reads_only_when_asked():
    assert needs_signature(RequestCode.PUT_KV_CONFIG, {}) and needs_signature(RequestCode.REGISTER_BROKER, {})
    assert not needs_signature(RequestCode.GET_KV_CONFIG, {}) and needs_signature(RequestCode.GET_KV_CONFIG, {}, True)
    assert needs_signature(1009, {}) and needs_signature(1011, {}) and needs_signature(1003, {})  # the controller's
    assert needs_signature(1002, {"designateElect": "true"}) and not needs_signature(1005, {})


def operator_env() -> dict[str, str]:
    """namesrv-admin's environment with the operator's account and no other NAMESRV_ setting."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NAMESRV_")}
    env.update({"NAMESRV_ACCESS_KEY": "operator", "NAMESRV_SECRET_KEY": "operator-secret"})
    return env


@pytest_twisted.inlineCallbacks
def test_namesrv_admin_signs_writes_with_a_namesrv_signature_and_reads_only_when_asked(tmp_path, accounts_file):
    config = server_config(tmp_path, aclEnable=True, aclAccountsFile=accounts_file, aclReadRequired=True,
                           aclNamesrvSignatureRequired=True)
    service, port = yield start_server(config)
    seen: list[dict] = []
    service.dispatcher.observe(lambda request, peer, response: seen.append(dict(request.ext or {})))
    env = operator_env()
    admin = [sys.executable, "-m", "twisted_namesrv.admin", "-n", f"127.0.0.1:{port}"]
    try:
        out, err, code = yield getProcessOutputAndValue(admin[0], [*admin[1:], "updateKvConfig", "-s", "NS", "-k",
                                                                   "k", "-v", "v"], env=env)
        assert code == 0, err
        assert seen[-1]["AccessKey"] == "operator" and seen[-1][NAMESRV_SIGNATURE].startswith("1:")
        read = [*admin[1:], "getKvConfig", "-s", "NS", "-k", "k"]
        out, err, code = yield getProcessOutputAndValue(admin[0], read, env=env)
        assert code == 1 and "AccessKey" not in seen[-1]  # sent unsigned: nothing to replay
        assert b"No accessKey is configured (the NameServer wants reads signed, aclReadRequired: set " \
               b"NAMESRV_SIGN_READS=true or pass --sign-reads" in err
        out, err, code = yield getProcessOutputAndValue(admin[0], read, env={**env, "NAMESRV_SIGN_READS": "true"})
        assert code == 0 and b"v" in out, err
        assert seen[-1]["AccessKey"] == "operator" and NAMESRV_SIGNATURE in seen[-1]
    finally:
        yield service.stopService()


def test_a_client_without_credentials_signs_nothing(tmp_path):
    client = NamesrvClient("127.0.0.1:1", 1)
    assert client.credentials is None and client.sign_reads is False


def test_the_controllers_operator_codes_need_one_too(accounts_file):
    """The controller's port shares the NameServer's AccessControl: 1009, 1011 and a designated 1002."""
    acl = AccessControl.from_file(accounts_file, bound_required=True, clock=lambda: START)
    clean = {"clusterName": "c1", "brokerName": "broker-a"}
    refused = acl.refusal(1011, signed(clean, *OPERATOR), None, "10.0.0.9:40000", ADMIN)
    assert refused is not None and "needs a NamesrvSignature" in refused
    assert acl.refusal(1011, bound(clean, 1011), None, "10.0.0.9:40000", ADMIN) is None
    assert "check failed" in acl.refusal(1009, bound(clean, 1011, nonce=b"o" * 16), None, "10.0.0.9:40000", ADMIN)


def broker_bound(ext: dict, code: int, stamp_ms: int, nonce: bytes) -> dict:
    return signed_bound(ext, code, "broker", "broker-secret", None, stamp_ms, nonce)


def test_one_accounts_signatures_cannot_crowd_out_anothers(tmp_path, accounts_file):
    """The nonce cache was one for every account: a broker's account (no admin) filling it with
    signatures dated at the window's far edge raised the floor there, and every operator's request
    was refused ("older than the replay cache remembers") for the next five minutes."""
    ns = Namesrv(tmp_path, aclEnable=True, aclAccountsFile=accounts_file, aclNamesrvSignatureRequired=True)
    ahead = NOW_MS + 299_000
    query = {"clusterName": "c1", "brokerAddr": "127.0.0.1:10911", "brokerName": "broker-a", "brokerId": "0"}
    for number in range(NONCE_LIMIT + 1):
        flood = broker_bound(query, RequestCode.QUERY_DATA_VERSION, ahead, number.to_bytes(16, "big"))
        assert ns.call(RequestCode.QUERY_DATA_VERSION, flood).code == ResponseCode.SUCCESS
    put = bound({"namespace": "ns", "key": "k", "value": "v"}, RequestCode.PUT_KV_CONFIG, NOW_MS + 1, b"o" * 16)
    answer = ns.call(RequestCode.PUT_KV_CONFIG, put)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert ns.state.kv.get("ns", "k") == "v"


def test_a_request_signed_before_the_server_started_is_refused_after_a_restart(tmp_path, accounts_file):
    """The nonces are remembered in memory: a captured operator's request replayed to the server
    restarted within the window was accepted again (a value put back, a deletion done twice)."""
    before = Namesrv(tmp_path, aclEnable=True, aclAccountsFile=accounts_file, aclNamesrvSignatureRequired=True)
    delete = bound({"namespace": "ns", "key": "k"}, RequestCode.DELETE_KV_CONFIG, NOW_MS + 5_000, b"d" * 16)
    before.clock.advance(10)
    assert before.call(RequestCode.DELETE_KV_CONFIG, delete).code == ResponseCode.SUCCESS
    assert before.call(RequestCode.DELETE_KV_CONFIG, delete).code == ResponseCode.SYSTEM_ERROR
    # restarted 20 s later: a fresh process, no nonces remembered
    after = Namesrv(tmp_path, started=START + 30, aclEnable=True, aclAccountsFile=accounts_file,
                    aclNamesrvSignatureRequired=True)
    after.state.kv.put("ns", "k", "put back")
    answer = after.call(RequestCode.DELETE_KV_CONFIG, delete)
    assert answer.code == ResponseCode.SYSTEM_ERROR and "before this server started" in answer.remark
    assert after.state.kv.get("ns", "k") == "put back"
    fresh = bound({"namespace": "ns", "key": "k"}, RequestCode.DELETE_KV_CONFIG, NOW_MS + 30_000, b"f" * 16)
    assert after.call(RequestCode.DELETE_KV_CONFIG, fresh).code == ResponseCode.SUCCESS


def test_a_request_signed_in_the_millisecond_the_server_started_is_not_before_it(tmp_path, accounts_file):
    """A NamesrvSignature gives its time in whole milliseconds; the start was kept to the microsecond,
    so a client that signed in the same millisecond (a test's first write; a script started with the
    server) had ``stamp_ms / 1000`` fall before it and was refused as a replay from the last process."""
    ns = Namesrv(tmp_path, started=START + 0.0007, aclEnable=True, aclAccountsFile=accounts_file,
                 aclNamesrvSignatureRequired=True)
    put = bound({"namespace": "ns", "key": "k", "value": "v"}, RequestCode.PUT_KV_CONFIG, NOW_MS, b"s" * 16)
    answer = ns.call(RequestCode.PUT_KV_CONFIG, put)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    earlier = bound({"namespace": "ns", "key": "k", "value": "w"}, RequestCode.PUT_KV_CONFIG, NOW_MS - 1, b"e" * 16)
    assert "before this server started" in ns.call(RequestCode.PUT_KV_CONFIG, earlier).remark


@pytest_twisted.inlineCallbacks
def test_a_write_to_every_namesrv_cannot_be_replayed_from_one_to_another(tmp_path, accounts_file):
    """namesrv-admin signed each NameServer's copy of a write with a nonce of its own: a listener's
    copy of ``updateKvConfig v1`` on its way to A, replayed to B after ``v2`` (within the window), put
    v1 back on B. Now one write carries one nonce to every NameServer, and B has seen it."""
    servers = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        config = server_config(tmp_path / name, aclEnable=True, aclAccountsFile=accounts_file,
                               aclNamesrvSignatureRequired=True)
        servers.append((yield start_server(config)))
    (service_a, port_a), (service_b, port_b) = servers
    seen: list[dict] = []
    service_a.dispatcher.observe(lambda request, peer, response: seen.append(dict(request.ext or {})))
    env = operator_env()
    admin = [sys.executable, "-m", "twisted_namesrv.admin", "-n", f"127.0.0.1:{port_a};127.0.0.1:{port_b}"]
    try:
        for value in ("v1", "v2"):
            out, err, code = yield getProcessOutputAndValue(admin[0], [*admin[1:], "updateKvConfig", "-s", "NS", "-k",
                                                                       "k", "-v", value], env=env)
            assert code == 0, err
        captured = next(ext for ext in seen if ext.get("value") == "v1")
        replay = NamesrvClient(f"127.0.0.1:{port_b}", 5)  # no credentials: sends the captured fields as they are
        try:
            answer = yield threads.deferToThread(replay.call, RequestCode.PUT_KV_CONFIG, captured)
        finally:
            replay.close()
        assert answer.code == ResponseCode.SYSTEM_ERROR and "was seen before" in answer.remark
        assert service_b.state.kv.get("NS", "k") == "v2" and service_a.state.kv.get("NS", "k") == "v2"
    finally:
        for service, _ in servers:
            yield service.stopService()
