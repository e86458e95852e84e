"""What the benchmarks read of Linux's /proc, read here only: a process's CPU (``/proc/PID/stat``),
its descendants and the process a launcher chain leads to, its threads' CPU by name, its memory
(``/proc/PID/status``), how busy the machine's cores are (``/proc/stat``)
and a thread's ``schedstat`` (run.py, curve.py, spark_pcap.py, spark_timeline.py, stall_why.py, registration_spans.py
and server_turns.py use these; a figure two tools give is then the same figure).

Busy is user + nice + system + irq + softirq.  Steal is not: it is time the hypervisor gave
another guest, which no process on this machine used; counted as busy, the "others" figures (the
cores' busy time less the processes we started) would charge to other processes the time our own
were kept off their cores.

``proc`` is the /proc to read: the tests give a directory of their own.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from pathlib import Path
from typing import NamedTuple

PROC = Path("/proc")
#: /proc's CPU times are in ticks of USER_HZ: this many a second
TICKS = os.sysconf("SC_CLK_TCK")


class PidStat(NamedTuple):
    """The fields of ``/proc/PID/stat`` the benchmarks use; CPU times in ticks (TICKS a second)."""

    comm: str
    ppid: int
    utime: int
    stime: int
    #: the CPU of its children it waited for (reaped)
    cutime: int
    cstime: int
    #: page faults served without a read (a page mapped, zeroed or found in the page cache): its own,
    #: and its reaped children's
    minflt: int = 0
    cminflt: int = 0
    #: page faults that waited for a read from disk (a page of its code or a file evicted meanwhile)
    majflt: int = 0

    @property
    def own_ticks(self) -> int:
        return self.utime + self.stime

    @property
    def reaped_ticks(self) -> int:
        return self.cutime + self.cstime


def parse_pid_stat(text: str) -> PidStat:
    """One ``/proc/PID/stat`` line.  The command name is in parentheses and may hold anything,
    parentheses and spaces too: the fields are those after its last ``)`` (ValueError otherwise)."""
    opened, closed = text.find("("), text.rfind(")")
    if opened < 0 or closed < opened:
        raise ValueError(f"not a /proc/PID/stat line: {text[:80]!r}")
    fields = text[closed + 2 :].split()  # from the state, the stat's third field
    return PidStat(text[opened + 1 : closed], int(fields[1]), *(int(f) for f in fields[11:15]),
                   int(fields[7]), int(fields[8]), int(fields[9]))


def pid_stat(pid: int, proc: Path = PROC) -> PidStat | None:
    """The process's stat; None once it is gone (or unreadable)."""
    try:
        return parse_pid_stat((proc / str(pid) / "stat").read_text())
    except (OSError, ValueError, IndexError, TypeError):
        return None


def pid_cpu_s(pid: int, proc: Path = PROC) -> float:
    """User and system CPU seconds of one process so far (0 once it is gone)."""
    stat = pid_stat(pid, proc)
    return 0.0 if stat is None else stat.own_ticks / TICKS


def pid_major_faults(pid: int, proc: Path = PROC) -> int:
    """Page faults of one process so far that waited for a read from disk (0 once it is gone): its
    thread sleeps meanwhile, neither running nor runnable."""
    stat = pid_stat(pid, proc)
    return 0 if stat is None else stat.majflt


def descendants(pid: int, proc: Path = PROC) -> list[int]:
    """Every process below ``pid``, from each thread's ``children`` file: a read per process of the
    tree (curve.py asks every 0.2 s while a server settles; a scan of every process's stat cost the
    load's process more), or, on a kernel without those files, from the parent links of
    /proc/*/stat."""
    if (proc / str(pid)).exists() and not (proc / str(pid) / "task" / str(pid) / "children").exists():
        return _descendants_by_parent(pid, proc)
    found, todo = [], [pid]
    while todo:
        try:
            kids = [
                int(c)
                for task in (proc / str(todo.pop()) / "task").iterdir()
                for c in (task / "children").read_text().split()
            ]
        except (OSError, ValueError):
            continue  # gone meanwhile
        found += kids
        todo += kids
    return found


def launched(pid: int, proc: Path = PROC, depth: int = 3) -> int:
    """The process a chain of launchers leads to, each with one child (taskset execs; a shell
    script that starts the server as its only child): the one whose main thread a probe watches.
    ``pid`` itself when it has no child or more than one, or is gone."""
    for _ in range(depth):
        try:
            children = (proc / str(pid) / "task" / str(pid) / "children").read_text().split()
        except OSError:
            break
        if len(children) != 1:
            break
        pid = int(children[0])
    return pid


def thread_ticks(pid: int, proc: Path = PROC) -> Counter[str]:
    """CPU ticks of a process's threads by name, digits dropped (a pool's threads together: the
    JVM's task threads, compiler, collector); empty once it is gone."""
    found: Counter[str] = Counter()
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except OSError:
        return found
    for task in tasks:
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = parse_pid_stat((task / "stat").read_text())
            found["".join(c for c in stat.comm if not c.isdigit())] += stat.own_ticks
    return found


def _descendants_by_parent(pid: int, proc: Path) -> list[int]:
    children: dict[int, list[int]] = {}
    for path in proc.glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            children.setdefault(parse_pid_stat(path.read_text()).ppid, []).append(int(path.parent.name))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def anonymous_kib(pid: int | str = "self", proc: Path = PROC) -> int:
    """The process's anonymous memory in kB (``/proc/PID/smaps_rollup``'s ``Anonymous``): its heaps and
    mappings of its own, what its RSS holds but its files; "self": the process that asks."""
    with (proc / str(pid) / "smaps_rollup").open() as rollup:
        return next(int(line.split()[1]) for line in rollup if line.startswith("Anonymous:"))


def status_kib(pid: int, keys: tuple[str, ...], proc: Path = PROC) -> dict[str, int] | None:
    """Those of ``/proc/PID/status``'s number lines named: its kB lines (``VmRSS``, ``VmHWM``) in kB,
    counts as they are (``voluntary_ctxt_switches``: the main thread's), 0 for one it lacks (a
    zombie has no memory lines); None once the process is gone."""
    try:
        text = (proc / str(pid) / "status").read_text()
    except OSError:
        return None
    found = dict.fromkeys(keys, 0)
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in found:
            found[key] = int(value.split()[0])
    return found


def tree_cpu_s(pid: int, proc: Path = PROC) -> float:
    """User and system CPU seconds of the process and its living descendants so far."""
    stats = (pid_stat(p, proc) for p in [pid, *descendants(pid, proc)])
    return sum(stat.own_ticks for stat in stats if stat is not None) / TICKS


def cores_busy_s(cores: set[int] | None = None, proc: Path = PROC) -> float:
    """CPU seconds ``cores`` (all of the machine's: None) have spent busy since boot, every
    process's: user, nice, system, irq and softirq (guest time is within user and nice; idle,
    iowait and steal are not busy: see the module's docstring)."""
    total = 0
    for line in (proc / "stat").read_text().splitlines():
        name, *fields = line.split()
        if (
            cores is None
            and name == "cpu"
            or cores is not None
            and name[:3] == "cpu"
            and name[3:].isdigit()
            and int(name[3:]) in cores
        ):
            user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[:7])
            total += user + nice + system + irq + softirq
    return total / TICKS


def core_steal_s(core: int, proc: Path = PROC) -> float:
    """Seconds the host has not run ``core`` (a virtual CPU) while it had work, since boot: its
    steal time; 0 where there is no such line."""
    for line in (proc / "stat").read_text().splitlines():
        if line.startswith(f"cpu{core} "):
            return int(line.split()[8]) / TICKS
    return 0.0


def kernel_thread(comm: str, proc: Path = PROC) -> int | None:
    """The pid of the process named ``comm`` whose parent is kthreadd (pid 2: a kernel thread,
    e.g. ``ksoftirqd/1``, which delivers a core's loopback packets once their work passes what a
    system call may do itself); None when there is none."""
    for entry in proc.iterdir():
        if entry.name.isdigit():
            stat = pid_stat(int(entry.name), proc)
            if stat is not None and stat.comm == comm and stat.ppid == 2:
                return int(entry.name)
    return None


def parse_schedstat(data: bytes | str) -> tuple[int, int]:
    """A thread's ``schedstat``: (ns it ran on a CPU, ns it was runnable waiting for one)."""
    ran, waited, _ = parse_schedstat_slices(data)
    return ran, waited


def parse_schedstat_slices(data: bytes | str) -> tuple[int, int, int]:
    """``parse_schedstat`` and the third field: how many times the thread was put on a CPU.

    The kernel adds to the first (the run time) at the thread's ticks and switches only: read from
    another CPU while the thread runs, it lags by up to a tick (4 ms at this machine's HZ of 250: a
    spinning thread's, read every 0.2 ms from the other core, grew in steps of 3.96-4.01 ms), so a
    window of a few ms may show none of the thread's run or a whole tick from before it.  The wait
    (second) is added when the thread gets its CPU and the slices (third) count switches: both exact
    once the thread has run after the window."""
    ran, waited, slices = data.split()
    return int(ran), int(waited), int(slices)


def schedstat_ns(path: str | Path) -> tuple[int, int]:
    """``parse_schedstat`` of the file at ``path`` (OSError when the thread is gone)."""
    with open(path, "rb") as f:
        return parse_schedstat(f.read())


class Schedstat:
    """A thread's ``schedstat`` read again and again through one descriptor kept open (``pread``:
    about 1 µs, against 13 µs to open, read and close it each time, which curve.py's probe did four
    times a lookup); zeros once it is gone."""

    def __init__(self, path: str | Path) -> None:
        try:
            self.fd: int | None = os.open(path, os.O_RDONLY)
        except OSError:
            self.fd = None

    def read_ns(self) -> tuple[int, int]:
        """(ns on a CPU, ns runnable waiting for one); (0, 0) once the thread is gone."""
        if self.fd is None:
            return 0, 0
        try:
            return parse_schedstat(os.pread(self.fd, 128, 0))
        except (OSError, ValueError):
            return 0, 0

    def read(self) -> tuple[float, float]:
        """(ms on a CPU, ms runnable waiting for one)."""
        ran, waited = self.read_ns()
        return ran / 1e6, waited / 1e6

    def read_slices(self) -> tuple[float, float, int]:
        """(ms on a CPU, ms runnable waiting for one, times put on a CPU): ``parse_schedstat_slices``;
        zeros once the thread is gone."""
        if self.fd is None:
            return 0.0, 0.0, 0
        try:
            ran, waited, slices = parse_schedstat_slices(os.pread(self.fd, 128, 0))
        except (OSError, ValueError):
            return 0.0, 0.0, 0
        return ran / 1e6, waited / 1e6, slices

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class OtherThreads:
    """The run time of a process's threads but its main one, each thread's ``schedstat`` kept open
    (``Schedstat``): what another thread of the server ran while its main thread waited (one holding
    the interpreter, a writer of the thread pool).  The threads are listed again at most every
    ``relist`` seconds (a pool starts its threads as work comes): a thread started since is counted
    from the next listing on, and a thread gone stops adding."""

    def __init__(self, pid: int | None, relist: float = 0.1, proc: Path = PROC) -> None:
        self.pid, self.relist, self.proc = pid, relist, proc
        self.threads: dict[int, Schedstat] = {}
        self._listed = -relist

    def list_if_due(self, now: float) -> None:
        """List the threads again when ``relist`` seconds have passed since (``now``: monotonic);
        between two reads of one span, never: a thread listed then would add all its past run."""
        if self.pid is None or now - self._listed < self.relist:
            return
        self._listed = now
        try:
            tids = {int(task.name) for task in (self.proc / str(self.pid) / "task").iterdir()} - {self.pid}
        except (OSError, ValueError):
            return
        for tid in tids - self.threads.keys():
            self.threads[tid] = Schedstat(self.proc / str(self.pid) / "task" / str(tid) / "schedstat")

    def ran_ms(self) -> float:
        """ms the threads listed have run so far."""
        return sum(thread.read_ns()[0] for thread in self.threads.values()) / 1e6

    def close(self) -> None:
        for thread in self.threads.values():
            thread.close()
        self.threads.clear()


def thread_switches(pid: int, proc: Path = PROC) -> tuple[int, int]:
    """(switches of the main thread, of all the process's threads) that gave the CPU up waiting for
    something (``voluntary_ctxt_switches``: each is a sleep, so a wake-up follows it); (0, 0) once it
    is gone.  A reactor's main thread sleeps in epoll once a turn: its count is the reactor's wake-ups."""
    main = every = 0
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except OSError:
        return 0, 0
    for task in tasks:
        with contextlib.suppress(OSError, ValueError):
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    count = int(line.split()[1])
                    every += count
                    if task.name == str(pid):
                        main = count
                    break
    return main, every
