"""SIGHUP stops the server cleanly, as SIGTERM does, as Java's NameServer stops on it.

Java's JVM takes SIGHUP, SIGINT and SIGTERM alike: its shutdown hook runs (``NamesrvController.shutdown``,
logged line by line in ``namesrv.log``) and it exits with status 129.  Twisted's reactor handles SIGINT and
SIGTERM only, so Python's default action for SIGHUP ended the process at once: no line in the log, no last
write of a route snapshot (warm_restart.py), no ``STOPPING`` for the service manager; a server started from
a terminal died without a word when the terminal or its ssh session closed.  Now SIGHUP is one more stop
signal, logged as Twisted logs the others, and the server ends with status 129 after the clean stop, as
the JVM does (``twistd`` by the signal itself, ``python -m twisted_namesrv`` by ``exit_status``): under
systemd's ``Restart=on-failure`` (deploy/systemd) a SIGHUP sent as "reload" (a logrotate script, a stray
``systemctl kill -s HUP``) is a clean stop and a start 2 s later, where status 0 left the cluster
without this NameServer until someone noticed; SIGTERM and SIGINT, ``systemctl stop``'s, end 0.

A SIGHUP ignored when the server started stays ignored: ``nohup`` (as ``mqnamesrv`` is run, and as the
rig's launchers run Java) sets that, and the JVM keeps it too.  A reactor that installed no signal
handlers of its own (embedded in a program that handles SIGTERM itself) gets none here either; a
reactor that did (twistd's, python -m's, pytest-twisted's) gets it.
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any

from twisted.logger import Logger

log = Logger()


def stop_on_hangup(reactor: Any) -> bool:
    """From now on SIGHUP stops ``reactor`` as its SIGTERM handler does; whether it was installed
    (not when SIGHUP is ignored or already handled, nor when SIGTERM is not the reactor's own: run
    without its signal handlers, SIGTERM left to Python or to the program embedding it)."""
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_DFL:
        return False
    own = getattr(reactor, "sigTerm", None)  # what the reactor sets for SIGTERM when it handles signals
    if own is None or signal.getsignal(signal.SIGTERM) != own:  # not its own: the embedding program's business
        return False

    def hangup(number: int, frame: FrameType | None) -> None:
        log.info("Received SIGHUP, shutting down.")
        reactor.callFromThread(reactor.stop)
        # what twistd reads to end by the same signal after the stop (Twisted's
        # _ISupportsExitSignalCapturing; its own SIGTERM handler sets it the same way)
        reactor._exitSignal = number

    signal.signal(signal.SIGHUP, hangup)
    return True


#: what a stop by SIGHUP exits with: 128 + the signal's number, as a JVM and a shell report it
HANGUP_EXIT_STATUS = 128 + signal.SIGHUP


def exit_status(reactor: Any) -> int:
    """After ``reactor.run()`` returned: HANGUP_EXIT_STATUS when SIGHUP stopped it, else 0."""
    return HANGUP_EXIT_STATUS if getattr(reactor, "_exitSignal", None) == signal.SIGHUP else 0


def default_hangup() -> None:
    """In a forked child that must never run the reactor's stop: SIGHUP back to its default action."""
    if signal.getsignal(signal.SIGHUP) not in (signal.SIG_IGN, None):
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
