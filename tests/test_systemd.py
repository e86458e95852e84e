"""systemd runs the NameServer as a native service: deploy/systemd/namesrv.service is a Type=notify
unit of an installed wheel, with a user systemd makes and a sandbox, and the server tells systemd
READY=1 (sdnotify.py, the NOTIFY_SOCKET protocol) once every port is bound -- received here on a
socket the test binds, from the unit's own ExecStart run out of a venv holding only the wheel."""

from __future__ import annotations

import configparser
import shlex
import shutil
import socket
import subprocess
import sys
import sysconfig
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO, clean_env
from tests.support import free_port
from twisted_namesrv import sdnotify, tap

UNIT = REPO / "deploy" / "systemd" / "namesrv.service"
PREFIX = "/opt/twisted-namesrv"  # where the unit expects the venv the wheel is installed in
READY_WITHIN = 30
HARDENING = {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
             "PrivateDevices": "yes", "StateDirectory": "namesrv", "CapabilityBoundingSet": "",
             "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX", "SystemCallArchitectures": "native"}


def unit() -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # systemd's keys are case-sensitive
    parser.read_string(UNIT.read_text(encoding="utf-8").replace("\\\n", " "))
    return parser


def exec_start(prefix: str = PREFIX) -> list[str]:
    return shlex.split(unit()["Service"]["ExecStart"].replace(PREFIX, prefix))


def test_the_unit_is_a_notify_service_of_an_installed_wheel_as_its_own_user():
    service = unit()["Service"]
    assert service["Type"] == "notify"
    assert service["DynamicUser"] == "yes" and "User" not in service  # systemd makes the user
    assert {key: service.get(key) for key in HARDENING} == HARDENING
    argv = exec_start()
    assert argv[0] == f"{PREFIX}/bin/twisted-namesrv" and ".venv" not in argv[0]  # not a checkout's venv
    options = tap.Options()
    options.parseOptions(argv[1:])
    state = f"/var/lib/{service['StateDirectory']}"
    assert options.config["kvConfigPath"].startswith(state + "/")  # writes only where ProtectSystem allows
    assert options.config["routeSnapshotPath"].startswith(state + "/")


#: what a start that cannot serve takes at most before it exits 1 (a read-only data dir, a port another
#: program holds, a config error: 1.1-1.3 s of wall time on this two-core machine under load)
FAILED_START_AT_MOST = 10


def test_a_start_that_keeps_failing_stops_the_restart_loop_whatever_the_machines_speed():
    """A read-only data dir exits 1 at every start: Restart=on-failure started it again 2 s later,
    and systemd's default start limit (5 starts in 10 s) was reached only by a start under 0.5 s.
    Here one takes 1.1-1.3 s: a start every 3.2 s, forever (1,100 an hour, two journal lines each,
    half a second of CPU each); a faster machine gave up after 10 s. Now the limit is the unit's: its
    burst of failed starts fits in its interval even at FAILED_START_AT_MOST each, so the loop ends
    ("start-limit-hit") after StartLimitBurst tries, on any machine."""
    units, service = unit()["Unit"], unit()["Service"]
    burst, interval = int(units["StartLimitBurst"]), int(units["StartLimitIntervalSec"])
    pause = int(service["RestartSec"])
    assert (burst - 1) * (pause + FAILED_START_AT_MOST) < interval
    assert burst >= 3 and pause >= 5  # a port still held for a few seconds, a crash: still tried again


@pytest.mark.parametrize("abstract", [True, False])
def test_ready_is_one_datagram_to_the_notify_socket(tmp_path, abstract):
    name = f"@namesrv-test-{uuid.uuid4().hex}" if abstract else str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind(sdnotify.socket_address(name))
        receiver.settimeout(5)
        assert sdnotify.ready("serving on  127.0.0.1:9876\n", {"NOTIFY_SOCKET": name})
        assert receiver.recv(4096) == b"READY=1\nSTATUS=serving on 127.0.0.1:9876\n"


def test_ready_waits_for_the_reactor_to_run(tmp_path):
    """Sent before reactor.run() installs the SIGTERM handler, a stop right after READY would kill
    the server (exit -15, no clean stop): READY goes once the reactor runs."""
    from twisted.internet.base import ReactorBase

    class NotRunning:
        running = False
        triggers: list = []

        def callWhenRunning(self, *call):  # noqa: N802 (Twisted's name)
            return ReactorBase.callWhenRunning(self, *call)

        def addSystemEventTrigger(self, phase, event, *call):  # noqa: N802
            self.triggers.append((phase, event, call))

    name = str(tmp_path / "notify")
    reactor = NotRunning()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind(name)
        receiver.setblocking(False)
        sdnotify.ready_when_running(reactor, "serving", {"NOTIFY_SOCKET": name})
        with pytest.raises(BlockingIOError):
            receiver.recv(4096)  # not yet
        ((phase, event, (function, *args)),) = reactor.triggers
        assert (phase, event) == ("after", "startup")  # after the signal handlers, installed during startup
        function(*args)
        assert receiver.recv(4096) == b"READY=1\nSTATUS=serving\n"


def test_without_systemd_or_with_a_dead_socket_nothing_fails(tmp_path):
    assert not sdnotify.ready("x", {})
    assert not sdnotify.ready("x", {"NOTIFY_SOCKET": str(tmp_path / "nobody")})
    assert not sdnotify.ready("x", {"NOTIFY_SOCKET": "vsock:2:1234"})


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A venv holding only the wheel, as the unit's install steps make it; the dependencies come
    from this interpreter's site-packages through a .pth line (no network, no checkout on the path)."""
    venv = tmp_path_factory.mktemp("opt") / "twisted-namesrv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run([str(venv / "bin/pip"), "install", "--quiet", "--no-deps", "--no-index",
                    "--disable-pip-version-check", str(wheel)], check=True, timeout=120, env=clean_env(venv))
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(subprocess.run([str(venv / "bin/python"), "-c", where], capture_output=True, text=True,
                               check=True).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_analyze_verifies_the_unit(installed, tmp_path):
    """Unknown keys are only warnings to systemd (exit 0): any output fails the test too."""
    copy = tmp_path / UNIT.name
    copy.write_text(UNIT.read_text(encoding="utf-8").replace(PREFIX, str(installed)))
    verified = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True, text=True, timeout=60)
    assert (verified.returncode, verified.stdout + verified.stderr) == (0, "")


def run_exec_start(installed: Path, tmp_path: Path, port: int, notify: str, **environ: str) -> subprocess.Popen:
    """The unit's ExecStart from the installed wheel, on this test's ports and directory."""
    swap = {"9876": str(port), "9877": str(free_port()), "0.0.0.0": "127.0.0.1"}
    argv = [swap.get(a, a.replace("/var/lib/namesrv", str(tmp_path))) for a in exec_start(str(installed))]
    env = dict(clean_env(tmp_path), NOTIFY_SOCKET=notify, **environ)
    return subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_the_installed_service_sends_ready_once_serving(installed, tmp_path):
    name, port = f"@namesrv-test-{uuid.uuid4().hex}", free_port()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind(sdnotify.socket_address(name))
        receiver.settimeout(READY_WITHIN)
        server = run_exec_start(installed, tmp_path, port, name)
        try:
            try:
                message = receiver.recv(4096).decode()
            except TimeoutError:
                server.terminate()
                pytest.fail(f"no READY=1 within {READY_WITHIN} s:\n{server.communicate(timeout=30)[0]}")
            assert message == f"READY=1\nSTATUS=serving on 127.0.0.1:{port}\n"
            socket.create_connection(("127.0.0.1", port), timeout=5).close()  # serving when it said so
        finally:
            server.terminate()
            output = server.communicate(timeout=30)[0]
        assert server.returncode == 0, output


def test_a_server_that_cannot_bind_never_says_ready(installed, tmp_path, taken_port):
    name = f"@namesrv-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind(sdnotify.socket_address(name))
        receiver.setblocking(False)
        server = run_exec_start(installed, tmp_path, taken_port, name)
        output = server.communicate(timeout=60)[0]
        assert server.returncode == 1, output
        with pytest.raises(BlockingIOError):
            receiver.recv(4096)


def test_the_unit_restarts_a_server_that_hangs():
    """A SIGSTOPped server kept its port and its unit 'active (running)' for as long as it was stopped:
    the unit had no watchdog. Now systemd kills it 30 s after its last WATCHDOG=1 (printing where each
    thread was) and Restart=on-failure starts it again."""
    service = unit()["Service"]
    assert service["WatchdogSec"] == "30" and service["Restart"] == "on-failure"
    assert "PYTHONFAULTHANDLER=1" in service["Environment"].split()
    assert int(service["TimeoutAbortSec"]) <= int(service["TimeoutStopSec"])


def test_the_watchdog_is_fed_every_half_period_from_the_reactor(tmp_path):
    from twisted.internet import task

    name, clock = str(tmp_path / "notify"), task.Clock()
    environ = {"NOTIFY_SOCKET": name, "WATCHDOG_USEC": "30000000"}
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind(name)
        receiver.setblocking(False)
        timer = sdnotify.watchdog_service(clock, environ)
        timer.startService()
        assert receiver.recv(4096) == b"WATCHDOG=1\n"  # at once
        clock.advance(14.9)
        with pytest.raises(BlockingIOError):
            receiver.recv(4096)
        clock.advance(0.1)
        assert receiver.recv(4096) == b"WATCHDOG=1\n"
        timer.stopService()
    assert sdnotify.watchdog_service(clock, {"NOTIFY_SOCKET": name}) is None  # no WatchdogSec
    assert sdnotify.watchdog_period({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}, pid=2) is None  # not ours
    assert sdnotify.watchdog_period({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "2"}, pid=2) == 30
    assert sdnotify.watchdog_period({"WATCHDOG_USEC": "0"}) is None


def test_a_watchdog_that_cannot_be_told_warns_once_and_when_it_is_told_again(tmp_path, monkeypatch):
    """A WATCHDOG=1 that could not be sent was a warning line every 15 s for as long as it failed: now
    the first failure of a run warns, the first send after it says so, and each failure is counted
    (namesrv_systemd_watchdog_failures_total)."""
    from twisted.internet import task
    from twisted.logger import Logger

    from twisted_namesrv.metrics import Metrics

    events: list[dict] = []
    monkeypatch.setattr(sdnotify, "log", Logger(observer=events.append))
    name, clock, metrics = str(tmp_path / "notify"), task.Clock(), Metrics()
    timer = sdnotify.watchdog_service(clock, {"NOTIFY_SOCKET": name, "WATCHDOG_USEC": "30000000"},
                                      failed=metrics.watchdog_failed)
    timer.startService()
    clock.pump([15] * 4)  # nobody at the socket: five tries
    assert metrics.watchdog_failures == 5
    assert [e["log_format"] for e in events if "systemd" in e["log_format"]].count(
        "could not tell systemd {what} (NOTIFY_SOCKET={value!r}): {error}") == 1
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind(name)
        del events[:]
        clock.advance(15)
        assert receiver.recv(4096) == b"WATCHDOG=1\n"
        assert [(e["log_format"], e["count"]) for e in events] == [
            ("systemd's watchdog is told again (NOTIFY_SOCKET={value}) after {count} failed tries", 5)]
        clock.advance(15)
        assert receiver.recv(4096) == b"WATCHDOG=1\n"
    Path(name).unlink()
    del events[:]
    clock.pump([15] * 3)  # failing again: one more warning
    timer.stopService()
    assert metrics.watchdog_failures == 8
    assert len(events) == 1 and events[0]["log_level"].name == "warn"


def test_the_installed_service_feeds_the_watchdog(installed, tmp_path):
    """The unit's ExecStart, with the variables systemd sets for WatchdogSec=2: READY, then WATCHDOG=1
    again and again while it serves."""
    name, port = f"@namesrv-test-{uuid.uuid4().hex}", free_port()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind(sdnotify.socket_address(name))
        receiver.settimeout(READY_WITHIN)
        server = run_exec_start(installed, tmp_path, port, name, WATCHDOG_USEC="2000000")
        try:
            messages = [receiver.recv(4096).decode() for _ in range(4)]
        finally:
            server.terminate()
            output = server.communicate(timeout=30)[0]
        assert server.returncode == 0, output
    assert f"READY=1\nSTATUS=serving on 127.0.0.1:{port}\n" in messages, messages
    assert messages.count("WATCHDOG=1\n") == 3, messages


def test_the_unit_limits_memory_with_room_for_the_budget(monkeypatch):
    """The unit had no MemoryMax: a server growing without bound took the host's memory, and the
    budget (receiveMemoryBudget: a quarter of the limit) is sized by it. Its limit is the Kubernetes
    manifest's, and what the server holds at rest (56 MiB with the metrics port, measured) plus twice
    the default budget (peers' frames' buffers) fits in it: no warning at the start."""
    from twisted_namesrv import budget

    limit = int(unit()["Service"]["MemoryMax"].removesuffix("M")) * 1024 * 1024
    manifest = (REPO / "deploy" / "kubernetes" / "namesrv.yaml").read_text(encoding="utf-8")
    assert f"memory: {limit // (1024 * 1024)}Mi}}" in manifest  # the pod's limits.memory
    monkeypatch.setattr(budget, "machine_limit", lambda: limit)
    held = budget.default_budget(16 * 1024 * 1024)
    assert held == 128 * 1024 * 1024
    assert budget.memory_limit_warning(held, 56 * 1024 * 1024, limit) is None
