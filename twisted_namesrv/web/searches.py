"""The status page's topic searches held at once: a budget per client and in all.

A search (``/api/topics?q=``) is built in a thread, one build at a time (apart.py), each reading
every topic's name (8 MB and about a second at a million topics).  The page asks once typing
pauses (250 ms), so a person has one search under way and perhaps one or two waiting; a script
sending distinct queries queued a build for each, every one of them waited for, without bound.
Now each search is counted from its admission until its answer is sent or its client goes (a
search not begun yet is then let go: apart.py); past ``per_client`` held for one host (an IPv6
client: its /64, ``state.hosts.peer_group``, else one client has 2^64 budgets) the next is
answered 429, past ``total`` for all 503, both with Retry-After, each a refusal (refusals.py: a
log line and ``namesrv_refusals_total{listener="http",reason}``).
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from ..state.hosts import peer_group

#: searches one client (its host) may have waiting or under way
PER_CLIENT = 4
#: searches every client together may have waiting or under way
TOTAL = 16


class Refused(NamedTuple):
    """Why a search is not taken: its HTTP status, the refusal's reason and what the answer says."""

    status: int
    reason: str
    message: str


class SearchBudget:
    """The searches held by host (``held``) and in all (``total_held``), against the two limits."""

    def __init__(self, per_client: int = PER_CLIENT, total: int = TOTAL) -> None:
        self.per_client = per_client
        self.total = total
        self.held: Counter[str] = Counter()
        self.total_held = 0

    def take(self, host: str) -> Refused | None:
        """Hold one search for ``host``, or say why not (nothing is held then)."""
        host = peer_group(host)
        if self.held[host] >= self.per_client:
            return Refused(429, "search_per_client",
                           f"{self.per_client} searches of this client are waiting or under way; retry once one is "
                           "answered")
        if self.total_held >= self.total:
            return Refused(503, "search_total",
                           f"{self.total} searches are waiting or under way; retry in a moment")
        self.held[host] += 1
        self.total_held += 1
        return None

    def release(self, host: str) -> None:
        """One search of ``host`` is answered, failed or let go."""
        host = peer_group(host)
        self.total_held -= 1
        self.held[host] -= 1
        if not self.held[host]:
            del self.held[host]
