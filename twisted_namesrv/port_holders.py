"""Who holds a TCP port this server could not listen on, for the start's one line.

"Address already in use" alone sends someone woken at 3 a.m. to ``ss -ltnp`` (or to guess: the Java
NameServer not stopped yet, a second server of ours, a proxy on 9876). Java says no more: 4.9.8 prints
``java.net.BindException: Address already in use`` in a stack trace, 5.3.3 ``Failed to bind to
0.0.0.0:9876``. Linux's ``/proc`` says who: the listening socket's inode in ``/proc/net/tcp`` (this
network namespace's), and the process whose descriptor is that socket. A process of another user is
not visible to an unprivileged server (systemd's ProtectProc=invisible, DynamicUser): then the line
says so and names the command that tells. Read only at a start that failed, never while serving.
"""

from __future__ import annotations

import os
from pathlib import Path

from .escapes import escaped

#: /proc/net/tcp's state of a listening socket
LISTEN = "0A"
#: the processes' descriptors looked at, at most (a failed start on a host of many processes stays short)
MAX_FDS_READ = 200_000
#: a command line shown at most this long
MAX_COMMAND = 120


def listening_inodes(port: int, proc: Path = Path("/proc")) -> set[str]:
    """The inodes of the sockets listening on ``port`` (any address, IPv4 or IPv6) in this namespace."""
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text(encoding="ascii", errors="replace").splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == LISTEN and fields[1].rpartition(":")[2] == f"{port:04X}":
                inodes.add(fields[9])
    return inodes


def holders(port: int, proc: Path = Path("/proc")) -> tuple[list[tuple[int, str]], bool]:
    """The processes (pid, command line) holding a socket listening on ``port``, and whether such a
    socket was seen at all (True with no process: one this user cannot see)."""
    inodes = listening_inodes(port, proc)
    if not inodes:
        return [], False
    wanted = {f"socket:[{inode}]" for inode in inodes}
    found: list[tuple[int, str]] = []
    budget = MAX_FDS_READ
    for entry in sorted(proc.glob("[0-9]*"), key=lambda path: int(path.name)):
        try:
            fds = os.listdir(entry / "fd")
        except OSError:
            continue
        for fd in fds[:budget]:
            try:
                if os.readlink(entry / "fd" / fd) in wanted:
                    found.append((int(entry.name), command_of(entry)))
                    break
            except OSError:
                continue
        budget -= len(fds)
        if budget <= 0 or len(found) >= 3:
            break
    return found, True


def command_of(process: Path) -> str:
    try:
        raw = (process / "cmdline").read_bytes()
    except OSError:
        return "?"
    text = raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace") or "?"
    text = text if len(text) <= MAX_COMMAND else text[:MAX_COMMAND - 3] + "..."
    return escaped(text)  # a newline in an argument (python -c) would cut the start's one line


def held_by(port: int, proc: Path = Path("/proc")) -> str:
    """What the start's line adds after "Address already in use": who holds ``port`` ('' when no
    socket listens on it here: another address's, a race)."""
    try:
        found, listening = holders(port, proc)
    except OSError:
        return ""
    if found:
        return "; held by " + ", ".join(f"pid {pid} ({command})" for pid, command in found)
    if listening:
        return f"; held by a process this user cannot see (as root: ss -ltnp 'sport = :{port}')"
    return ""
