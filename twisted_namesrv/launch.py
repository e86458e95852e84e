"""What both launchers share (``twistd namesrv``: tap.py; ``twistd namesrv-controller``:
controller/tap.py): a configuration a server cannot run with is one line on stderr and status 1,
a suspicious one a warning on stderr and in the log; under twistd, our log observer (logs.py,
escaped lines) in place of twistd's own (``take_over_twistd_logging``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

from twisted.logger import Logger
from twisted.python import usage

from . import CannotStart, cannot_start_line
from .escapes import escaped
from .logs import finish_writers

log = Logger()


def cannot_start(reason: str) -> NoReturn:
    """Log the reason, then exit 1 with it on stderr (SystemExit: twistd prints no traceback).
    Logged as an error: a critical event before the log opens would reach stderr a second time."""
    log.error("cannot start: {reason}", reason=reason)
    raise SystemExit(cannot_start_line(reason))


#: the umask the server takes before it makes a file, when set (octal, e.g. ``0002``): the image sets it
UMASK_ENV = "NAMESRV_UMASK"


def umask_from(environ: Mapping[str, str] = os.environ) -> None:
    """Take ``$NAMESRV_UMASK`` as the process's umask, when set.  The image sets 0002: it runs as a uid
    of group 0 (10001, or OpenShift's arbitrary one, another at every redeploy), and what one uid made
    in the data directory (the lock file, the KV store, the saved config) must stay writable to the
    next; a Kubernetes manifest that replaces the entrypoint keeps the image's environment.  The
    runtime's default (0022) would make them 0644.  A value that is not an octal umask cannot start.
    Under twistd, its own ``--umask`` (and the 0077 it takes when it daemonises without one) is set
    after this, and wins."""
    value = environ.get(UMASK_ENV, "").strip()
    if not value:
        return
    try:
        mask = int(value, 8)
    except ValueError:
        mask = -1
    if not 0 <= mask <= 0o777:
        cannot_start(f"{UMASK_ENV}={value!r} is not a umask (octal, 0 to 0777, e.g. 0002)")
    os.umask(mask)


def log_written_to_the_end() -> None:
    """The log's lines handed to its writer's thread (a stdout that can wait for its reader: logs.py)
    written before the process ends, once the reactor has stopped: twistd then ends by the signal
    that stopped it, where no atexit runs (logs.finish_writers)."""
    from twisted.internet import reactor

    reactor.addSystemEventTrigger("after", "shutdown", finish_writers)


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
        sys.stderr.write(f"namesrv: warning: {escaped(warning)}\n")


#: the options of ``twistd namesrv`` (or ``namesrv-controller``), whose log observer twistd asks for by
#: name (twistd_log_observer)
_twistd_options: Any = None


def take_over_twistd_logging(options: usage.Options, asked: bool = False) -> str | None:
    """Under twistd, our observer (logs.py) instead of twistd's own: when ``asked`` (a log option of
    ours says something else than its default) even over its ``--logger``; else unless ``--logger``
    or ``--syslog`` is given, honouring its ``--logfile`` (twistd_log_file): twistd's text observer
    writes what a peer put in a name raw, ESC and CR and all, and loses a line holding a lone surrogate.
    The operator's own logging left to twistd (``--logger NAME``, ``--syslog``; None when ours
    writes the log, or outside twistd): SIGUSR1 has nothing of ours to reopen then (usr1_not_ours)."""
    parent = getattr(options, "parent", None)
    if parent is None or "logger" not in parent:
        return None
    if not asked and (parent["logger"] or parent.get("syslog")):
        return f"--logger {parent['logger']}" if parent["logger"] else "--syslog"
    global _twistd_options
    _twistd_options = options
    parent["logger"] = f"{__name__}.{twistd_log_observer.__name__}"  # twistd imports it by name
    return None


def twistd_log_file(options: usage.Options) -> str | None:
    """Where twistd's own observer would write (None: stdout): its ``--logfile`` (``-``: stdout;
    ``twistd.log`` for a daemon given none); None outside twistd."""
    parent = getattr(options, "parent", None)
    if parent is None or "logfile" not in parent:
        return None
    name = parent["logfile"]
    if name == "-" or (not name and parent.get("nodaemon")):
        return None
    return name or "twistd.log"


def twistd_log_observer():
    """twistd's ``--logger``, set by ``twistd namesrv`` (take_over_twistd_logging).

    Why a module global holds the options (the one left in the package, on purpose): twistd
    starts logging before it calls makeService, from an observer factory it finds in its own
    options' ``logger``; ServerOptions.postOptions, which runs after ours, passes that value
    through ``namedAny``, so only a dotted name can be handed over, not a bound method of these
    options.  The other route, an ILogObserver component on the Application, is out of reach:
    twistd makes the Application and only then calls makeService, after its logger was built.
    A dotted name reaches only module state, so this function and the global are that route;
    ``python -m twisted_namesrv`` passes its observer without either (__main__.py).  It lives here,
    beside the launchers' other shared pieces, so that controller/tap.py need not import tap.py."""
    assert _twistd_options is not None
    return _twistd_options.log_observer()
