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


def test_the_count_is_taken_before_the_brokers_connections_close(tmp_path: Path, monkeypatch) -> None:
    """A first registration's count is its registration's: taken once every answer is read and
    before the brokers' connections close, so their departures (route events, a line each, their
    topics let go) are not counted as part of it, as they were when valgrind counted to the exit."""
    happened: list[str] = []

    class Connection:
        def setblocking(self, flag: bool) -> None:
            pass

        def close(self) -> None:
            happened.append("closed")

    class Server:
        def __init__(self, command: str, *args: object, **kwargs: object) -> None:
            self.proc = type("Proc", (), {"pid": 4321})()

        def wait_ready(self, timeout: float) -> int:
            return 9876

        def stop(self) -> None:
            happened.append("stopped")

        def discard(self) -> None:
            pass

    monkeypatch.setattr(instructions.curve, "REPO", instructions.curve.REPO)  # (count sets it to the tree)
    monkeypatch.setattr(instructions.curve, "Server", Server)
    monkeypatch.setattr(instructions.socket, "create_connection", lambda address: Connection())
    monkeypatch.setattr(instructions.curve, "send_all", lambda conns, frames, spread: happened.append("sent"))
    monkeypatch.setattr(instructions, "counted_so_far", lambda pid, port, out: happened.append("counted") or 1234)
    step = instructions.curve.step_named("tiny")
    assert instructions.count(tmp_path, step, 2, sys.executable) == 1234
    assert happened == ["sent", "counted", "closed", "closed", "stopped"]


def test_a_dump_is_read_for_its_summary(tmp_path: Path) -> None:
    """callgrind's dump says its count on its ``summary:`` line (no thousands' separators)."""
    text = "version: 1\ncreator: callgrind-3.19.0\ncmd: python\nevents: Ir\nsummary: 1811400911\ntotals: 1811400911\n"
    assert int(instructions.COUNTED.search(text).group(1)) == 1811400911
