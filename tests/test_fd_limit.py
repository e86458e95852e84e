"""The descriptor limit (ulimit -n): a start with it below maxConnections warns, naming both and the
fix; every port admits connections only while fdReserve descriptors stay free for the stores
(budget.py: FdBudget), so idle peers under a low limit leave KV writes, config saves and the probes
their descriptors (a subprocess under ulimit -n 256)."""

from __future__ import annotations

import contextlib
import errno
import http.client
import io
import json
import os
import re
import resource
import socket
import subprocess
import sys
import time

import pytest_twisted
from twisted.internet import task, tcp
from twisted.logger import Logger, LogLevel, capturedLogs, formatEvent, globalLogPublisher

from tests.support import free_port, server_config, start_server
from twisted_namesrv import budget, server
from twisted_namesrv.admin.client import NamesrvClient
from twisted_namesrv.budget import FdBudget, fd_limit_warning
from twisted_namesrv.remoting import RequestCode


def test_the_warning_names_the_limit_the_key_and_the_fix(monkeypatch):
    monkeypatch.setattr(resource, "getrlimit", lambda which: (1024, 4096))
    text = fd_limit_warning(10_000)
    assert text.startswith("open-file limit (ulimit -n) is 1024, below maxConnections=10000 + 64")
    assert "ulimit -n 10064" in text and "LimitNOFILE=" in text and "hard limit 4096" in text
    assert fd_limit_warning(960) is None  # 960 + 64 fits
    assert fd_limit_warning(0) is None  # no connection limit: nothing to compare
    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert fd_limit_warning(10**9) is None


def test_the_warning_leaves_out_the_descriptors_the_server_holds(monkeypatch):
    """Under ulimit -n 64 the start said "past about 48 connections" and 23 got in: the 16 kept for the
    stores were left out, the ~25 the server holds itself (its files, its ports, the HTTP port's
    headroom) were not."""
    monkeypatch.setattr(resource, "getrlimit", lambda which: (64, 64))
    assert "past about 23 connections new peers are refused" in fd_limit_warning(10_000, 16, held=25)
    assert "past about 0 connections" in fd_limit_warning(10_000, 16, held=60)


@pytest_twisted.ensureDeferred
async def test_a_start_below_the_limit_warns(tmp_path):
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    events: list[dict] = []
    globalLogPublisher.addObserver(events.append)
    try:
        service, _ = await start_server(server_config(tmp_path, maxConnections=soft + 1))
        await service.stopService()
    finally:
        globalLogPublisher.removeObserver(events.append)
    (warning,) = [e for e in events if "open-file limit" in str(e.get("warning", ""))]
    assert warning["log_level"].name == "warn" and f"maxConnections={soft + 1}" in warning["warning"]


class Counted:
    """A descriptor table as FdBudget reads it: ``open`` descriptors, each count recorded."""

    def __init__(self, open_now: int) -> None:
        self.open = open_now
        self.counts = 0

    def __call__(self) -> int:
        self.counts += 1
        return self.open


def test_the_budget_keeps_the_reserve_free_and_counts_seldom():
    clock = task.Clock()
    table = Counted(100)
    fds = FdBudget(256, 64, table, clock.seconds)
    admitted = 0
    while True:
        table.open += 1  # accepted: its descriptor is open when the port asks
        if not fds.admit():
            table.open -= 1  # closed at once
            break
        admitted += 1
    assert admitted == 256 - 64 - 100 and fds.refused == 1 and table.open == 256 - 64
    assert table.counts == 1  # counted at the first; the estimate took it from there, then refused on it
    assert not fds.admit() and table.counts == 1  # within a second of the last count: the estimate stands
    table.open -= 50  # peers left
    clock.advance(1)
    assert fds.admit() and table.counts == 2  # near the limit, counted again after a second
    clock.advance(5)
    table.open += 1
    fds.admit()
    assert table.counts == 3  # still near: counted again
    table.open += 1
    free = fds.free()
    fds.release()  # an admitted connection closed: free again before any count
    table.open -= 1
    fds.take()  # one kept in the place of one closed (the HTTP port's make_room)
    assert fds.free() == free and table.counts == 3


def test_far_from_the_limit_the_descriptors_are_not_counted_again():
    """A count lists every open descriptor (15-23 ms of the accepting turn at 19,500 connections):
    while the estimate leaves twice the reserve free it is not made again, however long the server
    runs and however many peers come and go; only once near the limit is it counted again."""
    clock = task.Clock()
    table = Counted(20)
    fds = FdBudget(20_000, 64, table, clock.seconds)
    for _ in range(19_000):  # peers connect over ten minutes, some leave
        clock.advance(0.03)
        table.open += 1
        assert fds.admit()
        if table.open % 7 == 0:
            fds.release()
            table.open -= 1
    assert table.counts == 1
    while fds.free() - 1 >= 2 * fds.reserve:  # up to the near zone: no count yet
        clock.advance(0.03)
        table.open += 1
        assert fds.admit() and table.counts == 1
    clock.advance(1)
    table.open += 1
    assert fds.admit() and table.counts == 2  # near the limit: counted again


def test_the_reserve_is_at_most_a_quarter_of_the_limit_and_nothing_without_a_limit():
    assert FdBudget(100, 64, Counted(10), task.Clock().seconds).reserve == 25
    unlimited = FdBudget(None, 64, Counted(10**6), task.Clock().seconds)
    assert all(unlimited.admit() for _ in range(1000))
    off = FdBudget(256, 0, Counted(255), task.Clock().seconds)
    assert off.admit()


LIMIT = 256


def start_limited(tmp_path, properties: str) -> tuple[subprocess.Popen, int, int]:
    """``python -m twisted_namesrv`` under ``ulimit -n 256``; its remoting and HTTP ports."""
    port, http = free_port(), free_port()
    (tmp_path / "namesrv.properties").write_text(properties)
    limit = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))  # noqa: E731
    proc = subprocess.Popen([sys.executable, "-m", "twisted_namesrv", "-c", str(tmp_path / "namesrv.properties"),
                             "--port", str(port), "--metrics-port", str(http), "--data-dir", str(tmp_path / "data")],
                            preexec_fn=limit, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        if "boot success" in line:
            return proc, port, http
    raise AssertionError(f"the server did not start: {proc.wait()}")


def http_get(port: int, path: str) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def idle_connections(port: int, count: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(count)]


def test_idle_peers_under_a_low_descriptor_limit_leave_the_stores_and_the_probes_their_descriptors(tmp_path):
    """Under ulimit -n 256: 300 idle HTTP connections, then 250 idle remoting connections. Before, they
    took every descriptor: remoting accepts failed, a KV write failed with EMFILE, /healthz failed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))  # this process's own sockets
    proc, port, http_port = start_limited(tmp_path, "aclEnable=false\n")
    flood: list[socket.socket] = []
    admin = NamesrvClient(f"127.0.0.1:{port}", 10)
    try:
        put = {"namespace": "ns", "key": "k0", "value": "v0"}
        assert admin.call(RequestCode.PUT_KV_CONFIG, put).code == 0  # connected before the flood
        flood += idle_connections(http_port, 300)
        time.sleep(1)
        assert http_get(http_port, "/healthz")[0] == 200  # takes the place of an idle connection
        fresh = NamesrvClient(f"127.0.0.1:{port}", 10)
        assert fresh.call(RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k0"}).code == 0
        fresh.close()
        flood += idle_connections(port, 250)
        time.sleep(1)
        for number in range(1, 4):  # the stores write with the descriptor table at its reserve
            put = {"namespace": "ns", "key": f"k{number}", "value": f"v{number}"}
            assert admin.call(RequestCode.PUT_KV_CONFIG, put).code == 0, number
        kv = json.loads((tmp_path / "data" / "kvConfig.json").read_text())
        assert kv["configTable"]["ns"] == {f"k{n}": f"v{n}" for n in range(4)}
        update = admin.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"productEnvName=under-pressure")
        assert update.code == 0 and "productEnvName=under-pressure" in (tmp_path / "namesrv.properties").read_text()
        assert http_get(http_port, "/healthz")[0] == 200
        status, metrics = http_get(http_port, "/metrics")
        refused = {reason: float(count) for reason, count in re.findall(
            rb'namesrv_refusals_total\{listener="remoting",reason="(\w+)"\} (\S+)', metrics)}
        assert refused[b"fd_reserve"] > 0
        assert re.search(rb'namesrv_refusals_total\{listener="http",reason="max_connections"\} [1-9]', metrics)
        for connection in flood:
            connection.close()
        flood.clear()
        time.sleep(1.5)  # counted again a second after the last count
        again = NamesrvClient(f"127.0.0.1:{port}", 10)
        assert again.call(RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k3"}).code == 0
        again.close()
    finally:
        admin.close()
        for connection in flood:
            connection.close()
        proc.terminate()
        output = proc.communicate(timeout=30)[0]
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert "EMFILE" not in output and "Too many open files" not in output, output[-3000:]
    assert "fewer than 64 of 256 descriptors (ulimit -n) would stay free for the stores (fdReserve)" in output


def wait_for_line(path, text: str, proc: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while text not in path.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, path.read_text()[-3000:]
        time.sleep(0.1)


def test_a_full_descriptor_table_pauses_accepting_logs_once_and_counts(tmp_path):
    """``prlimit --nofile=6`` on a running server (under what it holds open), peers connecting:
    every accept fails with EMFILE. Before, Twisted's port logged 'Could not accept new connection'
    and was called again at once, the peers waiting in the backlog: tens of thousands of lines in
    two seconds and a busy reactor. Now each port stops accepting for a second at a time, one
    warning says why, each failed turn is counted (fd_table_full), a scrape on a connection already
    open still answers, and once descriptors are free again the port accepts and says so."""
    port, http_port = free_port(), free_port()
    out = tmp_path / "out.log"
    with out.open("w") as written:
        proc = subprocess.Popen([sys.executable, "-m", "twisted_namesrv", "--port", str(port), "--metrics-port",
                                 str(http_port), "--data-dir", str(tmp_path / "data")],
                                stdout=written, stderr=subprocess.STDOUT)
    peers: list[socket.socket] = []
    scraper = http.client.HTTPConnection("127.0.0.1", http_port, timeout=10)
    try:
        wait_for_line(out, "boot success", proc)
        scraper.request("GET", "/healthz")
        assert scraper.getresponse().read()  # kept alive: a scraper's connection, open before
        limits = resource.prlimit(proc.pid, resource.RLIMIT_NOFILE)
        resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, (6, limits[1]))
        peers += idle_connections(port, 2) + idle_connections(http_port, 1)
        time.sleep(2.5)
        scraper.request("GET", "/metrics")
        response = scraper.getresponse()
        metrics = response.read()
        assert response.status == 200, metrics[-2000:]
        failed = re.search(rb'namesrv_refusals_total\{listener="remoting",reason="fd_table_full"\} (\S+)', metrics)
        assert failed and 1 <= float(failed[1]) <= 10, failed  # a turn a second, not one a reactor turn
        text = out.read_text()
        assert text.count("Could not accept") == 0 and text.count("EMFILE") <= 10, text[-3000:]
        # Twisted's reserve, lost in the full table: one line of ours, not its critical traceback
        assert "Traceback" not in text and "EMFILE recovery file descriptor" not in text, text[-3000:]
        assert text.count("no descriptor to keep in reserve for a full descriptor table") == 1, text[-3000:]
        assert text.count("listenPort: cannot accept connections: EMFILE") == 1, text[-3000:]
        assert "metricsPort: cannot accept connections: EMFILE" in text
        resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, limits)
        wait_for_line(out, "listenPort: accepting connections again", proc)
        client = NamesrvClient(f"127.0.0.1:{port}", 10)
        assert client.call(RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k"}).code != -1
        client.close()
        assert http_get(http_port, "/healthz")[0] == 200
    finally:
        scraper.close()
        for peer in peers:
            peer.close()
        proc.terminate()
        proc.wait(timeout=30)


def test_a_lost_descriptor_reserve_is_one_line_an_episode_and_taken_again_after_it():
    """Twisted's EMFILE reserve that cannot be taken again logged a critical traceback each time;
    now one warning while it stays lost, and it is taken again once a port accepts again (Twisted
    itself tried only at a port's start: the next full table found no reserve)."""
    table_full = [True]
    opened: list[object] = []

    def open_reserve() -> object:
        if table_full[0]:
            raise OSError(errno.EMFILE, "Too many open files")
        opened.append(reserve := io.BytesIO())
        return reserve
    reservation = tcp._FileDescriptorReservation(open_reserve)
    published: list[dict] = []
    watch = server.ReserveFailures(reservation, published.append)
    reservation._log = Logger(namespace="twisted.internet.tcp", observer=watch)
    with capturedLogs() as events:
        for _ in range(3):
            reservation.reserve()  # as a port's start or Twisted's recovery does, the table full
        watch.retake()  # a port accepts again, the table still full: still lost, nothing more said
        table_full[0] = False
        watch.retake()  # free: taken again
        assert reservation.available() and not watch.lost and len(opened) == 1
        reservation._log.info("Re-reserving for a test")  # the reservation's other events go on as they were
        table_full[0] = True
        with reservation:  # Twisted's recovery uses it, and cannot take it again: a new episode
            pass
    said = [formatEvent(e) for e in events if "reserve" in formatEvent(e)]
    assert len(said) == 2 and all("no descriptor to keep in reserve" in line for line in said), said
    assert all(e["log_level"] == LogLevel.warn for e in events if e.get("log_namespace") == "twisted_namesrv.server")
    assert [e["log_format"] for e in published] == ["Re-reserving for a test"]


def test_the_http_port_keeps_a_headroom_the_others_cannot_take():
    table = Counted(100)
    fds = FdBudget(256, 64, table, task.Clock().seconds, headroom=8)

    def admitted(probes: bool) -> int:
        kept = 0
        while True:
            table.open += 1  # accepted: its descriptor is open when the port asks
            if not fds.admit(probes):
                table.open -= 1
                return kept
            kept += 1

    assert admitted(probes=False) == 256 - 64 - 8 - 100  # a remoting flood stops short of the headroom ...
    assert admitted(probes=True) == 8  # ... which the HTTP port may still take
    assert FdBudget(256, 0, table, task.Clock().seconds, headroom=8).admit()  # fdReserve=0: nothing kept


@contextlib.contextmanager
def flooded_server(tmp_path, connections: int, output: list[str] | None = None):
    """A server under ``ulimit -n 256`` (``start_limited``) holding ``connections`` idle remoting
    peers; yields its (remoting, HTTP) ports, then closes the peers, stops it (its output appended
    to ``output``) and puts this process's limit back."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    proc, port, http_port = start_limited(tmp_path, "aclEnable=false\n")
    flood: list[socket.socket] = []
    try:
        flood += idle_connections(port, connections)
        time.sleep(1)
        yield port, http_port
    finally:
        for connection in flood:
            connection.close()
        proc.terminate()
        said = proc.communicate(timeout=30)[0]
        if output is not None:
            output.append(said)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_remoting_flood_leaves_the_probes_and_metrics_room_to_answer(tmp_path):
    """Under ulimit -n 256, 300 idle remoting connections: before, they took the budget to its
    reserve and /healthz and /metrics were closed unanswered (a scraper saw the server down, not
    what it refused). Now they answer, and /metrics counts the refusals (fd_reserve)."""
    output: list[str] = []
    with flooded_server(tmp_path, 300, output) as (_, http_port):
        assert http_get(http_port, "/healthz")[0] == 200
        status, metrics = http_get(http_port, "/metrics")
        assert status == 200
        assert re.search(rb'namesrv_refusals_total\{listener="remoting",reason="fd_reserve"\} [1-9]', metrics)
        assert not re.search(rb'namesrv_refusals_total\{listener="http",reason="fd_reserve"\} [1-9]', metrics)
    assert "fewer than 64 of 256 descriptors (ulimit -n) would stay free for the stores (fdReserve) and 8 more for " \
           "the HTTP port" in output[0]


#: a process with a second thread (the table shared: each growth waits for RCU) opening ``count``
#: descriptors, after making room for them when asked: prints how many times its table grew meanwhile
GROWTHS = """
import os, sys, threading
from twisted_namesrv.budget import make_table_room
count, room = int(sys.argv[1]), sys.argv[2] == "room"
def table_size():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("FDSize:"))
done = threading.Event()
threading.Thread(target=done.wait).start()
made = make_table_room(count + 16) if room else None
sizes, opened = {table_size()}, []
for _ in range(count):
    opened.append(os.open(os.devnull, os.O_RDONLY))
    sizes.add(table_size())
done.set()
print(made, len(sizes) - 1, table_size())
"""


def growths(count: int, room: bool) -> tuple[str, int, int]:
    done = subprocess.run([sys.executable, "-c", GROWTHS, str(count), "room" if room else "none"],
                          capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (count + 64, count + 64)))
    assert done.returncode == 0, done.stderr
    made, grew, size = done.stdout.split()
    return made, int(grew), int(size)


def test_room_made_at_start_leaves_no_growth_of_the_descriptor_table_to_an_accept():
    """Each doubling of a threaded process's descriptor table waits for an RCU grace period (4-75 ms
    here), which the reactor's thread slept in the accept that crossed 1,024, 2,048 or 4,096 as 5,000
    brokers connected: with the room made at start-up, opening 5,000 descriptors grows it no more."""
    assert growths(5000, room=False)[1] >= 4  # 256 -> 512 -> ... -> 8192: each a wait
    made, grew, size = growths(5000, room=True)
    assert (made, grew) == ("True", 0) and size >= 5016


def test_the_room_is_the_connections_the_reserve_and_a_slack_within_the_limit():
    assert budget.descriptor_room(10_000, 64, 1 << 16) == 10_000 + 64 + budget.ROOM_SLACK
    assert budget.descriptor_room(10_000, 64, 4096) == 4096  # ulimit -n below it: no more than it allows
    assert budget.descriptor_room(0, 64, 50_000) == 50_000  # no connection limit: what the limit allows
    assert budget.descriptor_room(0, 64, None) == budget.TABLE_ROOM_MAX  # neither: bounded all the same
    assert budget.descriptor_room(10**8, 64, None) == budget.TABLE_ROOM_MAX


def test_making_room_closes_nothing_open_and_fails_quietly_past_the_limit():
    before = sorted(os.listdir("/proc/self/fd"))
    assert budget.make_table_room(3) is True  # already room: nothing done
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    # past ulimit -n: False, and the table grows as it did
    assert soft == resource.RLIM_INFINITY or budget.make_table_room(soft + 1) is False
    assert sorted(os.listdir("/proc/self/fd")) == before


def test_namesrv_admin_refused_by_a_server_out_of_descriptors_says_so_not_tls(tmp_path):
    """Under ``ulimit -n 256`` with 250 idle peers the server closes every new connection at once
    (fd_reserve). namesrv-admin said '... closed the connection before answering GET_KV_CONFIG (is
    the NameServer enforcing TLS? try --tls)': a wrong lead at 3 a.m. Now a second connection, asked
    for a TLS handshake, is closed at once too, and the error says the server refuses connections,
    as out of descriptors; an enforcing TLS port is still named as one (tests/admin/test_tls.py)."""
    from twisted_namesrv.admin.client import AdminError

    with flooded_server(tmp_path, 250) as (port, _):
        fresh = NamesrvClient(f"127.0.0.1:{port}", 5)
        try:
            fresh.call(RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k"})
        except AdminError as exc:
            text = str(exc)
        else:
            raise AssertionError("answered under a full descriptor budget")
        finally:
            fresh.close()
        assert "the connection before answering GET_KV_CONFIG" in text, text  # closed, or reset
        assert "refusing connections, as it does out of file descriptors" in text and "try --tls" not in text, text
