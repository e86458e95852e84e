"""Checks every test gets for free."""

from __future__ import annotations

import pytest

from twisted_namesrv.state.routes import RouteInfoManager


@pytest.fixture(autouse=True)
def topic_index_matches_the_table(monkeypatch):
    """After each test, every RouteInfoManager's topics_by_broker is topicQueueTable inverted,
    whatever the test did to it through the manager's methods."""
    managers: list[RouteInfoManager] = []
    original = RouteInfoManager.__init__

    def tracked(self, *args, **kwargs):
        original(self, *args, **kwargs)
        managers.append(self)

    monkeypatch.setattr(RouteInfoManager, "__init__", tracked)
    yield
    for routes in managers:
        derived: dict[str, set[str]] = {}
        for topic, queues in routes.topicQueueTable.items():
            for broker_name in queues:
                derived.setdefault(broker_name, set()).add(topic)
        assert {name: set(topics) for name, topics in routes.topics_by_broker.items()} == derived
