"""``python -m twisted_namesrv [options]``: the service ``twistd -n namesrv`` runs, started directly.

Same options (tap.Options) and service (tap.makeService); it skips twistd's plugin scan, pid
file and daemon machinery, so it starts faster, logs to stdout, and stops on SIGINT/SIGTERM.
"""

from __future__ import annotations

import sys

from twisted.python import usage


def main(argv: list[str] | None = None) -> None:
    from .tap import Options, makeService

    options = Options()
    try:
        options.parseOptions(sys.argv[1:] if argv is None else argv)
    except usage.UsageError as exc:
        sys.exit(f"python -m twisted_namesrv: {exc}\n{options}")
    from twisted.internet import reactor
    from twisted.logger import globalLogBeginner

    from .logs import observer

    globalLogBeginner.beginLoggingTo([observer(options["log-format"])], redirectStandardIO=False)
    service = makeService(options)
    reactor.callWhenRunning(service.startService)
    reactor.addSystemEventTrigger("before", "shutdown", service.stopService)
    reactor.run()


if __name__ == "__main__":
    main()
