"""The server's clocks (clocks.py): the reactor's timers on the monotonic clock, the owners' time
the wall clock, the brokers' heartbeats on a steady one. A clock stepped back or forward (NTP's
first sync, a VM restored from a snapshot) holds no timer and expires no broker early or late."""

from __future__ import annotations

import itertools
import json
import re
import socket
import time
import urllib.request
from pathlib import Path

from twisted.internet import interfaces, task

from tests.support import LiveServer, free_port
from twisted_namesrv.clocks import WallClockReactor, on_monotonic_time, steady_seconds
from twisted_namesrv.remoting.codes import RequestCode
from twisted_namesrv.remoting.command import RemotingCommand

#: loaded before anything else in the server's process: time.time() moves by the seconds written in
#: the file CLOCK_STEP_FILE names (none yet: 0), as an NTP step would move it
STEP = '''
import os, time
_wall, _step = time.time, os.environ["CLOCK_STEP_FILE"]
time.time = lambda: _wall() + (float(open(_step).read()) if os.path.exists(_step) else 0)
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
    assert abs(seen.steady() - time.time()) < 1  # the heartbeats' clock reads the wall clock's until a step
    assert steady_seconds(seen) == seen.steady and steady_seconds(clock) == clock.seconds


def register(port: int, name: str, timeout_ms: int = 1000) -> socket.socket:
    """A 5.x broker of no topics whose heartbeat times out after ``timeout_ms``, its connection left open."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    body = (b'{"topicConfigSerializeWrapper":{"dataVersion":{"counter":1,"timestamp":1},"topicConfigTable":{}},'
            b'"filterServerList":[]}')
    sock.sendall(RemotingCommand.request(RequestCode.REGISTER_BROKER, {
        "brokerName": name, "brokerAddr": f"127.0.0.1:{10900 + len(name)}", "clusterName": "C",
        "haServerAddr": "127.0.0.1:1", "brokerId": "0", "heartbeatTimeoutMillis": str(timeout_ms),
        "compressed": "false"}, body, version=453).encode())
    assert sock.recv(65536)
    return sock


def expired(server: LiveServer, name: str, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if any("broker expired" in line and f"broker={name} " in line for line in server.output().splitlines()):
            return True
        time.sleep(0.1)
    return False


def stepping_server(tmp_path: Path) -> tuple[LiveServer, Path, int]:
    """A server whose wall clock steps when the test writes the step file; its HTTP port."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(STEP)
    (tmp_path / "ns.properties").write_text("scanNotActiveBrokerInterval=200\n")
    step, port, http = tmp_path / "step", free_port(), free_port()
    server = LiveServer(tmp_path, port, "--port", str(port), "--data-dir", str(tmp_path / "data"), "--compat", "5.3.3",
                        "-c", str(tmp_path / "ns.properties"), "--metrics-port", str(http),
                        env={"PYTHONPATH": str(tmp_path / "site"), "CLOCK_STEP_FILE": str(step)})
    return server.wait_ready(), step, http


def test_brokers_silent_when_the_clock_steps_back_an_hour_are_expired_on_time(tmp_path: Path):
    server, step, _ = stepping_server(tmp_path)
    try:
        before = register(server.port, "broker-a")
        assert expired(server, "broker-a", 10)  # the scan runs
        heard = register(server.port, "broker-bb")
        step.write_text("-3600")  # the clock steps back an hour
        # before: heard on the wall clock, now an hour ahead of it: expired an hour late
        assert expired(server, "broker-bb", 10), server.output()[-3000:]
        after = register(server.port, "broker-ccc")
        # before: the scan's call, scheduled before the step, waited for the wall clock to come back
        assert expired(server, "broker-ccc", 10), server.output()[-3000:]
        for sock in (before, heard, after):
            sock.close()
    finally:
        server.stop()


def test_brokers_heard_when_the_clock_steps_forward_an_hour_stay_and_show_on_the_wall_clock(tmp_path: Path):
    server, step, http = stepping_server(tmp_path)
    try:
        heard = register(server.port, "broker-a", timeout_ms=60_000)
        step.write_text("3600")  # the clock steps forward an hour
        assert not expired(server, "broker-a", 2)  # before: expired at the next scan, its heartbeat an hour old
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/api/clusters", timeout=10) as answer:
            clusters = json.load(answer)
        (member,) = [m for c in clusters["clusters"] for g in c["broker_groups"] for m in g["members"]]
        assert abs(member["last_update_ms"] - clusters["now_ms"]) < 5_000  # heard seconds ago, on the wall clock
        assert 55_000 < member["expires_in_ms"] <= 60_000
        heard.close()
    finally:
        server.stop()


def test_the_controllers_broker_heartbeats_are_on_the_steady_clock(tmp_path: Path):
    """In controller mode a broker's heartbeat times out after 10 s: a step forward of the wall clock
    past it made every broker inactive at once (an election with no one to elect)."""
    from twisted_namesrv.controller.config import ControllerConfig
    from twisted_namesrv.controller.log import FileControllerLog, SoleLeader
    from twisted_namesrv.controller.manager import ControllerManager

    wall, steady = task.Clock(), task.Clock()
    store = FileControllerLog(tmp_path)
    store.open()
    manager = ControllerManager(ControllerConfig(), store, SoleLeader("127.0.0.1:1"), wall.seconds,
                                steady=steady.seconds)
    manager.heartbeats.on_broker_heartbeat("C", "g", "127.0.0.1:10911", 1, 10_000, "ch", 0, 0, 0, 0)
    wall.advance(3600)
    assert manager.alive("C", "g", 1) and not manager.heartbeats.scan_not_active_broker()
    steady.advance(10.001)
    assert not manager.alive("C", "g", 1)


def test_a_reactor_moved_to_the_monotonic_clock_keeps_its_cancelled_calls_in_order():
    """A call cancelled before the move stays in the reactor's heap until it is popped: left at its
    wall-clock time above calls moved to monotonic times, the heap would hold them back."""
    from twisted.internet.selectreactor import SelectReactor

    reactor = SelectReactor()
    ran: list[str] = []
    cancelled = [reactor.callLater(1, ran.append, "cancelled") for _ in range(3)]
    due = [reactor.callLater(2 + i, ran.append, f"due {i}") for i in range(8)]
    reactor._insertNewDelayedCalls()  # into the heap, as a reactor's turn puts them
    for call in cancelled:
        call.cancel()
    on_monotonic_time(reactor)
    assert all(a.time <= b.time for a, b in itertools.pairwise(due))
    reactor.seconds = lambda: time.monotonic() + 100  # all due now
    reactor.runUntilCurrent()
    assert ran == [f"due {i}" for i in range(8)]


def test_a_crash_and_its_lost_topic_stay_their_ten_minutes_when_the_clock_steps_forward_an_hour(tmp_path: Path):
    """namesrv_brokers_departed and namesrv_lost_topics keep a crash for 10 minutes on the steady
    clock. Before, on the wall clock: a step forward past 10 minutes forgot both at the next scrape
    (NamesrvBrokerCrashed and NamesrvTopicsLost resolved, the page's list emptied) while the broker was
    still down and its topic lost, and a step back an hour kept them an hour and 10 minutes."""
    server, step, http = stepping_server(tmp_path)
    try:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        topics = {name: {"topicName": name, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicFilterType":
                         "SINGLE_TAG", "topicSysFlag": 0, "order": False} for name in ("Orders", "Payments")}
        body = json.dumps({"topicConfigSerializeWrapper": {"dataVersion": {"counter": 1, "timestamp": 1},
                                                           "topicConfigTable": topics},
                           "filterServerList": []}).encode()
        sock.sendall(RemotingCommand.request(RequestCode.REGISTER_BROKER, {
            "brokerName": "broker-a", "brokerAddr": "127.0.0.1:10911", "clusterName": "C", "haServerAddr":
            "127.0.0.1:1", "brokerId": "0", "compressed": "false"}, body, version=453).encode())
        assert sock.recv(65536)
        sock.close()  # the broker crashed: its connection closed, its topics lost

        def gauges() -> tuple[float, float]:
            with urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=10) as answer:
                text = answer.read().decode()
            departed = re.search(r'^namesrv_brokers_departed\{kind="closed"\} (\S+)$', text, re.M)
            lost = re.search(r"^namesrv_lost_topics (\S+)$", text, re.M)
            assert departed and lost, text
            return float(departed[1]), float(lost[1])

        deadline = time.monotonic() + 10
        while gauges() != (1, 2) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert gauges() == (1, 2)
        step.write_text("3600")  # the clock steps forward an hour
        assert gauges() == (1, 2)  # before: (0, 0)
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/api/clusters", timeout=10) as answer:
            clusters = json.load(answer)
        lost = clusters["lost_topics"][0]
        assert abs(lost["ts_ms"] - clusters["now_ms"]) < 10_000  # lost seconds ago, on the wall clock
    finally:
        server.stop()
