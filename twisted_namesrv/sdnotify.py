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

import errno
import os
import socket
from collections.abc import Callable, Mapping
from typing import Any

from twisted.logger import Logger

log = Logger()
#: what the watchdog's timer says
WATCHDOG = "WATCHDOG=1\n"


def socket_address(value: str) -> str | None:
    """The address ``$NOTIFY_SOCKET`` names: a path, or ``@name`` for an abstract socket (NUL first);
    None for what this does not speak (an empty value, ``vsock:``)."""
    if value.startswith("@") and len(value) > 1:
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    return None


def notify(message: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Send ``message`` (``KEY=value`` lines) to the service manager; whether it was sent (a failure
    is a warning line)."""
    error = send(message, environ)
    if error is not None:
        _warn_unsent(message, environ, error)
    return error is None and bool(environ.get("NOTIFY_SOCKET", ""))


def send(message: str, environ: Mapping[str, str] = os.environ) -> OSError | None:
    """Send ``message`` to ``$NOTIFY_SOCKET``; the error that kept it from being sent (a value that
    names no unix socket: EAFNOSUPPORT), or None (sent, or no socket to tell: not under systemd)."""
    value = environ.get("NOTIFY_SOCKET", "")
    if not value:
        return None
    address = socket_address(value)
    if address is None:
        return OSError(errno.EAFNOSUPPORT, "not a unix socket's path or @name")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(message.encode("utf-8"), address)
    except OSError as exc:
        return exc
    return None


def _warn_unsent(message: str, environ: Mapping[str, str], error: OSError) -> None:
    log.warn("could not tell systemd {what} (NOTIFY_SOCKET={value!r}): {error}",
             what="the server is ready" if message.startswith("READY=") else message.strip(),
             value=environ.get("NOTIFY_SOCKET", ""), error=error)


class Watchdog:
    """``WATCHDOG=1``, said by the watchdog's timer: a failure to send it (the socket gone: systemd
    restarted or the variable inherited by a process run elsewhere) is one warning when it starts
    failing and one line when it is sent again, each failure counted (``failures``, and ``failed()``:
    namesrv_systemd_watchdog_failures_total), where every 15 s was a warning line for as long as it failed."""

    def __init__(self, environ: Mapping[str, str] = os.environ, failed: Callable[[], None] | None = None) -> None:
        self.environ = environ
        self.failed = failed
        #: the times it could not be sent since start
        self.failures = 0
        #: the failures since it was last sent (0: it was)
        self.failing = 0

    def __call__(self) -> None:
        error = send(WATCHDOG, self.environ)
        if error is None:
            if self.failing:
                log.warn("systemd's watchdog is told again (NOTIFY_SOCKET={value}) after {count} failed tries",
                         value=self.environ.get("NOTIFY_SOCKET", ""), count=self.failing)
                self.failing = 0
            return
        self.failures += 1
        self.failing += 1
        if self.failed is not None:
            self.failed()
        if self.failing == 1:
            _warn_unsent(WATCHDOG, self.environ, error)


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


def watchdog_service(clock: Any, environ: Mapping[str, str] = os.environ,
                     failed: Callable[[], None] | None = None) -> Any:
    """A timer saying ``WATCHDOG=1`` on ``clock`` (the reactor) every half of systemd's watchdog
    period while it runs, for NamesrvService's children (a ``Watchdog``, ``failed`` told of each
    failure); None when systemd asks for none.  It runs on the reactor, so a reactor that
    stops turning stops saying it."""
    from .timers import ClockedTimerService

    period = watchdog_period(environ)
    if period is None:
        return None
    log.info("systemd's watchdog: WATCHDOG=1 every {every:g} s (WatchdogSec={period:g})",
             every=period / 2, period=period)
    watchdog = Watchdog(environ, failed)
    return ClockedTimerService(period / 2, watchdog, clock)
