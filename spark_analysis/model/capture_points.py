"""The same connections captured at two points: captures of the NameServer's host and of a broker's
(or a client's) host, given together.

Each connection between the two hosts is then in both captures under the same 4-tuple, with the
same sequence numbers, but stamped by two clocks (NTP keeps them within milliseconds; a host without
it, seconds). Read as one stream, the copies would interleave out of order, and a short connection
(a lookup, a refused attempt) seen again after its end would be a second connection: lookups,
deletions and refusals counted twice. So each connection is read from one capture only, the one
holding the most of that server endpoint's connections (the server's own host sees them all; a
broker's host its own; when both hold as many, the one that saw the SYN-ACK soonest after the SYN,
which is the server's host, whatever either clock says; then the one begun first), provided that
capture saw all the bytes the other did (each way's sequence numbers cover the other's); where it
did not, both are read, as before. Two points rarely keep as much of a packet: where a snap length
cut that copy of a connection (-s 96 on one host) and another capture saw every byte it did and
kept more of them (full length on the other), the connection is read from the latter: the bytes
win over the server's own host. What was left out and how
far the clocks differ is said: as NTP reckons it, from the connection whose SYN and SYN-ACK both
captured with the shortest round trip between the two points (the SYN's trip one way and the
SYN-ACK's the other cancel out; a packet lost on the way and sent again, seen at one point only in
its later copy, makes that connection's round trip long).

Pure: the driver runs it over the captures (model/periods.rotated_sets), the reading tasks'
ConnectionEnds per file and each 4-tuple's server end.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping
from typing import NamedTuple

from spark_analysis.model.endpoints import merged_ends
from spark_analysis.model.periods import SEQUENCE_SPACE, Capture, ConnectionEnds

Key = tuple[str, str]
#: captures further apart than this in time are not two points of the same traffic
WITHIN_S = 600.0
#: a SYN-ACK seen this much later after its SYN than in the other capture was seen a round trip away
#: from the server (a LAN's round trip is 0.1 ms and more; a kernel answers a SYN in microseconds)
RTT_STEP_S = 0.0001


class SecondPoint(NamedTuple):
    """The connections of one server endpoint that a capture (``paths``, its files) holds copies of,
    read from another capture (``kept_paths``) instead; ``clock_s``: how far this capture's clock
    reads ahead of the other's (clock_offset over the copies whose SYN and SYN-ACK both hold; None if
    none); ``fuller``: how many of them were read from there because a snap length cut this capture's
    copy and not as much of that one's (_fuller)."""

    server: str
    paths: tuple[str, ...]
    kept_paths: tuple[str, ...]
    connections: int
    clock_s: float | None
    fuller: int = 0


class CapturePoints(NamedTuple):
    """What a capture at a second point held of another's: ``left_out``, the (file, 4-tuple) pairs
    not read; ``points``, one SecondPoint per server endpoint and pair of captures."""

    left_out: frozenset[tuple[str, Key]] = frozenset()
    points: tuple[SecondPoint, ...] = ()

    def without(self, by_path: Mapping[str, Mapping[Key, ConnectionEnds]]) -> dict[str, dict[Key, ConnectionEnds]]:
        """The reading tasks' ends per file without the copies left out."""
        return {path: {key: found for key, found in ends.items() if (path, key) not in self.left_out}
                for path, ends in by_path.items()}


def second_points(captures: list[Capture], by_path: Mapping[str, Mapping[Key, ConnectionEnds]],
                  sides: Mapping[Key, str]) -> CapturePoints:
    """Each 4-tuple held by several captures at once, read from the one holding most of its server's
    connections when that one saw every byte the others did."""
    held = {index: merged_ends({path: by_path[path] for path in capture.paths if path in by_path})
            for index, capture in enumerate(captures)}
    holders: dict[Key, list[int]] = {}
    for index, ends in held.items():
        for key in ends:
            holders.setdefault(key, []).append(index)
    serves = Counter((index, sides[key]) for index, ends in held.items() for key in ends)
    left_out: set[tuple[str, Key]] = set()
    clocks: dict[tuple[str, int, int], list[tuple[float, float]]] = {}
    counted: Counter[tuple[str, int, int]] = Counter()
    fuller: Counter[tuple[str, int, int]] = Counter()
    for key, indexes in holders.items():
        if len(indexes) < 2:
            continue
        server = sides[key]
        order = {i: (-serves[i, server], _answered_after(held[i][key]), captures[i].first, i) for i in indexes}
        first_choice = min(indexes, key=order.__getitem__)
        best = _fuller(indexes, first_choice, key, held, captures, order)
        for other in indexes:
            mine, theirs = held[best][key], held[other][key]
            if other == best or not _at_once(captures[best], captures[other]) or not _covers(mine, theirs):
                continue
            left_out.update((path, key) for path in captures[other].paths if key in by_path.get(path, {}))
            counted[server, other, best] += 1
            fuller[server, other, best] += best != first_choice
            exchange = _exchange(mine, theirs)
            if exchange is not None:
                clocks.setdefault((server, other, best), []).append(exchange)
    points = tuple(SecondPoint(server, captures[other].paths, captures[best].paths, n,
                               clock_offset(clocks.get((server, other, best), [])), fuller[server, other, best])
                   for (server, other, best), n in sorted(counted.items()))
    return CapturePoints(frozenset(left_out), points)


def _fuller(indexes: list[int], best: int, key: Key, held: Mapping[int, Mapping[Key, ConnectionEnds]],
            captures: list[Capture], order: Mapping[int, tuple[float, float, float, int]]) -> int:
    """``best``, unless a snap length cut its copy of the connection and another capture, at the same
    time, saw every byte it did and kept more of them: then that one (the fewest bytes cut, then
    ``order``), which holds the headers and bodies the cut copy lost."""
    mine = held[best][key]
    fuller = [i for i in indexes if held[i][key].uncaptured < mine.uncaptured
              and _at_once(captures[i], captures[best]) and _covers(held[i][key], mine)]
    return min(fuller, key=lambda i: (held[i][key].uncaptured, order[i])) if fuller else best


def _exchange(mine: ConnectionEnds, theirs: ConnectionEnds) -> tuple[float, float] | None:
    """(round trip between the two points, how far theirs reads ahead of mine) from one connection's
    SYN and SYN-ACK, each stamped at both points: whichever point is the client's, the SYN's trip is
    in one difference and the SYN-ACK's in the other with the opposite sign, and half their sum is
    the clocks' difference (NTP's offset; the round trip its error, twice over). None without both."""
    if not (mine.opened and theirs.opened and mine.first_seq == theirs.first_seq):
        return None
    if mine.accepted_at is None or theirs.accepted_at is None:
        return None
    syn, syn_ack = theirs.first - mine.first, theirs.accepted_at - mine.accepted_at
    return abs(syn_ack - syn), (syn + syn_ack) / 2


def clock_offset(exchanges: list[tuple[float, float]]) -> float | None:
    """How far the second point's clock reads ahead of the first's: the offset of the exchange with
    the shortest round trip (NTP's clock filter: the least delayed sample errs least; the median of
    those as short, within RTT_STEP_S, so that equals agree however they are ordered)."""
    if not exchanges:
        return None
    shortest = min(trip for trip, _offset in exchanges)
    return statistics.median(offset for trip, offset in exchanges if trip - shortest <= RTT_STEP_S)


def _answered_after(found: ConnectionEnds) -> float:
    """How long after its SYN this capture saw the SYN-ACK, in RTT_STEP_S steps: on the server's
    host the kernel answers in microseconds (0), on the client's a round trip later; unknown (no
    SYN, or none answered) counts as far."""
    if not found.opened or found.accepted_at is None:
        return float("inf")
    return (found.accepted_at - found.first) // RTT_STEP_S


def _at_once(one: Capture, other: Capture) -> bool:
    return one.first - WITHIN_S <= other.last and other.first - WITHIN_S <= one.last


def _covers(mine: ConnectionEnds, theirs: ConnectionEnds) -> bool:
    """Whether ``mine`` saw every byte ``theirs`` did, each way (sequence numbers from mine's first,
    modulo 2**32); a way ``theirs`` saw something of that ``mine`` did not see at all is not covered."""
    shared = False
    for way in (0, 1):
        start, stop = mine.first_seq[way], mine.next_seq[way]
        their_start, their_stop = theirs.first_seq[way], theirs.next_seq[way]
        if their_start is None or their_stop is None:
            continue
        if start is None or stop is None:
            return False
        span = (stop - start) % SEQUENCE_SPACE
        if (their_start - start) % SEQUENCE_SPACE > span or (their_stop - start) % SEQUENCE_SPACE > span:
            return False
        shared = True
    return shared
