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

``fix_mmap_threshold`` (once, at start) holds glibc's mmap threshold at MMAP_THRESHOLD (1 MiB).
glibc starts at 128 KiB and raises the threshold to the size of every mapped block freed (up to 32
MiB): once the first peer's big frame was freed, the next ones' buffers (a frame of up to 16 MiB,
grown as its bytes come) were carved from the heap, whose growth by realloc copies (the old block
and the new one both resident meanwhile) and whose freed middle stays in the RSS.  So the budget's
bytes (budget.py) cost about twice their size in resident memory (RESIDENT_PER_BUDGET_BYTE).
Above a fixed threshold a big buffer is mapped on its own, grown by ``mremap`` without a copy and
unmapped when freed, at once.  Python's small objects (its own arenas) and anything under 1 MiB
are served as before.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from collections.abc import Callable
from typing import Any

#: how often the timer asks
TICK_SECONDS = 1.0
#: the process's CPU since the last trim (every thread's) past which a tick trims
WORK_SECONDS = 0.05
#: the process's CPU over the last tick under which it counts as quiet (1% of a tick)
QUIET_SECONDS = 0.01


#: the size from which glibc maps a block on its own (``M_MMAP_THRESHOLD``), fixed by fix_mmap_threshold
MMAP_THRESHOLD = 1 << 20
#: mallopt's parameter number for it (glibc's malloc.h)
M_MMAP_THRESHOLD = -3


def glibc_call(name: str) -> Callable[..., int] | None:
    """The C function ``name`` of the process's C library when that is glibc, or None (another C
    library, or one without it: musl and the BSDs have neither ``malloc_trim`` nor glibc's ``mallopt``
    parameters)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):  # musl has no such name: ValueError, or None
            return None
        call: Callable[..., int] = getattr(ctypes.CDLL(None), name)  # the process's own C library (dlopen(NULL))
    except (ValueError, OSError, AttributeError):
        return None
    return call


def glibc_trim() -> Callable[[], int] | None:
    """glibc's ``malloc_trim(0)`` (every free page of its heaps back to the system), or None where
    the process's C library is not glibc or has no such call."""
    trim: Any = glibc_call("malloc_trim")
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: int(trim(0))


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD) -> bool:
    """glibc's mmap threshold held at ``threshold`` (``mallopt(M_MMAP_THRESHOLD)``, which also stops
    its rising with each mapped block freed): whether it was set; nothing where the C library is not
    glibc.  Called once by the service at start (the module docstring says why)."""
    mallopt: Any = glibc_call("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, threshold))


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
