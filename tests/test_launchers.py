"""Every way of starting the server fails fast, in one line and with a non-zero status, when it
cannot serve: a port already taken, a data dir that is a file.  And --version everywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from twisted_namesrv import __version__, port_holders
from twisted_namesrv.service import BOOT_MESSAGE

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 30
IN_REPO_VENV = BIN == REPO / ".venv" / "bin"


def launcher(name: str, tmp_path: Path) -> list[str]:
    return {
        "python -m": [sys.executable, "-m", "twisted_namesrv"],
        "twisted-namesrv": [str(BIN / "twisted-namesrv")],
        "twistd -n": [str(BIN / "twistd"), "-n", "--pidfile=", "namesrv"],
        "twistd (daemon)": [str(BIN / "twistd"), "--pidfile", str(tmp_path / "twistd.pid"), "--logfile",
                            str(tmp_path / "twistd.log"), "namesrv"],
        "run-server.sh": [str(REPO / "tools" / "run-server.sh")],
    }[name]


LAUNCHERS = ["python -m", "twisted-namesrv", "twistd -n", "twistd (daemon)",
             pytest.param("run-server.sh", marks=pytest.mark.skipif(
                 not IN_REPO_VENV, reason="run-server.sh runs the checkout's .venv, and these tests another python"))]


def run(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, HOME=str(tmp_path), PYTHONUNBUFFERED="1")
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT)


@pytest.mark.parametrize("name", LAUNCHERS)
def test_a_taken_port_exits_1_naming_it(tmp_path, taken_port, name):
    result = run(launcher(name, tmp_path) + ["--port", str(taken_port), "--data-dir", str(tmp_path / "data")],
                 tmp_path)
    held = f"; held by pid {os.getpid()} ({port_holders.command_of(Path('/proc', str(os.getpid())))})"
    reason = f"cannot listen on 127.0.0.1:{taken_port} (listenPort): Address already in use{held}"
    assert result.returncode == 1, result
    if name == "twistd (daemon)":  # the parent reports what the daemon wrote on its status pipe
        # (twistd reads the daemon's first 100 bytes: who holds the port is in the log)
        assert "An error has occurred: b'twisted_namesrv.CannotStart: " + reason.partition(";")[0] in result.stderr
        assert f"cannot start: {reason}" in (tmp_path / "twistd.log").read_text()
    else:
        assert result.stderr.splitlines()[-1] == f"namesrv: cannot start: {reason}", result.stderr
        assert "Traceback" not in result.stderr + result.stdout
        assert f"cannot start: {reason}" in result.stdout  # the log


@pytest.mark.parametrize("name", LAUNCHERS)
def test_a_data_dir_that_is_a_file_exits_1_before_listening(tmp_path, taken_port, name):
    data = tmp_path / "data"
    data.write_text("not a directory\n")
    result = run(launcher(name, tmp_path) + ["--port", str(taken_port), "--data-dir", str(data)], tmp_path)
    assert result.returncode == 1, result
    assert result.stderr.splitlines()[-1] == (f"namesrv: cannot start: kvConfigPath={data}/kvConfig.json: "
                                              f"{data} is not a directory"), result.stderr
    assert "cannot listen" not in result.stderr  # checked before the (taken) port


@pytest.mark.parametrize("name", ["python -m", "twisted-namesrv", "twistd -n"])
def test_version(tmp_path, name):
    argv = launcher(name, tmp_path)
    result = run(argv[:-1] + ["namesrv", "--version"] if name.startswith("twistd") else argv + ["--version"], tmp_path)
    assert result.returncode == 0, result
    assert result.stdout.startswith(f"twisted-namesrv {__version__} (Twisted ")


def test_json_mode_writes_only_json_lines_and_one_boot_line(tmp_path):
    """A config warning, the boot line and shutdown: every stdout line is one JSON object."""
    (tmp_path / "namesrv.properties").write_text("bogusKey=1\n")
    proc = subprocess.Popen([sys.executable, "-m", "twisted_namesrv", "--log-format", "json", "--port", "0",
                             "-c", str(tmp_path / "namesrv.properties"), "--data-dir", str(tmp_path)],
                            cwd=tmp_path, env=dict(os.environ, HOME=str(tmp_path)), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if BOOT_MESSAGE in line:
                break
        proc.terminate()
        rest, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    records = [json.loads(text) for text in ("".join(seen) + rest).splitlines()]
    boots = [r for r in records if BOOT_MESSAGE in r["message"]]
    assert [r["message"] for r in boots] == [
        f"{BOOT_MESSAGE}, address 127.0.0.1:{boots[0]['port']}, compat 5.3.3, twisted-namesrv {__version__}"]
    assert any("unknown key bogusKey" in r["message"] and r["level"] == "warn" for r in records)
    assert "unknown key bogusKey" in err
