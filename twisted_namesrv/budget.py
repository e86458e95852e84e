"""One memory budget for what peers make the server hold before it can act on it, across all
peers and listeners (``receiveMemoryBudget``): every connection's partially received frame (up to
``frameMaxLength``), the frame being answered later and the frames that came behind it, and the
answers it has not read (server.py), what a TLS handshake not done yet sent (tls.py), and the bodies
being inflated (each up to ``inflateMaxLength``).

Per-peer limits alone bound nothing in total: 40 peers each sending 16 MiB - 1 of one frame and
stalling took the server from 85 to 718 MB.  Here what each connection holds is held against the
budget (``hold``); when the total passes it, the holders holding the most are closed first
(``over_budget``, logged and counted by the listener) until it fits.  An inflation takes its bytes
as it goes (``take``) and fails when the budget has no room left.

No Twisted here: the listener (server.py) closes what this module picks.
"""

from __future__ import annotations

import fcntl
import os
import resource
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Protocol

from .state.config import DEFAULT_FD_RESERVE
from .state.files import TEXT_FILE_LIMIT, read_regular_text

MiB = 1024 * 1024
#: the default's ceiling: a quarter of what the machine allows, at most this
AUTO_MAX = 256 * MiB
#: what peers' unfinished frames cost in resident memory at most, for each byte of them the budget counts
#: (their buffers grown as the bytes come: tools/memory_peak.py's stall under a 400 MiB cgroup took a
#: server of 56 MiB at rest to 120 MiB within a 32 MiB budget, to 151 MiB within 64 MiB).  On glibc with
#: the mmap threshold fixed (heap.fix_mmap_threshold) the same stall peaked at 87 MiB, about one byte a
#: byte; two are kept for the C libraries that keep freed buffers (musl) and as the start's margin
RESIDENT_PER_BUDGET_BYTE = 2
#: where the cgroup hierarchies are mounted, and which cgroup of each this process is in
CGROUP_ROOT, PROC_SELF_CGROUP = Path("/sys/fs/cgroup"), Path("/proc/self/cgroup")


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
        self._fit()

    def resize(self, limit: int) -> None:
        """The budget is now ``limit`` (the memory limit moved: ``LimitWatch``); holders past a smaller
        one go, the largest first, as in ``hold``."""
        self.limit = limit
        self._fit()

    def _fit(self) -> None:
        while self.held > self.limit and self.holders:
            largest = max(self.holders, key=self.holders.__getitem__)
            held = self.holders.pop(largest)
            self.held -= held
            self.closed += 1
            largest.over_budget(held, self)

    def room(self) -> int:
        return max(0, self.limit - self.held)

    def take(self, size: int, inflation: bool = True) -> bool:
        """Hold ``size`` bytes of an inflation (or of an ask waiting for a build: apart.py) if they
        fit, else False (nothing taken)."""
        if size > self.room():
            self.refused_inflations += inflation
            return False
        self.held += size
        return True

    def release(self, size: int) -> None:
        self.held -= size


def machine_limit() -> int | None:
    """The least of physical memory, the cgroup's memory limit (``cgroup_memory_limits``) and
    RLIMIT_AS/RLIMIT_DATA, in bytes."""
    limits: list[int] = []
    try:
        limits.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError):
        pass
    limits.extend(cgroup_memory_limits())
    for which in (resource.RLIMIT_AS, resource.RLIMIT_DATA):
        soft = resource.getrlimit(which)[0]
        if soft != resource.RLIM_INFINITY:
            limits.append(soft)
    return min(limits) if limits else None


def cgroup_memory_limits(root: Path | None = None, membership: Path | None = None) -> list[int]:
    """Every memory limit set on this process's cgroup and the cgroups above it, in bytes: cgroup v2's
    ``memory.max``, v1's ``memory.limit_in_bytes`` (``/proc/self/cgroup`` names the cgroup under the
    mount).  Not only the mount's top: a systemd unit's MemoryMax (no cgroup namespace) is on
    ``/sys/fs/cgroup/system.slice/namesrv.service/memory.max``, and the top of the mount is the host's,
    with no limit; a container without a cgroup namespace (v1) sees its own cgroup at the top while
    ``/proc/self/cgroup`` names the host's path, which is not there (so each cgroup above is read too)."""
    root = CGROUP_ROOT if root is None else root
    membership = PROC_SELF_CGROUP if membership is None else membership
    try:
        lines = read_regular_text(membership, TEXT_FILE_LIMIT).splitlines()
    except (OSError, UnicodeDecodeError):
        lines = []
    places = {(root, "memory.max"), (root / "memory", "memory.limit_in_bytes")}  # a container's own, at least
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":
            top, name = root, "memory.max"  # cgroup v2's one hierarchy
        elif "memory" in controllers.split(","):
            top, name = root / "memory", "memory.limit_in_bytes"
        else:
            continue
        cgroup = top.joinpath(*(part for part in path.split("/") if part not in ("", ".", "..")))
        places.update((above, name) for above in (cgroup, *cgroup.parents) if above.is_relative_to(top))
    limits: list[int] = []
    for directory, name in places:
        try:
            text = read_regular_text(directory / name, TEXT_FILE_LIMIT).strip()
        except (OSError, UnicodeDecodeError):
            continue
        if text.isdigit():  # "max" (v2) or v1's 9223372036854771712 (taken, the machine's is less): no limit
            limits.append(int(text))
    return limits


def default_budget(frame_max_length: int) -> int:
    """``receiveMemoryBudget=0``: the budget for the memory limit now (``budget_for``)."""
    return budget_for(machine_limit(), frame_max_length)


def budget_for(limit: int | None, frame_max_length: int) -> int:
    """``receiveMemoryBudget=0`` under the memory limit ``limit``: a quarter of it (AUTO_MAX without a
    limit or past 1 GiB), and at least two whole frames (one peer's biggest request must always fit;
    ``memory_limit_warning`` says when that leaves the limit too small).  No floor of its own: one of
    64 MiB under a 96 MiB cgroup let 40 peers each sending 16 MiB of a frame have the kernel kill the
    server (56 MiB at rest) where the budget would have refused them."""
    quarter = AUTO_MAX if limit is None else min(limit // 4, AUTO_MAX)
    return max(quarter, 2 * frame_max_length)


#: how often the memory limit is read again: a limit resized in place (a pod resized in place, ``docker
#: update --memory``, ``systemctl set-property namesrv MemoryMax=``) is followed within this
LIMIT_CHECK_SECONDS = 30.0


class LimitWatch:
    """The memory limit read again at each ``tick`` (a timer of the service, every LIMIT_CHECK_SECONDS).
    Read only at the start, a container's limit lowered in place left the default budget at a quarter
    of the old one: the stalled peers it let in had the kernel kill the server, where a budget of a
    quarter of the new one would have refused them.  With receiveMemoryBudget 0 (``follows``) the
    budget follows the limit (``budget_for``); either way a change is told (``tell(level, text)``: one
    line), and when the budget no longer fits in the new limit the start's warning is told again.
    ``read``: the limit now (``machine_limit``); ``resident``: the process's resident memory
    (``resident_bytes``).  No Twisted: the service's timer ticks it."""

    def __init__(self, budget: MemoryBudget, frame_max_length: int, follows: bool,
                 read: Callable[[], int | None], resident: Callable[[], int | None],
                 tell: Callable[[str, str], None]) -> None:
        self.budget, self.frame_max_length, self.follows = budget, frame_max_length, follows
        self.read, self.resident, self.tell = read, resident, tell
        #: the limit as last read (None: no limit, or not read yet)
        self.limit: int | None = None
        self.read_once = False
        #: times the limit was found changed since the start
        self.changes = 0

    def tick(self) -> None:
        limit = self.read()
        was, self.limit = self.limit, limit
        first, self.read_once = not self.read_once, True
        wanted = budget_for(limit, self.frame_max_length) if self.follows else self.budget.limit
        if (first or limit == was) and wanted == self.budget.limit:
            return  # the first read: the budget was made from this limit at the start
        before = self.budget.limit
        self.budget.resize(wanted)
        self.changes += 1
        since = "changed since the start" if first else f"was {_mib(was)}"
        self.tell("info", f"memory limit now {_mib(limit)} ({since}; the least of the machine's, the cgroup's "
                          f"memory limit and ulimit -v): "
                          + (f"receiveMemoryBudget follows it, {wanted // MiB} MiB (was {before // MiB} MiB)"
                             if self.follows else f"receiveMemoryBudget stays {wanted // MiB} MiB as set"))
        warning = memory_limit_warning(wanted, self.resident(), limit)
        if warning:
            self.tell("warn", warning)


def _mib(limit: int | None) -> str:
    return "none" if limit is None else f"{limit // MiB} MiB"


def resident_bytes() -> int | None:
    """This process's resident memory now (``/proc/self/statm``), None where it cannot be read."""
    try:
        pages = int(read_regular_text("/proc/self/statm", TEXT_FILE_LIMIT).split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        return None


def memory_limit_warning(budget: int, resident: int | None, limit: int | None) -> str | None:
    """The start's warning when what the process holds already (``resident``) and what peers may make
    it hold (``budget``, receiveMemoryBudget) do not fit in its memory ``limit`` (machine_limit), else
    None: past the limit the kernel kills it (an OOM kill: SIGKILL, no line of its own), where the budget
    would have refused the peers that filled it, named and counted."""
    needs = resident + RESIDENT_PER_BUDGET_BYTE * budget if resident is not None else 0
    if limit is None or resident is None or needs <= limit:
        return None
    return (f"memory limit {limit // MiB} MiB (the least of the machine's, the cgroup's memory limit and ulimit -v) "
            f"leaves {max(0, limit - resident) // MiB} MiB above what the server holds at start ({resident // MiB} "
            f"MiB), less than the {RESIDENT_PER_BUDGET_BYTE * budget // MiB} MiB peers' frames may make it hold "
            f"within receiveMemoryBudget ({budget // MiB} MiB): a burst of them has the kernel kill it (an OOM kill, "
            f"no line of its own) before the budget refuses them; raise the limit to at least "
            f"{-(-needs // MiB)} MiB (systemd MemoryMax=, the pod's limits.memory) or lower frameMaxLength "
            f"(receiveMemoryBudget at least twice it)")


#: descriptors past the reserve that only the HTTP port may take: a flood of remoting or controller
#: connections leaves the probes, the status page and /metrics room to answer (and to say why)
HTTP_HEADROOM = 8

#: how often at most the descriptors open are counted again, while the estimate is near the reserve
NEAR_RECOUNT_SECONDS = 1.0


#: descriptors besides the connections and the reserve: the listening ports, the epoll sets, the log
ROOM_SLACK = 64
#: the descriptor table's room made at start-up at most (8 bytes an entry: 8 MiB)
TABLE_ROOM_MAX = 1 << 20


def descriptor_room(max_connections: int, reserve: int, limit: int | None) -> int:
    """How many descriptors the process's table should hold from the start (``make_table_room``):
    every connection ``maxConnections`` admits, the reserve and ROOM_SLACK (``maxConnections`` 0,
    no limit: as many as ``ulimit -n`` allows), within ``limit`` and TABLE_ROOM_MAX."""
    wanted = max_connections + reserve + ROOM_SLACK if max_connections else TABLE_ROOM_MAX
    return min(wanted, limit if limit is not None else TABLE_ROOM_MAX, TABLE_ROOM_MAX)


def make_table_room(count: int) -> bool:
    """Grow this process's descriptor table to hold ``count`` descriptors now, at start-up: whether
    it holds them.  Linux doubles the table as descriptors are opened past its size (256, 512, ...
    8192), and in a process with more than one thread (the reactor's pool writes the stores) each
    doubling waits for an RCU grace period first (``expand_fdtable``'s ``synchronize_rcu``): while
    5,000 brokers connected, the reactor's thread slept 15.1 ms in the ``accept`` that returned
    descriptor 2,048 and 9.3 ms in the one of 4,096 (4-75 ms a doubling in a threaded test process, on
    a loaded machine), neither running nor runnable, and every lookup waited with it.  Made once here
    (the table never shrinks), no accept grows it.  A descriptor duplicated at ``count - 1`` or
    above (``F_DUPFD_CLOEXEC``: never over one open) makes the kernel grow the table to hold it,
    then is closed."""
    try:
        probe = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if probe >= count - 1:
            return True
        os.close(fcntl.fcntl(probe, fcntl.F_DUPFD_CLOEXEC, count - 1))
        return True
    except OSError:  # past ulimit -n (EINVAL), no memory: the table grows as it did
        return False
    finally:
        os.close(probe)


def count_open_fds() -> int | None:
    """Descriptors this process has open (/proc/self/fd, /dev/fd on the BSDs and macOS); None when
    neither can be read.  Costs a directory read of every open descriptor: counted seldom (FdBudget)."""
    for directory in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(directory)) - 1  # the listing's own descriptor
        except OSError:
            continue
    return None


def open_file_limit() -> int | None:
    """RLIMIT_NOFILE's soft limit, None when unlimited."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


class FdBudget:
    """The process's descriptors (RLIMIT_NOFILE) as a budget shared by every listening port: a new
    connection is kept only while ``reserve`` descriptors stay free for the stores, so that no number
    of peers (idle HTTP connections, remoting connections that never send) makes a KV write, a route
    snapshot, the page's events or the accounts reload fail with EMFILE.

    A port calls ``admit()`` once per accepted socket, its descriptor already open (False: close it,
    a refusal), and its protocol ``release()`` when an admitted connection closes.  What is open is
    counted from the descriptor table (``count``) at the first admission and then only near the limit
    -- while the estimate leaves fewer than twice the reserve free, at most every NEAR_RECOUNT_SECONDS
    (a count reads every descriptor: 15-23 ms of the accepting turn at 19,500 connections, a lookup's
    wait, so never while far from it) -- and between counts estimated as the last count plus the
    connections admitted since, less those released.  A socket closed unreleased (a TLS peer that
    never sent a byte) shows at the next count, so the estimate errs high: near the limit a
    connection may be refused for up to NEAR_RECOUNT_SECONDS that a count would have let in, never
    the other way.  What else opens descriptors between counts (a push to a broker, a store's file,
    a peer's HTTP client) makes it err low, by a few: the second reserve of the near zone is counted
    again before it is reached.  ``reserve`` is at most a quarter of the limit, so
    a small ``ulimit -n`` still admits peers.  ``headroom`` more are left to the HTTP port
    (``admit(probes=True)``): under ``ulimit -n 64``, 80 idle remoting connections took the budget
    to its reserve and /healthz, /metrics and the status page were closed unanswered, Prometheus
    saying the server down rather than what it refused.  No Twisted: the clock and the count are given."""

    def __init__(self, limit: int | None, reserve: int, count: Callable[[], int | None],
                 clock: Callable[[], float], headroom: int = 0) -> None:
        self.limit = limit
        self.reserve = min(reserve, limit // 4) if limit is not None else reserve
        self.headroom = headroom if self.reserve else 0
        self.count = count
        self.clock = clock
        #: descriptors open at the last count (the socket being admitted then left out) ...
        self.counted = 0
        self.counted_at: float | None = None
        #: ... and connections admitted since, less those released
        self.admitted = 0
        #: sockets refused for the reserve
        self.refused = 0

    def admit(self, probes: bool = False) -> bool:
        """Whether the connection just accepted (its descriptor open) may stay; ``probes``: the HTTP
        port's, which may take the headroom too."""
        if self.limit is None or not self.reserve:
            return True
        now = self.clock()
        since = None if self.counted_at is None else now - self.counted_at
        near = self.free() - 1 < 2 * self.reserve
        if since is None or (near and since >= NEAR_RECOUNT_SECONDS):
            counted = self.count()
            if counted is not None:
                self.counted, self.admitted, self.counted_at = counted - 1, 0, now
        if self.free() - 1 < self.reserve + (0 if probes else self.headroom):
            self.refused += 1
            return False
        self.admitted += 1
        return True

    def take(self) -> None:
        """A connection kept without asking: one closed to make room for it (Admission.make_room)."""
        self.admitted += 1

    def release(self) -> None:
        """An admitted connection closed: its descriptor is free again (since the last count or before)."""
        self.admitted -= 1

    def free(self) -> int:
        """Descriptors free as estimated (the limit's, when there is none)."""
        return (self.limit or 0) - self.counted - self.admitted


def fd_limit_warning(max_connections: int, margin: int = DEFAULT_FD_RESERVE, held: int = 0) -> str | None:
    """The warning when RLIMIT_NOFILE's soft limit is below maxConnections + ``margin`` (fdReserve:
    the descriptors kept for the stores, FdBudget), else None; ``held``: the descriptors the server
    holds or keeps whatever the peers (open now, its ports, the HTTP port's headroom), left out of the
    connections it names (under ulimit -n 64 it said "about 48" and 23 got in)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if not max_connections or soft == resource.RLIM_INFINITY or soft >= max_connections + margin:
        return None
    return (f"open-file limit (ulimit -n) is {soft}, below maxConnections={max_connections} + {margin}: past about "
            f"{max(0, soft - margin - held)} connections new peers are refused (fd_reserve), the rest kept for the "
            f"stores; raise it (ulimit -n {max_connections + margin}, systemd LimitNOFILE=; hard limit "
            f"{_shown(hard)}) or lower maxConnections")


def _shown(limit: int) -> str:
    return "unlimited" if limit == resource.RLIM_INFINITY else str(limit)
