"""``python -m twisted_namesrv [options]`` (also the ``twisted-namesrv`` command): the service
``twistd -n namesrv`` runs, started directly.

Same options (tap.Options) and service (tap.makeService); it skips twistd's plugin scan, pid
file and daemon machinery, so it starts faster, logs to stdout, and stops on SIGINT/SIGTERM/SIGHUP
(hangup.py).
Exit status: 0 after a stop by SIGTERM or SIGINT, 129 after one by SIGHUP (as Java's JVM: hangup.py),
1 when it cannot start (one line on stderr naming the key and the cause, also logged), 2 for a
command-line usage error (one line, and "try --help").
"""

from __future__ import annotations

import sys
from pathlib import Path

from .unused_imports import defer_unused

defer_unused()  # before Twisted is imported: what it imports and a server never runs loads at first use

from twisted.python import usage  # noqa: E402  (after defer_unused)

USAGE_ERROR = 2


def main(argv: list[str] | None = None) -> None:
    from .logs import hold_usr1_at_start

    hold_usr1_at_start()  # SIGUSR1 (logrotate's postrotate) must not end the start: logs.UsrOneHeld
    from .reactor import install

    install()  # the clients' sockets served before the brokers' in a turn (reactor.py), where epoll is
    from twisted.internet import reactor
    from twisted.logger import globalLogBeginner

    from . import CannotStart, cannot_start_line
    from .hangup import exit_status
    from .tap import Options, makeService

    program = "python -m twisted_namesrv" if sys.argv[0].endswith("__main__.py") else Path(sys.argv[0]).name
    options = Options()
    # --help's first line, as twistd's ("Usage: twistd [options] namesrv ..."): bare, it began "[-c FILE]"
    options.synopsis = f"Usage: {program} {Options.synopsis}"

    def begin_logging() -> None:
        globalLogBeginner.beginLoggingTo([options.log_observer()], redirectStandardIO=False)

    try:
        options.parseOptions(sys.argv[1:] if argv is None else argv)
    except usage.UsageError as exc:
        sys.stderr.write(f"{program}: {exc} (try --help)\n")
        sys.exit(USAGE_ERROR)
    except SystemExit as exc:
        if exc.code not in (0, None):  # a bad config: the log gets the reason too (-p and --version print only)
            begin_logging()
        raise
    begin_logging()
    try:
        service = makeService(options)
        service.startService()
    except CannotStart as exc:
        sys.exit(cannot_start_line(exc))
    reactor.addSystemEventTrigger("before", "shutdown", service.stopService)
    reactor.run()
    sys.exit(exit_status(reactor))


if __name__ == "__main__":
    main()
