"""What both launchers share (``twistd namesrv``: tap.py; ``twistd namesrv-controller``:
controller/tap.py): a configuration a server cannot run with is one line on stderr and status 1,
a suspicious one a warning on stderr and in the log."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import NoReturn

from twisted.logger import Logger

from . import CannotStart, cannot_start_line

log = Logger()


def cannot_start(reason: str) -> NoReturn:
    """Log the reason, then exit 1 with it on stderr (SystemExit: twistd prints no traceback).
    Logged as an error: a critical event before the log opens would reach stderr a second time."""
    log.error("cannot start: {reason}", reason=reason)
    raise SystemExit(cannot_start_line(reason))


def report_cannot_start_in_one_line() -> None:
    """Under ``twistd -n`` a port that cannot be bound raises CannotStart out of twistd: print
    its one line instead of a traceback (the log already has it).  Daemonised, twistd's parent
    prints the reason and exits 1."""
    previous = sys.excepthook

    def hook(kind, value, tb) -> None:
        if issubclass(kind, CannotStart):
            (sys.__stderr__ or sys.stderr).write(cannot_start_line(value) + "\n")
        else:
            previous(kind, value, tb)

    sys.excepthook = hook


def warn_of(warnings: Iterable[str]) -> None:
    """What a ``-c`` file holds that is suspicious (unknown keys, keys with no effect here): logged
    and on stderr, where whoever started the server looks."""
    for warning in warnings:
        log.warn("{warning}", warning=warning)
        sys.stderr.write(f"namesrv: warning: {warning}\n")
