"""compare: identical NameServers exit 0; a broker registered with only one exits 1 and is named."""

from __future__ import annotations

import json

import pytest_twisted
from twisted.internet import reactor, task

from tests.admin.support import namesrv, refused_addr, register_everywhere, run_cli, start_broker
from tests.interop.broker_double import BrokerDouble
from twisted_namesrv.admin.compare import MISSING, PRESENT, differences


@pytest_twisted.ensureDeferred
async def test_compare_identical_then_different(tmp_path):
    one, two = await namesrv(tmp_path, "one"), await namesrv(tmp_path, "two")
    try:
        await register_everywhere([one, two], BrokerDouble(reactor, "broker-a", topics={"TopicTest": 4, "T2": 1}))
        run = await run_cli("compare", one.addr, two.addr, "--data-versions")
        assert (run.code, run.err) == (0, "")
        assert run.out == f"{one.addr}, {two.addr} agree: 1 broker(s), 2 topic(s)\n"

        await start_broker(one, "broker-b", {"TopicTest": 8, "OnlyB": 2})
        run = await run_cli("compare", one.addr, two.addr)
        assert run.code == 1, run.err
        where = f"present on {one.addr}; missing on {two.addr}"
        assert run.out.splitlines() == [
            f"5 difference(s) between {one.addr}, {two.addr}:",
            f"  broker broker-b: {where}",
            f"  cluster DefaultCluster broker broker-b: {where}",
            f"  topic OnlyB: {where}",
            f"  topic TopicTest route broker broker-b: {where}",
            f"  topic TopicTest route queue broker-b: {where}",
        ]
        run = await run_cli("compare", "--json", f"{one.addr};{two.addr}")
        report = json.loads(run.out)
        assert run.code == 1 and report["equal"] is False
        assert {"path": ["broker", "broker-b"], "values": {one.addr: "present", two.addr: None}} in \
            report["differences"]
        assert not [d for d in report["differences"] if d["path"][:2] == ["broker", "broker-b"] and len(d["path"]) > 2]
        assert report["counts"] == {one.addr: {"brokers": 2, "topics": 3}, two.addr: {"brokers": 1, "topics": 2}}

        assert (await run_cli("-n", two.addr, "wipeWritePerm", "-b", "broker-a")).code == 0
        run = await run_cli("compare", one.addr, two.addr)
        assert run.code == 1
        assert f"  topic T2 route queue broker-a perm: 6 on {one.addr}; 4 on {two.addr}" in run.out.splitlines()
        assert f"  topic TopicTest route queue broker-a perm: 6 on {one.addr}; 4 on {two.addr}" in run.out
        assert run.out.startswith("7 difference(s)")
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
        [line] = run.out.splitlines()[1:]
        assert line.startswith("  broker broker-a dataVersion 0: timestamp=") and " counter=1 on " in line
    finally:
        await one.stop()
        await two.stop()


@pytest_twisted.ensureDeferred
async def test_compare_cannot_read_a_namesrv(tmp_path):
    one = await namesrv(tmp_path, "one")
    dead = refused_addr()
    try:
        run = await run_cli("compare", one.addr, dead)
        assert (run.code, run.out) == (2, "")
        assert run.err == f"error: connect to {dead} failed: Connection refused\n"
        assert (await run_cli("compare", one.addr)).code == 2
        assert (await run_cli("compare", one.addr, one.addr)).code == 2
    finally:
        await one.stop()


def test_differences_compares_a_path_where_its_containers_are():
    a = {("topic", "T"): PRESENT, ("topic", "T", "route"): PRESENT, ("topic", "T", "route", "queue", "b"): PRESENT,
         ("topic", "T", "route", "queue", "b", "perm"): 6}
    b = dict(a)
    b[("topic", "T", "route", "queue", "b", "perm")] = 2
    c = {("topic", "U"): PRESENT}
    found = differences({"A": a, "B": b, "C": c})
    assert [(d.path, d.values) for d in found] == [
        (("topic", "T"), {"A": PRESENT, "B": PRESENT, "C": MISSING}),
        (("topic", "T", "route", "queue", "b", "perm"), {"A": 6, "B": 2}),
        (("topic", "U"), {"A": MISSING, "B": MISSING, "C": PRESENT}),
    ]
    assert found[1].describe() == "topic T route queue b perm: 6 on A; 2 on B"
    assert found[2].describe() == "topic U: missing on A, B; present on C"
