"""One object per content for values many holders keep alike (interning, bounded).

Thousands of holders keep values that are mostly alike: every broker group's set of member ids
that are up ({0}, {0, 1}: topology.py), every kept renewal's answer pieces (the same header bytes
but for the opaque: answer_cache.py).  A copy each costs memory for nothing; ``Alike`` hands out
the one object of each content it has met.  It keeps at most ``limit`` of them: past that it
starts again (forgets them all, keeping the one asked about), so that contents that stopped
coming are let go while the ones still coming are shared again from the next ask; holders keep
what they were given either way (values are immutable: frozenset, bytes).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

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
