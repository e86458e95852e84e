#!/usr/bin/env bash
# Set up (first time) and run the NameServer in the foreground on 127.0.0.1:9876.
# State (kvConfig.json, namesrv.properties) lives in ./data unless --data-dir says otherwise.
# Extra arguments go to `twistd namesrv`, e.g. --port 9877 --compat 4.9.8.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$repo/tools/setup-env.sh"
args=("$@")
case " $* " in *" --data-dir"*|*" --kv-config-path"*|*" -c "*|*" --configFile"*) ;; *) args=(--data-dir "$repo/data" "${args[@]}") ;; esac
exec "$repo/.venv/bin/twistd" --nodaemon --pidfile= namesrv "${args[@]}"
