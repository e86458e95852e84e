#!/usr/bin/env bash
# Set up (venv, the real RocketMQ clients) and run every test and the linter.
# Extra arguments go to pytest.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
tools/setup-env.sh
if ! command -v chromium >/dev/null; then  # the status page's browser test (Debian's package)
  echo "installing chromium (apt)"
  apt-get update -qq && apt-get install -y -qq chromium
fi
if [ -x tools/install_clients.sh ]; then
  tools/install_clients.sh
  export NAMESRV_REQUIRE_CLIENTS=1  # the real clients are installed: their tests must run
fi
.venv/bin/ruff check .
.venv/bin/python -m pytest "$@"
