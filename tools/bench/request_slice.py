#!/usr/bin/env python3
"""Run a command with an EEVDF request slice: what the kernel lets a woken thread preempt the task
holding its core by (Linux 6.12 on; older kernels take the call and ignore the slice).

A benchmark's wrapper, not the server's: with it a curve runs our server beside itself, the slice the
one difference, round by round in the same run (docs/benchmarks.md, the 1,000-broker storm's waits):

    ip netns exec NS .venv/bin/python tools/bench/scale.py --curve --steps brokers-1000 --rounds 3 \\
        --compare 'slice=.venv/bin/python tools/bench/request_slice.py 100 -- .venv-bench/bin/python \\
            -m twisted_namesrv --port {port} --bind 127.0.0.1 --data-dir {data_dir} --compat {compat}'

The slice is set on this process's thread with ``sched_setattr`` (its ``sched_runtime``), its
policy, nice value and flags read first and kept, and lasts through ``exec`` and into every thread
and child the command makes.  A thread of a real-time or idle policy is left as it is.  The kernel's
default slice is 0.7 ms times 1 + log2(CPUs) (1.4 ms on two); a woken task with a shorter one may
end the running task's slice early where the default lets that task run it out, which the scheduler
notices at its next tick (4 ms at 250 Hz)."""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import struct
import sys

#: sched_setattr and sched_getattr by machine (the kernel's syscall tables)
SYSCALLS = {"x86_64": (314, 315), "aarch64": (274, 275)}
#: struct sched_attr as far as a fair policy reads it: size, policy, flags, nice, priority, runtime
#: (the slice, ns), deadline, period
SCHED_ATTR = struct.Struct("IIQiIQQQ")
#: SCHED_OTHER and SCHED_BATCH: the policies a request slice applies to
FAIR_POLICIES = (0, 3)


def request_slice(ns: int) -> int:
    """Ask for a request slice of ``ns`` nanoseconds on the calling thread; its slice as the kernel
    reports it afterwards (the kernel clamps it to 0.1-100 ms)."""
    calls = SYSCALLS.get(platform.machine())
    if calls is None:
        raise OSError(f"sched_setattr: no syscall number known for {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(SCHED_ATTR.size)
    if libc.syscall(calls[1], 0, buf, SCHED_ATTR.size, 0) != 0:
        raise OSError(ctypes.get_errno(), "sched_getattr")
    _, policy, flags, nice, priority, _, _, _ = SCHED_ATTR.unpack(buf.raw)
    if policy not in FAIR_POLICIES:
        raise OSError(f"sched_setattr: policy {policy} is not a fair one, left as it is")
    attr = ctypes.create_string_buffer(SCHED_ATTR.pack(SCHED_ATTR.size, policy, flags, nice, priority, ns, 0, 0))
    if libc.syscall(calls[0], 0, attr, 0) != 0:
        raise OSError(ctypes.get_errno(), "sched_setattr")
    if libc.syscall(calls[1], 0, buf, SCHED_ATTR.size, 0) != 0:
        raise OSError(ctypes.get_errno(), "sched_getattr")
    return SCHED_ATTR.unpack(buf.raw)[5]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("micros", type=int, help="the request slice, µs (0: the kernel's default again)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- and the command")
    a = p.parse_args()
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not command:
        p.error("no command")
    request_slice(a.micros * 1000)
    os.execvp(command[0], command)


if __name__ == "__main__":
    sys.exit(main())
