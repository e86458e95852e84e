# Sourced by tools/container-build.sh and the image's test: which container engine to use, set up.
#
# pick_engine [podman|docker]: sets $engine, podman first, docker when its daemon answers.
# podman gets runc and a containers.conf without default ulimits or pids limit (crun cannot set rlimits
# in some sandboxes), written under the cache dir and exported as CONTAINERS_CONF unless already set.

namesrv_podman_conf() {
  local dir="${XDG_CACHE_HOME:-$HOME/.cache}/twisted-namesrv"
  mkdir -p "$dir"
  cat > "$dir/containers.conf" <<'CONF'
[containers]
default_ulimits = []
pids_limit = 0

[engine]
runtime = "runc"
CONF
  echo "$dir/containers.conf"
}

pick_engine() {
  local wanted=${1:-}
  if [ "$wanted" != docker ] && command -v podman >/dev/null; then
    if [ -z "${CONTAINERS_CONF:-}" ]; then CONTAINERS_CONF=$(namesrv_podman_conf); export CONTAINERS_CONF; fi
    engine=podman; return 0
  fi
  if [ "$wanted" != podman ] && command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    engine=docker; return 0
  fi
  echo "container-build: no ${wanted:-podman or docker} that works here (apt-get install podman runc)" >&2
  return 1
}

image_exists() { "$engine" image inspect "$1" >/dev/null 2>&1; }
