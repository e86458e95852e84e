"""twisted-namesrv: an Apache RocketMQ NameServer on Twisted."""

__version__ = "0.1.0"  # setup.cfg reads it from here; --version prints it


class CannotStart(Exception):
    """The server cannot serve what it was asked to (a port it cannot listen on).  An Exception,
    not SystemExit, so that daemonised twistd hands it to the waiting parent, which exits 1; it
    lives here so that the parent's 100-byte report has room for the reason."""


def cannot_start_line(reason: object) -> str:
    """The one stderr line of a server that cannot start, whichever launcher ran it."""
    return f"namesrv: cannot start: {reason}"
