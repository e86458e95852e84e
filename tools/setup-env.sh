#!/usr/bin/env bash
# Create or refresh the project's virtualenv (.venv) with the package, its test tools and the
# Spark analysis dependencies (PySpark runs on the machine's Java; openjdk from apt if missing).
# Idempotent: does nothing when setup.cfg/setup.py have not changed since the last run.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/.venv"
python="${PYTHON:-python3}"

need_apt=()
command -v "$python" >/dev/null || need_apt+=(python3)
"$python" -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
command -v java >/dev/null || need_apt+=(default-jre-headless)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "installing ${need_apt[*]} (apt)"
  apt-get update -qq && apt-get install -y -qq "${need_apt[@]}"
fi

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
stamp="$venv/.installed"
want="$(cat "$repo/setup.cfg" "$repo/setup.py" | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  "$venv/bin/pip" install -q --upgrade pip
  # compat mode puts the checkout on sys.path, so twistd finds twisted/plugins/namesrv_plugin.py
  "$venv/bin/pip" install -q -e "$repo[test,spark]" --config-settings editable_mode=compat
  echo "$want" > "$stamp"
fi
