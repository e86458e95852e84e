"""The reactor's timers on the monotonic clock, the owners' time the wall clock (clocks.py): a
clock stepped back (NTP's first sync, a VM restored from a snapshot) holds no timer, so a broker
that goes silent after the step is still expired on time, as Java's scan (on nanoTime) does."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from twisted.internet import interfaces, task

from tests.support import LiveServer, free_port
from twisted_namesrv.clocks import WallClockReactor, on_monotonic_time
from twisted_namesrv.remoting.codes import RequestCode
from twisted_namesrv.remoting.command import RemotingCommand

#: loaded before anything else in the server's process: time.time() steps back an hour once the
#: file named by CLOCK_STEP_FLAG exists, as an NTP step would move it
STEP_BACK = '''
import os, time
_wall, _flag = time.time, os.environ["CLOCK_STEP_FLAG"]
time.time = lambda: _wall() - (3600 if os.path.exists(_flag) else 0)
'''


def test_timers_move_to_the_monotonic_clock_at_the_same_distance_and_owners_read_the_wall_clock():
    clock = task.Clock()
    clock.advance(1_000_000)  # a wall clock's reading, far from the monotonic one
    call = clock.callLater(30, lambda: None)
    seen = on_monotonic_time(clock)
    assert clock.seconds is time.monotonic
    assert abs(call.getTime() - (time.monotonic() + 30)) < 1 and call.seconds is time.monotonic
    assert isinstance(seen, WallClockReactor) and abs(seen.seconds() - time.time()) < 1
    assert seen.callLater == clock.callLater  # everything but the time is the reactor's
    assert interfaces.IReactorTime.providedBy(seen)  # and so are its interfaces (threads, resolvers...)
    assert on_monotonic_time(seen) is seen  # once


def register(port: int, name: str) -> socket.socket:
    """A 5.x broker of no topics whose heartbeat times out after 1 s, its connection left open."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    body = (b'{"topicConfigSerializeWrapper":{"dataVersion":{"counter":1,"timestamp":1},"topicConfigTable":{}},'
            b'"filterServerList":[]}')
    sock.sendall(RemotingCommand.request(RequestCode.REGISTER_BROKER, {
        "brokerName": name, "brokerAddr": f"127.0.0.1:{10900 + len(name)}", "clusterName": "C",
        "haServerAddr": "127.0.0.1:1", "brokerId": "0", "heartbeatTimeoutMillis": "1000", "compressed": "false"},
        body, version=453).encode())
    assert sock.recv(65536)
    return sock


def expired(server: LiveServer, name: str, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if any("broker expired" in line and f"broker={name} " in line for line in server.output().splitlines()):
            return True
        time.sleep(0.1)
    return False


def test_a_broker_silent_after_the_clock_steps_back_an_hour_is_expired_on_time(tmp_path: Path):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(STEP_BACK)
    (tmp_path / "ns.properties").write_text("scanNotActiveBrokerInterval=200\n")
    flag = tmp_path / "stepped"
    port = free_port()
    server = LiveServer(tmp_path, port, "--port", str(port), "--data-dir", str(tmp_path / "data"), "--compat", "5.3.3",
                        "-c", str(tmp_path / "ns.properties"),
                        env={"PYTHONPATH": str(tmp_path / "site"), "CLOCK_STEP_FLAG": str(flag)}).wait_ready()
    try:
        before = register(port, "broker-a")
        assert expired(server, "broker-a", 10)  # the scan runs
        flag.touch()  # the clock steps back an hour
        time.sleep(0.5)  # the scan's next call was scheduled before the step
        after = register(port, "broker-b")
        # before: the scan's call waited for the wall clock to come back to where it was, an hour
        assert expired(server, "broker-b", 10), server.output()[-3000:]
        before.close(), after.close()
    finally:
        server.stop()
