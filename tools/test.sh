#!/usr/bin/env bash
# Set up everything the tests need and run every test and the linter. Extra arguments go to pytest.
#   .venv with the test tools and the Spark stack   (tools/setup-env.sh --test --spark --browser --container --deploy
#   --deploy; Java, Chromium, podman and promtool from apt if missing: needs root, says what it installs first;
#   the manifests' validator and policy scanner in .venv-deploy)
#   the real RocketMQ clients under .clients        (tools/install_clients.sh)
# The replay and Spark tests read the recorded captures in tests/data/golden (see docs/startup.md).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
tools/setup-env.sh --test --spark --browser --container --deploy
if [ -x tools/install_clients.sh ]; then
  tools/install_clients.sh
  export NAMESRV_REQUIRE_CLIENTS=1  # the real clients are installed: their tests must run
fi
.venv/bin/ruff check .
.venv/bin/python -m pytest "$@"
