"""What glibc's heap holds free goes back to the system after work (heap.py): a tick trims once the
process used WORK_SECONDS of CPU since the last trim, never an idle server; where the C library
has no ``malloc_trim`` (musl, the BSDs) nothing is called."""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

import pytest
from twisted.internet import task

from twisted_namesrv import heap
from twisted_namesrv.schema import SERVER_SCHEMA
from twisted_namesrv.service import NamesrvService
from twisted_namesrv.state.config import NamesrvConfig


def test_a_tick_trims_after_work_once_quiet_and_not_when_idle() -> None:
    cpu, calls = [10.0], []
    trimmer = heap.HeapTrim(lambda: calls.append(cpu[0]) or 1, cpu=lambda: cpu[0], work=0.05, quiet=0.01)
    trimmer.tick()
    cpu[0] += 0.005
    trimmer.tick()
    assert calls == []  # idle, or nearly
    cpu[0] += 0.05
    trimmer.tick()
    assert calls == []  # busy in that tick: no trim while the burst goes on
    trimmer.tick()  # quiet since: the burst is over
    trimmer.tick()  # no work since
    assert (calls, trimmer.trims) == ([pytest.approx(10.055)], 1)
    cpu[0] += 1.0
    trimmer.tick()
    trimmer.tick()
    assert trimmer.trims == 2


def test_a_server_busy_at_every_tick_never_trims_on_its_reactor() -> None:
    """A trim walks the whole heap on the reactor's thread (9-15 ms at a 360 MB heap): run at each
    busy second (a 1M-topic registration in pieces, a storm) it was a lookup's longest wait."""
    cpu, calls = [0.0], []
    trimmer = heap.HeapTrim(lambda: calls.append(cpu[0]) or 1, cpu=lambda: cpu[0], work=0.05, quiet=0.01)
    for _ in range(30):
        cpu[0] += 0.3  # 30% of a core, every second
        trimmer.tick()
    assert calls == []


def test_no_trim_where_the_c_library_has_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    assert heap.glibc_trim() is None
    monkeypatch.setattr(sys, "platform", "linux")

    def no_name(name: str) -> str:
        raise ValueError(name)  # a C library that does not know the name (musl)

    monkeypatch.setattr(os, "confstr", no_name)
    assert heap.glibc_trim() is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's call")
def test_glibc_trim_calls_malloc_trim() -> None:
    try:
        glibc = os.confstr("CS_GNU_LIBC_VERSION")
    except ValueError:
        glibc = None
    if not glibc:
        pytest.skip("not glibc")
    trim = heap.glibc_trim()
    assert trim is not None and trim() in (0, 1)
    assert ctypes.CDLL(None).malloc_trim  # the one it called


def test_the_server_trims_on_its_timer(tmp_path: Path) -> None:
    data = tmp_path
    config = NamesrvConfig({"listenPort": 0, "bindAddress": "127.0.0.1", "kvConfigPath": str(data / "kv.json"),
                            "configStorePath": str(data / "namesrv.properties")}, schema=SERVER_SCHEMA)
    clock = task.Clock()
    service = NamesrvService.from_config(config, clock)
    if heap.glibc_trim() is None:
        assert service.heap_trim is None
        return
    assert service.heap_trim is not None
    timers = [s for s in service if getattr(s, "call", (None,))[0] == service.heap_trim.tick]
    assert [t.step for t in timers] == [heap.TICK_SECONDS]


#: a process that frees a big mapped block (glibc's threshold rises to its size), then allocates 16
#: blocks of 2 MiB (a peer's frame buffer each) under one of 600 KiB that stays, frees them, and prints
#: how much of them its RSS still holds; ``fixed``: heap.fix_mmap_threshold first
RETAINED = """
import os, sys
from twisted_namesrv import heap
if sys.argv[1] == "fixed":
    assert heap.fix_mmap_threshold()
def rss():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
big = bytearray(8 << 20)
del big
before = rss()
blocks = [bytearray(2 << 20) for _ in range(16)]
stays = bytearray(600 << 10)
del blocks
print(rss() - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's call")
def test_big_buffers_freed_go_back_to_the_system_once_the_threshold_is_fixed() -> None:
    """A peer's frame of a few MiB, freed, stayed in the RSS once a bigger one freed before had raised
    glibc's mmap threshold: the budget's bytes cost twice their size resident. Fixed at 1 MiB, each is
    mapped on its own and unmapped when freed."""
    import subprocess

    if heap.glibc_call("mallopt") is None:
        pytest.skip("not glibc")
    retained = {how: int(subprocess.run([sys.executable, "-c", RETAINED, how], capture_output=True, text=True,
                                        check=True, timeout=60).stdout)
                for how in ("as glibc starts", "fixed")}
    assert retained["as glibc starts"] > 24 << 20  # the 32 MiB freed, most of it still resident
    assert retained["fixed"] < 4 << 20


def test_no_threshold_is_set_where_the_c_library_is_not_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    assert heap.fix_mmap_threshold() is False
