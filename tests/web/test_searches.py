"""The status page's topic searches over real HTTP: what is held per client and in all is capped
(429 and 503, each a refusal logged and counted), and a search whose client went away before it
began is let go (web/searches.py, apart.py)."""

from __future__ import annotations

import json
import threading
import time

import pytest_twisted
from twisted.internet import defer, reactor
from twisted.internet.task import deferLater
from twisted.logger import capturedLogs, formatEvent
from twisted.web.client import Agent, readBody

from tests.support import free_port, server_config
from twisted_namesrv.service import NamesrvService


class Gate(list):
    """Topic names whose reading in the search's thread waits until ``opened``: a search under way
    for as long as the test says."""

    def __init__(self, names: list[str], opened: threading.Event) -> None:
        super().__init__(names)
        self.opened = opened

    def __iter__(self):
        assert self.opened.wait(30), "never opened"
        return super().__iter__()


@defer.inlineCallbacks
def until(condition, seconds: float = 10):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not reached in time"
        yield deferLater(reactor, 0.01, lambda: None)


def ask(agent: Agent, base: str, query: str) -> defer.Deferred:
    return agent.request(b"GET", f"{base}/api/topics?q={query}".encode())


@defer.inlineCallbacks
def answer(asked: defer.Deferred):
    response = yield asked
    body = yield readBody(response)
    return response.code, response.headers.getRawHeaders(b"retry-after"), json.loads(body)


@pytest_twisted.inlineCallbacks
def test_searches_held_are_capped_per_client_and_in_all_and_let_go_with_their_client(tmp_path) -> None:
    service = NamesrvService.from_config(server_config(tmp_path, metricsPort=free_port()), reactor)
    opened = threading.Event()
    service.state.routes.all_topics = lambda: Gate(["TopicA", "TopicB", "Other"], opened)
    builds = service.state.build_apart.__self__  # the one BuildsApart
    service.startService()
    try:
        web = yield service.web_ready
        base = f"http://127.0.0.1:{web.getHost().port}"
        budget = service.web.factory.searches
        budget.per_client, budget.total = 2, 3
        here, there = Agent(reactor), Agent(reactor, bindAddress=("127.0.0.2", 0))
        first = ask(here, base, "topic")  # begun: its thread waits at the gate
        yield until(lambda: budget.total_held == 1)  # (two connections: the second could come first)
        second = ask(here, base, "b")  # waits for the first
        yield until(lambda: budget.total_held == 2 and builds.waiting() == [("api/topics", "b", 200)])

        with capturedLogs() as logged:
            code, retry, body = yield answer(ask(here, base, "c"))  # a third from this client
        assert any("topic search refused" in formatEvent(event) for event in logged)
        assert (code, retry) == (429, [b"1"]) and "2 searches of this client" in body["error"]
        assert service.state.refusals.counts["http", "search_per_client"] == 1
        third = ask(there, base, "other")  # another client's first: taken
        yield until(lambda: budget.total_held == 3)
        code, retry, body = yield answer(ask(there, base, "d"))  # its second: past the total
        assert (code, retry) == (503, [b"1"]) and "3 searches are waiting" in body["error"]
        assert service.state.refusals.counts["http", "search_total"] == 1

        second.cancel()  # its client goes before it began: let go, never begun
        second.addErrback(lambda failure: None)
        yield until(lambda: budget.total_held == 2 and budget.held["127.0.0.1"] == 1)
        assert builds.waiting() == [("api/topics", "other", 200)]  # let go: never to begin
        opened.set()
        code, _, body = yield answer(first)
        assert code == 200 and body["matches"] == 2 and [t["topic"] for t in body["topics"]] == ["TopicA", "TopicB"]
        code, _, body = yield answer(third)
        assert code == 200 and body["matches"] == 1
        yield until(lambda: budget.total_held == 0 and not budget.held and builds.waiting() == [])
        code, _, body = yield answer(ask(here, base, "topic"))  # the budget is whole again
        assert code == 200 and body["matches"] == 2
    finally:
        opened.set()
        yield service.stopService()
