"""``python -m twisted_namesrv [options]``: the same service as ``twistd -n namesrv``."""

from __future__ import annotations

import sys

from twisted.scripts.twistd import run


def main() -> None:
    sys.argv = ["twistd", "--nodaemon", "--pidfile=", "namesrv", *sys.argv[1:]]
    run()


if __name__ == "__main__":
    main()
