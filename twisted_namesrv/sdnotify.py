"""Readiness for systemd's ``Type=notify``: one datagram, ``READY=1``, to ``$NOTIFY_SOCKET`` once the
server serves (every listener bound), so ``systemctl start`` returns, and units ordered ``After=`` it
start, only when brokers and clients can be answered.

The protocol of sd_notify(3), without libsystemd: a unix datagram socket whose path is the variable's
value; a leading ``@`` names Linux's abstract namespace (a NUL byte in the address). Not under systemd
(no variable) this does nothing; a socket that cannot be reached is a warning, never a failure: the
server serves either way, and systemd then reports the start as timed out, which says where to look.
READY waits for the reactor to run (``ready_when_running``): its SIGTERM handler is installed by then,
so a stop systemd sends right after READY is a clean stop, not a kill.

With ``WatchdogSec=`` in the unit, systemd passes ``WATCHDOG_USEC`` (and ``WATCHDOG_PID``) and kills a
service that does not say ``WATCHDOG=1`` within it; ``Restart=on-failure`` then starts it again.  The
reactor says it every half period (``watchdog_service``), so a server that hangs rather than dies
(SIGSTOP, a frozen VM thawed late, a turn of the reactor that never ends) is restarted: before, it kept
its port and its unit stayed "active (running)" while no broker or client was answered.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from functools import partial
from typing import Any

from twisted.logger import Logger

log = Logger()


def socket_address(value: str) -> str | None:
    """The address ``$NOTIFY_SOCKET`` names: a path, or ``@name`` for an abstract socket (NUL first);
    None for what this does not speak (an empty value, ``vsock:``)."""
    if value.startswith("@") and len(value) > 1:
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    return None


def notify(message: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Send ``message`` (``KEY=value`` lines) to the service manager; whether it was sent."""
    value = environ.get("NOTIFY_SOCKET", "")
    if not value:
        return False
    address = socket_address(value)
    if address is None:
        log.warn("NOTIFY_SOCKET={value!r} is not a unix socket: systemd is not told the server is ready",
                 value=value)
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(message.encode("utf-8"), address)
    except OSError as exc:
        log.warn("could not tell systemd {what} (NOTIFY_SOCKET={value}): {error}",
                 what="the server is ready" if message.startswith("READY=") else message.strip(),
                 value=value, error=exc)
        return False
    return True


def ready(status: str, environ: Mapping[str, str] = os.environ) -> bool:
    """``READY=1`` with a one-line ``STATUS`` (shown by ``systemctl status``)."""
    return notify(f"READY=1\nSTATUS={' '.join(status.split())}\n", environ)


def ready_when_running(reactor: Any, status: str, environ: Mapping[str, str] = os.environ) -> None:
    """``ready`` once ``reactor`` runs (at once if it does): after its signal handlers are installed.
    A clock without ``callWhenRunning`` (tests' ``task.Clock``) is told at once."""
    when_running = getattr(reactor, "callWhenRunning", None)
    if when_running is None:
        ready(status, environ)
    else:
        when_running(ready, status, environ)


def watchdog_period(environ: Mapping[str, str] = os.environ, pid: int | None = None) -> float | None:
    """Seconds within which systemd wants ``WATCHDOG=1`` from this process, or None: not asked (no
    ``WATCHDOG_USEC``, a value that is not a positive count) or asked of another process
    (``WATCHDOG_PID``, inherited by a child)."""
    usec = environ.get("WATCHDOG_USEC", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    owner = environ.get("WATCHDOG_PID", "")
    if owner and owner != str(os.getpid() if pid is None else pid):
        return None
    return int(usec) / 1_000_000


def watchdog_service(clock: Any, environ: Mapping[str, str] = os.environ) -> Any:
    """A timer saying ``WATCHDOG=1`` on ``clock`` (the reactor) every half of systemd's watchdog
    period while it runs, for NamesrvService's children; None when systemd asks for none.  It runs
    on the reactor, so a reactor that stops turning stops saying it."""
    from .timers import ClockedTimerService

    period = watchdog_period(environ)
    if period is None:
        return None
    log.info("systemd's watchdog: WATCHDOG=1 every {every:g} s (WatchdogSec={period:g})",
             every=period / 2, period=period)
    return ClockedTimerService(period / 2, partial(notify, "WATCHDOG=1\n", environ), clock)
