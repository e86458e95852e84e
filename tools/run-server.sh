#!/usr/bin/env bash
# Set up (first time: a virtualenv .venv with the server's few dependencies, no test or Spark tools)
# and run the NameServer in the foreground on 127.0.0.1:9876; Ctrl-C stops it.
# State (kvConfig.json, namesrv.properties) lives in ~/namesrv, as with every launcher (and Java's), unless
# --data-dir, --kv-config-path or -c say otherwise. Extra arguments go to `twistd namesrv`, e.g.
# --port 9877 --compat 4.9.8 --metrics-port 8080 --log-file ~/logs/rocketmqlogs/namesrv.log.
# The reactor is the server's own (twisted_namesrv/reactor.py), as python -m twisted_namesrv runs.
# Exit status: twistd's; 1 when the server cannot start (the reason on the last line of stderr).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$repo/tools/setup-env.sh"
echo "run-server: .venv/bin/twistd --nodaemon --pidfile= --reactor namesrv-epoll namesrv $*" >&2
exec "$repo/.venv/bin/twistd" --nodaemon --pidfile= --reactor namesrv-epoll namesrv "$@"
