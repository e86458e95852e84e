"""tools/setup-env.sh (and so tools/test.sh) waits while another install holds apt's or dpkg's lock
instead of failing with exit 100 (issue 46 item 10): tools/apt.sh's apt_get against an apt-get
stand-in that finds the lock taken twice, then gets it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAND_IN = """#!/bin/sh
# apt-get: the lock is taken for the first {busy} runs (apt's words, exit 100); each run's arguments logged
echo "$*" >> "{log}"
runs=$(wc -l < "{log}")
if [ "$runs" -le {busy} ]; then
  echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)" >&2
  exit 100
fi
[ "{fail}" = yes ] && {{ echo "E: Unable to locate package nothing-such" >&2; exit 100; }}
exit 0
"""


def apt_get(tmp_path: Path, busy: int, fail: bool = False, wait: int = 60) -> tuple[subprocess.CompletedProcess,
                                                                                     list[str]]:
    bin_dir, log = tmp_path / "bin", tmp_path / "runs.log"
    bin_dir.mkdir(exist_ok=True)
    log.write_text("")
    fake = bin_dir / "apt-get"
    fake.write_text(STAND_IN.format(busy=busy, log=log, fail="yes" if fail else "no"))
    fake.chmod(0o755)
    done = subprocess.run(["bash", "-c", f'source "{REPO}/tools/apt.sh"; apt_get install -y -qq chromium'],
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "APT_LOCK_RETRY": "0",
                               "APT_LOCK_WAIT": str(wait)}, capture_output=True, text=True, timeout=60)
    return done, log.read_text().splitlines()


def test_another_install_holding_the_lock_is_waited_for(tmp_path):
    done, runs = apt_get(tmp_path, busy=2)
    assert done.returncode == 0, done.stderr
    assert len(runs) == 3 and all(run == "-o DPkg::Lock::Timeout=60 install -y -qq chromium" for run in runs)
    assert done.stderr.count("another install holds its lock") == 2


def test_other_failures_and_a_lock_held_past_the_wait_still_fail(tmp_path):
    done, runs = apt_get(tmp_path, busy=0, fail=True)
    assert done.returncode == 100 and len(runs) == 1 and "Unable to locate package" in done.stderr
    done, runs = apt_get(tmp_path, busy=99, wait=0)
    assert done.returncode == 100 and len(runs) == 1


def test_every_apt_call_of_the_tools_goes_through_apt_get():
    """No script of tools/ runs apt-get, apt or dpkg but tools/apt.sh (quoted text - messages that
    tell a person what to install - aside)."""
    for script in sorted((REPO / "tools").glob("*.sh")):
        if script.name == "apt.sh":
            continue
        for number, line in enumerate(script.read_text().splitlines(), 1):
            code = re.sub(r'"(?:[^"\\]|\\.)*"|\'[^\']*\'', "", re.sub(r"(^|\s)#.*|command -v \S+", "", line))
            assert not re.search(r"(^|[\s;&|(])(apt-get|apt|dpkg)(\s|$)", code), f"{script.name}:{number}: {line}"
