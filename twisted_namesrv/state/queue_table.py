"""topicQueueTable (topic -> broker name -> QueueData), split into a fixed number of dicts.

A Python dict grows in one go: the insert that takes it past two thirds of its slots copies every
entry into a table twice as big.  One dict of a million topics does so at 699,051 keys, and that
one insert holds the reactor for as long as the table is big (42-67 ms measured), however finely
the writing is cut into steps.  Java's HashMap resizes the same way, under its write lock.

Here the topics are spread over ``SHARDS`` dicts by their hash, so the largest copy any insert
makes is one shard's: about ``len / SHARDS`` entries (at the default maxTopicQueueEntries of 8 M,
some 31k, a few milliseconds; at 1 M topics about 4k).  A lookup costs one index more; walks go
shard by shard, each in its insertion order (the table as a whole has no insertion order, nor
has Java's HashMap).  Only the methods the routes and their readers use are written for speed
(``get``, ``pop``, ``update``, the walks); the rest come from ``MutableMapping``.

Pure: no Twisted.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, MutableMapping, ValuesView
from itertools import chain
from typing import Any, TypeVar, overload

from ..bodies.route import QueueData

#: how many dicts the table is spread over (a power of two: the shard is 8 bits of the hash)
SHARDS = 256
#: a topic's shard: ``shards[hash(topic) >> SHARD_SHIFT & SHARD_MASK]`` (the loops over a
#: registration's topics index the shards themselves: a method call per topic cost them a tenth
#: of their time).  Bits above the low ones: a dict places a key by its hash's low bits, so shards
#: picked by those would start every key of a shard in the same few slots of its dict (at 1 M
#: topics, 32 of a shard's 8,192), and each look-up of a topic not held and each insert walked a
#: chain of taken slots first, a cache miss each (30% of their time); 24: clear of the bits any
#: shard's dict places by (up to 2^24 slots), and within a 32-bit build's hash
SHARD_SHIFT = _SHIFT = 24
SHARD_MASK = _MASK = SHARDS - 1

Queues = dict[str, QueueData]
T = TypeVar("T")
_MISSING: Any = object()


#: a key no topic is (not a string): each shard holds it once, when made, and lets it go (_shard)
_NOT_A_TOPIC = 0


def _shard() -> dict[str, Queues]:
    """An empty shard: a dict the cyclic collector tracks from the start, whose entries keep their
    keys' hashes.

    Tracked: a dict is tracked from its first dict value on; tracked after the boot's
    ``gc.freeze()`` (service.tune_gc), every collection of the generation it reached would walk all
    its entries (the table's first older-generation pass at 1M topics: 22 ms; each full one as
    long).  Tracked before it, it stays in the frozen, permanent generation: no collection walks
    it, and it is still freed when nothing holds it.

    Hashes kept: a dict whose keys have all been strings keeps none (16 bytes an entry, not 24),
    so each slot a look-up probes is compared by its key's own hash, read from the key, elsewhere
    in the heap: a cache miss more per slot in a table of a million, where a topic not held probes
    two or three slots, and each insert that grows the dict reads every key again.  A key of
    another kind makes CPython keep the hashes beside the keys for good, the key gone or not, and
    through every resize (until ``clear``: see ``TopicQueueTable.clear``).  Staging and writing a
    first registration's new topics, a 50k-topic piece into 800k held: their look-ups and inserts
    0.55-0.75 -> 0.39-0.49 us each (in process, same run); 8 bytes more a topic (about 10 MB at 1M)."""
    shard: dict[Any, Queues] = {_NOT_A_TOPIC: {}}
    del shard[_NOT_A_TOPIC]
    return shard


class TopicQueueTable(MutableMapping[str, Queues]):
    """topicQueueTable: a mapping of topic to its queues by broker name, as a dict would be,
    whose every insert copies at most one shard (``shards``)."""

    __slots__ = ("shards",)

    def __init__(self, entries: Mapping[str, Queues] | Iterable[tuple[str, Queues]] = ()) -> None:
        self.shards: list[dict[str, Queues]] = [_shard() for _ in range(SHARDS)]
        self.update(entries)

    def shard(self, topic: str) -> dict[str, Queues]:
        """The dict that holds ``topic`` if anything does."""
        return self.shards[hash(topic) >> _SHIFT & _MASK]

    # -- one topic ----------------------------------------------------------------------------
    @overload
    def get(self, topic: str, /) -> Queues | None: ...
    @overload
    def get(self, topic: str, default: T, /) -> Queues | T: ...

    def get(self, topic: str, default: Any = None, /) -> Any:
        return self.shards[hash(topic) >> _SHIFT & _MASK].get(topic, default)

    def __getitem__(self, topic: str) -> Queues:
        return self.shards[hash(topic) >> _SHIFT & _MASK][topic]

    def __setitem__(self, topic: str, queues: Queues) -> None:
        self.shards[hash(topic) >> _SHIFT & _MASK][topic] = queues

    def __delitem__(self, topic: str) -> None:
        del self.shards[hash(topic) >> _SHIFT & _MASK][topic]

    def __contains__(self, topic: object) -> bool:
        return topic in self.shards[hash(topic) >> _SHIFT & _MASK]

    def pop(self, topic: str, default: Any = _MISSING, /) -> Any:
        shard = self.shards[hash(topic) >> _SHIFT & _MASK]
        return shard.pop(topic) if default is _MISSING else shard.pop(topic, default)

    # -- many ---------------------------------------------------------------------------------
    def update(self, entries: Any = (), /, **more: Queues) -> None:
        """As dict.update: a mapping's items or pairs, each into its shard."""
        shards = self.shards
        pairs = entries.items() if isinstance(entries, Mapping) else entries
        for topic, queues in chain(pairs, more.items()):
            shards[hash(topic) >> _SHIFT & _MASK][topic] = queues

    def clear(self) -> None:
        """Every shard emptied, the same dicts (tracked before the boot's freeze: _shard), made to
        keep their keys' hashes again (dict.clear forgets it)."""
        for shard in self.shards:
            shard.clear()
            held: dict[Any, Queues] = shard
            held[_NOT_A_TOPIC] = {}
            del held[_NOT_A_TOPIC]

    def __len__(self) -> int:
        return sum(map(len, self.shards))

    def __iter__(self) -> Iterator[str]:
        return chain.from_iterable(self.shards)

    def keys(self) -> KeysView[str]:
        return _Keys(self)

    def items(self) -> ItemsView[str, Queues]:
        return _Items(self)

    def values(self) -> ValuesView[Queues]:
        return _Values(self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return len(self) == len(other) and all(other.get(topic, _MISSING) == queues
                                                   for topic, queues in self.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"TopicQueueTable({dict(self.items())!r})"


class _Keys(KeysView[str]):
    _mapping: TopicQueueTable

    def __iter__(self) -> Iterator[str]:
        return chain.from_iterable(self._mapping.shards)


class _Items(ItemsView[str, Queues]):
    _mapping: TopicQueueTable

    def __iter__(self) -> Iterator[tuple[str, Queues]]:
        return chain.from_iterable(shard.items() for shard in self._mapping.shards)


class _Values(ValuesView[Queues]):
    _mapping: TopicQueueTable

    def __iter__(self) -> Iterator[Queues]:
        return chain.from_iterable(shard.values() for shard in self._mapping.shards)
