"""Which topics a departing broker takes with it: only those its group alone serves, and only when
it is the group's last member; a topic served again is no longer lost; old ones are forgotten."""

from __future__ import annotations

from types import SimpleNamespace

from twisted_namesrv.bodies.route import BrokerData
from twisted_namesrv.lost_topics import LostTopics


def routes(groups: dict[str, dict[int, str]], topics: dict[str, list[str]]):
    """The two tables LostTopics reads, as RouteInfoManager holds them."""
    return SimpleNamespace(
        brokerAddrTable={name: BrokerData("c1", name, dict(addrs)) for name, addrs in groups.items()},
        topicQueueTable={t: dict.fromkeys(names, object()) for t, names in topics.items()})


def test_a_groups_last_member_takes_the_topics_only_its_group_serves():
    now = [100.0]
    lost = LostTopics(lambda: now[0], keep_seconds=600)
    table = routes({"a": {0: "h:1"}, "b": {0: "h:2", 1: "h:3"}}, {"OnlyA": ["a"], "Both": ["a", "b"], "OnlyB": ["b"]})
    lost.broker_leaving("expired", {"cluster": "c1", "broker": "b", "addr": "h:2", "reason": "expired: x"}, table)
    assert lost.recent(set()) == []  # b's slave stays: its queues stay
    lost.broker_leaving("closed", {"cluster": "c1", "broker": "a", "addr": "h:1", "reason": "connection closed"},
                        table)
    (gone,) = lost.recent(set())
    assert (gone.topic, gone.broker, gone.kind, gone.reason, gone.ts) == ("OnlyA", "a", "closed",
                                                                          "connection closed", 100.0)
    assert lost.recent({"OnlyA"}) == []  # served again
    lost.broker_leaving("changed", {"broker": "b", "addr": "h:3"}, table)  # not a departure
    now[0] += 601
    assert lost.recent(set()) == []


def test_an_unregistered_broker_says_so_and_the_limit_keeps_the_newest():
    lost = LostTopics(lambda: 0.0, limit=2)
    table = routes({"a": {0: "h:1"}}, {"T1": ["a"], "T2": ["a"], "T3": ["a"]})
    lost.broker_leaving("unregistered", {"broker": "a", "addr": "h:1"}, table)
    assert [(t.topic, t.reason) for t in lost.recent(set())] == [("T2", "the broker unregistered"),
                                                                  ("T3", "the broker unregistered")]
