"""What a change to the routes costs whoever reacts to it, counted in work (table entries walked,
answers dropped), never in time: a batch of departures walks topicQueueTable once, whatever the
number of groups it empties; the lost topics, the events and the answer cache then work on what
changed, not on everything held; a one-topic change reaches one topic; no reactor turn of a big
registration or of a mass disconnect touches more than a bounded number of table entries, whatever
the table's size, and lookups between those turns see each change whole or not at all; a table
sent again in pieces is neither decoded nor compared; a registration changes the table's entries
in place, never leaving copies of them behind.

The server is a whole NamesrvService (its wiring of lost topics and events included) on a fake
clock, with brokers and clients on in-memory connections."""

from __future__ import annotations

import dataclasses
import functools
import gc
import hashlib
import sys
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from twisted.internet import task
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

from tests.support import python_calls_run, server_config, server_lines_run
from twisted_namesrv import dispatch, processor, server, service
from twisted_namesrv.bodies.register import RegisterBrokerBody, TopicConfig, encode_register_body
from twisted_namesrv.bodies.route import DataVersion
from twisted_namesrv.remoting import FrameDecoder, RemotingCommand, RequestCode, header
from twisted_namesrv.service import NamesrvService
from twisted_namesrv.state import queue_table, registration, routes, settling
from twisted_namesrv.state.queue_table import TopicQueueTable
from twisted_namesrv.steps import STEP_BYTES

AT_ONCE = dispatch.AT_ONCE_PER_TURN

GROUPS = 40
GROUP_TOPICS = [f"Group{i:03d}" for i in range(20)]  # every group serves these, as stall.py's drop
BIG_TOPICS = [f"Big{i:05d}" for i in range(2000)]  # one broker's, untouched by the departures
KEPT = BIG_TOPICS[:50]  # looked up before the departures: their answers are kept


class Walked(TopicQueueTable):
    """topicQueueTable, counting the entries every walk of it visits (items, values, keys, iter)
    and, in ``touched``, every entry looked up, written or removed as well."""

    visited = 0
    touched = 0

    def __init__(self, entries: Mapping[str, Any] | None = None) -> None:
        super().__init__(entries or {})
        self.visited = self.touched = 0  # what filling it counted

    def _count(self, entries: Any) -> Any:
        for entry in entries:
            self.visited += 1
            self.touched += 1
            yield entry

    def get(self, key, default=None):  # type: ignore[override]
        self.touched += 1
        return super().get(key, default)

    def __getitem__(self, key):
        self.touched += 1
        return super().__getitem__(key)

    def __setitem__(self, key, value) -> None:
        self.touched += 1
        super().__setitem__(key, value)

    def __delitem__(self, key) -> None:
        self.touched += 1
        super().__delitem__(key)

    def pop(self, key, *default):  # type: ignore[override]
        self.touched += 1
        return super().pop(key, *default)

    def update(self, entries=(), /, **more) -> None:  # type: ignore[override]
        entries = list(entries.items() if isinstance(entries, Mapping) else entries) + list(more.items())
        self.touched += len(entries)
        super().update(entries)

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
        # the curve's brokers, from this machine (StringTransport's default peer, 192.168.1.1, is one
        # remote host, which brings at most topology.GROUPS_PER_HOST groups into the memory)
        transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 54321))
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

    def storm_brokers(self, count: int) -> list[tuple[Any, StringTransport]]:
        """``count`` brokers b000... registered with "Storm" and a topic of their own, their
        answers cleared: the connections a storm re-registers on."""
        brokers = [self.connect() for _ in range(count)]
        for index, (protocol, _) in enumerate(brokers):
            self.register(protocol, f"b{index:03d}", 3000 + index, ["Storm", f"Own{index}"])
        for _, transport in brokers:
            transport.clear()
        return brokers

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
    assert sorted((t.topic, t.broker, t.kind) for t in lost) == [(t, f"g{GROUPS - 1:03d}", "closed")
                                                                for t in GROUP_TOPICS]  # in the walk's order
    closed = [e for e in cluster.service.seen.events.recent if e.kind == "closed"]
    assert [e.info["broker"] for e in closed] == [f"g{i:03d}" for i in range(GROUPS)]  # in closing order


def test_thousands_of_channels_closed_at_once_leave_a_bounded_number_a_turn(cluster, monkeypatch):
    """Channels closed in one reactor turn leave CLOSED_PER_TURN a turn, in closing order (on the
    old code all of them in the next turn: 5,000 brokers, 114 ms of CPU in one turn)."""
    monkeypatch.setattr(dispatch, "CLOSED_PER_TURN", 10)
    groups = [cluster.connect()[0] for _ in range(25)]
    for index, protocol in enumerate(groups):
        cluster.register(protocol, f"g{index:03d}", 2000 + index, [f"Own{index}"])
    dispatcher = cluster.service.dispatcher
    removed: list[list[int]] = []

    def closed(state: Any, channels: dict) -> None:
        removed.append(list(channels))
        table_closed(state, channels)
    table_closed = dispatcher.table.closed
    monkeypatch.setattr(dispatcher, "table", dataclasses.replace(dispatcher.table, closed=closed))
    for protocol in groups:
        protocol.connectionLost()
    cluster.settle()
    assert [len(turn) for turn in removed] == [10, 10, 5]
    assert sum(removed, []) == [protocol.channel for protocol in groups]
    assert cluster.routes.brokerLiveTable == {}


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


# -- big changes in bounded turns, seen whole -------------------------------------------------------

#: the most table entries one reactor turn may touch: one step of the largest kind, and a few more
#: for the step's own bookkeeping (the walk of the departed groups' topics is the largest)
TURN_BOUND = max(registration.TOPICS_PER_STEP, settling.WRITE_PER_STEP, settling.WALK_PER_STEP,
                 2 * settling.REMOVE_PER_STEP) + 64


class Turns(Cluster):
    """A Cluster whose reactor turns run one at a time, one step each, counting the table entries
    each turn touches; lookups in between are answered as they come."""

    def __init__(self, tmp_path, monkeypatch, **config: Any) -> None:
        monkeypatch.setattr(service, "STEPS_PER_TURN_SECONDS", 0)  # one step per turn, whatever the machine
        super().__init__(tmp_path, **config)
        self.client, self.client_out = self.connect()

    def turns(self, table: Walked, between=lambda: None) -> list[int]:
        """Run the due calls one by one, and ``between`` after each (requests read in a turn of
        their own): the entries each of these turns touched."""
        touched = []
        while (due := [c for c in self.clock.getDelayedCalls() if c.getTime() <= self.clock.seconds()]):
            call = min(due, key=lambda c: c.getTime())
            self.clock.calls.remove(call)
            for turn in (functools.partial(call.func, *call.args, **call.kw), between):
                before = table.touched
                turn()
                touched.append(table.touched - before)
        return touched

    def one_staying_three_leaving(self, size: int, named: Callable[[int, int], str]) -> list[Any]:
        """Broker "stay" with ``size`` topics and "Shared", and the connections of go0-go2, each with
        ``size`` topics (the i-th of go``index`` named ``named(index, i)``) and "Shared"."""
        stay, _ = self.connect()
        self.register(stay, "stay", 1, [f"Stay{i:06d}" for i in range(size)] + ["Shared"])
        leaving = [self.connect()[0] for _ in range(3)]
        for index, protocol in enumerate(leaving):
            self.register(protocol, f"go{index}", 10 + index, [named(index, i) for i in range(size)] + ["Shared"])
        return leaving

    def found(self, topics: list[str]) -> list[bool]:
        """Whether each topic has a route now (looked up on the client's connection, at once)."""
        out = []
        for topic in topics:
            self.opaque += 1
            self.client.dataReceived(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic},
                                                             opaque=self.opaque, version=409).encode())
            answer = RemotingCommand.decode(self.client_out.value()[4:])
            self.client_out.clear()
            out.append(answer.code == 0)
        return out


def registration_frame(name: str, port: int, topics: list[str], counter: int = 1) -> bytes:
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, counter), {t: TopicConfig(t) for t in topics}),
                                False, False)
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, {
        "brokerName": name, "brokerAddr": f"127.0.0.1:{port}", "clusterName": "c", "haServerAddr": "h",
        "brokerId": "0"}, body, opaque=1, version=409).encode()


@pytest.mark.parametrize("size", [2 * TURN_BOUND, 6 * TURN_BOUND])
def test_a_big_registration_touches_a_bounded_slice_per_turn_and_lookups_see_it_whole(tmp_path, monkeypatch, size):
    """A first registration of ``size`` topics beside a broker holding as many: no reactor turn
    touches more than TURN_BOUND entries of topicQueueTable, whatever the size (it used to write
    them all in the turn that applied it), and a lookup between two turns finds all of the new
    topics or none of them, a topic both brokers serve with both or one; the broker is answered
    once they are all found."""
    cluster = Turns(tmp_path, monkeypatch)
    old, _ = cluster.connect()
    cluster.register(old, "old", 1, [f"Old{i:06d}" for i in range(size)] + ["Shared"])
    table = cluster.walked()
    new, new_out = cluster.connect()
    probes = ["New000000", f"New{size // 2:06d}", f"New{size - 1:06d}"]
    seen: list[tuple[bool, ...]] = []

    def look() -> None:
        found = cluster.found(probes)
        route = cluster.service.state.routes.pickup_topic_route_data("Shared")
        seen.append((*found, len(route.queueDatas) == 2))  # type: ignore[union-attr]
        assert len(set(seen[-1])) == 1, f"half a registration seen: {seen[-1]}"
        if found[0]:
            assert not seen[0][0] or len(seen) == 1
    new.dataReceived(registration_frame("new", 2, [f"New{i:06d}" for i in range(size)] + ["Shared"]))
    touched = cluster.turns(table, look)
    assert max(touched) <= TURN_BOUND, sorted(touched)[-5:]
    assert seen[0] == (False,) * 4 and seen[-1] == (True,) * 4  # before, then after
    assert sum(touched) >= 2 * size  # compared and written: the work is all there, in slices
    assert RemotingCommand.decode(new_out.value()[4:]).code == 0
    assert len(table) == 2 * size + 1 and cluster.routes.settling == 0


def test_a_scrape_while_a_big_registration_is_written_in_writes_none_of_it(tmp_path, monkeypatch):
    """/metrics and the status page's overview and clusters read between the steps of a big
    registration: each counts the topics written so far and looks its lost topics up through what
    is still to write, so no turn touches more than TURN_BOUND entries (they walked
    topicQueueTable, which writes everything pending at once: the whole registration in the
    scrape's turn), and a lost topic the registration serves again is not lost from its commit on."""
    from twisted_namesrv.web.api import StatusApi
    from twisted_namesrv.web.site import MetricsPage

    size = 6 * TURN_BOUND
    cluster = Turns(tmp_path, monkeypatch)
    service = cluster.service
    page = MetricsPage(service.state, service.remoting.factory, service.seen, service.seen.health)
    api = StatusApi(service.state, service.remoting.factory, service.seen, service.seen.health)
    gone, _ = cluster.connect()
    cluster.register(gone, "gone", 1, ["Back", "Gone"])  # (5.x refuses a first one of a single topic)
    gone.connectionLost()
    cluster.settle()
    assert sorted(lost["topic"] for lost in api.clusters()["lost_topics"]) == ["Back", "Gone"]
    table = cluster.walked()
    new, new_out = cluster.connect()
    read: list[tuple[int, int, list[str]]] = []

    def scrape() -> None:
        page._begin()()
        read.append((cluster.routes.settling, api.overview()["topics"],
                     [lost["topic"] for lost in api.clusters()["lost_topics"]]))
    new.dataReceived(registration_frame("new", 2, [f"New{i:06d}" for i in range(size)] + ["Back"]))
    touched = cluster.turns(table, scrape)
    assert max(touched) <= TURN_BOUND, sorted(touched)[-5:]
    during = [(topics, lost) for settling, topics, lost in read if settling]
    assert len(during) >= 4 and all(lost == ["Gone"] for _, lost in during)  # read mid-write, several times
    assert [topics for topics, _ in during] == sorted(topics for topics, _ in during)  # counted as written
    assert read[-1][:2] == (0, size + 1) and RemotingCommand.decode(new_out.value()[4:]).code == 0


@pytest.mark.parametrize("size", [2 * TURN_BOUND, 6 * TURN_BOUND])
def test_a_mass_disconnect_touches_a_bounded_slice_per_turn_and_lookups_see_it_whole(tmp_path, monkeypatch, size):
    """Groups serving ``size`` topics lose their connections together beside a broker that stays:
    no turn touches more than TURN_BOUND entries, whatever the size (the one walk used to run in
    one turn); from the turn that removes the brokers on, their topics are gone for every lookup
    (the shared one keeps the staying broker's queues only), while their queues leave
    topicQueueTable in the turns after; the departures' events and lost topics are heard once
    they have, with the tables complete."""
    cluster = Turns(tmp_path, monkeypatch)
    leaving = cluster.one_staying_three_leaving(size, lambda index, i: f"Go{i:06d}")
    table = cluster.walked()
    heard: list[tuple[str, int, bool]] = []

    def hear(kind: str, info: dict) -> None:
        heard.append((kind, cluster.routes.settling, "Go000000" in cluster.routes.topicQueueTable))
    cluster.routes.listen(hear)
    seen: list[tuple[bool, ...]] = []

    def look() -> None:
        found = cluster.found(["Go000000", f"Go{size - 1:06d}", "Stay000000"])
        route = cluster.service.state.routes.pickup_topic_route_data("Shared")
        seen.append((*found, [q.brokerName for q in route.queueDatas]))  # type: ignore[arg-type, union-attr]
    for protocol in leaving:
        protocol.connectionLost()
    touched = cluster.turns(table, look)
    assert max(touched) <= TURN_BOUND, sorted(touched)[-5:]
    assert all(s == (False, False, True, ["stay"]) for s in seen)  # gone from the first turn on, wholly
    assert cluster.routes.settling == 0 and sorted(table) == sorted([f"Stay{i:06d}" for i in range(size)] + ["Shared"])
    assert [(kind, settling, present) for kind, settling, present in heard] == [("closed", 0, False)] * 3
    lost = cluster.service.seen.lost.recent(cluster.routes.topicQueueTable)
    assert {t.broker for t in lost} == {"go2"} and len(lost) > 0


def test_a_mass_disconnects_events_are_heard_a_bounded_number_a_turn(tmp_path, monkeypatch):
    """A hundred brokers of the same two topics lose their connections together: their route events
    (a log line, counters and the page's events each) are heard in closing order, at most
    EVENTS_PER_STEP a turn, and the departure that took the topic away ends its turn (the lost
    topics' keeper looks at them); they used to be heard all in the turn that removed them (1,000
    to 5,000 brokers: 40-64 ms).  Small changes are still heard in the turn that made them."""
    cluster = Turns(tmp_path, monkeypatch)
    brokers = [cluster.connect()[0] for _ in range(100)]
    heard: list[tuple[str, str]] = []
    cluster.routes.listen(lambda kind, info: heard.append((kind, info["broker"])))
    for index, protocol in enumerate(brokers):
        cluster.register(protocol, f"g{index:03d}", 2000 + index, ["Shared", "Shared2"])
        assert heard[-1] == ("registered", f"g{index:03d}")  # at once
    heard.clear()
    for protocol in brokers:
        protocol.connectionLost()
    per_turn = []
    while (due := [c for c in cluster.clock.getDelayedCalls() if c.getTime() <= cluster.clock.seconds()]):
        call = min(due, key=lambda c: c.getTime())
        cluster.clock.calls.remove(call)
        before = len(heard)
        call.func(*call.args, **call.kw)
        per_turn.append(len(heard) - before)
    assert heard == [("closed", f"g{index:03d}") for index in range(100)]
    assert max(per_turn) <= routes.EVENTS_PER_STEP, per_turn
    lost = cluster.service.seen.lost.recent(cluster.routes.topicQueueTable)
    assert sorted((t.topic, t.broker) for t in lost) == [("Shared", "g099"), ("Shared2", "g099")]


#: the most memory blocks one turn of a mass disconnect may free, net: the names a step lets go
#: of, and what clearing a step's topics frees (each topic's queues and its QueueData), and a few more
FREE_BOUND = settling.LET_GO_PER_STEP + 4 * settling.REMOVE_PER_STEP + 1024


def test_a_mass_disconnect_frees_the_topics_it_took_away_a_bounded_slice_per_turn(tmp_path, monkeypatch):
    """The names of the topics a mass disconnect took away are held by nothing once the
    departures' lost topics are heard: they used to be freed all at once in the turn that ended
    the change (a million of them, with the lists that held them, 60-140 ms). No turn frees more
    than FREE_BOUND memory blocks, net, whatever the size, and all of it is freed in the end."""
    size = 6 * TURN_BOUND
    cluster = Turns(tmp_path, monkeypatch)
    leaving = cluster.one_staying_three_leaving(size, lambda index, i: f"Go{index}-{i:06d}")
    table = cluster.walked()
    gc.collect()
    for protocol in leaving:
        protocol.connectionLost()
    freed: list[int] = []
    held = sys.getallocatedblocks()

    def count() -> None:
        nonlocal held
        freed.append(held - (held := sys.getallocatedblocks()))
    cluster.turns(table, count)
    assert cluster.routes.settling == 0 and len(table) == size + 1
    assert max(freed) <= FREE_BOUND, sorted(freed)[-3:]
    assert sum(freed) >= 2 * 3 * size  # each topic's name and queues (and its QueueData): all gone, in slices


def test_a_big_registration_frees_its_decoded_table_a_bounded_slice_per_turn(tmp_path, monkeypatch):
    """Once a registration applied, its decoded table (a TopicConfig and its strings per topic)
    is held by nothing: it used to be freed all at once in the turn that applied it (80k topics:
    about 5 ms, with the names' check). No turn frees more than FREE_BOUND memory blocks, net."""
    size = 6 * TURN_BOUND
    cluster = Turns(tmp_path, monkeypatch)
    table = cluster.walked()
    new, new_out = cluster.connect()
    frame = registration_frame("new", 2, [f"New{i:06d}" for i in range(size)])
    gc.collect()
    freed: list[int] = []
    held = sys.getallocatedblocks()
    new.dataReceived(frame)

    def count() -> None:
        nonlocal held
        freed.append(held - (held := sys.getallocatedblocks()))
    cluster.turns(table, count)
    assert RemotingCommand.decode(new_out.value()[4:]).code == 0 and len(table) == size
    assert max(freed) <= FREE_BOUND, sorted(freed)[-3:]


def largest_dict_of_topics(table: object) -> int:
    """The most topics any one dict of ``table`` holds: an insert that grows that dict copies
    every one of them, in one go."""
    largest, layer = 0, [table]
    for _ in range(3):  # the table, what it is made of, what that is made of
        below: list[object] = []
        for part in layer:
            if isinstance(part, dict) and part and all(isinstance(queues, dict) for queues in part.values()):
                largest = max(largest, len(part))
            elif not isinstance(part, (str, type)):
                below += gc.get_referents(part)
        layer = below
    return largest


def test_no_dict_of_a_big_topic_table_holds_more_than_a_bounded_share_of_it(cluster):
    """A Python dict grows in one go: the insert that takes it past two thirds full copies every
    entry (topicQueueTable in one dict did so at 699,051 topics: 42-67 ms in one turn, however
    finely the writing was cut into steps). Spread over queue_table.SHARDS dicts, no dict holds
    more than a small share of the table, so no insert copies more than that share: at the
    default maxTopicQueueEntries (8 M) about 31k entries."""
    topics = [f"T{i:06d}" for i in range(40_000)]
    cluster.register(cluster.connect()[0], "big", 1, topics)
    table = cluster.routes.topicQueueTable
    assert len(table) == len(topics) and all(table.get(topic) for topic in topics[::997])
    assert 0 < largest_dict_of_topics(table) <= len(topics) // 64
    assert cluster.service.state.config["maxTopicQueueEntries"] // queue_table.SHARDS <= 32_768


def test_the_topics_of_one_shard_start_anywhere_in_its_dict(cluster):
    """A dict places a key by its hash's low bits; a shard is picked by other bits of it, so the
    topics of one shard do not all start at the same few slots of its dict (picked by the low 8
    bits, at 1 M topics they shared 32 of a shard's 8,192: each look-up of a topic not held and
    each insert walked a chain of taken slots first, a cache miss each)."""
    topics = [f"T{i:06d}" for i in range(40_000)]
    cluster.register(cluster.connect()[0], "big", 1, topics)
    for shard in cluster.routes.topicQueueTable.shards[:4]:
        assert len(shard) > 64
        assert len({hash(topic) & 255 for topic in shard}) > len(shard) // 2


def test_a_table_sent_again_in_pieces_is_neither_decoded_nor_compared(tmp_path):
    """5.x's enableSplitRegistration: a broker sends its table in pieces, each its own
    REGISTER_BROKER with the same dataVersion. Sent again (the next heartbeat with the same
    table, or a storm of them), each piece is known by its digest: no topic is looked up in
    topicQueueTable (on the old code only the first piece was, the others compared topic by
    topic), the tables and the answers kept stay as they are. A piece that changed is compared."""
    cluster = Cluster(tmp_path, compatVersion="5.3.3")
    names = [f"Piece{i:05d}" for i in range(4000)]
    pieces = [names[i:i + 1000] for i in range(0, 4000, 1000)]
    broker, _ = cluster.connect()

    def send_pieces(tables: list[list[str]], counter: int) -> None:
        for topics in tables:
            body = encode_register_body(RegisterBrokerBody(DataVersion(1, counter),
                                                           {t: TopicConfig(t) for t in topics}), False, True)
            cluster.send(broker, RequestCode.REGISTER_BROKER, {
                "brokerName": "big", "brokerAddr": "127.0.0.1:1", "clusterName": "c", "haServerAddr": "h",
                "brokerId": "0", "enableActingMaster": "false"}, body)
    send_pieces(pieces, 1)
    client, _ = cluster.connect()
    cluster.send(client, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": names[0]})
    table = cluster.walked()
    for counter in (1, 1, 2):  # the same table again, twice, then with a new dataVersion
        send_pieces(pieces, counter)
    assert table.touched == 0
    assert set(cluster.answers.routes) == {names[0]} and len(table) == 4000
    send_pieces([pieces[0], pieces[1] + ["Added"]], 3)
    assert 0 < table.touched <= 2 * 1001 + 8  # the changed piece only
    assert "Added" in table


def test_the_topic_table_is_nothing_to_the_collector(tmp_path):
    """topicQueueTable's entries hold no cycles: none is tracked by the garbage collector, so a
    full collection does not visit a million topics (each used to be two tracked objects)."""
    cluster = Cluster(tmp_path, compatVersion="5.3.3")
    broker, _ = cluster.connect()
    cluster.register(broker, "small", 1, ["A", "B"])
    cluster.register(cluster.connect()[0], "big", 2, [f"T{i:05d}" for i in range(3000)] + ["A"])
    table = cluster.routes.topicQueueTable
    assert len(table) == 3002
    assert not [topic for topic, queues in table.items()
                if gc.is_tracked(queues) or any(map(gc.is_tracked, queues.values()))]


def test_no_collection_walks_the_topic_table(tmp_path):
    """The server freezes what boot made (service.tune_gc); the table's dicts are tracked from the
    start, so they are frozen with it and no later collection walks their entries (a dict first
    tracked when its first topic came in was walked by every older-generation pass: 20-30 ms at
    1M topics)."""
    cluster = Cluster(tmp_path, compatVersion="5.3.3")
    service.tune_gc()
    try:
        cluster.register(cluster.connect()[0], "big", 2, [f"T{i:05d}" for i in range(3000)])
        gc.collect()
        table = cluster.routes.topicQueueTable
        assert len(table) == 3000
        parts = {id(part) for part in gc.get_referents(*gc.get_referents(table)) if isinstance(part, dict)}
        parts.add(id(table))
        assert not [part for part in gc.get_objects() if id(part) in parts]
    finally:
        gc.unfreeze()


def test_registrations_write_into_the_tables_entries_and_leave_no_copies(tmp_path):
    """A registration changes each topic's entry of topicQueueTable (its dict of queues) in place,
    whichever registration it is: a second group joining every topic, the first sending its table
    again with a new dataVersion, then without one topic (5.x deleteTopicWithBrokerRegistration).
    No copy of an entry replaces it, so a registration leaves nothing to free among the QueueData
    the table keeps (copies replacing the entries of 3 brokers' 100k topics left a third of the
    heap in holes the allocator could not give back)."""
    cluster = Cluster(tmp_path, compatVersion="5.3.3", deleteTopicWithBrokerRegistration=True)
    topics = [f"T{i:05d}" for i in range(3 * settling.WRITE_PER_STEP)]  # written in steps
    first, _ = cluster.connect()
    cluster.register(first, "first", 1, topics)
    entries = dict(cluster.routes.topicQueueTable)
    cluster.register(cluster.connect()[0], "second", 2, topics)
    cluster.register(first, "first", 1, topics, counter=2)
    cluster.register(first, "first", 1, topics[1:], counter=3)
    table = cluster.routes.topicQueueTable
    assert cluster.routes.settling == 0 and len(table) == len(topics)
    assert [topic for topic in topics if table[topic] is not entries[topic]] == []
    assert list(table[topics[0]]) == ["second"] and sorted(table[topics[1]]) == ["first", "second"]


def test_a_group_joining_a_tables_topics_looks_each_topic_up_once(cluster):
    """A registration of topics topicQueueTable holds (the second master of a pair, a first
    registration of a million topics' other half) looks each topic up once, as it is staged: the
    entry staging found is where its queue data is written, with no second look-up of the topic
    (in a table of a million, each look-up is a few cache misses: a third of writing it)."""
    topics = [f"T{i:05d}" for i in range(3 * settling.WRITE_PER_STEP)]  # written in steps
    cluster.register(cluster.connect()[0], "first", 1, topics)
    entries = dict(cluster.routes.topicQueueTable)
    table = cluster.walked()
    cluster.register(cluster.connect()[0], "second", 2, topics)
    assert cluster.routes.settling == 0
    assert table.touched == len(topics)
    assert all(table.shard(topic)[topic] is entries[topic] and sorted(entries[topic]) == ["first", "second"]
               for topic in topics)


def test_a_group_new_to_the_table_looks_each_topic_up_once_as_it_writes_it(cluster):
    """A registration of a group no topic holds yet (a first registration of its first member:
    the first piece of each broker's table at 1M topics) stages its topics without looking them
    up, whether the table holds them (the second master of a pair) or not, since the group lacks
    every one: each is looked up once, as it is written (and inserted when new), where staging
    looked it up a first time before (a few cache misses each in a table of a million)."""
    topics = [f"T{i:05d}" for i in range(3 * settling.WRITE_PER_STEP)]  # written in steps
    table = cluster.walked()
    cluster.register(cluster.connect()[0], "first", 1, topics)
    assert cluster.routes.settling == 0
    assert table.touched == 2 * len(topics)  # looked up, then inserted: new to the table
    table.touched = 0
    cluster.register(cluster.connect()[0], "second", 2, topics[::2] + [f"U{i:05d}" for i in range(100)])
    assert cluster.routes.settling == 0
    assert table.touched == len(topics[::2]) + 2 * 100  # held: looked up and written in; new: and inserted
    assert sorted(cluster.routes.topicQueueTable[topics[0]]) == ["first", "second"]


def test_a_registration_hashes_its_body_once(cluster, monkeypatch):
    """What tells a registration from another (its digest, kept to renew the broker), what tells
    its table from another (the memo digest) and what tells each piece of its table from another
    (what a table sent again in pieces skips) are hashed in one pass over the body: the first
    stands on the second, the second on the pieces' digests, which the decoder takes where it
    cuts as they were cut.  Only the table's last piece is hashed again (the decoder finds its end
    by decoding it): about once the body in all, where it was twice (three times before that).
    The body is hashed once more, whole, for the key its connection keeps (AnswerCache.keep_renewal;
    in the Cooperator's steps, as this one, past dispatch.RENEWED_BYTES_PER_TURN): sent again, it is
    renewed from memory by that one hash, no table decoded."""
    hashed: list[int] = []
    sha1 = hashlib.sha1

    class Counted:
        def __init__(self, data: Any = b"") -> None:
            self._hash = sha1()
            self.update(data)

        def update(self, data: Any) -> None:
            hashed.append(len(memoryview(data)))
            self._hash.update(data)

        def digest(self) -> bytes:
            return self._hash.digest()

    topics = [f"T{i:05d}" for i in range(6000)]  # a big body: its table decoded in pieces
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), {t: TopicConfig(t) for t in topics}),
                                False, False)
    assert len(body) > 2 * STEP_BYTES
    monkeypatch.setattr(hashlib, "sha1", Counted)
    broker, transport = cluster.connect()
    cluster.register(broker, "big", 1, topics)
    assert len(cluster.routes.topicQueueTable) == len(topics)
    assert len(body) > dispatch.RENEWED_BYTES_PER_TURN
    assert 2 * len(body) <= sum(hashed) < 2 * len(body) + STEP_BYTES + 8192
    hashed.clear()
    cluster.register(broker, "big", 1, topics)  # the same again: renewed from memory by its key
    assert len(body) <= sum(hashed) < len(body) * 1.1


def test_changes_made_while_a_departure_is_written_in_come_after_it_and_bound_every_turn(tmp_path, monkeypatch):
    """Connections lost over several turns, and one of the departed groups back (a small
    registration) while their queues are still being removed: each is a change after
    the one before it, none makes a turn finish another's work (a second batch used to finish the
    first's walk in one go), and lookups see each whole, the group back with its new table only."""
    size = 4 * TURN_BOUND
    cluster = Turns(tmp_path, monkeypatch)
    leaving = cluster.one_staying_three_leaving(size, lambda index, i: f"Go{index}-{i:06d}")
    table = cluster.walked()
    back, _ = cluster.connect()
    turns: list[str] = []

    def shared() -> list[str]:
        route = cluster.service.state.routes.pickup_topic_route_data("Shared")
        return sorted(q.brokerName for q in route.queueDatas)  # type: ignore[union-attr]

    def look() -> None:
        found = cluster.found(["Go0-000000", "Go0-000001", f"Go1-{size - 1:06d}", "Go2-000000"])
        go2 = found[3]  # until its departure, a turn after its connection closed
        assert not go2 or "go2 gone" not in turns
        if not go2:
            turns.append("go2 gone")
        back_found = found[0]  # once its registration, in steps of its own, is applied
        assert not turns.count("go0 back") or back_found
        if back_found:
            turns.append("go0 back")
        assert found[1:3] == [False, False]
        assert shared() == sorted(["stay", *(["go0"] if back_found else []), *(["go2"] if go2 else [])])
        counts = cluster.routes.topicsOfGroup  # what the tables' limits count: the routes lookups see
        assert (counts["stay"], counts.get("go0", 0), "go1" in counts, counts.get("go2", 0)) == (
            size + 1, 2 if back_found else 0, False, size + 1 if go2 else 0)
        turns.append("turn")
        if len(turns) == 2:  # two turns into the first batch's writing: the second batch, and go0 back
            leaving[2].connectionLost()
            back.dataReceived(registration_frame("go0", 20, ["Go0-000000", "Shared"], counter=5))
            turns.append("back")
    for protocol in leaving[:2]:
        protocol.connectionLost()
    touched = cluster.turns(table, look)
    assert max(touched) <= TURN_BOUND, sorted(touched)[-5:]
    assert cluster.routes.settling == 0 and turns.count("turn") > 6
    assert sorted(table) == sorted([f"Stay{i:06d}" for i in range(size)] + ["Shared", "Go0-000000"])
    assert sorted(table["Shared"]) == ["go0", "stay"] and list(table["Go0-000000"]) == ["go0"]
    heard = [(e.kind, e.info["broker"]) for e in cluster.service.seen.events.recent
             if e.kind in ("closed", "registered")]
    assert heard[-4:-2] == [("closed", "go0"), ("closed", "go1")]
    assert sorted(heard[-2:]) == [("closed", "go2"), ("registered", "go0")]
    assert "go0 back" in turns
    held = dict.fromkeys(["stay", "go0"], 0)
    for queues in table.values():
        for name in queues:
            held[name] += 1
    assert (cluster.routes.topicsOfGroup, cluster.routes.queueEntries) == (held, sum(held.values()))


def test_a_storm_of_small_registrations_holds_a_lookup_of_the_same_turn_for_a_few_of_them(tmp_path, monkeypatch):
    """A hundred brokers re-register in one reactor turn (small tables, each answered at once on
    its own) and a client's lookup is read in the same turn: it is answered after at most
    AT_ONCE_PER_TURN registrations (every one of them, on the old code); the others wait their turn
    and are answered in the turns after, each looked at about once (not once a turn until its
    turn comes: thousands of them cost the square of their number)."""
    looked: list[int] = []
    turn_full = dispatch.Dispatcher._turn_full

    def counted(self: dispatch.Dispatcher) -> bool:
        looked.append(1)
        return turn_full(self)
    monkeypatch.setattr(dispatch.Dispatcher, "_turn_full", counted)
    cluster = Cluster(tmp_path)
    brokers = cluster.storm_brokers(100)
    client, client_out = cluster.connect()
    registered: list[int] = []

    def lookup() -> None:
        registered.append(sum(1 for _, transport in brokers if transport.value()))
        client.dataReceived(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Storm"},
                                                    opaque=1, version=409).encode())
    for index, (protocol, _) in enumerate(brokers):  # one reactor turn: no clock advance in between
        body = encode_register_body(RegisterBrokerBody(DataVersion(1, 2), {t: TopicConfig(t) for t in (
            "Storm", f"Own{index}")}), False, False)
        protocol.dataReceived(RemotingCommand.request(RequestCode.REGISTER_BROKER, {
            "brokerName": f"b{index:03d}", "brokerAddr": f"127.0.0.1:{3000 + index}", "clusterName": "c",
            "haServerAddr": "h", "brokerId": "0"}, body, opaque=2, version=409).encode())
        if index == 49:
            lookup()
    assert RemotingCommand.decode(client_out.value()[4:]).code == 0  # answered in the turn it was read
    assert registered == [dispatch.AT_ONCE_PER_TURN]
    looked.clear()
    cluster.settle()
    assert all(RemotingCommand.decode(transport.value()[4:]).code == 0 for _, transport in brokers)
    assert len(looked) <= len(brokers), len(looked)


def test_a_storm_past_the_turns_share_is_not_decoded_in_the_turn_it_is_read(tmp_path, monkeypatch):
    """A hundred brokers re-register in one reactor turn: the turn decodes the headers of the
    AT_ONCE_PER_TURN it answers, and of the others looks only at their code (on the old code it
    decoded all of them there, so the turn, and a lookup read in it, waited for every header);
    each is decoded once, in the turn that answers it."""
    decoded: list[bytes] = []
    decode_json = header.HeaderTemplates.decode_json

    def counted(self: header.HeaderTemplates, data: bytes) -> header.Header:
        decoded.append(data)
        return decode_json(self, data)
    monkeypatch.setattr(header.HeaderTemplates, "decode_json", counted)
    cluster = Cluster(tmp_path)
    brokers = cluster.storm_brokers(100)
    decoded.clear()
    for index, (protocol, _) in enumerate(brokers):  # one reactor turn
        protocol.dataReceived(registration_frame(f"b{index:03d}", 3000 + index, ["Storm", f"Own{index}"], 2))
    assert len(decoded) == dispatch.AT_ONCE_PER_TURN
    cluster.settle()
    assert all(RemotingCommand.decode(transport.value()[4:]).code == 0 for _, transport in brokers)
    assert len(decoded) == len(brokers)


def test_a_storm_past_the_turns_share_is_read_on_without_pausing_its_connections(tmp_path, monkeypatch):
    """A hundred brokers re-register in one reactor turn: those past AT_ONCE_PER_TURN wait for a
    later turn, and their connections are not paused and resumed for it (on the old code each
    was: two epoll_ctl calls and the reactor's bookkeeping a broker); one that sends more behind
    its waiting registration is paused then, what it sent held, and answered in order."""
    paused: list[object] = []
    pause = StringTransport.pauseProducing

    def counted(self: StringTransport) -> None:
        paused.append(self)
        pause(self)
    monkeypatch.setattr(StringTransport, "pauseProducing", counted)
    cluster = Cluster(tmp_path)
    brokers = cluster.storm_brokers(100)
    paused.clear()
    for index, (protocol, _) in enumerate(brokers):  # one reactor turn
        protocol.dataReceived(registration_frame(f"b{index:03d}", 3000 + index, ["Storm", f"Own{index}"], 2))
    assert paused == []
    last, transport = brokers[-1]
    behind = RemotingCommand.request(RequestCode.GET_KV_CONFIG, {"namespace": "n", "key": "k"}, opaque=7,
                                     version=409).encode()
    last.dataReceived(behind)
    assert paused == [transport] and last.held == len(behind) - 4 + len(registration_frame("b099", 3099, [
        "Storm", "Own99"], 2)) - 4
    cluster.settle()
    assert [RemotingCommand.decode(frame).opaque for frame in FrameDecoder().feed(transport.value())] == [1, 7]
    assert transport.producerState == "producing" and last.held == 0
    assert all(RemotingCommand.decode(transport.value()[4:]).code == 0 for _, transport in brokers)


def test_a_frame_left_for_a_later_turn_that_does_not_decode_closes_its_channel(tmp_path):
    """A frame that looks like a registration past the turn's share, and turns out not to be a
    command when its turn comes, is refused as it would have been at once: the channel closed,
    the refusal counted."""
    cluster = Cluster(tmp_path)
    brokers = cluster.storm_brokers(AT_ONCE + 1)
    for index, (protocol, _) in enumerate(brokers[:-1]):
        protocol.dataReceived(registration_frame(f"b{index:03d}", 3000 + index, ["Storm", f"Own{index}"], 2))
    broken = b'{"code":103,"extFields":'  # cut short: not JSON
    last, transport = brokers[-1]
    last.dataReceived((4 + len(broken) + 1).to_bytes(4, "big") + len(broken).to_bytes(4, "big") + broken + b"x")
    assert not transport.disconnecting  # left for a later turn, not decoded yet
    cluster.settle()
    assert transport.disconnecting and cluster.service.dispatcher.metrics.rejected["undecodable"] == 1


def test_a_storm_during_a_big_registrations_steps_is_answered_before_it_ends(tmp_path, monkeypatch):
    """A hundred small registrations read in one turn while a big table takes its steps: those past
    AT_ONCE_PER_TURN are answered that many a turn in the turns after, not one after the other
    behind the big one's steps (as jobs in steps: every one of them waited for it)."""
    cluster = Turns(tmp_path, monkeypatch)
    brokers = cluster.storm_brokers(100)
    big, big_out = cluster.connect()
    table = cluster.walked()
    big.dataReceived(registration_frame("big", 2, [f"Big{i:06d}" for i in range(4 * TURN_BOUND)]))
    answered: list[tuple[int, bool]] = []

    def between() -> None:
        if not answered:  # the storm, read in one turn while the big table takes its first steps
            for index, (protocol, _) in enumerate(brokers):
                protocol.dataReceived(registration_frame(f"b{index:03d}", 3000 + index, ["Storm", f"Own{index}"], 2))
        answered.append((sum(1 for _, transport in brokers if transport.value()), bool(big_out.value())))
    cluster.turns(table, between)
    storm_done = next(turn for turn, (count, _) in enumerate(answered) if count == len(brokers))
    big_done = next(turn for turn, (_, done) in enumerate(answered) if done)
    assert answered[0][0] == dispatch.AT_ONCE_PER_TURN and storm_done < big_done, (storm_done, big_done)
    assert all(RemotingCommand.decode(transport.value()[4:]).code == 0 for _, transport in brokers)



def test_a_registration_runs_the_same_lines_at_ten_and_a_hundred_times_the_brokers(tmp_path):
    """What one broker's registration does is the same whether 20, 200 or 2,000 brokers are
    registered (the curve's many-brokers steps: 1,000 and 5,000 in pairs, four topics a pair):
    counted in lines of the server's code run, a walk of anything holding every broker, every
    group or every event kept would show.  Its first registration, one with a new dataVersion
    and the same again (renewed).  (The new dataVersion's "changed" event was compared with each
    of the last 200 events kept: 1,570 lines at 20 brokers, 1,749 from 200 on.)"""
    counted = {}
    for brokers in (20, 200, 2000):
        cluster = Cluster(tmp_path / str(brokers))
        cluster.service.factory.idle_timeout = None  # task.Clock sorts every call at each callLater
        for index in range(brokers):
            cluster.register(cluster.connect()[0], f"b{index:05d}", 10000 + index,
                             [f"Pair{index // 2:05d}_{j}" for j in range(4)])
        newcomer, transport = cluster.connect()
        topics = [f"New_{j}" for j in range(4)]
        register = functools.partial(cluster.register, newcomer, "newcomer", 9, topics)
        counted[brokers] = [server_lines_run(functools.partial(register, counter=counter)) for counter in (1, 2, 2)]
        assert b'"code":0' in transport.value() and len(cluster.routes.brokerLiveTable) == brokers + 1
        events = [e.kind for e in cluster.service.seen.events.recent if e.info.get("broker") == "newcomer"]
        assert events == ["registered", "changed"]
    # the same but for 2 lines: at 20 brokers the events kept (200 at most) are not yet a full ring
    # whose oldest goes as one comes (RecentEvents._append)
    for runs in zip(*counted.values(), strict=True):
        assert max(runs) - min(runs) <= 2, counted


#: the Python calls of a new broker's first registration of four topics, read to answered
#: (test_a_new_brokers_first_registration_makes_few_calls): 328 at 9405704, 264 at 9fad6c3, 227
#: at 9174244, 212 since work of one step's size takes no step (a CRC, a hash, a table's staging:
#: each yield resumed the handler and its generators) and a header's four ints in range are taken
#: as they are (docs/benchmarks.md), 217 with the body's numbers held to Java's ranges
#: (fastjson.java_numbers, 3) and the renewal key made by its steps (2), 213 since a server's
#: registration header is parsed without the template and kin keys it never keeps (4), 214 while
#: alike brokers' bodies were kept to be decoded once (removed: real brokers seldom send one
#: another's bytes within the few hundred milliseconds it kept them), 213 again, 215 since the
#: routes keep each group's write-bit counts as it changes (two look-ups: no scrape walks the
#: table after a change), 216 since a route event's log line and page event go through the filter
#: that summarises a flapping broker's (service.told_unless_flapping: one call, no more while none
#: flaps), 205 since a change's look-ups for nothing are cut (the departures' broker key with none
#: departed, a new group's scan for a swapped member and its key's property, the live key worked out
#: once, a new group marked changed once, the subscribers' holds without a generator, the switches a
#: first registration need not read), 204 since a plan hands its Staging to the manager as it is (its
#: nine counts and tables were copied into the plan, then into a new Staging when it applied), 156
#: since a first registration of the common shape goes through processor.register_fused (read from
#: its frame, no RemotingCommand or answer Header made) and the state half makes its values as
#: msgspec Structs and writes a change's few entries with no Staged layer, 155 since a group's
#: topology entry is a Struct encoded as it is (no comprehension of its members' rows), 156 again
#: since the registration's kept renewal keeps where its key was read (answer_cache.RenewalKey.shape,
#: one call here, so each heartbeat after it is read at those places): held at that; no room for a
#: call more, let alone a path's worth (its log line's level checked by Logger.emit alone was 7
#: calls).  Fewer calls is not always less work: str.format per field in place of a comprehension's
#: call cost more; 155 since a 4.9.8 body's absent mappingDataVersion is DataVersion's defaults,
#: its numbers not read (fastjson.java_numbers: about 8k instructions), 153 since a DataVersion's
#: ints in a long's range are taken as they are (its split's and its body's: java_numbers twice),
#: 142 since the body's versions are read typed (no DataVersion.from_json, nor _flat_data_version
#: and fastjson.loads for its split), DataVersion and RegisterBrokerBody are Structs made in C, the
#: plan's rules are taken as made and the digest made at once (no generator)
FIRST_REGISTRATION_CALLS = 142


def test_a_new_brokers_first_registration_makes_few_calls(tmp_path):
    """A first registration is the one phase of the curve our one core is busy for (5,000 brokers
    registering at once): what one costs is counted in Python calls, each a few hundred
    nanoseconds, from the read of its frame (as a 4.9.8 broker sends it, its table's CRC
    included) to its answer written, its event logged and heard, its topology entry encoded, at
    200 brokers held.  The cuts that brought it down (docs/benchmarks.md) stay cut."""
    cluster = Cluster(tmp_path)
    cluster.service.factory.idle_timeout = None  # task.Clock sorts every call at each callLater
    for index in range(200):
        cluster.register(cluster.connect()[0], f"b{index:05d}", 10000 + index,
                         [f"Pair{index // 2:05d}_{j}" for j in range(4)])
    body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), {t: TopicConfig(t) for t in
                                                                    [f"New_{j}" for j in range(4)]}), False, False)
    ext = {"brokerName": "newcomer", "brokerAddr": "127.0.0.1:9", "clusterName": "c", "haServerAddr": "127.0.0.1:9",
           "brokerId": "0", "compressed": "false", "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF)}
    frame = RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body, opaque=77, version=409).encode()
    newcomer, transport = cluster.connect()
    calls = python_calls_run(functools.partial(newcomer.dataReceived, frame))
    assert RemotingCommand.decode(transport.value()[4:]).code == 0
    assert [e.kind for e in cluster.service.seen.events.recent if e.info.get("broker") == "newcomer"] == ["registered"]
    assert calls <= FIRST_REGISTRATION_CALLS, calls




def test_a_registration_looks_through_no_kept_lookup(tmp_path, monkeypatch):
    """A lookup's answer kept (the curve's probe keeps one throughout its phases), a broker's first
    registration was looked for among the kept lookups twice before it was decoded: as a read
    (``replies_from_read``) and as a frame (``replies_from_memory``), two calls and some twenty
    lines, about 24 k of a first registration's 0.52 M instructions in the real server (its accept
    aside: docs/benchmarks.md, ``instructions.py --kept-lookup``).  A frame whose header begins as a
    Java broker's registration's (processor.FUSED_HEAD) is no lookup: neither looks; a lookup still does."""
    from twisted_namesrv.answer_cache import AnswerCache

    cluster = Cluster(tmp_path)
    cluster.register(cluster.connect()[0], "b", 1, ["Kept", "Other"])  # (5.x refuses a first one of one topic)
    client, _ = cluster.connect()
    for _ in range(2):
        cluster.send(client, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Kept"})
    assert cluster.answers.replies
    looked: list[str] = []
    for name in ("replies_from_read", "replies_from_memory"):
        made = getattr(AnswerCache, name)
        monkeypatch.setattr(AnswerCache, name, lambda self, *args, _made=made, _name=name, **kwargs: (
            looked.append(_name), _made(self, *args, **kwargs))[1])
    newcomer, transport = cluster.connect()
    cluster.register(newcomer, "newcomer", 2, ["New_0", "New_1"])
    assert b'"code":0' in transport.value() and looked == []
    cluster.send(client, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Kept"})
    assert looked == ["replies_from_read"]  # answered from memory as before

def test_a_new_groups_route_event_costs_the_departures_and_the_topology_no_look_beyond_it(tmp_path):
    """A first registration's "registered" event, heard by the departures while none departed and
    by the topology for a group it does not know yet, is a call each and what that one must do:
    no broker key worked out for nothing to pop (DepartedBrokers.route_event), no scan of a new
    group's members for a swapped id, no property's call for its key (Topology.present): the
    topology's 6 are heard, present, the clock, its ids, _changed and its entry encoded (the group,
    the member and the entry are msgspec Structs, made and encoded in C: 9 while they were
    dataclasses, 7 while the entry was a dict with its members' rows made by a comprehension; 2
    and 11 before the look-ups for nothing were cut)."""
    cluster = Cluster(tmp_path)
    info = {"cluster": "c", "broker": "newcomer", "id": 0, "addr": "127.0.0.1:9", "topics": 4}
    departed, topology = cluster.service.seen.departed, cluster.service.state.topology
    assert python_calls_run(functools.partial(departed.route_event, "registered", info)) == 1
    assert python_calls_run(functools.partial(topology.heard, "registered", info)) == 6
    assert topology.group("c", "newcomer").member(0).addr == "127.0.0.1:9" and not departed.brokers()


def test_a_table_another_broker_sent_is_held_to_max_topics_per_broker(tmp_path):
    """The same body from a second broker, maxTopicsPerBroker lowered meanwhile, is counted against
    the limit as it is then: refused whole, nothing of it applied."""
    cluster = Cluster(tmp_path)
    topics = [f"Alike_{j}" for j in range(4)]
    cluster.register(cluster.connect()[0], "b0", 10000, topics)
    cluster.service.state.config.values["maxTopicsPerBroker"] = 3
    protocol, transport = cluster.connect()
    cluster.register(protocol, "b1", 10001, topics)
    answer = RemotingCommand.decode(transport.value()[4:])
    assert answer.code != 0 and "maxTopicsPerBroker (3)" in answer.remark
    assert dict(cluster.routes.topicQueueTable["Alike_0"]).keys() == {"b0"}

def test_what_a_registration_keeps_for_its_renewal_is_nothing_to_the_collector(tmp_path):
    """A broker's memo, renewal and kept answer (what renews it from its heartbeats' bytes) are
    frozen Structs of text, numbers and bytes, made in C: none is tracked, so none adds to the
    objects each collection walks at 5,000 brokers (service.tune_gc)."""
    cluster = Cluster(tmp_path)
    protocol, _ = cluster.connect()
    cluster.register(protocol, "b00000", 10000, ["Pair00000_0", "Pair00000_1"])
    kept = cluster.answers.renewals[protocol.channel]
    (memo,) = cluster.routes.registration_memo("c", "127.0.0.1:10000", "b00000", 0, False)
    assert [gc.is_tracked(o) for o in (kept, kept.renewal, memo)] == [False] * 3


def test_what_alike_brokers_keep_is_one_object_for_all(tmp_path):
    """5,000 brokers of a cluster keep, each, what they share with the others once, not a copy: the
    cluster's name, the kept answer's pieces (a master's answer is the same but for its opaque), the
    addresses a renewal shows and the topology's member ids up."""
    cluster = Cluster(tmp_path)
    kept = []
    for index in range(2):
        protocol, _ = cluster.connect()
        topics = [f"Shared{index}_{j}" for j in range(2)]  # (a first registration of one topic is refused)
        body = encode_register_body(RegisterBrokerBody(DataVersion(1, 1), {t: TopicConfig(t) for t in topics}),
                                    False, False)
        cluster.send(protocol, RequestCode.REGISTER_BROKER, {
            "brokerName": f"broker-{index}", "brokerAddr": f"127.0.0.1:{10000 + index}",
            "clusterName": "SharedCluster", "haServerAddr": f"127.0.0.1:{20000 + index}", "brokerId": "0"}, body)
        kept.append(cluster.answers.renewals[protocol.channel])
    first, second = kept
    assert first.head is second.head and first.rest is second.rest
    assert first.renewal.shown is second.renewal.shown
    assert first.renewal.names[0] is second.renewal.names[0] == "SharedCluster"
    groups = cluster.service.state.topology.groups
    assert groups["SharedCluster", "broker-0"].up is groups["SharedCluster", "broker-1"].up == {0}


def test_connections_opened_at_once_keep_no_dict_of_their_own(tmp_path):
    """Connections opened before any of them registered a broker or asked for a route (thousands
    of brokers reconnecting at once after a restart) share their class's key table as the first
    connection's do: none holds a dict of its own (CPython makes one only for attributes set in
    another order than the table's; at 5,000 brokers they were 464 bytes each)."""
    cluster = Cluster(tmp_path)
    # a class of its own: its key table new, as in a server just started (the tests before filled the protocol's)
    cluster.service.factory.protocol = type("JustStarted", (server.RemotingProtocol,), {})
    connections = [cluster.connect()[0] for _ in range(30)]  # (a few fit the key table's room as it grew)
    *brokers, client = connections
    for index, broker in enumerate(brokers):
        for _ in range(2):  # the first registration, then the same bytes again (a heartbeat)
            cluster.register(broker, f"b{index:05d}", 10000 + index, [f"Shared{index}_0", f"Shared{index}_1"])
    cluster.send(client, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Shared0_0"})
    assert all(cluster.answers.renewals.get(broker.channel) is not None for broker in brokers)
    with_a_dict = [c for c in connections if any(type(o) is dict for o in gc.get_referents(c))]
    assert with_a_dict == []


def test_connections_from_one_host_hold_one_string_of_it(tmp_path):
    """Thousands of connections from one host (a rack's brokers, a proxy's, a pod's clients) hold
    its address as one string, not one each: a socket's peer address is a new string each time."""
    cluster = Cluster(tmp_path)
    protocols = []
    for port in (50001, 50002):
        protocol = cluster.service.factory.buildProtocol(None)
        protocol.makeConnection(StringTransport(peerAddress=IPv4Address("TCP", ".".join(["10", "0", "0", "7"]), port)))
        protocols.append(protocol)
    first, second = protocols
    assert first.host == "10.0.0.7" and first.host is second.host
    assert first.peer.address == "10.0.0.7:50001"


def _grown(first: object, keys: list[str]) -> dict[Any, None]:
    """A dict that held ``first``, let it go, then got ``keys`` one by one: a shard's history."""
    grown: dict[Any, None] = {first: None}
    del grown[first]
    for key in keys:
        grown[key] = None
    return grown


def test_the_shards_keep_their_keys_hashes_beside_them(cluster):
    """Every shard of topicQueueTable is a dict that keeps each key's hash beside it (as a dict that
    ever held a key other than a string does): a look-up of a topic compares the slots it probes
    by the hashes there, not by reading each probed topic's name elsewhere in the heap (a cache
    miss a slot in a table of a million), and a shard that grows does not read every name again.
    Measured by its size: a dict of the same history but for a string first is smaller; and so
    after the table is cleared."""
    cluster.register(cluster.connect()[0], "big", 1, [f"T{i:05d}" for i in range(10_000)])
    table = cluster.routes.topicQueueTable
    for shard in table.shards[:4]:
        assert len(shard) > 20
        keys = list(shard)
        assert sys.getsizeof(shard) == sys.getsizeof(_grown(0, keys)) > sys.getsizeof(_grown("", keys))
    table.clear()
    shard = table.shards[0]
    for key in keys:
        shard[key] = {}
    assert sys.getsizeof(shard) == sys.getsizeof(_grown(0, keys)) > sys.getsizeof(_grown("", keys))


def test_a_scrape_after_a_change_walks_no_table_entry(cluster):
    """/metrics (and /readyz, the status page) after a change of the routes: each group's topics
    and writable ones are read from the counts the routes keep as the tables change; before, the
    first scrape after any change walked every (topic, group) entry of topicQueueTable in the
    reactor's turn (3.1-3.5 s at maxTopicQueueEntries' 8 M), which any peer that may register could
    make happen before each scrape."""
    from twisted_namesrv.web.site import MetricsPage

    service = cluster.service
    page = MetricsPage(service.state, service.remoting.factory, service.seen, service.seen.health)
    big, _ = cluster.connect()
    cluster.register(big, "big", 1, BIG_TOPICS)
    groups = [cluster.connect()[0] for _ in range(5)]
    for index, protocol in enumerate(groups):
        cluster.register(protocol, f"g{index:03d}", 2000 + index, GROUP_TOPICS)
    page._begin()()
    table = cluster.walked()
    cluster.routes.wipe_write_perm_of_broker("g000")  # a change (that walks the table itself)
    cluster.register(groups[1], "g001", 2001, GROUP_TOPICS[:5], counter=2)  # another
    table.visited = 0
    page._begin()()
    service.readiness()
    health = service.seen.health.health()
    assert table.visited == 0
    assert (health.group("g000").write_perm, health.group("g000").topics) == (0, len(GROUP_TOPICS))
    assert (health.group("g001").write_perm, health.group("big").write_perm) == (len(GROUP_TOPICS), len(BIG_TOPICS))


def test_the_paths_every_registration_takes_read_no_code_by_its_enum():
    """Python 3.11 reads ``RequestCode.REGISTER_BROKER`` through EnumType's ``__getattr__`` hook
    (type's own look-up, called as a method): about 1,000 instructions a read, where a module's
    name for the member is a dict look-up.  The first registration's fused path and the checks
    every registration and heartbeat passes read the members once, at import."""
    hot = [processor.register_fused, dispatch.Dispatcher.answer, dispatch.Dispatcher._fusable,
           dispatch.Dispatcher._fused, dispatch.Dispatcher._renews_from_memory]
    for function in hot:
        assert not {"RequestCode", "ResponseCode", "SerializeType"} & set(function.__code__.co_names), function
