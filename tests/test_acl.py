"""aclEnable: state-changing requests must be signed as RocketMQ clients sign them, with an
account of a plain_acl.yml; refusals change nothing and answer what a Java broker answers."""

from __future__ import annotations

import json
import os
import struct
import sys
import time

import pytest
import pytest_twisted
from twisted.internet.utils import getProcessOutputAndValue

from tests.support import server_config, start_server
from tests.test_processor import MASTER, Namesrv
from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body
from twisted_namesrv.bodies.route import DataVersion
from twisted_namesrv.context import Peer
from twisted_namesrv.remoting import RemotingCommand, RequestCode, ResponseCode
from twisted_namesrv.remoting.crc import crc32_masked
from twisted_namesrv.state.acl import AccessControl, AclConfigError, signature, signed, signed_bound

ACCOUNTS = """\
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: operator
    secretKey: operator-secret
    admin: true
  - accessKey: broker
    secretKey: broker-secret
    whiteRemoteAddress:
    admin: false
"""
PUT = {"namespace": "ns", "key": "k", "value": "v"}


@pytest.fixture
def accounts_file(tmp_path):
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACCOUNTS)
    return str(path)


def ns_with_acl(tmp_path, accounts_file, **values) -> Namesrv:
    return Namesrv(tmp_path, aclEnable=True, aclAccountsFile=accounts_file, **values)


def test_signature_is_hmac_sha1_of_the_values_in_key_order_then_the_body():
    # by hand: values of AccessKey, b, topic (Java String order) then the body
    import base64
    import hashlib
    import hmac

    expected = base64.b64encode(hmac.new(b"sk", b"akBtopicXbody", hashlib.sha1).digest()).decode()
    assert signature("sk", {"topic": "topicX", "b": "B", "AccessKey": "ak", "Signature": "old"}, b"body") == expected



def test_a_null_value_is_signed_as_java_appends_it():
    """StringBuilder.append((String) null) writes "null": a header with a null extField is checked
    like any other, not failed on."""
    import base64
    import hashlib
    import hmac

    expected = base64.b64encode(hmac.new(b"sk", b"aknull", hashlib.sha1).digest()).decode()
    assert signature("sk", {"AccessKey": "ak", "b": None}, None) == expected


def as_java_sends_it(ns: Namesrv, code: int, ext: dict) -> RemotingCommand:
    """``ext`` in a JSON header as a Java client writes it (a lone surrogate as ``\\ud800``), decoded and
    dispatched as the server does (Namesrv.call's own encoder would write the surrogate as ``?``)."""
    header = json.dumps({"code": code, "language": "JAVA", "version": 479, "opaque": 1, "flag": 0, "extFields": ext})
    request = RemotingCommand.decode(struct.pack(">I", len(header)) + header.encode())
    return ns.dispatcher.dispatch(request, Peer(1, "127.0.0.1:40000"))


def test_a_lone_surrogate_is_signed_as_java_writes_it_and_refused_not_raised(tmp_path, accounts_file):
    """A JSON header's "\\ud800" is a lone surrogate: Java's getBytes(UTF_8) writes it as "?", and the
    signature checks raised on it (no answer, no refusal line, no audit event)."""
    assert signature("sk", {"AccessKey": "ak", "k": "a\ud800b"}, None) == signature("sk", {"AccessKey": "ak",
                                                                                            "k": "a?b"}, None)
    assert signature("sk", {"\ud800": "v", "a": "w"}, None)  # keys in UTF-16 order, surrogates and all
    ns = ns_with_acl(tmp_path, accounts_file)
    for fields in ({"namespace": "n\ud800", "AccessKey": "operator", "Signature": "eA=="},
                   {"namespace": "n", "AccessKey": "operator", "Signature": "\ud800"}):
        answer = as_java_sends_it(ns, RequestCode.PUT_KV_CONFIG, {"key": "k", "value": "v", **fields})
        assert answer.code == ResponseCode.SYSTEM_ERROR and "Check signature failed" in answer.remark
    assert ns.state.refusals.counts["remoting", "acl"] == 2
    signed_put = signed({"namespace": "n\ud800", "key": "k", "value": "v"}, "operator", "operator-secret")
    assert as_java_sends_it(ns, RequestCode.PUT_KV_CONFIG, signed_put).code == ResponseCode.SUCCESS
    # both signatures (namesrv-admin's): the NamesrvSignature's content keeps the surrogate's own bytes
    bound = signed_bound({"namespace": "n\ud800", "key": "k", "value": "v"}, RequestCode.PUT_KV_CONFIG, "operator",
                         "operator-secret", None, int(ns.clock.seconds() * 1000), bytes(range(16)))
    assert as_java_sends_it(ns, RequestCode.PUT_KV_CONFIG, bound).code == ResponseCode.SUCCESS
    moved = {**bound, "namespace": "n\udfff"}  # the same "?" to ACL 1.0, other bytes to the NamesrvSignature
    moved["Signature"] = signature("operator-secret", {k: v for k, v in moved.items() if k != "Signature"}, None)
    assert "NamesrvSignature" in as_java_sends_it(ns, RequestCode.PUT_KV_CONFIG, moved).remark


def test_operator_codes_need_an_admin_signature(tmp_path, accounts_file):
    ns = ns_with_acl(tmp_path, accounts_file)
    refused = {
        "No accessKey is configured": PUT,
        "No acl config for nobody": signed(PUT, "nobody", "x"),
        "Check signature failed for accessKey=operator": signed(PUT, "operator", "wrong-secret"),
        "Need admin permission for request code=100, but accessKey=broker is not": signed(PUT, "broker",
                                                                                         "broker-secret"),
    }
    for reason, ext in refused.items():
        answer = ns.call(RequestCode.PUT_KV_CONFIG, ext)
        assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR,
                                                f"org.apache.rocketmq.acl.common.AclException: {reason}")
    assert ns.state.kv.configTable == {}
    tampered = signed(PUT, "operator", "operator-secret")
    tampered["value"] = "changed after signing"
    assert ns.call(RequestCode.PUT_KV_CONFIG, tampered).code == ResponseCode.SYSTEM_ERROR
    assert ns.call(RequestCode.PUT_KV_CONFIG, signed(PUT, "operator", "operator-secret", security_token="t")).code == 0
    assert ns.state.kv.configTable == {"ns": {"k": "v"}}
    assert ns.call(RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k"}).code == 0  # reads stay open


def register_ext(body: bytes) -> dict[str, str]:
    return {"clusterName": "c1", "brokerAddr": MASTER, "brokerName": "broker-a", "brokerId": "0",
            "compressed": "false", "bodyCrc32": str(crc32_masked(body))}


def test_brokers_sign_their_registrations_with_any_account(tmp_path, accounts_file):
    ns = ns_with_acl(tmp_path, accounts_file)
    body, other = (encode_register_body(RegisterBrokerBody(DataVersion(1, 1), {t: TopicConfig(t) for t in topics}),
                                        False, True) for topics in (("T1", "T2"), ("T8", "T9")))
    assert ns.call(RequestCode.REGISTER_BROKER, register_ext(body), body).code == ResponseCode.SYSTEM_ERROR
    body_swapped = ns.call(RequestCode.REGISTER_BROKER, signed(register_ext(body), "broker", "broker-secret", body),
                           other)  # the signature covers the body
    assert body_swapped.code == ResponseCode.SYSTEM_ERROR and ns.routes.topicQueueTable == {}
    good = ns.call(RequestCode.REGISTER_BROKER, signed(register_ext(body), "broker", "broker-secret", body), body)
    assert good.code == ResponseCode.SUCCESS and sorted(ns.routes.topicQueueTable) == ["T1", "T2"]


def test_reads_need_a_signature_when_configured(tmp_path, accounts_file):
    ns = ns_with_acl(tmp_path, accounts_file, aclReadRequired=True)
    ask = {"topic": "T1"}
    assert ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, ask).code == ResponseCode.SYSTEM_ERROR
    assert ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, signed(ask, "broker", "broker-secret")).code == (
        ResponseCode.TOPIC_NOT_EXIST)


@pytest.mark.parametrize(("text", "problem"), [
    ("accounts: []", "has no 'accounts' list"), ("accounts:\n  - accessKey: a\n", "account 1 needs"),
    ("accounts: [", "cannot read"),
])
def test_a_bad_accounts_file_is_refused_naming_it(tmp_path, text, problem):
    path = tmp_path / "plain_acl.yml"
    path.write_text(text)
    with pytest.raises(AclConfigError, match=f"^aclAccountsFile: .*{problem}"):
        AccessControl.from_file(str(path), clock=time.time)


def test_acl_on_without_an_accounts_file_is_a_config_error(tmp_path):
    from twisted_namesrv import tap

    (tmp_path / "namesrv.properties").write_text("aclEnable=true\n")
    with pytest.raises(SystemExit, match="^namesrv: cannot start: aclAccountsFile: required"):
        tap.Options().parseOptions(["-c", str(tmp_path / "namesrv.properties")])


@pytest_twisted.inlineCallbacks
def test_the_admin_cli_signs_with_the_environments_keys(tmp_path, accounts_file):
    service, port = yield start_server(server_config(tmp_path, aclEnable=True, aclAccountsFile=accounts_file))
    command = [sys.executable, "-m", "twisted_namesrv.admin", "-n", f"127.0.0.1:{port}", "updateKvConfig", "-s", "NS",
               "-k", "k", "-v", "v"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("NAMESRV_")}
    try:
        out, err, code = yield getProcessOutputAndValue(command[0], command[1:], env=env)
        assert code == 1 and b"AclException: No accessKey is configured" in err
        keys = {"NAMESRV_ACCESS_KEY": "operator", "NAMESRV_SECRET_KEY": "operator-secret"}
        out, err, code = yield getProcessOutputAndValue(command[0], command[1:], env={**env, **keys})
        assert code == 0, err
        assert service.state.kv.configTable == {"NS": {"k": "v"}}
    finally:
        yield service.stopService()


# -- address whitelists (ACL 1.0's RemoteAddressStrategyFactory, plus CIDR) --------------------

@pytest.mark.parametrize(("pattern", "address", "matches"), [
    ("*", "10.1.2.3", True), ("*.*.*.*", "10.1.2.3", True), ("*:*:*:*:*:*:*:*", "::1", True),
    ("", "10.1.2.3", False),
    ("192.168.0.1", "192.168.0.1", True), ("192.168.0.1", "192.168.0.2", False),
    ("192.168.1.1-10", "192.168.1.10", True), ("192.168.1.1-10", "192.168.1.11", False),
    ("192.168.1.1-10", "192.168.2.5", False),
    ("192.168.*", "192.168.200.7", True), ("192.168.*", "192.169.0.1", False),
    ("192.168.1.*", "192.168.1.254", True), ("192.168.1-10.*", "192.168.7.1", True),
    ("192.168.1-10.*", "192.168.11.1", False),
    ("192.168.1.{1,2,3}", "192.168.1.3", True), ("192.168.1.{1,2,3}", "192.168.1.4", False),
    ("10.0.0.1,10.0.0.2", "10.0.0.2", True), ("10.0.0.1,10.0.0.2", "10.0.0.3", False),
    ("10.0.0.0/8", "10.255.0.1", True), ("10.0.0.0/8", "11.0.0.1", False),
    ("::1", "0:0:0:0:0:0:0:1", True), ("2001:db8::1-ff", "2001:db8::ff", True),
    ("2001:db8::1-ff", "2001:db8::100", False), ("2001:db8:*", "2001:db8:1::9", True),
    ("2001:db8:*", "2001:db9::", False), ("2001:db8::/32", "2001:db8:ffff::1", True),
    ("2001:db8::/32", "10.0.0.1", False), ("192.168.*", "::ffff:10.0.0.1", False),
])
def test_whitelist_patterns_match_as_acl_1_0_defines_them(pattern, address, matches):
    import ipaddress

    from twisted_namesrv.state.acl import address_pattern

    assert address_pattern(pattern)(ipaddress.ip_address(address)) is matches


@pytest.mark.parametrize("pattern", ["192.168.1", "300.1.1.1", "*.168.1.1", "192.168.1.10-1", "192.168.1.{x}",
                                     "not-an-address", "10.0.0.0/33"])
def test_a_bad_whitelist_pattern_stops_the_start_naming_it(tmp_path, pattern):
    path = tmp_path / "plain_acl.yml"
    path.write_text(f"accounts:\n  - accessKey: a\n    secretKey: s\n    whiteRemoteAddress: '{pattern}'\n")
    with pytest.raises(AclConfigError, match="account 1: bad address pattern"):
        AccessControl.from_file(str(path), clock=time.time)


WHITELISTS = """\
globalWhiteRemoteAddresses:
  - 10.10.*
  - 192.168.0.0/24
accounts:
  - accessKey: ops
    secretKey: ops-secret
    admin: true
    whiteRemoteAddress: 172.16.0.1-9
  - accessKey: broker
    secretKey: broker-secret
    whiteRemoteAddress: 172.16.0.1-9
"""


@pytest.fixture
def whitelisted(tmp_path):
    path = tmp_path / "plain_acl.yml"
    path.write_text(WHITELISTS)
    return AccessControl.from_file(str(path), clock=time.time)


def test_the_global_whitelist_lets_brokers_and_readers_in_unsigned_but_never_an_admin_write(whitelisted):
    for peer in ("10.10.3.4:5555", "192.168.0.77:5555"):
        assert whitelisted.refusal(RequestCode.BROKER_HEARTBEAT, {}, None, peer) is None
        assert whitelisted.refusal(RequestCode.REGISTER_BROKER, {}, None, peer) is None
        # Java's ACL 1.0 lets a globally whitelisted peer do anything; an admin write stays signed here
        assert "No accessKey" in whitelisted.refusal(RequestCode.PUT_KV_CONFIG, PUT, None, peer)
    assert "No accessKey" in whitelisted.refusal(RequestCode.BROKER_HEARTBEAT, {}, None, "10.11.3.4:5555")


def test_an_accounts_whitelist_replaces_its_signature_not_its_permissions(whitelisted):
    for key in ("ops", "broker"):
        unsigned = {**PUT, "AccessKey": key}
        assert whitelisted.refusal(RequestCode.BROKER_HEARTBEAT, unsigned, None, "172.16.0.5:1") is None
        assert "Check signature failed" in whitelisted.refusal(RequestCode.BROKER_HEARTBEAT, unsigned, None,
                                                               "172.16.0.10:1")
    for key in ("ops", "broker"):  # Java would let these through; an admin write is always signed here
        refusal = whitelisted.refusal(RequestCode.PUT_KV_CONFIG, {**PUT, "AccessKey": key}, None, "172.16.0.5:1")
        assert "Check signature failed" in refusal
    assert "No accessKey" in whitelisted.refusal(RequestCode.PUT_KV_CONFIG, PUT, None, "172.16.0.5:1")
    signed_elsewhere = signed(PUT, "ops", "ops-secret")
    assert whitelisted.refusal(RequestCode.PUT_KV_CONFIG, signed_elsewhere, None, "8.8.8.8:1") is None
    by_broker = signed(PUT, "broker", "broker-secret")
    refusal = whitelisted.refusal(RequestCode.PUT_KV_CONFIG, by_broker, None, "172.16.0.5:1")
    assert "Need admin permission" in refusal


@pytest.mark.parametrize(("remote", "ip"), [("10.0.0.1:5555", "10.0.0.1"), ("::1:5555", "::1"),
                                            ("[2001:db8::7]:80", "2001:db8::7"), ("::ffff:10.0.0.1:80", "10.0.0.1"),
                                            ("fe80::1%eth0:33", "fe80::1"), ("?:?", None)])
def test_the_peer_address_a_whitelist_is_matched_against(remote, ip):
    import ipaddress

    from twisted_namesrv.state.acl import peer_ip

    assert peer_ip(remote) == (None if ip is None else ipaddress.ip_address(ip))


def test_whitelists_apply_through_the_dispatcher(tmp_path):
    path = tmp_path / "plain_acl.yml"
    path.write_text("globalWhiteRemoteAddresses: ['127.0.0.1']\naccounts:\n  - accessKey: a\n    secretKey: s\n")
    ns = ns_with_acl(tmp_path, str(path))
    assert ns.call(RequestCode.BROKER_HEARTBEAT, {"clusterName": "c", "brokerAddr": "a:1", "brokerName": "b",
                                                  "brokerId": "0"}).code == ResponseCode.SUCCESS  # from 127.0.0.1
    assert ns.call(RequestCode.PUT_KV_CONFIG, PUT).code == ResponseCode.SYSTEM_ERROR
    assert ns.state.kv.get("ns", "k") is None


def test_account_reprs_hold_no_secret():
    from twisted_namesrv.state.acl import Account

    assert "operator-secret" not in repr(Account("operator", "operator-secret", True))


def test_stock_brokers_register_unsigned_from_the_broker_networks_only(tmp_path, accounts_file):
    """aclBrokerNetworks: a stock broker (it signs nothing) registers, heartbeats and unregisters from
    the networks named, nowhere else; no network stands in for an admin's signature."""
    topics = {t: TopicConfig(t) for t in ("T1", "T2")}
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), topics), False, True)
    ns = ns_with_acl(tmp_path, accounts_file, aclBrokerNetworks="10.0.0.0/8, 127.0.0.0/8")
    assert ns.call(RequestCode.REGISTER_BROKER, register_ext(body), body).code == ResponseCode.SUCCESS  # 127.0.0.1
    assert sorted(ns.routes.topicQueueTable) == ["T1", "T2"]
    assert ns.call(RequestCode.PUT_KV_CONFIG, PUT).code == ResponseCode.SYSTEM_ERROR
    assert ns.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T1"}).code == ResponseCode.SYSTEM_ERROR
    assert sorted(ns.routes.topicQueueTable) == ["T1", "T2"] and ns.state.kv.get("ns", "k") is None

    acl = ns.state.acl
    for code in (RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER, RequestCode.BROKER_HEARTBEAT,
                 RequestCode.QUERY_DATA_VERSION):
        assert acl.refusal(code, {}, None, "10.1.2.3:10911") is None
        assert "No accessKey" in acl.refusal(code, {}, None, "192.168.0.1:10911")
        assert acl.refusal(code, signed({}, "broker", "broker-secret"), None, "192.168.0.1:10911") is None
    for code in (RequestCode.PUT_KV_CONFIG, RequestCode.WIPE_WRITE_PERM_OF_BROKER, RequestCode.UPDATE_NAMESRV_CONFIG):
        assert "No accessKey" in acl.refusal(code, {}, None, "10.1.2.3:1")
        assert "Need admin" in acl.refusal(code, signed({}, "broker", "broker-secret"), None, "10.1.2.3:1")
        assert acl.refusal(code, signed({}, "operator", "operator-secret"), None, "192.168.0.1:1") is None


@pytest.mark.parametrize("text", ["10.0.0.0/33", "example.org", "10.0.0.0/8;192.168.0.0/16"])
def test_a_bad_broker_network_stops_the_start_naming_the_key(tmp_path, accounts_file, text):
    from twisted_namesrv.state.config import ConfigError

    with pytest.raises(ConfigError, match="aclBrokerNetworks: .*expected CIDR networks"):
        ns_with_acl(tmp_path, accounts_file, aclBrokerNetworks=text)


def test_an_acl_refusal_is_one_log_line_with_the_peer_and_a_count(tmp_path, accounts_file):
    from twisted.logger import capturedLogs

    ns = ns_with_acl(tmp_path, accounts_file)
    with capturedLogs() as events:
        for _ in range(3):
            assert ns.call(RequestCode.PUT_KV_CONFIG, PUT).code == ResponseCode.SYSTEM_ERROR
    refused = [e for e in events if e.get("refused") == "acl"]
    assert len(refused) == 3 and [e["log_level"].name for e in refused] == ["warn", "debug", "debug"]
    assert refused[0]["peer"] == "127.0.0.1:40000" and refused[0]["kind"] == "admin"
    assert refused[0]["why"] == "No accessKey is configured"
    assert ns.state.refusals.counts["remoting", "acl"] == 3


def test_the_accounts_file_is_read_again_when_it_changes_and_a_broken_one_changes_nothing(tmp_path, accounts_file):
    """Java's AclFileWatchService reloads plain_acl.yml (every 5 s); so does the service's timer."""
    from twisted.internet import task
    from twisted.logger import capturedLogs

    from twisted_namesrv.service import NamesrvService
    from twisted_namesrv.state.acl import RELOAD_INTERVAL_SECONDS

    clock = task.Clock()
    service = NamesrvService.from_config(server_config(tmp_path, aclEnable=True, aclAccountsFile=accounts_file),
                                         reactor=clock)
    acl = service.state.acl
    timer = next(child for child in service if getattr(child, "step", None) == RELOAD_INTERVAL_SECONDS)
    timer.startService()
    assert "newcomer" not in acl.accounts
    with open(accounts_file, "a") as file:
        file.write("  - accessKey: newcomer\n    secretKey: newcomer-secret\n    admin: true\n")
    with capturedLogs() as events:
        clock.advance(RELOAD_INTERVAL_SECONDS)
    assert "newcomer" in acl.accounts and acl.accounts["newcomer"].admin
    assert any("reloaded" in e.get("outcome", "") for e in events)
    assert acl.refusal(RequestCode.PUT_KV_CONFIG, signed(PUT, "newcomer", "newcomer-secret"), None) is None

    with open(accounts_file, "w") as file:
        file.write("accounts: [\n")  # half written
    with capturedLogs() as events:
        clock.advance(RELOAD_INTERVAL_SECONDS)
    assert "newcomer" in acl.accounts and "operator" in acl.accounts  # the accounts read before stay
    (error,) = [e for e in events if "not reloaded" in e.get("outcome", "")]
    assert error["log_level"].name == "error" and "not valid YAML" in error["outcome"]
    with capturedLogs() as events:
        clock.advance(RELOAD_INTERVAL_SECONDS)
    assert not [e for e in events if "outcome" in e]  # said once, not every 5 s
    timer.stopService()


def test_a_repeated_lookup_is_checked_again_when_reads_are_guarded(tmp_path):
    """With aclReadRequired a lookup's answer depends on who asks (the peer's address, the
    accounts as last reloaded), not on its bytes alone: the same bytes from a peer outside the
    whitelist are refused, even right after they were answered from a peer inside it (answered
    from memory, they were not: answer_cache.py keeps no answer frame then)."""
    path = tmp_path / "plain_acl.yml"
    path.write_text("globalWhiteRemoteAddresses: ['10.0.0.1']\naccounts:\n  - accessKey: a\n    secretKey: s\n")
    ns = ns_with_acl(tmp_path, str(path), aclReadRequired=True, compatVersion="4.9.8")
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), {"T1": TopicConfig("T1")}), False, False)
    ext = {"brokerName": "b", "brokerAddr": "10.0.0.1:1", "clusterName": "c", "haServerAddr": "h", "brokerId": "0"}
    assert ns.call(RequestCode.REGISTER_BROKER, signed(ext, "a", "s", body), body).code == ResponseCode.SUCCESS
    lookup = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}, opaque=5,
                                     version=409).encode()
    inside, outside = Peer(1, "10.0.0.1:4000"), Peer(2, "10.0.0.2:4000")
    for _ in range(2):
        answer = ns.dispatcher.handle(lookup[4:], inside)
        assert answer is not None and RemotingCommand.decode(answer[4:]).code == ResponseCode.SUCCESS
    for frames in ([lookup[4:]], [lookup[4:]] * 5):
        out: list[bytes] = []
        ns.dispatcher.answer(frames, outside, out)
        assert [RemotingCommand.decode(a[4:]).code for a in out] == [ResponseCode.SYSTEM_ERROR] * len(frames)
    out = []
    assert ns.dispatcher.answer_read(lookup * 5, out) == 0 and out == []
