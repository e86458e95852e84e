"""What every task counts and notes, returned as data (spark/job.py: never accumulators), merged
by the driver: one typed tally, each field with its own merge.

Adding a count is one field here (with COUNT metadata: summary.json's ``counts`` list the fields
that have it, in this order; the reading tasks' own are in capture/inputs.ReadTally). The rest is
what the analysis needs added up: the decoding costs of 4-tuples (spark/balance.py), the calls'
latency buckets (analysis/latency.py), the findings' groups (analysis/findings.py), the clients'
counts (analysis/clients.py) and how each file's connections start and end (model/periods.py).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any

from spark_analysis.capture.inputs import COUNT, ReadTally
from spark_analysis.model.periods import ConnectionEnds, merge_ends

#: group -> key -> [count, first t, last t, worst] (analysis/findings.py notes calls and connections so)
Groups = dict[str, dict[tuple[Any, ...], list[Any]]]


@dataclass
class Tally(ReadTally):
    connection: int = field(default=0, metadata=COUNT)
    frame: int = field(default=0, metadata=COUNT)
    request: int = field(default=0, metadata=COUNT)
    response: int = field(default=0, metadata=COUNT)
    call: int = field(default=0, metadata=COUNT)
    unanswered: int = field(default=0, metadata=COUNT)
    registration: int = field(default=0, metadata=COUNT)
    crc_failures: int = field(default=0, metadata=COUNT)
    gaps: int = field(default=0, metadata=COUNT)  # holes in TCP streams the capture missed
    lost_bytes: int = field(default=0, metadata=COUNT)  # bytes around them not cut into frames
    undecodable: int = field(default=0, metadata=COUNT)  # connections with bytes that are no frame
    controller: int = field(default=0, metadata=COUNT)  # rows of controller/: calls to a 5.x controller
    #: frames a snap length cut, read as far as their bytes go; stream bytes sent but not captured
    #: (no gap: packets seen, their ends not kept); captured bytes no frame could be placed in
    cut_frames: int = field(default=0, metadata=COUNT)
    uncaptured_bytes: int = field(default=0, metadata=COUNT)
    unplaced_bytes: int = field(default=0, metadata=COUNT)
    #: captured bytes of frames begun before the capture (a stream whose start it missed, before its
    #: first frame): no gap, no loss
    mid_frame_bytes: int = field(default=0, metadata=COUNT)
    #: stream bytes a receiver had before the capture began (its SACK blocks said so) that no captured
    #: segment carried: a capture begun while segments arrived out of order; no gap, no loss
    unseen_bytes: int = field(default=0, metadata=COUNT)
    #: decoding cost by 4-tuple of the costly ones, and of all the others together (spark/balance.py)
    costs: Counter[Any] = field(default_factory=Counter[Any])
    hashed_cost: int = 0
    #: (4-tuple, sent by its lower end) -> stream bytes sent, of the costly ones (spark/balance.py:
    #: which of them are guessed clients', decoded beside the replay)
    sent: Counter[Any] = field(default_factory=Counter[Any])
    latencies: Counter[Any] = field(default_factory=Counter[Any])  # analysis/latency.count_calls
    groups: Groups = field(default_factory=dict)  # analysis/findings.note_calls
    #: topic -> when a lookup of it was first answered with a route (analysis/findings.note_routes_found):
    #: a time per topic, merged by the earliest; a clients' decoding task notes thousands of topics, and
    #: as groups (a count and two times each, folded key by key) they were half of the driver's merge.
    #: A consumer group's retry and dead-letter topics are also keyed (topic, client): when that client
    #: had the route (a lookup failing after it is no start-up lookup)
    routes_found: dict[Any, float] = field(default_factory=dict)
    clients: Counter[Any] = field(default_factory=Counter[Any])  # analysis/clients
    #: (server endpoint, request code) -> requests it was asked: what kind of server it is (model/endpoints)
    served: Counter[Any] = field(default_factory=Counter[Any])
    #: (input, by its index among the inputs; where its stretch starts: inputs.Piece.part) ->
    #: 4-tuple -> how it starts and ends there (model/periods.file_parts, rotated_sets, model/endpoints.py)
    ends: dict[tuple[int, int], dict[tuple[str, str], ConnectionEnds]] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """summary.json's counts: every COUNT field, in order."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.metadata.get("count")}

    def merge(self, other: ReadTally) -> Tally:
        """Add another task's tally (or a reading task's ReadTally) to this one, in place."""
        for f in fields(other):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if f.name == "files":
                for path, facts in theirs.items():
                    self.note_file(path, **facts._asdict())
            elif f.name == "groups":
                merge_groups(mine, theirs)
            elif f.name == "routes_found":
                merge_earliest(mine, theirs)
            elif f.name == "ends":
                for part, found in theirs.items():
                    merge_ends(mine.setdefault(part, {}), found)
            elif isinstance(mine, Counter):
                mine.update(theirs)
            else:
                setattr(self, f.name, mine + theirs)
        return self


def add(groups: Groups, group: str, key: tuple[Any, ...], count: int, first: float, last: float,
        worst: tuple[Any, ...] | None = None) -> None:
    """Note ``count`` events of a group's key between ``first`` and ``last``; ``worst`` kept if larger."""
    found = groups.setdefault(group, {}).get(key)
    if found is None:
        groups[group][key] = [count, first, last, worst]
    else:
        _fold(found, count, first, last, worst)


def _fold(found: list[Any], count: int, first: float, last: float, worst: tuple[Any, ...] | None) -> None:
    found[0] += count
    found[1], found[2] = min(found[1], first), max(found[2], last)
    if worst is not None and (found[3] is None or worst > found[3]):
        found[3] = worst


def merge_earliest(times: dict[Any, float], more: dict[Any, float]) -> dict[Any, float]:
    """Add ``more`` (another task's times by key) to ``times``, in place: the earlier of the two."""
    if not times:
        times.update(more)
        return times
    known = times.get
    for key, t in more.items():
        found = known(key)
        if found is None or t < found:
            times[key] = t
    return times


def merge_groups(groups: Groups, more: Groups) -> Groups:
    """Add ``more`` (another task's groups) to ``groups``, in place. A key new here is copied as it
    is, without a call: the driver merges every task's groups after the last Spark job, while every
    core waits (a clients' decoding task notes thousands of topics found)."""
    for group, entries in more.items():
        mine = groups.setdefault(group, {})
        for key, noted in entries.items():
            found = mine.get(key)
            if found is None:
                mine[key] = list(noted)
            else:
                _fold(found, *noted)
    return groups
