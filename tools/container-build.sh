#!/usr/bin/env bash
# Build the NameServer's container image, localhost/twisted-namesrv:VERSION, with podman or docker (whichever
# works here, podman first), and print the image's name on the last line of stdout.
#
#   tools/container-build.sh [--engine podman|docker] [--base IMAGE] [--tag NAME]
#
# The wheels of the package and its dependencies are built on the host (in a temporary build context), so
# the image build needs no network. The base is --base, else $NAMESRV_BASE_IMAGE, else
# python:3.11-slim-bookworm if it is present or can be pulled; when it cannot (no registry reachable),
# a Debian base is built once with debootstrap from the apt source this machine already uses
# (/etc/apt), imported as twisted-namesrv-base:SUITE and reused by later builds.
# podman runs with runc and a containers.conf without default ulimits or a pids limit (crun cannot set
# rlimits in some sandboxes): the script writes one and points CONTAINERS_CONF at it, unless set.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
say() { printf 'container-build: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

engine="" base="${NAMESRV_BASE_IMAGE:-}" tag=""
while [ $# -gt 0 ]; do
  case "$1" in
    --engine) engine=${2:?--engine needs podman or docker}; shift 2 ;;
    --base) base=${2:?--base needs an image}; shift 2 ;;
    --tag) tag=${2:?--tag needs a name}; shift 2 ;;
    -h|--help) sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) say "unknown option $1 (try --help)"; exit 2 ;;
  esac
done

# shellcheck source=tools/container-engine.sh
source "$repo/tools/container-engine.sh"
pick_engine "$engine" || exit 1
version=$(sed -n 's/^__version__ = "\(.*\)".*/\1/p' "$repo/twisted_namesrv/__init__.py")
tag=${tag:-localhost/twisted-namesrv:$version}  # fully qualified: what podman calls it, and the manifest
say "engine: $engine; image: $tag"

# 1. the wheels, built with the project's venv (its Python must match the base's: both Debian 12's 3.11)
# from a copy of the sources, into a build context of their own (nothing is written in the checkout)
"$repo/tools/setup-env.sh" >&2
context=$(mktemp -d "${TMPDIR:-/tmp}/namesrv-image.XXXXXX")
cleanup() { rm -rf "$context"; }
trap cleanup EXIT
mkdir "$context/src"
tar -C "$repo" --exclude=__pycache__ -c setup.py setup.cfg pyproject.toml README.md twisted_namesrv spark_analysis \
    twisted/plugins/namesrv_plugin.py | tar -C "$context/src" -x
"$repo/.venv/bin/python" -m pip wheel --quiet --wheel-dir "$context/wheels" "$context/src" >&2
say "wheels: $(ls "$context/wheels" | wc -l) (the package and its dependencies)"

# 2. the base: given, present, pulled, or built from Debian packages
debian_source() {  # "URI SUITE" of the first Debian source this machine's apt uses
  python3 - <<'PY'
import glob
import re

def deb822(path):
    for stanza in re.split(r"\n\s*\n", open(path, encoding="utf-8").read()):
        fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
        if "deb" in fields.get("Types", "").split() and fields.get("URIs") and fields.get("Suites"):
            yield fields["URIs"].split()[0], fields["Suites"].split()[0]

def one_line(path):
    for line in open(path, encoding="utf-8"):
        words = re.sub(r"\[[^]]*\]", "", line).split()
        if len(words) >= 3 and words[0] == "deb":
            yield words[1], words[2]

found = [s for p in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")) for s in deb822(p)]
found += [s for p in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]
          for s in (one_line(p) if glob.os.path.exists(p) else ())]
debian = [s for s in found if "debian" in s[0] and "security" not in s[0]] or found
if debian:
    print(*debian[0])
PY
}

build_debian_base() {  # NAME: debootstrap a minimal Debian with python3 and import it
  local name=$1 uri suite root
  read -r uri suite < <(debian_source) || true
  [ -n "${uri:-}" ] || die "no Debian apt source in /etc/apt to build a base from"
  command -v debootstrap >/dev/null || die "no base image and no debootstrap to build one: apt-get install debootstrap (or pass --base IMAGE)"
  [ "$(id -u)" = 0 ] || die "building a Debian base needs root (debootstrap); or pass --base IMAGE"
  root="$context/rootfs"
  say "building a Debian $suite base from $uri (debootstrap, once; about a minute)"
  debootstrap --variant=minbase --include=python3,python3-venv --components=main "$suite" "$root" "$uri" \
    > "$context/debootstrap.log" 2>&1 || { tail -20 "$context/debootstrap.log" >&2; die "debootstrap failed"; }
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* \
         "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/*
  tar -C "$root" -c . | "$engine" import --change 'CMD ["/bin/bash"]' - "$name" >/dev/null
  rm -rf "$root"
}

if [ -z "$base" ]; then
  upstream=docker.io/library/python:3.11-slim-bookworm
  suite=$(debian_source | awk '{print $2}')
  own=localhost/twisted-namesrv-base:${suite:-bookworm}
  [ "$engine" = docker ] && own=twisted-namesrv-base:${suite:-bookworm}
  if image_exists "$upstream"; then base=$upstream
  elif image_exists "$own"; then base=$own
  elif timeout 30 "$engine" pull -q "$upstream" >/dev/null 2>&1; then base=$upstream
  else say "cannot pull $upstream"; build_debian_base "$own"; base=$own
  fi
fi
say "base: $base"

# 3. the image
format=()
[ "$engine" = podman ] && format=(--format docker)  # keeps HEALTHCHECK (OCI images have none)
previous=$("$engine" image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
cp "$repo/Containerfile" "$context/Containerfile"
rm -rf "$context/src"
"$engine" build "${format[@]}" --build-arg "BASE=$base" -t "$tag" -f "$context/Containerfile" "$context" >&2
"$engine" image prune -f --filter label=org.twisted-namesrv.stage=build >/dev/null 2>&1 || true  # the wheels' stage
if [ -n "$previous" ] && [ "$previous" != "$("$engine" image inspect --format '{{.Id}}' "$tag")" ]; then
  "$engine" rmi "$previous" >/dev/null 2>&1 || true  # the image this tag named before, unless a container uses it
fi
say "built $tag ($("$engine" image inspect --format '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}'))"
echo "$tag"
