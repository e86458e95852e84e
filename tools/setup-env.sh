#!/usr/bin/env bash
# Create or refresh the project's virtualenv (.venv).
#
#   tools/setup-env.sh           the server only: Twisted and its few dependencies (what run-server.sh needs)
#   tools/setup-env.sh --test    plus the test tools (pytest, hypothesis, ruff, mypy, numpy) and TLS (pyOpenSSL),
#                                and etcd (apt's etcd-server when `etcd` is missing and we are root; otherwise
#                                the controller's high-availability tests skip, saying so)
#   tools/setup-env.sh --spark   plus the Spark analysis stack (pyspark, pyarrow, pandas, plotly) and a Java
#                                runtime for it (apt's default-jre-headless when `java` is missing; needs root),
#                                and the classes Spark's JVM loads recorded in .venv (`python -m spark_analysis
#                                prepare`, ~160 MB, ~30 s once per PySpark and Java): reports start in half the time;
#                                and pyspark.zip's modules compiled for its Python workers (spark_analysis/spark/worker_zip.py)
#   tools/setup-env.sh --tls     plus pyOpenSSL, for tls.server.mode (opt-in: Twisted then loads it in every process)
#   tools/setup-env.sh --browser plus Chromium for the status page's browser test (apt's chromium; needs root)
#   tools/setup-env.sh --container  plus podman, runc and debootstrap, to build and test the container image
#                                (tools/container-build.sh; apt, needs root); where podman's default limits
#                                cannot be set, a containers.conf drop-in so that `podman run` works as printed
#   tools/setup-env.sh --deploy  plus the checks of deploy/: promtool (apt's prometheus) for the alert rules'
#                                unit tests, and kubernetes-validate and checkov for the manifests, in a venv
#                                of their own (.venv-deploy: checkov pins many libraries the test venv also uses)
#
# The package is installed editable (code changes apply without reinstalling) and a .pth file puts the
# checkout on the venv's path, which is how twistd finds twisted/plugins/namesrv_plugin.py (Twisted looks
# for plugins in the twisted/plugins directory of every sys.path entry; a plain `pip install -e .` only
# maps the Python packages). Idempotent: a run asking for nothing the venv lacks does nothing; extras
# installed earlier stay installed.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/.venv"
python="${PYTHON:-python3}"
say() { printf 'setup-env: %s\n' "$*"; }
# shellcheck source=tools/apt.sh
source "$repo/tools/apt.sh"  # apt_get: waits for another install's lock instead of failing

extras=()
browser=0
container=0
deploy=0
for arg in "$@"; do
  case "$arg" in
    --test) extras+=(test) ;;
    --spark) extras+=(spark) ;;
    --tls) extras+=(tls) ;;
    --browser) browser=1 ;;
    --container) container=1 ;;
    --deploy) deploy=1 ;;
    -h|--help) sed -n '2,25p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup-env: unknown option $arg (known: --test, --spark, --tls, --browser, --container, --deploy)" >&2; exit 2 ;;
  esac
done

# apt_install WHY PACKAGE...: install system packages, saying what and why first; only root may.
apt_install() {
  local why=$1; shift
  say "system packages needed: $* ($why)"
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup-env: not root, cannot install $*; run as root, or install them first:" \
         "sudo apt-get install $*" >&2
    exit 1
  fi
  command -v apt-get >/dev/null || { echo "setup-env: no apt-get here; install $* with this system's tools" >&2; exit 1; }
  say "apt-get install $* (as root)"
  apt_get update -qq && apt_get install -y -qq "$@"
}

need=()
command -v "$python" >/dev/null || need+=(python3)
"$python" -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
[ ${#need[@]} -eq 0 ] || apt_install "to create the virtualenv .venv" "${need[@]}"
if [[ " ${extras[*]-} " == *" spark "* ]] && ! command -v java >/dev/null; then
  apt_install "PySpark runs on a Java runtime" default-jre-headless
fi
if [[ " ${extras[*]-} " == *" test "* ]] && ! command -v etcd >/dev/null; then
  if [ "$(id -u)" -eq 0 ]; then
    apt_install "the controller's high-availability tests run a real etcd" etcd-server
  else
    say "etcd is missing and only root may install it (sudo apt-get install etcd-server):" \
        "the controller's high-availability tests will skip (fail with CI=true)"
  fi
fi
if [ "$browser" -eq 1 ] && ! command -v chromium >/dev/null; then
  apt_install "the status page's test drives headless Chromium" chromium
fi
if [ "$container" -eq 1 ] && ! { command -v podman && command -v runc && command -v debootstrap; } >/dev/null; then
  apt_install "the container image is built and run with podman (runc), its base made with debootstrap" \
    podman runc debootstrap
fi
if [ "$container" -eq 1 ] && [ "$(id -u)" -eq 0 ]; then
  # podman's defaults raise the open-file limit (and use crun): where a sandbox forbids that, `podman run`
  # fails as docs/deploy.md prints it. Then podman gets, machine-wide, what tools/container-build.sh uses.
  dropin=/etc/containers/containers.conf.d/50-twisted-namesrv.conf
  if [ ! -f "$dropin" ] && ! "$python" -c 'import resource
resource.setrlimit(resource.RLIMIT_NOFILE, (1048576, 1048576))' 2>/dev/null; then
    say "this machine may not raise the open-file limit that podman sets by default: writing $dropin" \
        "(runc, no default ulimits, no pids limit) so that podman run works as the docs print it"
    # shellcheck source=tools/container-engine.sh
    source "$repo/tools/container-engine.sh"
    mkdir -p "$(dirname "$dropin")" && cp "$(namesrv_podman_conf)" "$dropin"
  fi
fi
if [ "$deploy" -eq 1 ] && ! command -v promtool >/dev/null; then
  apt_install "the alert rules' unit tests run promtool, which Debian ships in prometheus" prometheus
fi
if [ "$deploy" -eq 1 ]; then
  tools_venv="$repo/.venv-deploy"
  [ -x "$tools_venv/bin/python" ] || "$python" -m venv "$tools_venv"
  if ! "$tools_venv/bin/python" -m pip show -q kubernetes-validate checkov >/dev/null 2>&1; then
    say "installing kubernetes-validate and checkov into $tools_venv (the manifests' schema and policy checks)"
    "$tools_venv/bin/pip" install --disable-pip-version-check -q kubernetes-validate==1.37.0 checkov==3.3.30
  fi
fi

if [ ! -x "$venv/bin/python" ]; then
  say "creating $venv"
  "$python" -m venv "$venv"
fi
stamp="$venv/.installed"  # first line: hash of setup.cfg/setup.py; then one installed extra per line
want="$(cat "$repo/setup.cfg" "$repo/setup.py" | sha256sum | cut -d' ' -f1)"
have=()
[ -f "$stamp" ] && mapfile -t have < <(tail -n +2 "$stamp")
missing=0
if [ ! -f "$stamp" ] || [ "$(head -1 "$stamp")" != "$want" ]; then
  missing=1
else
  for extra in "${extras[@]}"; do
    [[ " ${have[*]-} " == *" $extra "* ]] || missing=1
  done
fi
if [ "$missing" -eq 1 ]; then
  all=$(printf '%s\n' "${have[@]}" "${extras[@]}" | sed '/^$/d' | sort -u | paste -sd, -)
  say "installing twisted-namesrv${all:+[$all]} into $venv (pip; the first run downloads packages)"
  "$venv/bin/pip" install --disable-pip-version-check --progress-bar on -e "$repo${all:+[$all]}"
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "$repo" > "$site/twisted_namesrv_checkout.pth"  # twistd's plugin lookup sees twisted/plugins here
  { echo "$want"; printf '%s\n' "${all//,/$'\n'}" | sed '/^$/d'; } > "$stamp"
  say "done: $venv/bin holds twistd, twisted-namesrv and namesrv-admin (or: source .venv/bin/activate)"
fi
if [[ " ${extras[*]-} " == *" spark "* ]]; then
  archive="$("$venv/bin/python" -c 'from spark_analysis.spark.session import class_archive, whole
archive = class_archive()
print(archive if archive and not whole(archive) else "")')"  # to record: none there, or not whole
  if [ -n "$archive" ]; then
    say "recording the classes Spark's JVM loads, into $archive (~160 MB, once for this PySpark and Java):" \
        "a capture report then starts in about half the time"
    capture="$(mktemp --suffix=.pcap)"
    trap 'rm -f "$capture" "${capture%.pcap}.truth.json"' EXIT  # synth_pcap writes its truth beside
    "$venv/bin/python" "$repo/tools/synth_pcap.py" "$capture" --brokers 4 --clients 4 --topics 20 --hours 0.2 --seed 1 >/dev/null
    "$venv/bin/python" -m spark_analysis prepare "$capture"
  fi
  "$venv/bin/python" -m spark_analysis.spark.worker_zip  # once: Spark's Python workers import compiled modules
fi
