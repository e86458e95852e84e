"""Topics that lost their last broker, for the status page.

A topic leaves topicQueueTable, silently, when the last broker group serving it empties: its last
member expired, closed its connection, went idle or unregistered.  Clients then get
TOPIC_NOT_EXIST and nothing on the page said why.  This keeps, for DEPARTED_KEEP_SECONDS, each
such topic with the broker that took it away, how and when; a topic that gets a broker again is
no longer lost.  RocketMQ's own topics (system_topics.py: the broker- and cluster-named ones,
TopicValidator's, retry and dead-letter) go with their broker by design and are left out.
RouteInfoManager works out which topics left with a departure while it removes them (the
one scan of topicQueueTable a batch of departures makes) and hands them here once the change is
complete (``departed``, which the composition root hands ``RouteInfoManager.listen_lost``): this
reads no table, so its work is the topics lost, not the topics held.  Those still lost are kept
across a restart with the page's events (event_log.py): a NameServer restarted after a broker
took topics away still names them for the rest of their ten minutes.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from dataclasses import dataclass, replace
from typing import Any

from .system_topics import is_system_topic

#: route events after which a broker is no longer in brokerLiveTable
DEPARTURES = frozenset({"expired", "closed", "idle", "unregistered"})
#: how a broker that stopped cleanly left (UNREGISTER_BROKER: mqshutdown broker, systemctl stop)
CLEAN_STOP = "unregistered"
#: departures that are crashes (the connection closed without unregistering, the heartbeat stopped,
#: the connection went idle): ranked above a clean stop in colour and order, and what makes a broker flap
CRASHES = DEPARTURES - {CLEAN_STOP}
KEEP_SECONDS = 600  # departures.DEPARTED_KEEP_SECONDS: as long as the broker that took it stays greyed
LIMIT = 1000  # at most this many kept, the newest


@dataclass(frozen=True, slots=True)
class LostTopic:
    topic: str
    cluster: str | None
    broker: str
    addr: str | None
    kind: str
    reason: str
    #: when it was lost, on the wall clock (what the page shows, what a restart reads back)
    ts: float
    #: the same on the steady clock, which its ten minutes are counted on: a wall clock stepped
    #: forward an hour must not forget a loss at once, nor one stepped back keep it an hour longer
    at: float = 0.0


class LostTopics:
    def __init__(self, clock: Callable[[], float], keep_seconds: float = KEEP_SECONDS, limit: int = LIMIT,
                 steady: Callable[[], float] | None = None) -> None:
        """``clock``: the wall clock; ``steady``: the clock the ages are counted on (clocks.py's
        steady_seconds; by default ``clock``)."""
        self.clock = clock
        self.steady = steady or clock
        self.keep_seconds = keep_seconds
        self.limit = limit
        self._lost: dict[str, LostTopic] = {}

    def departed(self, kind: str, info: dict[str, Any], topics: list[str]) -> None:
        """A departure (route event ``kind``, ``info``) took ``topics`` away: no group serves them
        now.  Only the newest ``limit`` are kept, so only those are looked at."""
        name = info.get("broker")
        if kind not in DEPARTURES or not isinstance(name, str):
            return
        now, at = self.clock(), self.steady()
        reason = str(info.get("reason") or ("the broker unregistered" if kind == "unregistered" else kind))
        cluster = info.get("cluster")
        clusters = (cluster,) if isinstance(cluster, str) else ()
        lost = self._lost
        for topic in self._newest_applications(topics, clusters, (name,)):
            lost.pop(topic, None)
            lost[topic] = LostTopic(topic, cluster, name, info.get("addr"), kind, reason, now, at)
        self._forget(at)

    def _newest_applications(self, topics: list[str], clusters: tuple[str, ...], brokers: tuple[str, ...]) -> list[str]:
        """The last ``limit`` of ``topics`` that are an application's, in their order: looked for
        from the end, so a departure taking a million topics looks at about ``limit`` of them."""
        newest: list[str] = []
        for topic in reversed(topics):
            if len(newest) == self.limit:
                break
            if not is_system_topic(topic, clusters, brokers):
                newest.append(topic)
        newest.reverse()
        return newest

    def recent(self, present: Container[str]) -> list[LostTopic]:
        """Topics lost in the last ``keep_seconds`` and not served again (``present``), oldest first,
        each ``ts`` on the wall clock of now (a loss seconds ago says so after a step of the clock)."""
        steady = self.steady()
        self._forget(steady)
        offset = self.clock() - steady  # 0 until the wall clock steps
        return [lost if lost.ts == lost.at + offset else replace(lost, ts=lost.at + offset)
                for topic, lost in self._lost.items() if topic not in present]

    def restore(self, kept: list[LostTopic]) -> None:
        """The last run's lost topics (event_log.py keeps them in events.json), before this run's,
        each with when it was lost: a restart neither forgets them nor gives them ten minutes more
        (their age is the wall clock's, the only one a restart keeps).  One saved at a time ahead of
        the clock (stepped back between the stop and the start) is taken as lost now: kept its ten
        minutes from the restart, not the step's hour more, and never shown lost in the future."""
        lost, self._lost = self._lost, {}
        wall, steady = self.clock(), self.steady()
        restored = [replace(topic, ts=min(topic.ts, wall), at=steady - max(0.0, wall - topic.ts)) for topic in kept]
        for topic in (*restored, *lost.values()):
            self._lost.pop(topic.topic, None)
            self._lost[topic.topic] = topic
        self._forget(steady)

    def _forget(self, now: float) -> None:
        """The oldest go while over the limit or older than ``keep_seconds``: found in one walk
        from the oldest (looking for the first anew after each removal walked past every
        removed one: a departure of a thousand topics made a million steps)."""
        lost, oldest_kept = self._lost, now - self.keep_seconds
        over = len(lost) - self.limit
        gone: list[str] = []
        for topic, kept in lost.items():
            if len(gone) >= over and kept.at >= oldest_kept:
                break
            gone.append(topic)
        for topic in gone:
            del lost[topic]
