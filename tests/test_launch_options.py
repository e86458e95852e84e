"""What an operator meets at the command line: usage errors in one line, range errors naming their
file, a failed start that leaves nothing behind, log files that rotate and filter by level under
every launcher, no pid file in the foreground, and runtime config changes that survive a restart."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import pytest_twisted
from twisted.logger import Logger, LogLevel

from tests.support import answer_to, connect
from tests.test_launchers import BIN, IN_REPO_VENV, REPO, TIMEOUT, run
from twisted_namesrv import logs, tap
from twisted_namesrv.remoting import RemotingCommand, RequestCode, ResponseCode
from twisted_namesrv.remoting.codes import V5_3_3
from twisted_namesrv.state.config import ConfigError, NamesrvConfig

FOREGROUND = {
    "python -m": [sys.executable, "-m", "twisted_namesrv"],
    "twistd -n": [str(BIN / "twistd"), "-n", "namesrv"],
}


@pytest.mark.parametrize("name", list(FOREGROUND))
@pytest.mark.parametrize("args, message", [
    (["--port", "abc"], "--port: not a number: abc"),
    (["--log-rotate", "often"], "--log-rotate: 'often' is neither 'daily' nor a size such as 128MB"),
    (["--log-level", "loud"], "--log-level: loud is not one of debug, info, warn, error, critical"),
    (["--log-keep", "\u00b2"], "--log-keep: not a number: \u00b2"),  # a traceback, exit 1, before
])
def test_a_usage_error_is_one_line_and_try_help(tmp_path, name, args, message):
    result = run(FOREGROUND[name] + args, tmp_path)
    assert result.returncode == 2, result
    (line,) = result.stderr.splitlines()
    assert message in line and line.endswith("--help)"), line
    assert result.stdout == ""


@pytest.mark.parametrize("name, program", [("python -m", "python -m twisted_namesrv"),
                                           ("twistd -n", "twistd [options] namesrv")])
def test_help_begins_with_the_usage_line_under_every_launcher(tmp_path, name, program):
    """``python -m twisted_namesrv --help`` began "[-c FILE] [-n NAMESRV_LIST] ...", the synopsis
    without the command it belongs to; twistd's said "Usage: twistd [options] namesrv ..."."""
    result = run(FOREGROUND[name] + ["--help"], tmp_path)
    assert result.returncode == 0, result
    assert result.stdout.splitlines()[0].startswith(f"Usage: {program} [-c FILE] "), result.stdout[:200]


def test_a_value_out_of_range_names_the_file_it_came_from(tmp_path):
    config = tmp_path / "namesrv.properties"
    config.write_text("listenPort=70000\n")
    with pytest.raises(ConfigError, match=rf"^{config}: listenPort: 70000 is out of range"):
        NamesrvConfig.from_file(str(config))
    with pytest.raises(ConfigError, match=r"^listenPort: 70000 is out of range"):  # the command line's own
        NamesrvConfig.from_file(None, {"listenPort": 70000, "configStorePath": str(tmp_path / "none")})


def test_a_file_saved_with_a_byte_order_mark_and_crlf_sets_its_first_key(tmp_path):
    """Notepad's UTF-8 writes a BOM and CRLF line ends; the first key was 'unknown key \\ufefflistenPort'
    and the server listened on 9876."""
    config = tmp_path / "namesrv.properties"
    config.write_bytes(b"\xef\xbb\xbflistenPort=29876\r\nenableTopicList=false\r\n")
    loaded = NamesrvConfig.from_file(str(config))
    assert (loaded["listenPort"], loaded["enableTopicList"]) == (29876, False)
    assert loaded.warnings == [f"{config}: starts with a byte-order mark (a Windows editor's): read past here, while "
                               "Java's mqnamesrv reads it as part of the first key and so ignores listenPort=29876"]


@pytest.mark.parametrize("name", [*FOREGROUND, pytest.param("run-server.sh", marks=pytest.mark.skipif(
    not IN_REPO_VENV, reason="run-server.sh runs the checkout's .venv"))])
def test_a_failed_start_leaves_no_data_dir_and_its_reason_in_the_log_file(tmp_path, taken_port, name):
    argv = [str(REPO / "tools" / "run-server.sh")] if name == "run-server.sh" else FOREGROUND[name]
    data, log_file = tmp_path / "state" / "data", tmp_path / "logs" / "namesrv.log"
    result = run(argv + ["--port", str(taken_port), "--data-dir", str(data), "--log-file", str(log_file)],
                 tmp_path)
    assert result.returncode == 1, result
    assert not (tmp_path / "state").exists() and not (tmp_path / "namesrv").exists()
    assert f"cannot listen on 127.0.0.1:{taken_port}" in log_file.read_text()
    assert "cannot listen" not in result.stdout  # the log went to the file
    assert not (tmp_path / "twistd.pid").exists()


def test_twistd_in_the_foreground_writes_no_pid_file_so_a_second_server_starts_beside_it(tmp_path):
    servers = []
    try:
        for name in ("a", "b"):
            server = subprocess.Popen(FOREGROUND["twistd -n"] + ["--port", "0", "--data-dir", str(tmp_path / name)],
                                      cwd=tmp_path, env=dict(os.environ, HOME=str(tmp_path)),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            servers.append(server)
            seen = []
            for line in server.stdout:
                seen.append(line)
                if "boot success" in line:
                    break
            assert "boot success" in seen[-1], "".join(seen)
            assert not (tmp_path / "twistd.pid").exists()
    finally:
        for server in servers:
            server.terminate()
            server.communicate(timeout=TIMEOUT)


def test_a_log_file_rotates_at_its_size_keeps_the_newest_and_filters_by_level(tmp_path):
    path = tmp_path / "logs" / "namesrv.log"
    observer = logs.configured_observer("text", str(path), rotate="1K", keep=2, level="warn")
    log = Logger(observer=observer)
    for i in range(60):
        log.info("quiet {i}", i=i)
        log.warn("loud {i} {pad}", i=i, pad="x" * 40)
    names = sorted(p.name for p in path.parent.iterdir())
    assert names == ["namesrv.log", "namesrv.log.1", "namesrv.log.2"]
    text = "".join(p.read_text() for p in path.parent.iterdir())
    assert "loud 59" in path.read_text() and "quiet" not in text and "loud 0 " not in text
    assert all(p.stat().st_size <= 1024 + 200 for p in path.parent.iterdir())


def test_daily_rotation_keeps_the_newest_files(tmp_path):
    daily = logs.open_log_file(str(tmp_path / "namesrv.log"), "daily", keep=2)
    for day in (1, 2, 3, 4):
        daily.write(f"day {day}\n")
        daily.lastDate = (2026, 11, day)  # as if the day changed: the next write rotates
        daily.rotate()
    daily.close()
    assert len(list(tmp_path.glob("namesrv.log.*"))) == 2


def test_a_log_file_that_cannot_be_written_stops_the_start_naming_it(tmp_path):
    (tmp_path / "file").write_text("")
    result = run(FOREGROUND["python -m"] + ["--port", "0", "--log-file", str(tmp_path / "file" / "x.log")], tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].startswith(f"namesrv: cannot start: --log-file: cannot write {tmp_path}")


def test_twistd_writes_json_lines_to_its_log_file(tmp_path, taken_port):
    log_file = tmp_path / "ns.log"
    result = run(FOREGROUND["twistd -n"] + ["--port", str(taken_port), "--data-dir", str(tmp_path / "d"),
                                            "--log-file", str(log_file), "--log-format", "json",
                                            "--log-level", "info"], tmp_path)
    assert result.returncode == 1
    lines = log_file.read_text().splitlines()
    assert lines and all(line.startswith("{") for line in lines)
    assert any('"level": "critical"' in line and "cannot listen" in line for line in lines)


def test_level_names_are_twisted_levels():
    assert [LogLevel.levelWithName(name) for name in logs.LEVELS]


@pytest_twisted.inlineCallbacks
def test_a_runtime_config_change_survives_a_restart_with_the_same_data_dir(tmp_path):
    data = tmp_path / "data"
    argv = ["--port", "0", "--data-dir", str(data)]
    options = tap.Options()
    options.parseOptions(argv)
    service = tap.makeService(options)
    service.startService()
    port = yield service.port_ready
    try:
        client = yield connect(port.getHost().port)
        update = RemotingCommand.request(RequestCode.UPDATE_NAMESRV_CONFIG, {},
                                         b"orderMessageEnable=true\n", opaque=1, version=V5_3_3)
        answer = yield client.call(update)
        assert answer.code == ResponseCode.SUCCESS
        client.transport.loseConnection()
    finally:
        yield service.stopService()

    again = tap.Options()
    again.parseOptions(argv)
    store = str(data / "namesrv.properties")
    assert again.config["orderMessageEnable"] is True
    assert again.config.sources["orderMessageEnable"] == store
    assert again.config["listenPort"] == 0  # the saved listenPort=0 is not read back: the command line's
    printed = again.config.all_keys_text()
    assert f"# orderMessageEnable from {store}\norderMessageEnable=true\n" in printed
    assert "# listenPort from command line\nlistenPort=0\n" in printed


def test_the_saved_file_gives_back_only_keys_a_runtime_update_may_change(tmp_path):
    store = tmp_path / "namesrv.properties"
    store.write_text("orderMessageEnable=true\nlistenPort=1234\nkvConfigPath=/elsewhere\nproductEnvName=x\n")
    config = NamesrvConfig.from_file(None, {"configStorePath": str(store)})
    assert (config["orderMessageEnable"], config["productEnvName"]) == (True, "x")
    assert config["listenPort"] == 9876 and config["kvConfigPath"] != "/elsewhere"


def _started(argv: list[str], tmp_path, ready: str, log: Path | None = None) -> subprocess.Popen:
    """A server (or controller) started in the foreground, once ``ready`` is in its output (or in
    ``log``); a server once it answered a request too: its reactor runs (the boot line comes before)."""
    process = subprocess.Popen(argv, cwd=tmp_path, env=dict(os.environ, HOME=str(tmp_path)),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if log is None:
        seen: list[str] = []
        for line in process.stdout:
            seen.append(line)
            if ready in line:
                port = int(re.search(r"address 127\.0\.0\.1:(\d+)", line).group(1))
                asked = RemotingCommand.request(RequestCode.GET_KV_CONFIG, {"namespace": "NS", "key": "k"}, opaque=1)
                assert answer_to(port, asked.encode(), timeout=TIMEOUT).code == ResponseCode.QUERY_NOT_FOUND
                return process
        process.kill()
        raise AssertionError("".join(seen))
    deadline = time.monotonic() + TIMEOUT
    while not (log.exists() and ready in log.read_text()):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(process.communicate()[0] + (log.read_text() if log.exists() else ""))
        time.sleep(0.1)
    return process


def _usr1_then_stop(process: subprocess.Popen) -> tuple[int | None, str]:
    """SIGUSR1 (logrotate's postrotate), then whether it is still running, then a clean stop."""
    process.send_signal(signal.SIGUSR1)
    for _ in range(100):
        if process.poll() is not None:
            break
        time.sleep(0.05)
    running = process.poll()
    process.terminate()
    out, _ = process.communicate(timeout=TIMEOUT)
    return running, out


def test_sigusr1_under_the_operators_own_twistd_logger_is_a_line_not_the_end_of_the_server(tmp_path):
    """twistd installs its rotation on SIGUSR1 only for its own observer: with the operator's
    ``--logger`` (or ``--syslog``) nothing handled it and Python's default action ended the server
    at once, no clean stop, no line; the server writes no file to reopen then, and says so."""
    argv = [str(BIN / "twistd"), "-n", "--logger", "twisted_namesrv.logs.json_lines", "namesrv", "--port", "0",
            "--data-dir", str(tmp_path / "d")]
    server = _started(argv, tmp_path, "boot success")
    running, out = _usr1_then_stop(server)
    assert running is None, out
    assert "Received SIGUSR1: the log is written by twistd's --logger twisted_namesrv.logs.json_lines" in out, out
    assert "Main loop terminated" in out, out  # stopped by the SIGTERM after it, cleanly


def test_sigusr1_reopens_the_standalone_controllers_log_file(tmp_path):
    """``twistd namesrv-controller --logfile``: our observer replaced twistd's (which rotated on
    SIGUSR1) without a handler of its own, so logrotate's postrotate ended the controller."""
    log = tmp_path / "controller.log"
    argv = [str(BIN / "twistd"), "-n", "--logfile", str(log), "namesrv-controller", "--port", "0"]
    controller = _started(argv, tmp_path, "controller listening on", log)
    os.rename(log, tmp_path / "controller.log.1")  # logrotate's create
    log.touch()
    running, out = _usr1_then_stop(controller)
    assert running is None, out
    assert f"Received SIGUSR1, log file reopened: {log}" in log.read_text(), out


#: a start that gets SIGUSR1 while it reads its stores (logrotate's postrotate in the seconds before
#: the reactor runs): the service's construction sends it to its own process first
def _held_acted_on(process: subprocess.Popen, log: Path | None = None) -> str:
    """What the server wrote (on its output, or nothing when it writes ``log``) until the SIGUSR1
    held in its start was acted on, its first "Received SIGUSR1" line: its own handler is in from
    then on.  The ready line can come before that (the handler goes in once the reactor's startup
    triggers have run, while requests are already answered), and a second SIGUSR1 sent meanwhile
    met the hold too and was acted on with the first: one line for two (CI under load)."""
    if log is not None:
        deadline = time.monotonic() + TIMEOUT
        while "Received SIGUSR1" not in (log.read_text() if log.exists() else ""):
            assert process.poll() is None and time.monotonic() < deadline, log.read_text() if log.exists() else ""
            time.sleep(0.05)
        return ""
    watchdog = threading.Timer(TIMEOUT, process.kill)  # a line that never comes ends the read (EOF)
    watchdog.start()
    seen: list[str] = []
    try:
        for line in process.stdout:
            seen.append(line)
            if "Received SIGUSR1" in line:
                break
    finally:
        watchdog.cancel()
    return "".join(seen)


_USR1_DURING_START = """
import os, signal, sys
from twisted_namesrv.service import NamesrvService
made = NamesrvService.from_config.__func__
def from_config(cls, *args, **kwargs):
    os.kill(os.getpid(), signal.SIGUSR1)
    return made(cls, *args, **kwargs)
NamesrvService.from_config = classmethod(from_config)
sys.argv = [sys.argv[0]] + sys.argv[1:]
if sys.argv[1] == "twistd":
    from twisted.scripts.twistd import run
    sys.argv = sys.argv[1:]
    run()
else:
    from twisted_namesrv.__main__ import main
    main(sys.argv[2:])
"""


@pytest.mark.parametrize("launcher", ["python -m", "twistd"])
def test_sigusr1_before_the_reactor_runs_is_held_not_the_end_of_the_start(tmp_path, launcher):
    """The handler that reopens the log was installed once the reactor ran: a SIGUSR1 in the start
    (the config and the stores read, the ports bound; seconds for big stores) met Python's default
    action and the server died at once, no line, exit -10 (a supervisor's restart its only trace).
    It is held from the launcher's first call into ours and acted on once the handler is in."""
    args = ["twistd", "-n", "namesrv"] if launcher == "twistd" else ["main"]
    server = _started([sys.executable, "-c", _USR1_DURING_START, *args, "--port", "0", "--data-dir",
                       str(tmp_path / "d")], tmp_path, "boot success")
    held = _held_acted_on(server)
    running, out = _usr1_then_stop(server)
    out = held + out
    assert running is None, out
    assert out.count("Received SIGUSR1: the log goes to standard output, no file to reopen") == 2, out


def test_sigusr1_in_the_standalone_controllers_start_is_held_too(tmp_path):
    """``twistd namesrv-controller``: its handler came with its observer, after makeService; a
    SIGUSR1 while its service was made ended it the same way."""
    script = """
import os, signal, sys
from twisted_namesrv.controller import service
made = service.ControllerService.__init__
def init(self, *args, **kwargs):
    os.kill(os.getpid(), signal.SIGUSR1)
    made(self, *args, **kwargs)
service.ControllerService.__init__ = init
from twisted.scripts.twistd import run
sys.argv = sys.argv[1:]
run()
"""
    log = tmp_path / "controller.log"
    controller = _started([sys.executable, "-c", script, "twistd", "-n", "--logfile", str(log), "namesrv-controller",
                           "--port", "0"], tmp_path, "controller listening on", log)
    _held_acted_on(controller, log)
    running, out = _usr1_then_stop(controller)
    assert running is None, out
    assert log.read_text().count(f"Received SIGUSR1, log file reopened: {log}") == 2, log.read_text()
