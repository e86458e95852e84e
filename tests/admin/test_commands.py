"""Each subcommand against our in-process NameServer, in both output forms."""

from __future__ import annotations

import json

import pytest_twisted

from tests.admin.conftest import TOPICS_A, TOPICS_B
from tests.admin.support import namesrv, run_cli


@pytest_twisted.ensureDeferred
async def test_cluster_list(server):
    a, b = server.brokers
    run = await run_cli("-n", server.addr, "clusterList")
    assert (run.code, run.err) == (0, "")
    lines = [line.split() for line in run.out.splitlines()]
    assert lines[0] == ["#Cluster", "Name", "#Broker", "Name", "#BID", "#Addr"]
    assert lines[1:] == [["DefaultCluster", "broker-a", "0", a.addr], ["DefaultCluster", "broker-b", "0", b.addr]]
    run = await run_cli("-n", server.addr, "--json", "clusterList")
    info = json.loads(run.out)
    assert sorted(info["clusterAddrTable"]["DefaultCluster"]) == ["broker-a", "broker-b"]
    assert info["brokerAddrTable"]["broker-b"]["brokerAddrs"] == {"0": b.addr}


@pytest_twisted.ensureDeferred
async def test_topic_route(server):
    run = await run_cli("topicRoute", "-t", "TopicTest", "-n", server.addr)  # -n after the subcommand
    assert run.code == 0, run.err
    assert run.out.startswith("{\n    \"brokerDatas\"")  # pretty
    route = json.loads(run.out)
    queues = {q["brokerName"]: q["readQueueNums"] for q in route["queueDatas"]}
    assert queues == {"broker-a": 4, "broker-b": 2}
    assert json.loads((await run_cli("-n", server.addr, "--json", "topicRoute", "-t", "TopicTest")).out) == route


@pytest_twisted.ensureDeferred
async def test_topic_route_of_an_unknown_topic_fails_with_the_remark(server):
    run = await run_cli("-n", server.addr, "topicRoute", "-t", "NoSuchTopic")
    assert (run.code, run.out) == (1, "")
    assert "GET_ROUTEINFO_BY_TOPIC failed: TOPIC_NOT_EXIST (17)" in run.err
    assert "No topic route info in name server for the topic: NoSuchTopic" in run.err


@pytest_twisted.ensureDeferred
async def test_topic_list(server):
    run = await run_cli("-n", server.addr, "topicList")
    assert run.code == 0, run.err
    assert run.out.splitlines() == sorted(TOPICS_A | TOPICS_B)
    run = await run_cli("-n", server.addr, "--json", "topicList", "-c", "DefaultCluster")
    assert json.loads(run.out)["topicList"] == sorted(TOPICS_A | TOPICS_B)
    run = await run_cli("-n", server.addr, "topicList", "-c", "NoSuchCluster")
    assert (run.code, run.out) == (0, "")


@pytest_twisted.ensureDeferred
async def test_kv_config_round_trip(server):
    ns = ["-n", server.addr]
    run = await run_cli(*ns, "updateKvConfig", "-s", "NS1", "-k", "k1", "-v", "v 1")
    assert run.code == 0 and f"in name server[{server.addr}] OK" in run.out
    assert (await run_cli(*ns, "updateKvConfig", "-s", "NS1", "-k", "k2", "-v", "v2")).code == 0
    run = await run_cli(*ns, "getKvConfig", "-s", "NS1", "-k", "k1")
    assert (run.code, run.out) == (0, "v 1\n")
    run = await run_cli(*ns, "--json", "getKvConfig", "-s", "NS1", "-k", "k1")
    assert json.loads(run.out) == {"namespace": "NS1", "key": "k1", "value": "v 1"}
    run = await run_cli(*ns, "getKvList", "-s", "NS1")
    assert [line.split(None, 1) for line in run.out.splitlines()] == [["#Key", "#Value"], ["k1", "v 1"], ["k2", "v2"]]
    run = await run_cli(*ns, "--json", "getKvList", "-s", "NS1")
    assert json.loads(run.out)["table"] == {"k1": "v 1", "k2": "v2"}
    run = await run_cli(*ns, "--json", "deleteKvConfig", "-s", "NS1", "-k", "k1")
    assert json.loads(run.out) == {"results": [{"namesrv": server.addr, "ok": True, "deleted": True}]}
    run = await run_cli(*ns, "getKvConfig", "-s", "NS1", "-k", "k1")
    assert (run.code, run.out) == (1, "")
    assert "QUERY_NOT_FOUND (22): No config item, Namespace: NS1 Key: k1" in run.err
    run = await run_cli(*ns, "getKvList", "-s", "NoSuchNamespace")
    assert run.code == 1 and "QUERY_NOT_FOUND (22)" in run.err


@pytest_twisted.ensureDeferred
async def test_namesrv_config(server):
    ns = ["-n", server.addr]
    run = await run_cli(*ns, "getNamesrvConfig")
    assert run.code == 0, run.err
    assert run.out.startswith(f"============{server.addr}============\n")
    assert "orderMessageEnable                                =  false" in run.out
    run = await run_cli(*ns, "updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "true")
    assert (run.code, run.err) == (0, "")
    assert run.out == (f"update name server config in name server[{server.addr}] OK: "
                       "orderMessageEnable = true (was false)\n")
    run = await run_cli(*ns, "--json", "getNamesrvConfig")
    [result] = json.loads(run.out)["results"]
    assert result["namesrv"] == server.addr and result["config"]["orderMessageEnable"] == "true"


@pytest_twisted.ensureDeferred
async def test_blacklisted_config_key_is_refused_with_exit_1(server):
    run = await run_cli("-n", server.addr, "updateNamesrvConfig", "-k", "kvConfigPath", "-v", "/tmp/elsewhere")
    assert (run.code, run.out) == (1, "")
    assert "UPDATE_NAMESRV_CONFIG failed: NO_PERMISSION (16): Can not update config in black list." in run.err


@pytest_twisted.ensureDeferred
async def test_a_config_update_that_did_not_take_exits_1(server, tmp_path):
    """The server answers SUCCESS to each update below (as Java does); the config read back tells."""
    ns = ["-n", server.addr]
    run = await run_cli(*ns, "updateNamesrvConfig", "-k", "noSuchKey", "-v", "1")
    assert (run.code, run.out) == (1, "")
    assert run.err == (f"error: {server.addr}: noSuchKey is not a configuration key of this NameServer: it answered "
                       "OK but ignores the key (getNamesrvConfig lists its keys)\n")
    run = await run_cli(*ns, "updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "maybe")
    assert (run.code, run.out) == (1, "")
    assert run.err == f"error: {server.addr}: orderMessageEnable did not take 'maybe': it reads back as 'false'\n"
    run = await run_cli(*ns, "updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "TRUE")
    assert run.code == 0 and run.out.endswith("orderMessageEnable = true (was false)\n")
    run = await run_cli(*ns, "--json", "updateNamesrvConfig", "-k", "enableAllTopicList", "-v", "FALSE")
    assert json.loads(run.out)["results"] == [
        {"namesrv": server.addr, "ok": True, "key": "enableAllTopicList", "before": "true", "after": "false"}]

    old = await namesrv(tmp_path, "old", compatVersion="4.9.8")  # a 5.x key on a 4.9.8 server
    try:
        run = await run_cli("-n", f"{server.addr};{old.addr}", "updateNamesrvConfig", "-k", "enableTopicList",
                            "-v", "false")
        assert run.code == 1
        assert run.out.startswith(f"update name server config in name server[{server.addr}] OK")
        assert run.err.startswith(f"error: {old.addr}: enableTopicList is not a configuration key of this NameServer")
    finally:
        await old.stop()


@pytest_twisted.ensureDeferred
async def test_deleting_an_absent_kv_config_says_so_and_exits_0(server):
    ns = ["-n", server.addr]
    run = await run_cli(*ns, "deleteKvConfig", "-s", "NS1", "-k", "nope")
    assert (run.code, run.err) == (0, "")
    assert run.out == f"kv config [NS1] nope was not in name server[{server.addr}]: nothing to delete\n"
    assert (await run_cli(*ns, "updateKvConfig", "-s", "NS1", "-k", "k", "-v", "v")).code == 0
    run = await run_cli(*ns, "--json", "deleteKvConfig", "-s", "NS1", "-k", "nope")
    assert json.loads(run.out) == {"results": [{"namesrv": server.addr, "ok": True, "deleted": False}]}
    run = await run_cli(*ns, "deleteKvConfig", "-s", "NS1", "-k", "k")
    assert run.out == f"delete kv config [NS1] k from name server[{server.addr}] OK\n"


@pytest_twisted.ensureDeferred
async def test_write_permissions(server):
    ns = ["-n", server.addr]

    async def perms() -> dict[str, int]:
        route = json.loads((await run_cli(*ns, "topicRoute", "-t", "TopicTest")).out)
        return {q["brokerName"]: q["perm"] for q in route["queueDatas"]}

    run = await run_cli(*ns, "wipeWritePerm", "-b", "broker-a")
    assert run.out == f"wipe write perm of broker[broker-a] in name server[{server.addr}] OK, {len(TOPICS_A)}\n"
    assert await perms() == {"broker-a": 4, "broker-b": 6}
    run = await run_cli(*ns, "--json", "addWritePerm", "-b", "broker-a")
    assert json.loads(run.out) == {"results": [{"namesrv": server.addr, "ok": True, "addTopicCount": 3}]}
    assert await perms() == {"broker-a": 6, "broker-b": 6}


@pytest_twisted.ensureDeferred
async def test_write_permissions_of_a_broker_nobody_registered_fail(server):
    """Java answers SUCCESS with a count of 0 for any name: read back, a typo is an error."""
    for command in ("wipeWritePerm", "addWritePerm"):
        run = await run_cli("-n", server.addr, command, "-b", "nosuch")
        assert (run.code, run.out) == (1, "")
        assert run.err == f"error: {server.addr}: no broker named nosuch is registered (clusterList lists them)\n"
    run = await run_cli("-n", server.addr, "addWritePerm", "-b", "broker-b")  # registered, nothing to add: fine
    assert run.code == 0 and run.out.endswith("OK, 2\n")


@pytest_twisted.ensureDeferred
async def test_delete_topic(server):
    ns = ["-n", server.addr]
    run = await run_cli(*ns, "deleteTopic", "-t", "TopicTest", "-c", "DefaultCluster")
    assert run.code == 0 and "delete topic [TopicTest] of cluster [DefaultCluster]" in run.out
    run = await run_cli(*ns, "deleteTopic", "-t", "OnlyA")
    assert run.code == 0, run.err
    assert (await run_cli(*ns, "topicList")).out.splitlines() == ["TBW102"]


@pytest_twisted.ensureDeferred
async def test_module_entry_point_exit_codes(server):
    from tests.admin.support import refused_addr, run_module

    run = await run_module("-n", server.addr, "topicList")
    assert (run.code, run.out.split()) == (0, sorted(TOPICS_A | TOPICS_B))
    run = await run_module("-n", refused_addr(), "topicList")
    assert run.code == 1 and "Connection refused" in run.err


EVIL = "evil\x1b]0;pwned\x07\x1b[2J\r\n#forged\u202e\x9b31m"


@pytest_twisted.ensureDeferred
async def test_control_characters_from_the_namesrv_never_reach_the_terminal_raw(tmp_path):
    """Broker names, topics, KV keys and values, config values and remarks come from whoever can
    reach the NameServer: every output form shows their control characters as escapes."""
    from tests.admin.support import start_broker

    ns = await namesrv(tmp_path)
    try:
        await start_broker(ns, "broker" + EVIL, {"Topic" + EVIL: 4, "TBW102": 8})
        put = await run_cli("-n", ns.addr, "updateKvConfig", "-s", "NS", "-k", "k" + EVIL, "-v", "v" + EVIL)
        assert put.code == 0, put.err
        runs = [await run_cli("-n", ns.addr, *argv) for argv in (
            ["clusterList"], ["topicList"], ["getKvList", "-s", "NS"], ["getKvConfig", "-s", "NS", "-k", "k" + EVIL],
            ["topicRoute", "-t", "Topic" + EVIL], ["getNamesrvConfig"], ["updateKvConfig", "-s", "NS", "-k", "x",
                                                                          "-v", EVIL],
            ["getKvConfig", "-s", "NS", "-k", "missing" + EVIL],  # the remark quotes the key: stderr
            ["--json", "clusterList"], ["--json", "getKvList", "-s", "NS"], ["--json", "topicList"])]
    finally:
        await ns.stop()
    for run in runs:
        for text in (run.out, run.err):
            assert not any(c in text for c in "\x1b\x07\r\x9b\u202e"), repr(text)
    cluster, topics, kv, value = (run.out for run in runs[:4])
    assert "broker" + "evil\\x1b]0;pwned\\x07\\x1b[2J\\r\\n#forged\\u202e\\x9b31m" in cluster
    forged = [(i, line) for i, run in enumerate(runs) for text in (run.out, run.err) for line in text.splitlines()
              if line.startswith("#forged")]  # a remark's own lines are indented: none passes for the command's
    assert not forged, forged
    assert "Topicevil\\x1b]0;pwned" in topics and "kevil\\x1b" in kv and value.startswith("vevil\\x1b]0;pwned\\x07")
    assert "missingevil\\x1b" in runs[7].err and runs[7].code == 1
    decoded = json.loads(runs[9].out)  # JSON stays JSON, with the values exactly as stored
    assert decoded["table"]["k" + EVIL] == "v" + EVIL
    assert "broker" + EVIL in json.loads(runs[8].out)["brokerAddrTable"]
