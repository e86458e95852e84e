"""Issue 44's seventh attack: a file the server reads swapped for a FIFO (or a symlink to one, a
device, a directory).  open() of a FIFO blocks until a writer comes, and the reactor with it: before,
the accounts file's reload hung every port.  Now every file the server reads, at start or at
runtime, is opened without blocking and refused unless it is a regular file (state/files.py): at
start the CannotStart line names the key; at a reload the old accounts stay, one error line, one count.

Each test runs under an alarm: on the old code the open() blocks and the alarm fails the test
instead of hanging the run."""

from __future__ import annotations

import os
import signal
import socket
import time
import tracemalloc
from contextlib import contextmanager
from pathlib import Path
from urllib.request import urlopen

import pytest
from twisted.internet import reactor
from twisted.logger import capturedLogs, formatEvent

from tests.support import LiveServer, free_port, server_config
from tests.tls_support import make_pki
from twisted_namesrv import CannotStart
from twisted_namesrv.admin.client import NamesrvClient
from twisted_namesrv.controller.tap import Options as ControllerOptions
from twisted_namesrv.metrics import Metrics
from twisted_namesrv.remoting import RequestCode, ResponseCode
from twisted_namesrv.service import NamesrvService, load, reload_acl
from twisted_namesrv.state.acl import AccessControl
from twisted_namesrv.state.config import ConfigError, NamesrvConfig
from twisted_namesrv.state.files import NotRegularFile, open_regular, read_regular
from twisted_namesrv.state.store import write_atomically

ACCOUNTS = "accounts:\n  - accessKey: ops\n    secretKey: ops-secret\n    admin: true\n"


class Blocked(BaseException):
    """Not an OSError (as TimeoutError is): no ``except OSError`` of the code under test takes it."""


@contextmanager
def no_blocking(seconds: int = 10):
    """Fails the test (instead of hanging it) when what runs inside blocks longer than ``seconds``."""
    def blocked(signum, frame):
        raise Blocked(f"blocked for {seconds} s: an open() of a FIFO?")

    previous = signal.signal(signal.SIGALRM, blocked)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def fifo(tmp_path: Path, name: str = "pipe") -> Path:
    """A symlink to a FIFO that no one writes to, as the attacker leaves it."""
    target = tmp_path / f"{name}.fifo"
    os.mkfifo(target)
    link = tmp_path / name
    link.symlink_to(target)
    return link


def open_fifos() -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # listdir's own
            continue
        if target.endswith(".fifo"):
            found.append(target)
    return found


# -- the helper ------------------------------------------------------------------------------------

def test_only_regular_files_are_opened_and_nothing_blocks(tmp_path):
    regular = tmp_path / "plain"
    regular.write_bytes(b"data")
    (tmp_path / "link").symlink_to(regular)  # a ConfigMap's symlink is followed
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(tmp_path / "sock"))
    (tmp_path / "dir").mkdir()
    with no_blocking():
        assert read_regular(regular, None) == read_regular(tmp_path / "link", 16) == b"data"
        for path, kind in ((fifo(tmp_path), "a FIFO (named pipe)"), (tmp_path / "pipe.fifo", "a FIFO (named pipe)"),
                           (tmp_path / "dir", "a directory"), (Path("/dev/null"), "a character device")):
            with pytest.raises(NotRegularFile) as raised:
                read_regular(path, None)
            assert raised.value.strerror == f"{kind}, not a regular file" and raised.value.filename == str(path)
        with pytest.raises(OSError):  # a socket cannot even be opened
            read_regular(tmp_path / "sock", None)
        with pytest.raises(NotRegularFile):  # for writing too: O_RDWR of a FIFO opens, and the read would block
            open_regular(tmp_path / "pipe", os.O_RDWR | os.O_CREAT)
    listening.close()
    assert open_fifos() == []  # every fd refused was closed again


# -- at start: the CannotStart line names the key -----------------------------------------------------

@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def base(tmp_path):
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACCOUNTS)
    return {"kvConfigPath": str(tmp_path / "kv.json"), "configStorePath": str(tmp_path / "ns.properties"),
            "aclAccountsFile": str(acl)}


@pytest.mark.parametrize("key", ["kvConfigPath", "aclAccountsFile",
                                 "tls.server.certPath", "tls.server.keyPath", "tls.server.trustCertPath"])
def test_a_fifo_at_start_is_refused_naming_its_key(tmp_path, base, pki, key):
    values = {**base, "aclEnable": key == "aclAccountsFile", key: str(fifo(tmp_path))}
    if key.startswith("tls."):
        values.update({"tls.server.mode": "enforcing", "tls.server.authClient": True,
                       **{k: str(v) for k, v in (("tls.server.certPath", pki.cert), ("tls.server.keyPath", pki.key),
                                                 ("tls.server.trustCertPath", pki.ca)) if k != key}})
    config = server_config(tmp_path, **values)
    with no_blocking(), pytest.raises(CannotStart) as raised:
        load(config, reactor)
    assert str(raised.value).startswith(key) and "a FIFO (named pipe), not a regular file" in str(raised.value)


def test_a_fifo_as_the_config_file_or_the_saved_config_is_refused(tmp_path):
    with no_blocking():
        with pytest.raises(ConfigError, match=r"cannot read config file .*pipe: a FIFO \(named pipe\), not a regular"):
            NamesrvConfig.from_file(str(fifo(tmp_path)))
        store = fifo(tmp_path, "namesrv.properties")
        with pytest.raises(ConfigError, match=r"^configStorePath: cannot read .*namesrv.properties: a FIFO"):
            NamesrvConfig.from_file(None, {"configStorePath": str(store)})
        (tmp_path / "dir.properties").mkdir()
        with pytest.raises(ConfigError, match="a directory, not a regular file"):
            NamesrvConfig.from_file(str(tmp_path / "dir.properties"))


def test_a_fifo_as_the_controllers_store_or_config_file_is_refused(tmp_path, base):
    store = tmp_path / "controller"
    store.mkdir()
    os.mkfifo(store / "controller.log")
    config = server_config(tmp_path, **base, controllerStorePath=str(store))
    service = NamesrvService.from_config(config, reactor, controller_port=0)
    with no_blocking(), pytest.raises(CannotStart, match="^controllerStorePath: cannot open .*a FIFO"):
        service.controller.open_store()
    with no_blocking(), pytest.raises(SystemExit, match="cannot read config file .*pipe: a FIFO"):
        ControllerOptions().parseOptions(["-c", str(fifo(tmp_path))])


# -- at a reload: the old accounts stay, one line, one count ----------------------------------------

def test_a_fifo_swapped_in_for_the_accounts_keeps_the_old_ones(tmp_path):
    accounts = tmp_path / "plain_acl.yml"
    accounts.write_text(ACCOUNTS)
    acl = AccessControl.from_file(str(accounts), clock=time.time)
    metrics = Metrics()
    accounts.unlink()
    accounts.symlink_to(fifo(tmp_path).resolve())
    with no_blocking(), capturedLogs() as events:
        reload_acl(acl, metrics)
        reload_acl(acl, metrics)  # the same FIFO at the next check: nothing new to say
    (line,) = [formatEvent(e) for e in events]
    assert line.startswith("aclAccountsFile: not reloaded, the accounts read before stay:") and "a FIFO" in line
    assert events[0]["log_level"].name == "error" and metrics.acl_reload_failures == 1
    assert set(acl.accounts) == {"ops"}
    accounts.unlink()
    accounts.write_text(ACCOUNTS.replace("ops", "ops2"))
    reload_acl(acl, metrics)
    assert set(acl.accounts) == {"ops2"}


def test_a_huge_file_swapped_in_for_the_accounts_is_refused_unread(tmp_path):
    """A huge sparse file (4 GB in the attack): the reload read it whole every 5 s on the reactor thread (under a memory
    limit the MemoryError ended the reload timer: no later change of the accounts was read)."""
    accounts = tmp_path / "plain_acl.yml"
    accounts.write_text(ACCOUNTS)
    acl = AccessControl.from_file(str(accounts), clock=time.time)
    metrics = Metrics()
    huge = tmp_path / "huge.yml"
    with open(huge, "wb") as handle:
        handle.truncate(64 << 20)  # sparse: no disk, but read whole it is 64 MiB (the attack was 4 GB)
    os.replace(huge, accounts)
    tracemalloc.start()
    with capturedLogs() as events:
        reload_acl(acl, metrics)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    (line,) = [formatEvent(e) for e in events]
    assert "not reloaded, the accounts read before stay" in line and "over the 4194304 this file may hold" in line
    assert peak < 1 << 20 and metrics.acl_reload_failures == 1 and set(acl.accounts) == {"ops"}  # never read
    accounts.unlink()
    accounts.write_text(ACCOUNTS.replace("ops", "ops2"))
    reload_acl(acl, metrics)
    assert set(acl.accounts) == {"ops2"}


def test_the_reload_timer_survives_whatever_a_reload_raises(tmp_path, monkeypatch):
    accounts = tmp_path / "plain_acl.yml"
    accounts.write_text(ACCOUNTS)
    acl = AccessControl.from_file(str(accounts), clock=time.time)
    metrics = Metrics()
    monkeypatch.setattr(acl, "reload_if_changed", lambda: (_ for _ in ()).throw(MemoryError()))
    with capturedLogs() as events:
        reload_acl(acl, metrics)  # an exception out of here would end the TimerService calling it
    assert metrics.acl_reload_failures == 1 and "MemoryError" in formatEvent(events[0])


def test_a_live_server_keeps_answering_when_its_accounts_become_a_fifo(tmp_path):
    """The attack as the issue ran it: every port must still answer after the reload (5 s)."""
    accounts = tmp_path / "plain_acl.yml"
    accounts.write_text(ACCOUNTS)
    port, web = free_port(), free_port()
    config = tmp_path / "ns.properties"
    config.write_text(f"listenPort={port}\nmetricsPort={web}\nkvConfigPath={tmp_path / 'kv.json'}\naclEnable=true\n"
                      f"aclAccountsFile={accounts}\n")
    server = LiveServer(tmp_path, port, "-c", str(config)).wait_ready()
    try:
        target = fifo(tmp_path).resolve()
        accounts.unlink()
        accounts.symlink_to(target)
        time.sleep(7)  # the reload timer (every 5 s) has looked at the file
        client = NamesrvClient(f"127.0.0.1:{port}", 3, ("ops", "ops-secret"))
        try:
            assert client.call(RequestCode.GET_BROKER_CLUSTER_INFO).code == ResponseCode.SUCCESS
            assert client.call(RequestCode.PUT_KV_CONFIG, {"namespace": "n", "key": "k", "value": "v"}).code == 0
        finally:
            client.close()
        with urlopen(f"http://127.0.0.1:{web}/healthz", timeout=3) as health:
            assert health.status == 200
        with urlopen(f"http://127.0.0.1:{web}/metrics", timeout=3) as scraped:
            assert "namesrv_acl_reload_failures_total 1.0" in scraped.read().decode()
    finally:
        server.stop()
    assert server.output().count("aclAccountsFile: not reloaded, the accounts read before stay") == 1


def test_a_fifo_left_as_a_stores_temp_file_does_not_block_the_next_save(tmp_path):
    """write_atomically's fixed temp file (kvConfig.json.tmp): a FIFO there was opened O_WRONLY, which
    blocks until a reader comes; now it is removed and the temp file created anew."""
    target = tmp_path / "kvConfig.json"
    os.mkfifo(tmp_path / "kvConfig.json.tmp")
    with no_blocking():
        write_atomically(target, b'{"configTable":{}}', "kvConfigPath")
    assert target.read_bytes() == b'{"configTable":{}}' and not (tmp_path / "kvConfig.json.tmp").exists()
