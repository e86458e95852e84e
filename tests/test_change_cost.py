"""What a change to the routes costs whoever reacts to it, counted in work (table entries walked,
answers dropped), never in time: a batch of departures walks topicQueueTable once, whatever the
number of groups it empties; the lost topics, the events and the answer cache then work on what
changed, not on everything held; a one-topic change reaches one topic.

The server is a whole NamesrvService (its wiring of lost topics and events included) on a fake
clock, with brokers and clients on in-memory connections."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet import task
from twisted.internet.testing import StringTransport

from tests.support import server_config
from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body
from twisted_namesrv.bodies.route import DataVersion
from twisted_namesrv.remoting import RemotingCommand, RequestCode
from twisted_namesrv.service import NamesrvService

GROUPS = 40
GROUP_TOPICS = [f"Group{i:03d}" for i in range(20)]  # every group serves these, as stall.py's drop
BIG_TOPICS = [f"Big{i:05d}" for i in range(2000)]  # one broker's, untouched by the departures
KEPT = BIG_TOPICS[:50]  # looked up before the departures: their answers are kept


class Walked(dict):
    """topicQueueTable, counting the entries every walk of it visits (items, values, keys, iter)."""

    visited = 0

    def _count(self, entries: Any) -> Any:
        for entry in entries:
            self.visited += 1
            yield entry

    def items(self):  # type: ignore[override]
        return self._count(super().items())

    def values(self):  # type: ignore[override]
        return self._count(super().values())

    def keys(self):  # type: ignore[override]
        return self._count(super().keys())

    def __iter__(self):
        return self._count(super().__iter__())


class Cluster:
    def __init__(self, tmp_path, **config: Any) -> None:
        self.clock = task.Clock()
        self.service = NamesrvService.from_config(server_config(tmp_path, **config), reactor=self.clock)
        self.routes = self.service.state.routes
        self.answers = self.service.state.answers
        self.opaque = 0

    def connect(self):
        protocol = self.service.factory.buildProtocol(None)
        transport = StringTransport()
        protocol.makeConnection(transport)
        return protocol, transport

    def settle(self) -> None:
        while any(call.getTime() <= self.clock.seconds() for call in self.clock.getDelayedCalls()):
            self.clock.advance(0)

    def send(self, protocol, code: int, ext: dict[str, str], body: bytes | None = None) -> None:
        self.opaque += 1
        protocol.dataReceived(RemotingCommand.request(code, ext, body, opaque=self.opaque, version=409).encode())
        self.settle()

    def register(self, protocol, name: str, port: int, topics: list[str], counter: int = 1) -> None:
        body = encode_register_body(RegisterBrokerBody(DataVersion(1, counter), {t: TopicConfig(t) for t in topics}),
                                    False, False)
        self.send(protocol, RequestCode.REGISTER_BROKER, {"brokerName": name, "brokerAddr": f"127.0.0.1:{port}",
                                                          "clusterName": "c", "haServerAddr": "h", "brokerId": "0"},
                  body)

    def big_broker_watched(self, topics: list[str]) -> tuple[Any, list]:
        """A broker "big" with ``topics``, KEPT's answers kept, and the list every RouteChange
        published from now on goes to."""
        big, _ = self.connect()
        self.register(big, "big", 1, topics)
        client, _ = self.connect()
        for topic in KEPT:
            self.send(client, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        published: list = []
        self.routes.subscribe(published.append, lambda: False)  # after the answer cache; collects nothing itself
        return big, published

    def walked(self) -> Walked:
        """From now on, count the walks of topicQueueTable."""
        table = self.routes.topicQueueTable = Walked(self.routes.topicQueueTable)
        return table


@pytest.fixture
def cluster(tmp_path) -> Cluster:
    return Cluster(tmp_path)


def test_a_mass_disconnect_walks_the_topic_table_once_and_drops_only_what_it_changed(cluster):
    """GROUPS groups lose their connections in one reactor turn: their departures walk
    topicQueueTable once (not once per group: the lost topics are worked out in that walk), the
    answers kept for the untouched broker's topics stay kept, and each group's topics are lost
    to the departure that emptied the last group serving them."""
    big, _ = cluster.connect()
    cluster.register(big, "big", 1, BIG_TOPICS)
    groups = [cluster.connect()[0] for _ in range(GROUPS)]
    for index, protocol in enumerate(groups):
        cluster.register(protocol, f"g{index:03d}", 2000 + index, GROUP_TOPICS)
    client, _ = cluster.connect()
    for topic in [*KEPT, GROUP_TOPICS[0]]:
        cluster.send(client, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    assert set(cluster.answers.routes) == {*KEPT, GROUP_TOPICS[0]}
    table = cluster.walked()
    for protocol in groups:
        protocol.connectionLost()
    cluster.settle()
    assert set(cluster.routes.brokerAddrTable) == {"big"}
    assert table.visited <= len(BIG_TOPICS) + len(GROUP_TOPICS)  # one walk: the table as it was
    assert set(cluster.answers.routes) == set(KEPT)  # only the departed groups' routes were dropped
    lost = cluster.service.seen.lost.recent(cluster.routes.topicQueueTable)
    assert [(t.topic, t.broker, t.kind) for t in lost] == [(t, f"g{GROUPS - 1:03d}", "closed") for t in GROUP_TOPICS]
    closed = [e for e in cluster.service.seen.events.recent if e.kind == "closed"]
    assert [e.info["broker"] for e in closed] == [f"g{i:03d}" for i in range(GROUPS)]  # in closing order


def test_route_events_are_heard_after_the_change_with_the_tables_complete(cluster):
    """An observer of a departure reads tables that no longer hold the departed group, its
    topics included: the event comes once the change is complete, not in the middle of it."""
    seen: list[tuple[str, bool, bool]] = []

    def observe(kind: str, info: dict) -> None:
        seen.append((kind, info["broker"] in cluster.routes.brokerAddrTable,
                     GROUP_TOPICS[0] in cluster.routes.topicQueueTable))
    cluster.routes.listen(observe)
    protocol, _ = cluster.connect()
    cluster.register(protocol, "g000", 2000, GROUP_TOPICS)
    protocol.connectionLost()
    cluster.settle()
    assert seen == [("registered", True, True), ("closed", False, False)]


def test_a_one_topic_change_on_a_big_broker_reaches_one_topic(cluster):
    """The broker re-registers its table with one topic added: the answers kept for its other
    topics stay, one topic's route changes, and nothing walks the topic table."""
    big, published = cluster.big_broker_watched(BIG_TOPICS)
    table = cluster.walked()
    cluster.register(big, "big", 1, [*BIG_TOPICS, "Added"], counter=2)
    assert table.visited == 0
    assert [(list(c.topics), list(c.brokers), c.everything) for c in published] == [(["Added"], [], False)]
    assert set(cluster.answers.routes) == set(KEPT)


@pytest.mark.parametrize(("compat", "delete_with_registration"), [("4.9.8", False), ("5.3.3", False), ("5.3.3", True)])
def test_a_one_topic_removal_on_a_big_broker_reaches_at_most_that_topic(tmp_path, compat, delete_with_registration):
    """stall.py's "removed again": the broker re-registers its table without a topic it had. No
    kept answer goes; the topic's route changes only where the registration deletes what it
    lacks (5.3.3's deleteTopicWithBrokerRegistration, off by default), else it stays, as Java
    keeps it. Nothing walks the topic table, except once to find what the broker lacks when it
    deletes (as Java's topicSetOfBrokerName walks it)."""
    cluster = Cluster(tmp_path, compatVersion=compat, deleteTopicWithBrokerRegistration=delete_with_registration)
    big, published = cluster.big_broker_watched([*BIG_TOPICS, "Added"])
    table = cluster.walked()
    cluster.register(big, "big", 1, BIG_TOPICS, counter=2)
    assert table.visited == (len(BIG_TOPICS) + 1 if delete_with_registration else 0)
    changed = [(list(c.topics), list(c.brokers), c.everything) for c in published]
    assert changed == ([(["Added"], [], False)] if delete_with_registration else [])
    assert ("Added" in cluster.routes.topicQueueTable) is not delete_with_registration
    assert set(cluster.answers.routes) == set(KEPT)
