"""One object per content for values many holders keep alike (interning, bounded).

Thousands of holders keep values that are mostly alike: every broker group's set of member ids
that are up ({0}, {0, 1}: topology.py), every kept renewal's answer pieces (the same header bytes
but for the opaque: answer_cache.py).  A copy each costs memory for nothing; ``Alike`` hands out
the one object of each content it has met.  It keeps at most ``limit`` of them: past that it
starts again (forgets them all, keeping the one asked about), so that contents that stopped
coming are let go while the ones still coming are shared again from the next ask; holders keep
what they were given either way (values are immutable: frozenset, bytes).

``AlikeBodies`` does the same for what a registration's body decodes to: brokers that send the
same table (a master and its slave, the curve's pairs of brokers) have it decoded once.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

from ..bodies.register import RegisterBrokerBody, VersionSplit
from ..steps import STEP_BYTES
from .settling import LET_GO_PER_STEP

T = TypeVar("T", bound=Hashable)


class Alike(Generic[T]):
    """``alike(value)``: the one object equal to ``value`` that was handed out (``value`` itself the
    first time); at most ``limit`` kept."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._kept: dict[T, T] = {}

    def __call__(self, value: T) -> T:
        shared = self._kept.get(value)
        if shared is None:
            if len(self._kept) >= self.limit:
                self._kept.clear()
            shared = self._kept[value] = value
        return shared

    def __len__(self) -> int:
        return len(self._kept)

    def clear(self) -> None:
        self._kept.clear()


#: the largest body whose decoding is shared (``AlikeBodies``): a few hundred topics, decoded in one
#: go (no piece of it skipped or cut, nothing of it decoded in steps) and let go of with the last
#: reference to it, never emptied in place (RouteInfoManager._let_go empties a bigger table)
ALIKE_BODY_BYTES = 16 * 1024
assert ALIKE_BODY_BYTES <= STEP_BYTES and ALIKE_BODY_BYTES // 6 <= LET_GO_PER_STEP  # (6: an entry's least bytes)
#: the bodies kept at most (then all forgotten, as ``Alike``): brokers sending one table register
#: near one another (a group's master and slave start together; the curve's pairs one after the other)
ALIKE_BODIES = 64


class AlikeBodies(dict[bytes, tuple[VersionSplit, RegisterBrokerBody]]):
    """The last small plain JSON registration bodies read in full (a first registration's: no memo
    of the broker's own to compare with), by their bytes: their split_data_version and the body
    decoded from them, handed to a registration that sends the same bytes instead of hashing and
    decoding them again (``processor.register_broker_steps``; a lookup is a dict's, in C).  What is
    shared nobody changes: the routes read a decoded body's table, versions and filter servers and
    keep copies of what they keep (its DataVersion as it is, which nobody writes to).  A body with
    static-topic mappings is not kept: their dicts go into topicQueueMappingInfoTable as they are."""

    def keep(self, body: bytes | memoryview | None, split: VersionSplit, decoded: RegisterBrokerBody) -> None:
        """Keep ``decoded``, ``body`` decoded in full, and its ``split``, when they can be shared."""
        if (isinstance(body, bytes) and len(body) <= ALIKE_BODY_BYTES and decoded.tablePieces is None
                and not decoded.tableSkipped and not decoded.tableUnchanged and not decoded.topicQueueMappingInfoMap
                and not decoded.topicQueueMappingDetailMap):
            if len(self) >= ALIKE_BODIES:
                self.clear()
            self[body] = (split, decoded)
