"""Test helpers shared by the suites: the golden captures, an in-process server on an
ephemeral loopback port, a minimal remoting client, and the server's lines a piece of work runs."""

from __future__ import annotations

import gc
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer, protocol, reactor, task
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol

from twisted_namesrv.remoting import FrameDecoder, RemotingCommand
from twisted_namesrv.schema import SERVER_SCHEMA
from twisted_namesrv.service import NamesrvService
from twisted_namesrv.state.config import NamesrvConfig

CAPTURES = Path(__file__).resolve().parent / "data" / "golden"  # real Java traffic, kept in the repo
SERVER_CODE = str(Path(__file__).resolve().parents[1] / "twisted_namesrv")
TIMEOUT = 10  # seconds a test waits for an answer before it fails instead of hanging


def require_captures(what: str) -> None:
    """The golden captures are part of the repository: one missing is a broken checkout, never a skip."""
    pytest.fail(f"golden capture {what} not present: the recorded Java NameServer traffic the replay, frame "
                "and Spark tests compare with lives in tests/data/golden (see its README.md)")


def capture(name: str) -> Path:
    path = CAPTURES / name
    if not path.exists():
        require_captures(str(path))
    return path


def server_config(tmp_path: Path, **values: Any) -> NamesrvConfig:
    base = {"listenPort": 0, "bindAddress": "127.0.0.1", "kvConfigPath": str(tmp_path / "kvConfig.json"),
            "configStorePath": str(tmp_path / "namesrv.properties")}
    base.update(values)
    return NamesrvConfig(base, schema=SERVER_SCHEMA)


def free_port() -> int:
    """A loopback port nobody listens on right now (for keys where 0 means 'off')."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_http(process: subprocess.Popen, url: str, seconds: float = 30) -> None:
    """Returns once ``url`` answers 2xx; fails the test, with the server's output when it has a pipe,
    if the server exits first or nothing answers within ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except OSError:
            if process.poll() is not None:
                output = process.communicate()[0] if process.stdout else ""
                pytest.fail(f"the server exited with {process.returncode}: {output}")
            assert time.monotonic() < deadline, f"{url} did not answer within {seconds} s"
            time.sleep(0.1)


@defer.inlineCallbacks
def start_server(config: NamesrvConfig):
    """A started NamesrvService and its port number; stop it with ``service.stopService()``."""
    service = NamesrvService.from_config(config, reactor)
    service.startService()
    port = yield service.port_ready
    return service, port.getHost().port


class RemotingClient(protocol.Protocol):
    """Sends frames and hands back responses by opaque; records anything unasked for."""

    def __init__(self) -> None:
        self.decoder = FrameDecoder(1 << 31)
        self.waiting: dict[int, defer.Deferred] = {}
        self.received: dict[int, RemotingCommand] = {}
        self.frames: dict[int, bytes] = {}  # each response's bytes as received, by opaque
        self.closed: defer.Deferred = defer.Deferred()

    def dataReceived(self, data: bytes) -> None:
        for frame in self.decoder.feed(data):
            command = RemotingCommand.decode(frame)
            self.frames[command.opaque] = len(frame).to_bytes(4, "big") + frame
            waiter = self.waiting.pop(command.opaque, None)
            if waiter is not None:
                waiter.callback(command)
            else:
                self.received[command.opaque] = command

    def connectionLost(self, reason: object = None) -> None:
        self.closed.callback(None)
        for waiter in self.waiting.values():
            waiter.errback(ConnectionError("connection closed before the answer"))
        self.waiting.clear()

    def answer(self, opaque: int) -> defer.Deferred:
        """The response with this opaque (already received or still to come)."""
        if opaque in self.received:
            return defer.succeed(self.received.pop(opaque))
        d = self.waiting[opaque] = defer.Deferred()
        return d.addTimeout(TIMEOUT, reactor)

    def send(self, data: bytes) -> None:
        self.transport.write(data)

    @defer.inlineCallbacks
    def call(self, request: RemotingCommand):
        self.send(request.encode())
        response = yield self.answer(request.opaque)
        return response


def answer_to(port: int, data: bytes, timeout: float = TIMEOUT) -> RemotingCommand:
    """The first answer a live server on 127.0.0.1:``port`` gives to ``data`` (blocking; not in the reactor)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        decoder = FrameDecoder()
        while True:
            chunk = sock.recv(65536)
            assert chunk, "the server closed the connection without an answer"
            frames = decoder.feed(chunk)
            if frames:
                return RemotingCommand.decode(frames[0])


def connect(port: int) -> defer.Deferred:
    return connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", port), RemotingClient())


class ClockedReactor:
    """The real reactor for sockets, a task.Clock for time: the test says when time passes."""

    def __init__(self, clock: task.Clock) -> None:
        self.clock = clock

    def seconds(self) -> float:
        return self.clock.seconds()

    def callLater(self, delay, f, *args, **kwargs):
        if delay == 0:  # the next turn (closed channels' brokers leave then) is no time passing
            return reactor.callLater(0, f, *args, **kwargs)
        return self.clock.callLater(delay, f, *args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(reactor, name)


class LiveServer:
    """``python -m twisted_namesrv ARGS`` as a child process, as an operator runs it: its stdout and
    stderr kept in files beside the test's other files; ``stop`` sends SIGTERM and waits."""

    def __init__(self, tmp_path: Path, port: int, *args: str, name: str = "server",
                 launcher: tuple[str, ...] = (sys.executable, "-m", "twisted_namesrv"),
                 env: dict[str, str] | None = None) -> None:
        """``launcher``: what runs the server (``twistd -n --pidfile= namesrv``: the twistd plugin);
        ``env``: more environment variables."""
        self.port = port
        self.stdout, self.stderr = tmp_path / f"{name}.stdout", tmp_path / f"{name}.stderr"
        with self.stdout.open("ab") as out, self.stderr.open("ab") as err:
            self.process = subprocess.Popen([*launcher, *args], stdout=out, stderr=err, cwd=tmp_path,
                                            stdin=subprocess.DEVNULL,
                                            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})

    def wait_ready(self, seconds: float = 60) -> LiveServer:
        """Returns once the port answers a connection; fails the test if the server exits first."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"the server exited with {self.process.returncode}: {self.stderr.read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        pytest.fail(f"nothing listens on {self.port} after {seconds} s")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def output(self) -> str:
        return self.stdout.read_text(errors="replace") + self.stderr.read_text(errors="replace")


def python_calls_run(work: Callable[[], object]) -> int:
    """How many Python functions ``work`` calls, whoever's (the server's, Twisted's, the standard
    library's; C functions not counted): the work of a path counted as calls, not timed.  The
    collector is off meanwhile; a profiler before is put back."""
    counted = 0

    def calls(frame: Any, event: str, arg: Any) -> None:
        nonlocal counted
        if event == "call":
            counted += 1

    _run_hooked(work, sys.getprofile, sys.setprofile, calls)
    return counted


def server_lines_run(work: Callable[[], object]) -> int:
    """How many lines of the server's own code (twisted_namesrv) ``work`` runs: work counted, not
    timed (a test of what grows with the tables compares it at N and 10N).  The collector is off
    meanwhile (its callbacks are no part of the work); a tracer before (coverage) is put back."""
    counted = 0

    def lines(frame: Any, event: str, arg: Any) -> Any:
        nonlocal counted
        if event == "line":
            counted += 1
        return lines

    def calls(frame: Any, event: str, arg: Any) -> Any:
        return lines if frame.f_code.co_filename.startswith(SERVER_CODE) else None

    _run_hooked(work, sys.gettrace, sys.settrace, calls)
    return counted


def _run_hooked(work: Callable[[], object], hooked: Callable[[], Any], hook: Callable[[Any], None],
                counter: Any) -> None:
    """``work`` with ``counter`` as the interpreter's tracer or profiler (``hook``; ``hooked`` the one
    before, put back after) and the collector off (its callbacks are no part of the work)."""
    before, collecting = hooked(), gc.isenabled()
    gc.disable()
    hook(counter)
    try:
        work()
    finally:
        hook(before)
        if collecting:
            gc.enable()
