"""Connections captured twice under other addresses: address translation (NAT) seen from inside.

`tcpdump -i any` on a host whose NameServer runs in a container (a published port: DNAT; or a
container's client going out: SNAT/masquerade) captures each translated connection twice: on the
outside interface with the host's address, and on the bridge with the container's. NAT rewrites
addresses and ports, never sequence numbers, so the two 4-tuples carry the same sequence numbers
each way at the same moments. Counted as two connections they would make two NameServers of one
and count every registration, lookup and failure twice; so one copy is kept, the one nearest the
server (its SYN captured last: a SYN travels from the client to the server), whose addresses are
those the NameServer itself saw and logged. Connections older than the capture have no SYN: their
copy is the one at the server endpoint the copies with a SYN were kept at, else at the endpoint
more 4-tuples share (where the paths meet), else the lower address.

(The same packet captured on two interfaces of one bridge keeps its 4-tuple: reassembly drops the
second copy as a retransmission; nothing to do here.)

Pure: the driver runs it over the reading tasks' ConnectionEnds (model/periods.py) and each
4-tuple's server end (model/endpoints.server_sides).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import NamedTuple

from spark_analysis.model.periods import ConnectionEnds

#: copies of one connection are captured within this long of each other (the kernel forwards a
#: packet from one interface to the other in microseconds; a loaded host, milliseconds)
COPY_WITHIN_S = 1.0

Key = tuple[str, str]


class Copy(NamedTuple):
    """A connection captured again under other addresses: the 4-tuple left out (``seen``, with its
    server end ``seen_server``) and the one it is counted as (``kept``, ``kept_server``)."""

    seen: Key
    seen_server: str
    kept: Key
    kept_server: str


class Translated(NamedTuple):
    """The copies found (``copies``), and the 4-tuples to leave out (``left_out``: theirs)."""

    copies: tuple[Copy, ...] = ()
    left_out: frozenset[Key] = frozenset()

    def without(self, ends: Mapping[Key, ConnectionEnds]) -> dict[Key, ConnectionEnds]:
        """``ends`` without the copies left out."""
        left_out = self.left_out
        return {key: found for key, found in ends.items() if key not in left_out}

    def seen_as(self) -> list[tuple[str, str, str, str, int]]:
        """Per translation, the connections seen under it: (server seen, server counted, client
        seen, client counted, connections), the client's addresses without their ports."""
        found = Counter((copy.seen_server, copy.kept_server, _client_host(copy.seen, copy.seen_server),
                         _client_host(copy.kept, copy.kept_server)) for copy in self.copies)
        return [(*pair, n) for pair, n in sorted(found.items())]


def translated_copies(ends: Mapping[Key, ConnectionEnds], sides: Mapping[Key, str]) -> Translated:
    """The 4-tuples that are another 4-tuple's connection seen under other addresses: the same
    sequence numbers each way (first and next), both ways seen, and the same first and last moments
    within COPY_WITHIN_S."""
    alike: dict[tuple[int, ...], list[Key]] = {}
    for key, found in ends.items():
        if (mark := _sequence_mark(key, found, sides[key])) is not None:
            alike.setdefault(mark, []).append(key)
    groups = [group for keys in alike.values() if len(keys) > 1 for group in _together(keys, ends)]
    if not groups:
        return Translated()
    shared = Counter(sides.values())
    kept_at: Counter[str] = Counter()
    chosen: list[tuple[list[Key], Key]] = []
    opened: list[list[Key]] = []
    older: list[list[Key]] = []  # no SYN: they follow where the opened ones were kept
    for group in groups:
        (opened if all(ends[key].opened for key in group) else older).append(group)
    for group in opened:
        kept = max(group, key=lambda key: (ends[key].first, key))
        kept_at[sides[kept]] += 1
        chosen.append((group, kept))
    for group in older:
        chosen.append((group, min(group, key=lambda key: (-kept_at[sides[key]], -shared[sides[key]], key))))
    copies = tuple(sorted(Copy(key, sides[key], kept, sides[kept]) for group, kept in chosen for key in group
                          if key != kept))
    return Translated(copies, frozenset(copy.seen for copy in copies))


def _sequence_mark(key: Key, found: ConnectionEnds, server: str) -> tuple[int, ...] | None:
    """Each way's first and next sequence numbers, the client's way first; None unless both ways
    sent something (a lone SYN's 32 random bits are too few to call two connections one)."""
    client_way = 0 if server == key[1] else 1
    ways = (client_way, 1 - client_way)
    numbers = [found.first_seq[way] for way in ways] + [found.next_seq[way] for way in ways]
    if any(n is None for n in numbers):
        return None
    return tuple(n for n in numbers if n is not None)


def _together(keys: list[Key], ends: Mapping[Key, ConnectionEnds]) -> list[list[Key]]:
    """``keys`` (alike in sequence numbers) in groups captured at the same moments."""
    groups: list[list[Key]] = []
    for key in sorted(keys, key=lambda key: ends[key].first):
        found = ends[key]
        if groups and all(abs(found.first - ends[other].first) <= COPY_WITHIN_S
                          and abs(found.last - ends[other].last) <= COPY_WITHIN_S for other in groups[-1]):
            groups[-1].append(key)
        else:
            groups.append([key])
    return [group for group in groups if len(group) > 1]


def _client_host(key: Key, server: str) -> str:
    client = key[0] if key[1] == server else key[1]
    return client.rsplit(":", 1)[0]
