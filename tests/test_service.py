"""NamesrvService on the real reactor (127.0.0.1, ephemeral ports), and the command lines."""

from __future__ import annotations

import gc
import json
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor, task
from twisted.logger import capturedLogs

from tests.support import answer_to, connect, free_port, server_config, start_server
from twisted_namesrv import CannotStart, port_holders, tap
from twisted_namesrv.remoting import RemotingCommand, RequestCode, ResponseCode
from twisted_namesrv.remoting.codes import V5_3_3
from twisted_namesrv.schema import SERVER_SCHEMA
from twisted_namesrv.service import BOOT_MESSAGE, GC_THRESHOLDS, NamesrvService
from twisted_namesrv.state import store
from twisted_namesrv.state.config import NamesrvConfig

BIN = Path(sys.executable).parent
SUBPROCESS_TIMEOUT = 15


def route_request(topic: str, opaque: int) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, opaque=opaque,
                                   version=V5_3_3)


@pytest_twisted.inlineCallbacks
def test_service_answers_an_unknown_topic(tmp_path):
    service, port = yield start_server(server_config(tmp_path))
    client = None
    try:
        client = yield connect(port)
        answer = yield client.call(route_request("NoSuchTopic", 5))
        assert answer.code == ResponseCode.TOPIC_NOT_EXIST and answer.opaque == 5
        assert answer.remark.startswith("No topic route info in name server for the topic: NoSuchTopic")
    finally:
        if client is not None:
            client.transport.loseConnection()
            yield client.closed
        yield service.stopService()


@pytest_twisted.inlineCallbacks
def test_start_tunes_the_collector_for_long_lived_tables(tmp_path):
    threshold = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    service, _ = yield start_server(server_config(tmp_path))
    try:
        assert gc.get_threshold() == GC_THRESHOLDS
        assert gc.get_freeze_count() > 0
    finally:
        yield service.stopService()
        gc.unfreeze()
        gc.set_threshold(*threshold)


@pytest_twisted.inlineCallbacks
def test_kv_survives_a_restart(tmp_path):
    config = server_config(tmp_path)
    service, port = yield start_server(config)
    try:
        client = yield connect(port)
        put = RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "k", "value": "v1"},
                                      opaque=1)
        assert (yield client.call(put)).code == ResponseCode.SUCCESS
        client.transport.loseConnection()
        yield client.closed
    finally:
        yield service.stopService()
    assert (tmp_path / "kvConfig.json").exists()
    restarted, port = yield start_server(server_config(tmp_path))
    try:
        client = yield connect(port)
        get = RemotingCommand.request(RequestCode.GET_KV_CONFIG, {"namespace": "NS", "key": "k"}, opaque=2)
        answer = yield client.call(get)
        assert (answer.code, answer.ext.get("value")) == (ResponseCode.SUCCESS, "v1")
        client.transport.loseConnection()
        yield client.closed
    finally:
        yield restarted.stopService()


@pytest_twisted.inlineCallbacks
def test_stop_closes_client_connections(tmp_path):
    service, port = yield start_server(server_config(tmp_path))
    client = yield connect(port)
    yield client.call(route_request("x", 1))
    yield service.stopService()
    yield client.closed  # the server closed it
    assert service.factory.connections == {}


@pytest_twisted.inlineCallbacks
def test_a_stop_logs_the_brokers_it_drops_as_the_server_stopping(tmp_path):
    from tests.test_housekeeping import register_request
    service, port = yield start_server(server_config(tmp_path))
    client = yield connect(port)
    answer = yield client.call(register_request())
    assert answer.code == ResponseCode.SUCCESS
    with capturedLogs() as events:
        yield service.stopService()
        yield client.closed
    closed = [e for e in events if e.get("route_event") == "closed"]
    assert [e["route_info"]["reason"] for e in closed] == ["server stopping"]  # not "connection closed"


def test_corrupt_kv_file_refuses_to_construct(tmp_path):
    kv_path = tmp_path / "kvConfig.json"
    kv_path.write_text('{"configTable": {"NS": ')
    with pytest.raises(CannotStart) as info:
        NamesrvService.from_config(server_config(tmp_path))
    assert str(info.value).startswith("kvConfigPath: ") and str(kv_path) in str(info.value)
    options = tap.Options()
    options.parseOptions(["--data-dir", str(tmp_path), "--port", "0", "--bind", "127.0.0.1"])
    with pytest.raises(SystemExit) as exit_info:
        tap.makeService(options)
    assert str(kv_path) in str(exit_info.value.code)
    assert kv_path.read_text() == '{"configTable": {"NS": '  # left as it was


def test_tap_options_build_the_config(tmp_path):
    options = tap.Options()
    options.parseOptions(["--data-dir", str(tmp_path), "--port", "0", "--bind", "127.0.0.1", "--compat", "4.9.8"])
    config: NamesrvConfig = options.config
    assert config["kvConfigPath"] == str(tmp_path / "kvConfig.json")
    assert config["configStorePath"] == str(tmp_path / "namesrv.properties")
    assert (config["listenPort"], config["bindAddress"], config.profile.name) == (0, "127.0.0.1", "4.9.8")
    service = tap.makeService(options)
    assert isinstance(service, NamesrvService)


def test_a_non_numeric_port_option_is_a_usage_error(tmp_path):
    from twisted.python import usage

    with pytest.raises(usage.UsageError, match="^--port: not a number: abc"):
        tap.Options().parseOptions(["--data-dir", str(tmp_path), "--port", "abc"])


@pytest.mark.parametrize(("argv", "key"), [
    (["--port", "70000"], "listenPort"), (["--compat", "6.0.0"], "compatVersion"),
    (["--metrics-port", "-1"], "metricsPort"), (["--port", "9876", "--metrics-port", "9876"], "metricsPort"),
    (["--bind", " "], "bindAddress"),
])
def test_tap_refuses_bad_options_naming_the_key(tmp_path, argv, key):
    with pytest.raises(SystemExit, match=f"^namesrv: cannot start: {key}"):
        tap.Options().parseOptions(["--data-dir", str(tmp_path), *argv])


@pytest.mark.parametrize(("line", "key"), [
    ("frameMaxLength=100", "frameMaxLength"), ("headerMaxLength=10", "headerMaxLength"),
    ("headerMaxLength=99999999", "headerMaxLength"), ("maxConnections=-1", "maxConnections"),
    ("serverChannelMaxIdleTimeSeconds=-5", "serverChannelMaxIdleTimeSeconds"),
    ("scanNotActiveBrokerInterval=0", "scanNotActiveBrokerInterval"),
    ("waitSecondsForService=-1", "waitSecondsForService"),
    ("routeSnapshotInterval=5", "routeSnapshotInterval"),
])
def test_a_bad_properties_file_is_refused_naming_the_key(tmp_path, line, key):
    (tmp_path / "namesrv.properties").write_text(line + "\n")
    path = re.escape(str(tmp_path / "namesrv.properties"))
    with pytest.raises(SystemExit, match=f"^namesrv: cannot start: {path}: {key}"):  # names the file too
        tap.Options().parseOptions(["-c", str(tmp_path / "namesrv.properties")])


@pytest.mark.parametrize("line", ["listenPort=nine", "orderMessageEnable=maybe", "clusterTest=1",
                                  "serverSocketBacklog=1_000"])
def test_a_value_that_does_not_parse_is_refused_naming_key_value_and_file(tmp_path, line):
    path = tmp_path / "namesrv.properties"
    path.write_text(f"# comment\n {line} \n")
    with pytest.raises(SystemExit) as info:
        tap.Options().parseOptions(["-c", str(path)])
    assert str(info.value.code).startswith(f"namesrv: cannot start: {path}: {line}: not a ")


def test_an_unknown_key_warns_naming_it_and_the_file_or_is_refused_when_strict(tmp_path, capsys):
    path = tmp_path / "namesrv.properties"
    path.write_text("orderMessageEnable=TRUE\nbogusKey=1\n")
    options = tap.Options()
    options.parseOptions(["-c", str(path)])
    assert options.config["orderMessageEnable"] is True
    assert capsys.readouterr().err == (f"namesrv: warning: {path}: unknown key bogusKey, ignored (a typo? "
                                       "--strict-config refuses unknown keys)\n")
    with pytest.raises(SystemExit, match=f"^namesrv: cannot start: {path}: unknown key bogusKey"):
        tap.Options().parseOptions(["-c", str(path), "--strict-config"])


def test_an_unreadable_config_file_is_refused_naming_it(tmp_path):
    with pytest.raises(SystemExit, match=f"^namesrv: cannot start: cannot read config file {tmp_path}: a directory, "
                       "not a regular file"):
        tap.Options().parseOptions(["-c", str(tmp_path)])


@pytest.mark.parametrize(("make", "cause"), [
    (lambda d: d.write_text("x"), "{d} is not a directory"),
    (lambda d: (d / "kvConfig.json").mkdir(parents=True), "{d}/kvConfig.json is a directory"),
])
def test_an_unusable_data_dir_is_refused_before_listening(tmp_path, make, cause):
    data = tmp_path / "data"
    make(data)
    options = tap.Options()
    options.parseOptions(["--data-dir", str(data), "--port", "0"])
    with pytest.raises(SystemExit) as info:
        tap.makeService(options)
    assert info.value.code == f"namesrv: cannot start: kvConfigPath={data}/kvConfig.json: {cause.format(d=data)}"


def test_an_unusable_path_set_by_the_config_file_names_the_file(tmp_path):
    """kvConfigPath from the operator's -c file (their old Java server's directory): the reason names
    the file that set it, as a value out of range does; before, only the path, which the operator then
    looked for on the command line."""
    (tmp_path / "old").write_text("a file where the directory was")
    path = tmp_path / "namesrv.properties"
    path.write_text(f"kvConfigPath={tmp_path}/old/kvConfig.json\n")
    options = tap.Options()
    options.parseOptions(["-c", str(path), "--port", "0"])
    with pytest.raises(SystemExit) as info:
        tap.makeService(options)
    assert info.value.code == (f"namesrv: cannot start: {path}: kvConfigPath={tmp_path}/old/kvConfig.json: "
                               f"{tmp_path}/old is not a directory")


def read_only_dir(tmp_path):
    """A directory this process cannot write in: a chmod 500 one, or for root (which writes there
    anyway) Linux's sysfs."""
    if os.geteuid() != 0:
        data = tmp_path / "data"
        data.mkdir(mode=0o500)
        return data
    if not Path("/sys/kernel").is_dir():
        pytest.skip("root writes in any directory, and there is no sysfs")
    return Path("/sys")


def test_a_read_only_data_dir_is_refused_naming_its_owner_and_ours(tmp_path):
    data = read_only_dir(tmp_path)
    seen = data.stat()
    try:
        refused = f"^kvConfigPath={data}/kvConfig.json: cannot write in {data}: Perm"
        with pytest.raises(CannotStart, match=refused) as info:
            NamesrvService.from_config(server_config(data))
        assert str(info.value).endswith(
            f"(owned by uid {seen.st_uid} gid {seen.st_gid}, mode {seen.st_mode & 0o7777:04o}; "
            f"running as uid {os.getuid()} gid {os.getgid()})")
    finally:
        if data.is_relative_to(tmp_path):
            data.chmod(0o700)


def test_a_crash_s_leftover_temp_file_of_another_uid_does_not_stop_the_server():
    """The image under an arbitrary uid of group 0 (OpenShift): a crash left kvConfig.json.tmp, 0644,
    of the uid that ran before; the next uid of group 0 writes the directory (10001:0, 0770), and the
    save unlinks the leftover first. The start-up check asked whether the leftover was writable and
    refused ("... is read-only"); now it asks what the save does, and the save goes through. As root
    the check runs in a child under that uid (root may write any file)."""
    with tempfile.TemporaryDirectory() as base:
        data = Path(base) / "namesrv"
        data.mkdir()
        data.chmod(0o770)  # as the image's (mkdir's mode is cut by the umask)
        (data / "kvConfig.json.tmp").write_text('{"half')
        (data / "kvConfig.json.tmp").chmod(0o444 if os.geteuid() else 0o644)
        if os.geteuid() == 0:
            os.chmod(base, 0o755)
            os.chown(data, 10001, 0)
            os.chown(data / "kvConfig.json.tmp", 10001, 10001)
        said = as_another_uid(lambda: (store.unwritable(data / "kvConfig.json"),
                                       store.write_atomically(data / "kvConfig.json", b"{}")))
        assert said == (None, None)
        assert (data / "kvConfig.json").read_bytes() == b"{}" and not (data / "kvConfig.json.tmp").exists()
        (data / "kvConfig.json.tmp").write_text("")  # another leftover, in a directory it cannot write in:
        data.chmod(0o500 if os.geteuid() else 0o550)  # still refused
        [why] = as_another_uid(lambda: (store.unwritable(data / "kvConfig.json"),))
        assert why is not None and why.startswith(f"cannot write in {data}: cannot remove {data}/kvConfig.json.tmp")
        os.chmod(data, 0o700)


def test_a_data_dir_another_user_keeps_closed_is_refused_in_one_line():
    """A data dir of another user, mode 0700 (the unit's StateDirectory, then a start by hand under
    another account; a chown -R gone wrong): looking for the saved configStorePath in it (and, with
    -c, the data dir's check) raised PermissionError, a traceback and no line saying what and where."""
    with tempfile.TemporaryDirectory() as base:
        data = Path(base) / "namesrv"
        data.mkdir()
        data.chmod(0o700 if os.geteuid() == 0 else 0o000)  # root's: closed to the child's uid
        os.chmod(base, 0o755)
        seen = data.stat()

        def start() -> tuple[str]:
            try:
                tap.Options().parseOptions(["--data-dir", str(data), "--port", "0"])
            except SystemExit as exc:
                return (str(exc.code),)
            return ("started",)

        try:
            [said] = as_another_uid(start)
            [why] = as_another_uid(lambda: (store.unwritable(data / "deeper" / "kvConfig.json"),))  # -c's check
        finally:
            data.chmod(0o700)
        closed = (f"cannot look in {data}: Permission denied (owned by uid {seen.st_uid} gid {seen.st_gid}, mode "
                  f"{seen.st_mode & 0o7777:04o}; running as uid {os.getuid() or 1000680000} gid {os.getgid()})")
        assert said == f"namesrv: cannot start: configStorePath={data}/namesrv.properties: {closed}"
        assert why == closed


def as_another_uid(work):
    """``work()`` as this process (not root), or for root in a child as uid 1000680000 of group 0."""
    if os.geteuid():
        return work()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        try:
            os.setgroups([])
            os.setgid(0)
            os.setuid(1000680000)
            told = json.dumps(work())
        except BaseException as exc:  # told to the parent, which fails with it
            told = json.dumps({"raised": repr(exc)})
        finally:
            os.write(write, told.encode())
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as said:
        told = json.loads(said.read())
    os.waitpid(child, 0)
    assert not isinstance(told, dict), told
    return tuple(told)


def subprocess_env(tmp_path) -> dict[str, str]:
    env = dict(os.environ, HOME=str(tmp_path), PYTHONUNBUFFERED="1")
    env.pop("ROCKETMQ_HOME", None)
    return env


def test_the_direct_runner_refuses_a_bad_key_naming_it(tmp_path):
    result = subprocess.run([sys.executable, "-m", "twisted_namesrv", "--port", "70000"], cwd=tmp_path,
                            env=subprocess_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "listenPort: 70000 is out of range (0 to 65535)" in result.stderr


@pytest.mark.parametrize("compat", ["5.3.3", "4.9.8"])
def test_print_config_items(tmp_path, compat):
    result = subprocess.run([sys.executable, "-m", "twisted_namesrv", "--compat", compat, "-p"], cwd=tmp_path,
                            env=subprocess_env(tmp_path), capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT)
    assert result.returncode == 0, result.stderr
    printed = dict(line.split("=", 1) for line in result.stdout.splitlines() if not line.startswith("#"))
    assert "# compatVersion from command line\n" in result.stdout  # where a value not at its default came from
    assert list(printed) == [k.name for k in SERVER_SCHEMA.keys]  # every key the docs list (test_docs)
    assert printed["compatVersion"] == compat and printed["listenPort"] == "9876" and printed["rocketmqHome"] == ""
    assert not list(tmp_path.glob("*.pid")) and not (tmp_path / "namesrv").exists()  # nothing written


def read_until(proc: subprocess.Popen, needle: str, deadline: float) -> str:
    seen = ""
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while needle not in seen:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not selector.select(remaining):
                break
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            seen += chunk.decode("utf-8", "replace")
    return seen


def ask(port: int, request: RemotingCommand) -> RemotingCommand:
    return answer_to(port, request.encode(), timeout=5)


@pytest.fixture(scope="module")
def twistd_run(tmp_path_factory):
    """One `twistd -n namesrv` process: its output until the boot message, an answer it gave,
    then SIGTERM; its exit status and the rest of its output."""
    tmp_path = tmp_path_factory.mktemp("twistd")
    data_dir = tmp_path / "data"
    answers = []

    def ask_it(boot: str) -> None:
        match = re.search(r"address 127\.0\.0\.1:(\d+)", boot)
        answers.append(ask(int(match.group(1)), route_request("NoSuchTopic", 3)) if match else None)

    returncode, boot, rest = stopped_by_signal([str(BIN / "twistd"), "-n", "--pidfile=", "namesrv", "--port", "0",
                                                "--bind", "127.0.0.1", "--data-dir", str(data_dir)], BOOT_MESSAGE,
                                               tmp_path, signal.SIGTERM, before=ask_it)
    return {"boot": boot, "answer": answers[0] if answers else None, "rest": rest, "returncode": returncode,
            "data_dir": data_dir}


def test_twistd_boots_answers_and_stops_on_sigterm(twistd_run):
    assert BOOT_MESSAGE in twistd_run["boot"], twistd_run["boot"]
    assert twistd_run["answer"] is not None and twistd_run["answer"].code == ResponseCode.TOPIC_NOT_EXIST
    assert "Server Shut Down" in twistd_run["rest"]
    # after a clean shutdown twistd re-raises the signal, so it ends by SIGTERM (status 143) as the
    # Java NameServer's JVM does, which is what service managers expect of a SIGTERM stop
    assert twistd_run["returncode"] == -signal.SIGTERM
    assert "Traceback" not in twistd_run["boot"] + twistd_run["rest"]


def _hangup_as_a_shell_leaves_it() -> None:
    """SIGHUP at its default action in the server started, whatever the tests were started with: a
    server started under ``nohup`` keeps SIGHUP ignored, as the JVM does (hangup.py), so the SIGHUP
    tests run by a CI under ``nohup`` waited for a stop that was never coming."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def stopped_by_signal(argv: list[str], ready: str, cwd: Path, sig: int,
                      before: Callable[[str], None] | None = None) -> tuple[int, str, str]:
    """Start ``argv``, wait for ``ready`` in its output, call ``before`` with that output, send ``sig``:
    its exit status, its output until ready and the rest of it."""
    proc = subprocess.Popen(argv, cwd=cwd, env=subprocess_env(cwd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=_hangup_as_a_shell_leaves_it)
    boot = ""
    try:
        boot = read_until(proc, ready, time.monotonic() + SUBPROCESS_TIMEOUT)
        if before is not None:
            before(boot)
        proc.send_signal(sig)
        rest, _ = proc.communicate(timeout=SUBPROCESS_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, boot, rest.decode("utf-8", "replace")


def stopped_by_sighup(argv: list[str], ready: str, cwd: Path) -> tuple[int, str]:
    """stopped_by_signal with SIGHUP, once the handler is set (the reactor runs, right after the ready line)."""

    def settled(boot: str) -> None:
        assert ready in boot, boot
        time.sleep(0.5)

    returncode, boot, rest = stopped_by_signal(argv, ready, cwd, signal.SIGHUP, before=settled)
    return returncode, boot + rest


def test_twistd_stops_cleanly_on_sighup_as_java_does(tmp_path):
    """Java's JVM runs its shutdown hook on SIGHUP and exits 129; Python's default action killed the
    server without a line (a terminal or ssh session closing, a logrotate script's kill -HUP)."""
    status, text = stopped_by_sighup([str(BIN / "twistd"), "-n", "--pidfile=", "namesrv", "--port", "0", "--bind",
                                      "127.0.0.1", "--data-dir", str(tmp_path / "data")], BOOT_MESSAGE, tmp_path)
    assert "Received SIGHUP, shutting down." in text and "Server Shut Down" in text, text
    assert status == -signal.SIGHUP  # twistd re-raises it after the clean stop: 129, as the JVM
    assert "Traceback" not in text


def test_the_standalone_controller_under_twistd_stops_cleanly_on_sighup(tmp_path):
    """``twistd namesrv-controller`` (as mqcontroller): its service's parent is twistd's Application,
    so a check for no parent took it for the NameServer's embedded controller and left SIGHUP to
    Python's default action: killed without a line, the store not closed."""
    config = tmp_path / "controller.properties"
    config.write_text(f"controllerDLegerGroup=G1\ncontrollerDLegerPeers=n0-127.0.0.1:{free_port()}\n"
                      f"controllerDLegerSelfId=n0\ncontrollerStorePath={tmp_path / 'store'}\n")
    status, text = stopped_by_sighup([str(BIN / "twistd"), "-n", "--pidfile=", "namesrv-controller", "-c",
                                      str(config)], "controller listening on", tmp_path)
    assert "Received SIGHUP, shutting down." in text and "Server Shut Down" in text, text
    assert status == -signal.SIGHUP
    assert "Traceback" not in text


def test_python_m_stops_cleanly_on_sighup_with_status_129_and_on_sigterm_with_0(tmp_path):
    """docs/startup.md's table: python -m ends 129 after a clean stop by SIGHUP, as the JVM does, so
    that systemd's Restart=on-failure starts again a NameServer a logrotate-style SIGHUP stopped (with
    0 it stayed down); 0 after SIGTERM, systemctl stop's."""
    argv = [sys.executable, "-m", "twisted_namesrv", "--port", "0", "--data-dir", str(tmp_path)]
    status, text = stopped_by_sighup(argv, BOOT_MESSAGE, tmp_path)
    assert "Received SIGHUP, shutting down." in text and status == 128 + signal.SIGHUP, (status, text)
    assert "Traceback" not in text
    status, boot, rest = stopped_by_signal(argv, BOOT_MESSAGE, tmp_path, signal.SIGTERM,
                                           before=lambda boot: time.sleep(0.5))  # the reactor's handler set
    assert status == 0 and "Traceback" not in boot + rest, (status, boot, rest)


def test_a_sighup_ignored_at_start_stays_ignored(tmp_path):
    """``nohup`` (how mqnamesrv is run) ignores SIGHUP: the server keeps serving through one."""
    proc = subprocess.Popen([sys.executable, "-m", "twisted_namesrv", "--port", "0", "--data-dir", str(tmp_path)],
                            cwd=tmp_path, env=subprocess_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    try:
        boot = read_until(proc, BOOT_MESSAGE, time.monotonic() + SUBPROCESS_TIMEOUT)
        port = int(re.search(r"address 127\.0\.0\.1:(\d+)", boot).group(1))
        time.sleep(0.5)
        proc.send_signal(signal.SIGHUP)
        answer = ask(port, route_request("NoSuchTopic", 3))
        assert proc.poll() is None and answer.code == ResponseCode.TOPIC_NOT_EXIST
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=SUBPROCESS_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert "SIGHUP" not in rest.decode("utf-8", "replace")


def test_a_busy_metrics_port_stops_the_server_naming_it(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "twisted_namesrv", "--port", "0", "--metrics-port", str(port),
                                 "--data-dir", str(tmp_path)], cwd=tmp_path, env=subprocess_env(tmp_path),
                                capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    # which process holds it (here this one): "Address already in use" alone sent someone to ss -ltnp
    held = f"; held by pid {os.getpid()} ({port_holders.command_of(Path('/proc', str(os.getpid())))})"
    reason = f"cannot listen on 127.0.0.1:{port} (metricsPort): Address already in use{held}"
    assert result.stderr.splitlines()[-1] == f"namesrv: cannot start: {reason}"


def test_with_a_config_file_updates_go_to_it_even_with_a_data_dir(tmp_path):
    (tmp_path / "mine.properties").write_text("orderMessageEnable=true\n")
    options = tap.Options()
    options.parseOptions(["-c", str(tmp_path / "mine.properties"), "--data-dir", str(tmp_path / "data")])
    assert options.config["configStorePath"] == str(tmp_path / "mine.properties")
    assert options.config["kvConfigPath"] == str(tmp_path / "data" / "kvConfig.json")


@pytest_twisted.inlineCallbacks
def test_a_taken_metrics_port_releases_the_remoting_port(tmp_path):
    """Either the server has every port it was asked for or none: a supervisor's restart can bind again."""
    listen_port = free_port()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        service = NamesrvService.from_config(server_config(tmp_path, listenPort=listen_port,
                                                           metricsPort=busy.getsockname()[1]))
        with pytest.raises(CannotStart, match=r"\(metricsPort\): Address already in use"):
            service.startService()
    assert not service.running and service.port is None
    yield task.deferLater(reactor, 0, lambda: None)  # a closed port's socket goes on the reactor's next turn
    with socket.socket() as again:
        again.bind(("127.0.0.1", listen_port))


@pytest_twisted.inlineCallbacks
def test_ports_are_child_services_bound_in_the_privileged_step(tmp_path):
    """twistd binds in privilegedStartService, before it drops root; startService then binds nothing twice,
    and stopping the service stops listening."""
    service = NamesrvService.from_config(server_config(tmp_path, listenPort=0, metricsPort=free_port()))
    assert [child.name for child in service.listeners()] == ["listenPort", "metricsPort"]
    service.privilegedStartService()
    remoting, web = service.port, service.web_port
    assert remoting is not None and web is not None
    service.startService()
    assert (service.port, service.web_port) == (remoting, web)
    yield service.stopService()
    assert service.port is None and service.web_port is None


def test_every_service_is_a_child_and_every_multiservice_has_children(tmp_path):
    """Issue 36: timers are TimerServices and ports Listeners, all children of NamesrvService (the
    controller's its own); no MultiService is empty and no Service starts a LoopingCall by hand.
    The one LoopingCall left is etcd's beat, started after the first beat it awaits (EtcdConsensus.start)."""
    from twisted.application.internet import TimerService
    from twisted.application.service import IServiceCollection

    service = NamesrvService.from_config(server_config(tmp_path, listenPort=0, metricsPort=free_port()),
                                         controller_port=0)

    def walk(node, depth=0):
        yield node
        if IServiceCollection.providedBy(node):
            assert list(node), f"{type(node).__name__} has no children"
            for child in node:
                yield from walk(child, depth + 1)

    found = list(walk(service))
    names = {type(node).__name__ for node in found}
    assert {"Listener", "HousekeepingService", "PeersService", "ControllerService", "EventLogService"} <= names
    assert sum(isinstance(node, TimerService) for node in found) >= 4  # housekeeping, peers, the controller's scans
    package = Path(__file__).resolve().parent.parent / "twisted_namesrv"
    by_hand = {path.relative_to(package).as_posix() for path in package.rglob("*.py")
               if "LoopingCall(" in path.read_text()}
    assert by_hand == {"controller/etcd.py"}
    started = {path.relative_to(package).as_posix() for path in package.rglob("*.py")
               if re.search(r"(?<!super\(\))\.startService\(\)", path.read_text())}
    assert started == {"__main__.py"}  # the root, outside twistd: nothing else starts a Service by hand
