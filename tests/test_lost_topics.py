"""Which topics a departing broker takes with it: only those no group serves once it left, and
only when it was its group's last member; a topic served again is no longer lost; old ones are
forgotten.  RouteInfoManager works them out as it removes them and hands them over (listen_lost)."""

from __future__ import annotations

import pytest
from twisted.internet import task

from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig
from twisted_namesrv.bodies.route import DataVersion
from twisted_namesrv.lost_topics import LostTopic, LostTopics
from twisted_namesrv.state.config import NamesrvConfig
from twisted_namesrv.state.routes import RegisterRequest, RouteInfoManager


def manager(lost: LostTopics) -> RouteInfoManager:
    routes = RouteInfoManager(NamesrvConfig({"compatVersion": "4.9.8"}), task.Clock().seconds)
    routes.listen_lost(lost.departed)
    return routes


def register(routes: RouteInfoManager, name: str, addr: str, topics: list[str], broker_id: int = 0) -> None:
    body = RegisterBrokerBody(DataVersion(1, 1), {t: TopicConfig(t) for t in topics}, [], {})
    routes.register_broker(RegisterRequest("c1", addr, name, broker_id, None, body, channel=addr))


def test_a_groups_last_member_takes_the_topics_only_its_group_serves():
    now = [100.0]
    lost = LostTopics(lambda: now[0], keep_seconds=600)
    routes = manager(lost)
    register(routes, "a", "h:1", ["OnlyA", "Both"])
    register(routes, "b", "h:2", ["Both", "OnlyB"])
    register(routes, "b", "h:3", ["Both", "OnlyB"], broker_id=1)
    routes.on_channel_destroy("h:2", "expired: x")
    assert lost.recent(set()) == []  # b's slave stays: its queues stay
    routes.on_channel_destroy("h:1", "connection closed")
    (gone,) = lost.recent(set())
    assert (gone.topic, gone.broker, gone.kind, gone.reason, gone.ts) == ("OnlyA", "a", "closed",
                                                                          "connection closed", 100.0)
    assert lost.recent({"OnlyA"}) == []  # served again
    now[0] += 601
    assert lost.recent(set()) == []


def test_groups_leaving_together_lose_the_topics_they_shared():
    """Two groups serving one topic empty in one batch: the topic is lost, to the later departure
    (each departure alone left the other group serving it)."""
    lost = LostTopics(lambda: 0.0)
    routes = manager(lost)
    register(routes, "a", "h:1", ["Shared", "OnlyA"])
    register(routes, "b", "h:2", ["Shared"])
    register(routes, "c", "h:3", ["Shared", "Kept"])
    routes.on_channels_destroy({"h:1": "connection closed", "h:2": "connection closed"})
    assert [(t.topic, t.broker) for t in lost.recent(set())] == [("OnlyA", "a")]  # c still serves Shared
    routes.on_channels_destroy({"h:3": "connection closed"})
    recent = [(t.topic, t.broker) for t in lost.recent(set())]  # one departure's: in the table's order
    assert recent[0] == ("OnlyA", "a") and sorted(recent[1:]) == [("Kept", "c"), ("Shared", "c")]
    register(routes, "x", "h:4", ["P", "Q"])
    register(routes, "y", "h:5", ["Q"])
    routes.on_channels_destroy({"h:4": "connection closed", "h:5": "connection closed"})
    assert [(t.topic, t.broker) for t in lost.recent(set())][-2:] == [("P", "x"), ("Q", "y")]


def test_an_unregistered_broker_says_so_and_the_limit_keeps_the_newest():
    lost = LostTopics(lambda: 0.0, limit=2)
    routes = manager(lost)
    register(routes, "a", "h:1", ["T1", "T2"])
    routes.unregister_broker("c1", "h:1", "a", 0)
    register(routes, "b", "h:2", ["T3"])
    routes.unregister_broker("c1", "h:2", "b", 0)
    recent = [(t.topic, t.reason) for t in lost.recent(set())]  # T3, and one of a's, in the table's order
    assert len(recent) == 2 and recent[0][0] in ("T1", "T2") and recent[1] == ("T3", "the broker unregistered")
    assert recent[0][1] == "the broker unregistered"


def test_a_change_that_is_no_departure_loses_nothing():
    lost = LostTopics(lambda: 0.0)
    lost.departed("changed", {"broker": "b", "addr": "h:3"}, ["T"])
    assert lost.recent(set()) == []


def test_rocketmqs_own_topics_go_with_their_broker_unnoticed():
    lost = LostTopics(lambda: 0.0)
    routes = manager(lost)
    register(routes, "x", "h:1", ["x", "c1", "%RETRY%group", "SCHEDULE_TOPIC_XXXX", "Orders"])
    routes.on_channel_destroy("h:1")
    assert [t.topic for t in lost.recent(set())] == ["Orders"]


def test_a_departure_of_many_topics_looks_at_about_the_newest_limit_of_them(monkeypatch):
    """Only the newest ``limit`` lost topics are kept, so only they (and RocketMQ's own topics
    passed over on the way) are looked at: a departure that takes a million topics costs the
    bookkeeping about ``limit`` checks, not a million."""
    import twisted_namesrv.lost_topics as module
    looked: list[str] = []

    def counting(topic, *names):
        looked.append(topic)
        return topic.startswith("%RETRY%")
    monkeypatch.setattr(module, "is_system_topic", counting)
    lost = LostTopics(lambda: 0.0, limit=10)
    topics = [f"T{i:05d}" for i in range(10_000)] + ["%RETRY%g"]
    lost.departed("closed", {"broker": "b", "addr": "h:1"}, topics)
    assert len(looked) == 11
    assert [t.topic for t in lost.recent(set())] == topics[-11:-1]



@pytest.mark.parametrize(("started", "kept_for"), [(43_200.0 - 3_540, 600), (43_200.0 + 60, 540),
                                                   (43_200.0 + 3_600, 0)])
def test_a_restart_after_the_clock_stepped_back_keeps_a_loss_ten_minutes_not_the_step_more(started, kept_for):
    """A loss saved at 12:00 and read back by a server started at 11:01 (the host's clock stepped
    back an hour between the stop and the start: a VM restored, a boot before NTP's sync) was
    stamped 59 minutes in the future: namesrv_lost_topics and its alert held it 69 minutes.  A time
    ahead of the clock is read as now: its ten minutes count from the restart.  A step forward
    (loss saved at 12:00, started at 13:00) forgets it at once, as any loss older than ten minutes."""
    saved = LostTopic("T", "c1", "a", "h:1", "closed", "connection closed", ts=43_200.0)
    wall, steady = [started], [5.0]
    lost = LostTopics(lambda: wall[0], keep_seconds=600, steady=lambda: steady[0])
    lost.restore([saved])
    assert [t.ts for t in lost.recent(set())] == ([min(saved.ts, started)] if kept_for else [])
    wall[0], steady[0] = wall[0] + kept_for - 1, steady[0] + kept_for - 1
    assert len(lost.recent(set())) == (1 if kept_for else 0)
    wall[0], steady[0] = wall[0] + 2, steady[0] + 2
    assert lost.recent(set()) == []
