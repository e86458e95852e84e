# shellcheck shell=bash
# apt_get ARGS...: apt-get that waits while another install runs, instead of failing with exit 100
# ("Could not get lock /var/lib/dpkg/lock-frontend"). Sourced by tools/setup-env.sh (and so by
# tools/test.sh), the project's only apt calls.
#
# DPkg::Lock::Timeout makes apt wait for dpkg's lock; apt 2.6 does not wait for its own locks with it
# (the package lists' of `apt-get update`, the archives'), so a run that still could not get a lock is
# tried again every APT_LOCK_RETRY seconds (5) until APT_LOCK_WAIT seconds (600) have passed. Any other
# failure is returned at once.
apt_get() {
  local wait="${APT_LOCK_WAIT:-600}" retry="${APT_LOCK_RETRY:-5}" errors rc
  local deadline=$((SECONDS + wait))
  errors="$(mktemp)"
  while true; do
    rc=0
    apt-get -o "DPkg::Lock::Timeout=$wait" "$@" 2>"$errors" || rc=$?
    cat "$errors" >&2
    if [ "$rc" -ne 0 ] && grep -q "Could not get lock" "$errors" && [ "$SECONDS" -lt "$deadline" ]; then
      printf 'apt: another install holds its lock; trying again in %s s (until %s s have passed)\n' \
        "$retry" "$wait" >&2
      sleep "$retry"
      continue
    fi
    rm -f "$errors"
    return "$rc"
  done
}
