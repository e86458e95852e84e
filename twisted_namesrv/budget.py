"""One memory budget for what peers make the server hold before it can act on it, across all
peers and listeners (``receiveMemoryBudget``): every connection's partially received frame (up to
``frameMaxLength``), the frame being answered later and the frames that came behind it, and the
answers it has not read (server.py), and the bodies being inflated (each up to ``inflateMaxLength``).

Per-peer limits alone bound nothing in total: 40 peers each sending 16 MiB - 1 of one frame and
stalling took the server from 85 to 718 MB.  Here what each connection holds is held against the
budget (``hold``); when the total passes it, the holders holding the most are closed first
(``over_budget``, logged and counted by the listener) until it fits.  An inflation takes its bytes
as it goes (``take``) and fails when the budget has no room left.

No Twisted here: the listener (server.py) closes what this module picks.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Hashable
from pathlib import Path
from typing import Protocol

MiB = 1024 * 1024
#: the default's ceiling and floor: a quarter of what the machine allows, within these
AUTO_MAX, AUTO_MIN = 256 * MiB, 64 * MiB
CGROUP_MEMORY_MAX = Path("/sys/fs/cgroup/memory.max")


class Holder(Hashable, Protocol):
    def over_budget(self, held: int, budget: MemoryBudget) -> None:
        """Give the ``held`` bytes back (close): the budget is spent and this holds the most."""


class MemoryBudget:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.holders: dict[Holder, int] = {}
        #: holders closed to stay within the budget, and inflations refused for lack of room
        self.closed = 0
        self.refused_inflations = 0

    def hold(self, holder: Holder, size: int) -> None:
        """``holder`` now holds ``size`` bytes (0: none); over the budget, the largest holders go."""
        before = self.holders.pop(holder, 0)
        if size:
            self.holders[holder] = size
        self.held += size - before
        while self.held > self.limit and self.holders:
            largest = max(self.holders, key=self.holders.__getitem__)
            held = self.holders.pop(largest)
            self.held -= held
            self.closed += 1
            largest.over_budget(held, self)

    def room(self) -> int:
        return max(0, self.limit - self.held)

    def take(self, size: int) -> bool:
        """Hold ``size`` bytes of an inflation if they fit, else False (nothing taken)."""
        if size > self.room():
            self.refused_inflations += 1
            return False
        self.held += size
        return True

    def release(self, size: int) -> None:
        self.held -= size


def machine_limit() -> int | None:
    """The least of physical memory, the cgroup's memory.max and RLIMIT_AS/RLIMIT_DATA, in bytes."""
    limits: list[int] = []
    try:
        limits.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError):
        pass
    try:
        text = CGROUP_MEMORY_MAX.read_text().strip()
        if text.isdigit():
            limits.append(int(text))
    except OSError:
        pass
    for which in (resource.RLIMIT_AS, resource.RLIMIT_DATA):
        soft = resource.getrlimit(which)[0]
        if soft != resource.RLIM_INFINITY:
            limits.append(soft)
    return min(limits) if limits else None


def default_budget(frame_max_length: int) -> int:
    """``receiveMemoryBudget=0``: a quarter of what the machine allows, within AUTO_MIN..AUTO_MAX,
    and at least two whole frames (one peer's biggest request must always fit)."""
    limit = machine_limit()
    quarter = AUTO_MAX if limit is None else limit // 4
    return max(min(quarter, AUTO_MAX), AUTO_MIN, 2 * frame_max_length)


def fd_limit_warning(max_connections: int, margin: int = 64) -> str | None:
    """The warning when RLIMIT_NOFILE's soft limit is below maxConnections + ``margin`` (listening
    sockets, files, the controller's connections), else None."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if not max_connections or soft == resource.RLIM_INFINITY or soft >= max_connections + margin:
        return None
    return (f"open-file limit (ulimit -n) is {soft}, below maxConnections={max_connections} + {margin}: past about "
            f"{max(0, soft - margin)} connections accept() fails with EMFILE and new peers are dropped unanswered; "
            f"raise it (ulimit -n {max_connections + margin}, systemd LimitNOFILE=; hard limit {_shown(hard)}) or "
            f"lower maxConnections")


def _shown(limit: int) -> str:
    return "unlimited" if limit == resource.RLIM_INFINITY else str(limit)
