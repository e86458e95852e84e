"""instructions.py counts the real server with its timers held off: their work comes per second,
not per registration, and under valgrind a registration takes some fifty times as long."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools" / "bench"))
import instructions  # noqa: E402  (tools/bench)

BUILT = """
from twisted.internet import task
from twisted_namesrv.schema import SERVER_SCHEMA
from twisted_namesrv.service import NamesrvService
from twisted_namesrv.state.config import NamesrvConfig
config = NamesrvConfig({"listenPort": 0, "kvConfigPath": "%(data)s/kvConfig.json",
                        "configStorePath": "%(data)s/namesrv.properties"}, schema=SERVER_SCHEMA)
service = NamesrvService.from_config(config, reactor=task.Clock())
print(service.housekeeping.interval, service.events.interval, service.topology.interval)
"""


def test_every_timer_of_the_server_waits_the_held_seconds(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", instructions.HOLD_TIMERS + "\n" + BUILT % {"data": tmp_path}],
                         capture_output=True, text=True, check=True, cwd=REPO, timeout=120).stdout
    assert out.split() == [str(instructions.HELD_SECONDS)] * 3


def test_the_counted_command_starts_the_server_as_python_m_does() -> None:
    """UNTIMED is ``python -m twisted_namesrv`` with the timers held: its options and exit status."""
    done = subprocess.run([sys.executable, "-c", instructions.UNTIMED, "--no-such-option"], capture_output=True,
                          text=True, cwd=REPO, timeout=120)
    assert done.returncode == 2 and "no-such-option" in done.stderr
