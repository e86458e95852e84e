"""compare: identical NameServers exit 0; a broker registered with only one exits 1 and is named."""

from __future__ import annotations

import json

import pytest_twisted
from twisted.internet import reactor, task

from tests.admin.support import namesrv, refused_addr, register_everywhere, run_cli, start_broker
from tests.interop.broker_double import BrokerDouble
from twisted_namesrv.admin.compare import MISSING, PRESENT, Report, Snapshot, differences
from twisted_namesrv.remoting.codes import V4_9_8, V5_3_3


@pytest_twisted.ensureDeferred
async def test_compare_identical_then_different(tmp_path):
    one, two = await namesrv(tmp_path, "one"), await namesrv(tmp_path, "two")
    try:
        await register_everywhere([one, two], BrokerDouble(reactor, "broker-a", topics={"TopicTest": 4, "T2": 1}))
        run = await run_cli("compare", one.addr, two.addr, "--data-versions")
        assert (run.code, run.err) == (0, "")
        assert run.out == f"{one.addr}, {two.addr} agree: 1 broker, 2 topics\n"

        await start_broker(one, "broker-b", {"TopicTest": 8, "OnlyB": 2})
        run = await run_cli("compare", one.addr, two.addr)
        assert run.code == 1, run.err
        where = f"present on {one.addr}; missing on {two.addr}"
        assert run.out.splitlines() == [
            f"2 NameServers differ: 1 broker missing on {two.addr}, 1 topic missing on {two.addr}, 1 topic differs",
            f"broker broker-b: {where}",  # its line under cluster DefaultCluster would say the same: left out
            f"topic OnlyB: {where}",
            "topic TopicTest",
            f"  route broker broker-b: {where}",
            f"  route queue broker-b: {where}",
        ]
        summary = run.out.splitlines()[0]
        run = await run_cli("compare", "--json", f"{one.addr};{two.addr}")
        report = json.loads(run.out)
        assert run.code == 1 and report["equal"] is False and report["summary"] == summary
        assert {"path": ["broker", "broker-b"], "values": {one.addr: "present", two.addr: None}} in \
            report["differences"]
        assert not [d for d in report["differences"] if d["path"][:2] == ["broker", "broker-b"] and len(d["path"]) > 2]
        assert report["counts"] == {one.addr: {"brokers": 2, "topics": 3}, two.addr: {"brokers": 1, "topics": 2}}
        assert report["versions"] == {one.addr: "V5_3_3", two.addr: "V5_3_3"}

        assert (await run_cli("-n", two.addr, "wipeWritePerm", "-b", "broker-a")).code == 0
        run = await run_cli("compare", one.addr, two.addr)
        assert run.code == 1
        lines = run.out.splitlines()
        assert lines[0].endswith(", 2 topics differ")
        perm = f"  route queue broker-a perm: 6 on {one.addr}; 4 on {two.addr}"
        assert lines[lines.index("topic T2") + 1] == perm and perm in lines[lines.index("topic TopicTest"):]
    finally:
        await one.stop()
        await two.stop()


@pytest_twisted.ensureDeferred
async def test_compare_data_versions(tmp_path):
    one, two = await namesrv(tmp_path, "one"), await namesrv(tmp_path, "two")
    try:
        broker = BrokerDouble(reactor, "broker-a", topics={"TopicTest": 4, "T2": 1})
        await register_everywhere([one, two], broker)
        await task.deferLater(reactor, 0.01, lambda: None)
        newer = broker.register_request(opaque=2)  # a later data version, to `one` only
        assert (await one.links[0].call(newer)).code == 0
        assert (await run_cli("compare", one.addr, two.addr)).code == 0  # same routes
        run = await run_cli("compare", "--data-versions", one.addr, two.addr)
        assert run.code == 1
        summary, group, line = run.out.splitlines()
        assert (summary, group) == ("2 NameServers differ: 1 broker differs", "broker broker-a")
        assert line.startswith("  dataVersion 0: timestamp=") and " counter=1 on " in line
    finally:
        await one.stop()
        await two.stop()


@pytest_twisted.ensureDeferred
async def test_a_4_9_8_and_a_5_3_3_namesrv_differ_only_where_routes_do(tmp_path):
    """The generations' own fields (5.x's enableActingMaster on every broker of every route) are
    no difference unless --strict; three brokers registered with one server only are."""
    new, old = await namesrv(tmp_path, "new"), await namesrv(tmp_path, "old", compatVersion="4.9.8")
    try:
        for name in ("broker-0", "broker-1"):
            await register_everywhere([new, old], BrokerDouble(reactor, name, topics={"TopicTest": 4, "T2": 1},
                                                               version=V5_3_3))
        note = (f"(6 differences in fields only RocketMQ 5.x sends ignored: enableActingMaster; {old.addr} "
                "answers as V4_9_8; --strict shows them)")
        run = await run_cli("compare", new.addr, old.addr)
        assert (run.code, run.err) == (0, "")
        assert run.out.splitlines() == [f"{new.addr}, {old.addr} agree: 2 brokers, 2 topics", note]
        run = await run_cli("compare", "--strict", new.addr, old.addr)
        assert run.code == 1
        assert run.out.splitlines()[:3] == [
            "2 NameServers differ: 2 brokers differ, 2 topics differ", "broker broker-0",
            f"  enableActingMaster: false on {new.addr}; missing on {old.addr}"]

        for n in range(3):
            await start_broker(new, f"extra-{n}", {"TopicTest": 4, f"Only{n}": 2})
        run = await run_cli("compare", new.addr, old.addr)
        assert run.code == 1
        missing = f"present on {new.addr}; missing on {old.addr}"
        assert run.out.splitlines() == [
            f"2 NameServers differ: 3 brokers missing on {old.addr}, 3 topics missing on {old.addr}, 1 topic differs",
            *[f"broker extra-{n}: {missing}" for n in range(3)],
            *[f"topic Only{n}: {missing}" for n in range(3)],
            "topic TopicTest",
            *[f"  route broker extra-{n}: {missing}" for n in range(3)],
            *[f"  route queue extra-{n}: {missing}" for n in range(3)],
            note,  # the extra brokers' own fields are inside what is missing: nothing more to ignore
        ]
        report = json.loads((await run_cli("compare", "--json", new.addr, old.addr)).out)
        assert report["versions"] == {new.addr: "V5_3_3", old.addr: "V4_9_8"}
        assert report["ignoredGenerationOnly"] == 6 and len(report["differences"]) == 12
    finally:
        await new.stop()
        await old.stop()


@pytest_twisted.ensureDeferred
async def test_compare_cannot_read_a_namesrv(tmp_path):
    one = await namesrv(tmp_path, "one")
    dead = refused_addr()
    try:
        run = await run_cli("compare", one.addr, dead)
        assert (run.code, run.out) == (1, "")
        assert run.err == f"error: connect to {dead} failed: Connection refused\n"
        assert (await run_cli("compare", one.addr)).code == 2
        assert (await run_cli("compare", one.addr, one.addr)).code == 2
        assert (await run_cli("compare", one.addr, "bad:address")).code == 2
    finally:
        await one.stop()


@pytest_twisted.ensureDeferred
async def test_compare_signs_its_reads_for_a_namesrv_that_requires_it(tmp_path, monkeypatch):
    accounts = tmp_path / "plain_acl.yml"
    accounts.write_text("accounts:\n  - accessKey: operator\n    secretKey: operator-secret\n    admin: true\n")
    acl = {"aclEnable": True, "aclAccountsFile": str(accounts), "aclReadRequired": True}
    one, two = await namesrv(tmp_path, "one", **acl), await namesrv(tmp_path, "two", **acl)
    try:
        monkeypatch.delenv("NAMESRV_ACCESS_KEY", raising=False)
        monkeypatch.delenv("NAMESRV_SIGN_READS", raising=False)
        run = await run_cli("compare", one.addr, two.addr)
        assert run.code == 1 and "AclException" in run.err
        monkeypatch.setenv("NAMESRV_ACCESS_KEY", "operator")
        monkeypatch.setenv("NAMESRV_SECRET_KEY", "operator-secret")
        run = await run_cli("compare", one.addr, two.addr)  # reads go unsigned unless asked: nothing to replay
        assert run.code == 1 and "set NAMESRV_SIGN_READS=true or pass --sign-reads" in run.err
        monkeypatch.setenv("NAMESRV_SIGN_READS", "true")
        run = await run_cli("compare", one.addr, two.addr)
        assert (run.code, run.err) == (0, "")
    finally:
        await one.stop()
        await two.stop()


def snapshots(**paths: dict) -> dict[str, Snapshot]:
    return {addr: Snapshot(p, V5_3_3) for addr, p in paths.items()}


def test_differences_compares_a_path_where_its_containers_are():
    a = {("topic", "T"): PRESENT, ("topic", "T", "route"): PRESENT, ("topic", "T", "route", "queue", "b"): PRESENT,
         ("topic", "T", "route", "queue", "b", "perm"): 6}
    b = dict(a)
    b[("topic", "T", "route", "queue", "b", "perm")] = 2
    c = {("topic", "U"): PRESENT}
    found = differences(snapshots(A=a, B=b, C=c))
    assert [(d.path, d.values) for d in found] == [
        (("topic", "T"), {"A": PRESENT, "B": PRESENT, "C": MISSING}),
        (("topic", "T", "route", "queue", "b", "perm"), {"A": 6, "B": 2}),
        (("topic", "U"), {"A": MISSING, "B": MISSING, "C": PRESENT}),
    ]
    assert found[1].describe() == "topic T route queue b perm: 6 on A; 2 on B"
    assert found[2].describe() == "topic U: missing on A, B; present on C"
    report = Report.of(["A", "B", "C"], found, strict=False)
    assert report.summary() == "3 NameServers differ: 1 topic missing on C, 1 topic missing on A, B, 1 topic differs"
    assert report.lines()[1:] == ["topic T: present on A, B; missing on C", "  route queue b perm: 6 on A; 2 on B",
                                  "topic U: missing on A, B; present on C"]


def test_a_5x_field_differs_between_5x_namesrvs_only():
    broker = {("broker", "b"): PRESENT, ("broker", "b", "enableActingMaster"): False}
    old = {("broker", "b"): PRESENT}
    both_false = {"A": Snapshot(broker, V5_3_3), "B": Snapshot(dict(broker), V5_3_3), "C": Snapshot(old, V4_9_8)}
    [found] = differences(both_false)
    assert found.generation_only and Report.of(list(both_false), [found], strict=False).shown == []
    assert Report.of(list(both_false), [found], strict=True).shown == [found]
    both_false["B"].paths[("broker", "b", "enableActingMaster")] = True
    [found] = differences(both_false)
    assert not found.generation_only
    assert found.describe(2) == "enableActingMaster: false on A; true on B; missing on C"
