"""A change of topicQueueTable made whole at once and written into it in slices.

Java changes its tables under a write lock: a lookup sees them before a registration or after it,
never half-way.  A change of many topics (a broker's 80k-topic table, groups leaving a table of a
million topics) written entry by entry in one reactor turn holds every lookup for as long as the
table is big; written across turns, lookups in between would see it half-way.  So RouteInfoManager
commits such a change as a ``Settling``: from the commit on, a lookup reads the table through it
(``queues``) and sees the whole change; ``step`` writes it into the table a slice at a time,
between lookups.  Whatever would walk the whole table or change it finishes it first (``finish``):
such work is as big as the table anyway.  Nothing else writes the table while one is pending.

Two kinds, one pending at a time:

- ``Staged``: a registration's new entries, built aside in steps (state/registration.py): each
  topic's queues as the registration leaves them (empty: the topic leaves the table).
- ``Departed``: broker groups that left (their brokers, addresses and clusters already gone): their
  queues are hidden from every lookup at once, then removed topic by topic, first finding which
  topics hold them (one walk of the table, in slices), then removing them; a topic left without
  queues leaves the table, and ``lost`` hears it with the last group that served it.

Pure: no Twisted, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from itertools import islice
from typing import Protocol

from ..bodies.route import QueueData

#: what one step does, about a millisecond of it: table entries written (a registration's), walked
#: (looking for the departed groups' topics), or cleared of the departed groups' queues
WRITE_PER_STEP = 2048
WALK_PER_STEP = 4096
REMOVE_PER_STEP = 1024

Table = dict[str, dict[str, QueueData]]
_ABSENT: dict[str, QueueData] = {}


class Settling(Protocol):
    """A committed change not yet written into the table."""

    def queues(self, topic: str) -> Mapping[str, QueueData] | None:
        """The topic's queues as the change leaves them (None: not in the table)."""

    def step(self) -> bool:
        """Write one slice in; False once everything is."""

    def finish(self) -> None:
        """Write the rest in, at once."""

    def __len__(self) -> int:
        """Entries still to write or walk (a bound on ``finish``'s work)."""


class Staged:
    """A registration's staged entries (topic -> its queues; empty: the topic leaves)."""

    __slots__ = ("table", "staged", "_todo", "_left")

    def __init__(self, table: Table, staged: Mapping[str, dict[str, QueueData]]) -> None:
        self.table = table
        self.staged = staged
        self._todo: Iterator[tuple[str, dict[str, QueueData]]] = iter(staged.items())
        self._left = len(staged)

    def queues(self, topic: str) -> Mapping[str, QueueData] | None:
        queues = self.staged.get(topic, _ABSENT)
        if queues is _ABSENT:
            return self.table.get(topic)
        return queues or None

    def step(self) -> bool:
        return self._write(WRITE_PER_STEP)

    def finish(self) -> None:
        self._write(self._left)

    def _write(self, count: int) -> bool:
        table = self.table
        for topic, queues in islice(self._todo, count):
            if queues:
                table[topic] = queues
            else:
                table.pop(topic, None)
        self._left = max(0, self._left - count)
        return self._left > 0

    def __len__(self) -> int:
        return self._left


class Departed:
    """Groups gone from every table but topicQueueTable (``leaving``: in the order they left);
    ``lost(topic, group)``: a topic no group serves any more, with the last group of
    ``leaving`` that did."""

    __slots__ = ("table", "leaving", "lost", "_order", "_walk", "_touched", "_todo", "_left")

    def __init__(self, table: Table, leaving: Mapping[str, object], lost: Callable[[str, str], None]) -> None:
        self.table = table
        self.leaving = leaving
        self.lost = lost
        self._order = {group: index for index, group in enumerate(leaving)}
        self._walk: Iterator[tuple[str, dict[str, QueueData]]] | None = iter(table.items())
        self._touched: list[str] = []
        self._todo: Iterator[str] = iter(())
        self._left = len(table)  # entries to walk, then topics to clear

    def queues(self, topic: str) -> Mapping[str, QueueData] | None:
        queues = self.table.get(topic)
        if queues is None or self.leaving.keys().isdisjoint(queues):
            return queues
        return {group: queue for group, queue in queues.items() if group not in self.leaving} or None

    def step(self) -> bool:
        if self._walk is not None:
            self._find(WALK_PER_STEP)
        else:
            self._remove(REMOVE_PER_STEP)
        return self._walk is not None or self._left > 0

    def finish(self) -> None:
        self._find(len(self.table))
        self._remove(self._left)

    def _find(self, count: int) -> None:
        """The next ``count`` entries of the one walk: which topics hold a departed group."""
        if self._walk is None:
            return
        disjoint = self.leaving.keys().isdisjoint
        entries = list(islice(self._walk, count))
        self._touched += [topic for topic, queues in entries if not disjoint(queues)]
        self._left -= len(entries)
        if len(entries) < count or self._left <= 0:
            self._walk = None
            self._todo = iter(self._touched)
            self._left = len(self._touched)

    def _remove(self, count: int) -> None:
        """The departed groups' queues out of the next ``count`` topics that hold them."""
        table, leaving, last = self.table, self.leaving, self._order.__getitem__
        for topic in islice(self._todo, count):
            queues = table.get(topic)
            if queues is None:
                continue
            gone = [group for group in queues if group in leaving]
            for group in gone:
                del queues[group]
            if not queues:
                del table[topic]
                self.lost(topic, gone[0] if len(gone) == 1 else max(gone, key=last))
        self._left = max(0, self._left - count)

    def __len__(self) -> int:
        return self._left
