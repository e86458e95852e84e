"""Fixtures of the admin CLI tests: a NameServer with two registered broker doubles."""

from __future__ import annotations

import pytest_twisted

from tests.admin.support import namesrv, start_broker

TOPICS_A = {"TopicTest": 4, "TBW102": 8, "OnlyA": 2}
TOPICS_B = {"TopicTest": 2, "TBW102": 8}


@pytest_twisted.async_yield_fixture
async def server(tmp_path):
    """broker-a (id 0, topics TOPICS_A) and broker-b (TOPICS_B) in DefaultCluster."""
    ns = await namesrv(tmp_path)
    try:
        await start_broker(ns, "broker-a", TOPICS_A)
        await start_broker(ns, "broker-b", TOPICS_B)
    except BaseException:
        await ns.stop()
        raise
    yield ns
    await ns.stop()
