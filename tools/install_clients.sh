#!/usr/bin/env bash
# Install the three real RocketMQ clients the interop tests (tests/interop) drive against our
# NameServer:
#
#   DIR/cpp1  PyPI rocketmq==0.4.4             (rocketmq-client-cpp 1.x via ctypes, x86_64 only)
#   DIR/cpp2  PyPI rocketmq-python-cvs==2.1.0.3 (rocketmq-client-cpp 2.1 via ctypes, x86_64 only)
#   DIR/node  npm  ali-ons@3.12.0               (pure JavaScript)
#
# Both PyPI packages install a top-level `rocketmq` package, so each gets its own --target
# directory; the tests run them with PYTHONPATH=DIR/cppN and the repository venv's python.
#
# usage: tools/install_clients.sh [DIR]      (default DIR: <repo>/.clients)
# Idempotent: a client already installed at the right version is left alone.
# Exits non-zero if an install fails.  The tests find DIR through NAMESRV_CLIENTS_DIR
# (default <repo>/.clients).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${1:-$REPO/.clients}"
PIP="$REPO/.venv/bin/pip"
PYTHON="$REPO/.venv/bin/python"

CPP1_PKG=rocketmq CPP1_VERSION=0.4.4
CPP2_PKG=rocketmq-python-cvs CPP2_VERSION=2.1.0.3
ONS_PKG=ali-ons ONS_VERSION=3.12.0

say() { printf 'install_clients: %s\n' "$*"; }
die() { say "ERROR: $*" >&2; exit 1; }

mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
say "clients directory: $DIR"
# keep the installed clients out of git without touching the repository's .gitignore
[ -f "$DIR/.gitignore" ] || printf '# written by tools/install_clients.sh\n*\n' >"$DIR/.gitignore"

# The version pip recorded for a distribution installed with --target DIR, or nothing.
target_version() {  # <dir> <distribution name>
    local info
    for info in "$1/${2//-/_}"-*.dist-info; do
        if [ -f "$info/METADATA" ]; then
            sed -n 's/^Version: //p' "$info/METADATA" | head -1
            return
        fi
    done
}

install_pip_client() {  # <subdir> <package> <version>
    local sub=$1 pkg=$2 version=$3 dest="$DIR/$1" have
    have="$(target_version "$dest" "$pkg")"
    if [ "$have" = "$version" ] && [ -f "$dest/rocketmq/client.py" ] && ls "$dest"/rocketmq/librocketmq.* >/dev/null 2>&1; then
        say "$sub: $pkg==$version already installed in $dest, skipped"
        return
    fi
    [ -x "$PIP" ] || die "$PIP not found: create the repository venv first"
    if [ -n "$have" ]; then
        say "$sub: found $pkg==$have in $dest, replacing it with $version"
    fi
    local staging="$dest.partial"
    rm -rf "$staging"
    say "$sub: pip install --target $dest $pkg==$version"
    if ! "$PIP" install --quiet --disable-pip-version-check --no-compile --target "$staging" "$pkg==$version"; then
        rm -rf "$staging"
        die "$sub: pip install $pkg==$version failed"
    fi
    rm -rf "$dest"
    mv "$staging" "$dest"
    # the package must at least import (it loads its bundled librocketmq.so via ctypes)
    if ! PYTHONPATH="$dest" "$PYTHON" -c 'import rocketmq.client' >/dev/null 2>&1; then
        die "$sub: $pkg==$version installed in $dest but 'import rocketmq.client' fails"
    fi
    say "$sub: installed $pkg==$version in $dest"
}

install_node_client() {
    local dest="$DIR/node" manifest have=""
    manifest="$dest/node_modules/$ONS_PKG/package.json"
    command -v node >/dev/null || die "node not found on PATH (needed for $ONS_PKG)"
    command -v npm >/dev/null || die "npm not found on PATH (needed for $ONS_PKG)"
    if [ -f "$manifest" ]; then
        have="$(node -p 'require(process.argv[1]).version' "$manifest" 2>/dev/null || true)"
    fi
    if [ "$have" = "$ONS_VERSION" ]; then
        say "node: $ONS_PKG@$ONS_VERSION already installed in $dest, skipped"
        return
    fi
    if [ -n "$have" ]; then
        say "node: found $ONS_PKG@$have in $dest, replacing it with $ONS_VERSION"
    fi
    mkdir -p "$dest"
    say "node: npm install --prefix $dest $ONS_PKG@$ONS_VERSION"
    npm install --prefix "$dest" --no-audit --no-fund --loglevel=error --save-exact "$ONS_PKG@$ONS_VERSION" \
        || die "node: npm install $ONS_PKG@$ONS_VERSION failed"
    have="$(node -p 'require(process.argv[1]).version' "$manifest" 2>/dev/null || true)"
    [ "$have" = "$ONS_VERSION" ] || die "node: after npm install, $manifest reports version '${have:-none}'"
    (cd "$dest" && node -e "require('$ONS_PKG')") >/dev/null 2>&1 \
        || die "node: $ONS_PKG@$ONS_VERSION installed in $dest but require('$ONS_PKG') fails"
    say "node: installed $ONS_PKG@$ONS_VERSION in $dest"
}

OS="$(uname -s)" ARCH="$(uname -m)"
if [ "$OS" = Linux ] && [ "$ARCH" = x86_64 ]; then
    install_pip_client cpp1 "$CPP1_PKG" "$CPP1_VERSION"
    install_pip_client cpp2 "$CPP2_PKG" "$CPP2_VERSION"
else
    say "cpp1/cpp2: skipped: $CPP1_PKG and $CPP2_PKG ship only a Linux x86_64 librocketmq.so," \
        "this machine is $OS $ARCH; installing only $ONS_PKG"
fi
install_node_client
say "done"
