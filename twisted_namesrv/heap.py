"""Freed memory handed back to the system after the server worked: glibc's ``malloc_trim``.

A burst of work (thousands of brokers' first registrations, their connections accepted, a storm)
frees much of what it allocated: decoded frames, the answers' parts, tables outgrown. Python's
own allocator returns an arena once it is empty; what came from glibc's heap (anything over 512
bytes: a table of thousands of entries, a read's buffer) stays in the process as free chunks,
counted in its RSS until something reuses them. Nor does glibc trim its heap's top by itself once
the server has freed a block it had mapped on its own (a table of a megabyte outgrown): its trim
threshold then rises to twice that block's size. After the curve's 5,000 first registrations and
1,000 client connections the heap held 1.9 MB free, 0.8 MiB of RSS that ``malloc_trim(0)`` gave
back in 0.13 ms (docs/benchmarks.md).

``HeapTrim.tick`` runs every TICK_SECONDS (a timer the composition root, service.py, wires) and
trims once the process has used WORK_SECONDS of CPU since its last trim AND the last tick was
quiet (under QUIET_SECONDS of CPU): an idle server never trims, a busy one not while it is busy,
once after its burst. A trim walks every free chunk of the heap on the reactor's thread: 9-15 ms
with a heap of 360 MB half freed, 150-210 ms at 2.3 GB (a throwaway script of 600-900-byte blocks,
2026-12-01); run each second of a 1M-topic registration in pieces or a storm, it was a lookup's
longest wait. Only where the C library is glibc (``glibc_trim``): musl
and the BSDs have no ``malloc_trim``, and a process there runs as before.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from collections.abc import Callable

#: how often the timer asks
TICK_SECONDS = 1.0
#: the process's CPU since the last trim (every thread's) past which a tick trims
WORK_SECONDS = 0.05
#: the process's CPU over the last tick under which it counts as quiet (1% of a tick)
QUIET_SECONDS = 0.01


def glibc_trim() -> Callable[[], int] | None:
    """glibc's ``malloc_trim(0)`` (every free page of its heaps back to the system), or None where
    the process's C library is not glibc or has no such call."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):  # musl has no such name: ValueError, or None
            return None
        trim = ctypes.CDLL(None).malloc_trim  # the process's own C library (dlopen(NULL))
    except (ValueError, OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: int(trim(0))


class HeapTrim:
    """Calls ``trim`` at a tick once the process used ``work`` CPU seconds since the last one and
    under ``quiet`` since the tick before (``cpu``: the process's CPU clock, a test's own)."""

    def __init__(self, trim: Callable[[], int], cpu: Callable[[], float] = time.process_time,
                 work: float = WORK_SECONDS, quiet: float = QUIET_SECONDS) -> None:
        self.trim, self.cpu, self.work, self.quiet = trim, cpu, work, quiet
        self.last = self.ticked = cpu()
        #: trims so far
        self.trims = 0

    def tick(self) -> None:
        now = self.cpu()
        busy = now - self.ticked >= self.quiet
        self.ticked = now
        if busy or now - self.last < self.work:
            return
        self.trim()
        self.trims += 1
        self.last = self.ticked = self.cpu()  # the trim's own CPU not counted as work
