"""Changes of topicQueueTable made whole at once and written into it in slices.

Java changes its tables under a write lock: a lookup sees them before a registration or after it,
never half-way.  A change of many topics (a broker's 80k-topic table, groups leaving a table of a
million topics) written entry by entry in one reactor turn holds every lookup for as long as the
table is big; written across turns, lookups in between would see it half-way.  So RouteInfoManager
commits such a change as a *layer* over the table: from the commit on, a lookup reads the table
through the layers still pending (``over``, oldest first) and sees every change whole; ``step``
writes the oldest layer into the table a slice at a time, between lookups, and the next one after
it.  A change made while layers are pending is a layer after them; only work that walks or edits
the whole table in place finishes them first (``finish``): such work is as big as the table.

Two kinds of layer:

- ``Staged``: a registration's new entries, built aside in steps (state/registration.py): the
  group's queue data for each topic it changes (None: out of the topic; a topic left with none
  leaves the table), written into the table's entries in place.
- ``Departed``: broker groups that left (their brokers, addresses and clusters already gone): their
  queues are hidden from every lookup at once, then removed topic by topic, first finding which
  topics hold them (one walk of the table, in slices, once the layers before it are written), then
  removing them; a topic left without queues leaves the table, and ``lost`` hears it with what the
  last group that served it was given.  Departures committed while one such layer waits for its
  turn join it: one walk for all of them.

A layer carries the route events to hand over once it is written (``events``: the departures',
whose lost topics the walk finds).  Pure: no Twisted, no clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from itertools import islice, repeat
from typing import Any, Generic, Protocol, TypeVar

from ..bodies.route import QueueData
from .queue_table import SHARD_MASK, SHARD_SHIFT, TopicQueueTable

#: what one step does, about a millisecond of it: table entries written (a registration's), walked
#: (looking for the departed groups' topics), or cleared of the departed groups' queues
WRITE_PER_STEP = 2048
WALK_PER_STEP = 4096
REMOVE_PER_STEP = 1024
#: names of topics that left let go of (freed) per step, once their departures were heard
LET_GO_PER_STEP = 16384

Table = MutableMapping[str, dict[str, QueueData]]
Queues = Mapping[str, QueueData]
_UNSTAGED = QueueData("", 0, 0, 0, 0)  # a topic the registration did not stage (None is staged)
#: the entry of a staged topic staging did not look up: the writing looks it up
_LOOK_UP: dict[str, QueueData] = {}
T = TypeVar("T")


class Layer(Protocol):
    """A committed change not yet written into the table."""

    #: route events to hand over once the layer is written
    events: list[Any]

    def over(self, topic: str, queues: Queues | None) -> Queues | None:
        """The topic's queues with this change on top of ``queues`` (the table's, through the
        layers before this one); None: not in the table."""

    def step(self) -> bool:
        """Write one slice in; False once everything is."""

    def finish(self) -> None:
        """Write the rest in, at once."""

    def __len__(self) -> int:
        """Entries still to write or walk (a bound on ``finish``'s work)."""


class Staged:
    """A registration's staged entries: ``group``'s queue data for each topic it changes (None:
    the group's queues leave the topic).  Written into the table's own entries in place, not as
    copies of them: a registration then leaves nothing to free among what the table keeps (copies
    replacing entries left a third of the heap in holes the allocator could not give back).

    ``entries``: the table's entry of each staged topic, in the staged order, as staging found
    them in the table itself (None: new to it; registration.Entries; none at all when staging
    looked nothing up: a group joining the table, each topic then looked up once, here).  Nothing changed the table
    between that staging and this layer's commit (the plan was fresh, no layer was pending), and
    layers are written in order, so each is still the topic's entry when its turn comes: the
    group's queue data is set in it with no second look-up of the topic in a table of a million
    (each one a few cache misses: a third of writing a first registration)."""

    __slots__ = ("table", "group", "staged", "events", "_todo", "_left")

    def __init__(self, table: Table, group: str, staged: Mapping[str, QueueData | None],
                 entries: Sequence[dict[str, QueueData] | None] | None = None) -> None:
        self.table = table
        self.group = group
        self.staged = staged
        self.events: list[Any] = []
        self._todo = todo_of(staged, entries)
        self._left = len(staged)

    def over(self, topic: str, queues: Queues | None) -> Queues | None:
        queue = self.staged.get(topic, _UNSTAGED)
        if queue is _UNSTAGED:
            return queues
        group = self.group
        if queue is None:
            if not queues or group not in queues:
                return queues
            return {name: held for name, held in queues.items() if name != group} or None
        merged = dict(queues) if queues else {}
        merged[group] = queue
        return merged

    def step(self) -> bool:
        return self._write(WRITE_PER_STEP)

    def finish(self) -> None:
        self._write(self._left)

    def _write(self, count: int) -> bool:
        write_staged(self.table, self.group, islice(self._todo, count))
        self._left = max(0, self._left - count)
        return self._left > 0

    def __len__(self) -> int:
        return self._left


Todo = Iterator[tuple[tuple[str, QueueData | None], dict[str, QueueData] | None]]


def todo_of(staged: Mapping[str, QueueData | None], entries: Sequence[dict[str, QueueData] | None] | None) -> Todo:
    """Each staged (topic, queue data) with the table's entry staging found for it (``_LOOK_UP``:
    none known, the writing looks it up): what ``write_staged`` writes, by a layer in steps or,
    for a change of few entries with nothing before it (a first registration's four topics),
    at once without a layer made, queued and taken off (RouteInfoManager._publish)."""
    known: Iterable[dict[str, QueueData] | None] = entries or ()
    if entries is None or len(entries) != len(staged):
        known = repeat(_LOOK_UP)
    return zip(staged.items(), known, strict=False)  # repeat(_LOOK_UP): endless


def write_staged(table: Table, group: str, todo: Iterable[tuple[tuple[str, QueueData | None],
                                                                dict[str, QueueData] | None]]) -> None:
    """The one writing of staged entries (``todo``: each (topic, queue data) with the table's
    entry staging found for it, ``_LOOK_UP`` when none) into ``table``: the group's queue data set
    in the topic's entry, a new entry for a new topic, the group's taken out for None."""
    # each topic in its shard, without a method call (another mapping: in the mapping itself)
    shards = table.shards if type(table) is TopicQueueTable else None
    place: MutableMapping[str, dict[str, QueueData]] = table
    for (topic, queue), entry in todo:
        if queue is not None and entry is not None and entry is not _LOOK_UP:
            entry[group] = queue  # the topic's entry, as staging found it
            continue
        if shards is not None:
            place = shards[hash(topic) >> SHARD_SHIFT & SHARD_MASK]
        if queue is not None:
            if entry is None or (entry := place.get(topic)) is None:  # staged as new, or found not held
                # new to the table: named by a string of its own, made beside the entry the
                # table keeps (the decoder's lies between the body's TopicConfigs, the same size
                # class of the heap for most names: kept once they are freed it left every
                # other block of its pools empty, 8 MB with 100k topics); inline, as a call
                # per topic was a tenth of writing a million new topics
                place["".join((topic, ""))] = {group: queue}
            else:
                entry[group] = queue
        elif (held := place.get(topic)) is not None and held.pop(group, None) is not None and not held:
            del place[topic]


class Departed(Generic[T]):
    """Groups gone from every table but topicQueueTable (``leaving``: in the order they left,
    each with what ``lost(topic, value)`` is given for a topic it was the last to serve)."""

    __slots__ = ("table", "leaving", "lost", "events", "_order", "_walk", "_touched", "_left")

    def __init__(self, table: Table, leaving: dict[str, T], lost: Callable[[str, T], None]) -> None:
        self.table = table
        self.leaving = leaving
        self.lost = lost
        self.events: list[Any] = []
        self._order: dict[str, int] = {}
        self._walk: Iterator[tuple[str, dict[str, QueueData]]] | None = None  # made when its turn comes
        #: the topics that hold a departed group, let go of as they are cleared: the last step
        #: would otherwise free every name at once (a topic that left is held by nothing else)
        self._touched: deque[str] = deque()
        self._left = -1  # not started: entries to walk, then topics to clear

    @property
    def started(self) -> bool:
        return self._left >= 0

    def join(self, leaving: dict[str, T], events: list[Any]) -> None:
        """More groups that left, before this layer's turn came: found in the same walk."""
        assert not self.started, "a walk under way cannot take more groups"
        for group, value in leaving.items():
            self.leaving.pop(group, None)  # its last departure is the one that emptied it
            self.leaving[group] = value
        self.events += events

    def over(self, topic: str, queues: Queues | None) -> Queues | None:
        if queues is None or self.leaving.keys().isdisjoint(queues):
            return queues
        return {group: queue for group, queue in queues.items() if group not in self.leaving} or None

    def step(self) -> bool:
        if not self.started or self._walk is not None:
            self._find(WALK_PER_STEP)
        else:
            self._remove(REMOVE_PER_STEP)
        return self._walk is not None or self._left > 0

    def finish(self) -> None:
        self._find(len(self.table) + 1)
        self._remove(self._left)

    def _find(self, count: int) -> None:
        """The next ``count`` entries of the one walk: which topics hold a departed group."""
        if not self.started:
            self._walk, self._left = iter(self.table.items()), len(self.table)
            self._order = {group: index for index, group in enumerate(self.leaving)}
        if self._walk is None:
            return
        disjoint = self.leaving.keys().isdisjoint
        entries = list(islice(self._walk, count))
        self._touched.extend([topic for topic, queues in entries if not disjoint(queues)])
        self._left -= len(entries)
        if len(entries) < count or self._left <= 0:
            self._walk = None
            self._left = len(self._touched)

    def _remove(self, count: int) -> None:
        """The departed groups' queues out of the next ``count`` topics that hold them."""
        table, leaving, last, touched = self.table, self.leaving, self._order.__getitem__, self._touched
        for _ in range(min(count, len(touched))):
            topic = touched.popleft()
            queues = table.get(topic)
            if queues is None:
                continue
            gone = [group for group in queues if group in leaving]
            for group in gone:
                del queues[group]
            if not queues:
                del table[topic]
                self.lost(topic, leaving[gone[0] if len(gone) == 1 else max(gone, key=last)])
        self._left = max(0, self._left - count)

    def __len__(self) -> int:
        return len(self.table) if not self.started else self._left


class PermChanged:
    """``group``'s queue data on every topic with ``change(perm)`` as its permission.  Both changes
    (wipe: the write bit off; add: read and write) give the same permission when made again, so a
    lookup through this layer and the walk agree whichever entries the walk has written.  The
    replacements are shared as the table shares its QueueData (one per distinct one).
    ``flipped(topic, old, new)`` hears each entry the walk rewrites (the manager's write-bit counts
    of what it could not count at the commit); None: nobody, as once the group left."""

    __slots__ = ("table", "group", "change", "flipped", "events", "_replaced", "_walk", "_left")

    def __init__(self, table: Table, group: str, change: Callable[[int], int],
                 flipped: Callable[[str, QueueData, QueueData], None] | None = None) -> None:
        self.table = table
        self.group = group
        self.change = change
        self.flipped = flipped
        self.events: list[Any] = []
        self._replaced: dict[QueueData, QueueData] = {}
        self._walk: Iterator[tuple[str, dict[str, QueueData]]] | None = None  # made when its turn comes
        self._left = -1  # not started: entries still to walk

    def _changed(self, queue: QueueData) -> QueueData:
        perm = self.change(queue.perm)
        if perm == queue.perm:
            return queue  # as changed already (or written by the walk)
        new = self._replaced.get(queue)
        if new is None:
            new = self._replaced[queue] = queue.with_perm(perm)
        return new

    def over(self, topic: str, queues: Queues | None) -> Queues | None:
        queue = queues.get(self.group) if queues else None
        if queue is None:
            return queues
        new = self._changed(queue)
        if new is queue:
            return queues
        merged = dict(queues)  # type: ignore[arg-type]
        merged[self.group] = new
        return merged

    def step(self) -> bool:
        return self._set(WALK_PER_STEP)

    def finish(self) -> None:
        self._set(len(self.table) + 1)

    def _set(self, count: int) -> bool:
        """The new permission into the group's entries among the next ``count`` of the one walk."""
        if self._left < 0:
            self._walk, self._left = iter(self.table.items()), len(self.table)
        if self._walk is None:
            return False
        group, changed = self.group, self._changed
        entries = list(islice(self._walk, count))
        for topic, queues in entries:
            queue = queues.get(group)
            if queue is not None and (new := changed(queue)) is not queue:
                queues[group] = new  # in place: the table's entry stays the one staging may hold
                if self.flipped is not None:
                    self.flipped(topic, queue, new)
        self._left -= len(entries)
        if len(entries) < count or self._left <= 0:
            self._walk, self._left = None, 0
        return self._walk is not None

    def __len__(self) -> int:
        return len(self.table) if self._left < 0 else self._left
