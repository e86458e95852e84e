"""server_turns.py's report of a curve phase's longest lookup wait: which of the reactor's turns,
delayed calls and collector passes overlapped it, and their CPU together. What a run shows is a
benchmark's; here only that the records are read right."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "tools" / "bench"


@pytest.fixture
def server_turns(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import server_turns

    return server_turns


def test_the_longest_wait_lists_what_overlapped_it_and_the_reactors_cpu_in_it(server_turns):
    """A lookup sent at 10.000 s waited 9 ms: a turn's reads just before it, a Cooperator tick of
    1 ms of CPU over 8.5 ms of wall (preempted) and the turn that answered it overlap; a turn
    before and a collection after do not."""
    records = [
        ["io", 9.990, 0.2, 1, 0.2, 0.5, 0.0, 0.0, 0],  # over before the lookup came
        ["io", 9.9995, 0.4, 1, 0.6, 0.01, 0.0, 0.0, 0],
        ["call", 10.0002, 1.0, "Cooperator._tick", 8.5],
        ["io", 10.0088, 0.1, 2, 0.1, 0.02, 0.0, 0.0, 0],
        ["gc", 10.020, 0.3, 0, 0.3],
    ]
    lines = server_turns.during(records, 10.0, 9.0)
    assert [line.split(":")[0].split("  ")[-1] for line in lines[:-1]] == [
        "reads (1 ready)", "call Cooperator._tick", "reads (2 ready)"]
    assert "1.00 ms of CPU in 8.50" in lines[1]
    assert "epoll wait before 0.01, runnable 0.00" in lines[0]
    assert lines[-1] == "  the reactor's CPU in it 1.50 ms of 9.00"


def test_the_longest_waits_are_the_last_runs(server_turns, tmp_path):
    """The curve's records: each phase's longest wait from the last run that has phase windows (its
    start, ``probe_max_at``, and its length); a phase without a start is left out."""
    runs = [
        {"phase_windows": {"heartbeat_storm": [1.0, 2.0]}, "probe_max_at": {"heartbeat_storm": 1.5},
         "figures": {"heartbeat_storm_probe_max_ms": 3.0}},
        {"phase_windows": {"heartbeat_storm": [5.0, 6.0], "mass_disconnect": [7.0, 8.0]},
         "probe_max_at": {"heartbeat_storm": 5.25, "mass_disconnect": None},
         "figures": {"heartbeat_storm_probe_max_ms": 4.5, "mass_disconnect_probe_max_ms": 1.0}},
    ]
    path = tmp_path / "R.jsonl"
    path.write_text("".join(json.dumps(run) + "\n" for run in runs))
    assert server_turns.longest_waits(path) == {"heartbeat_storm": (5.25, 4.5)}
    assert server_turns.longest_waits(None) == {}


def test_the_real_servers_turns_are_timed(tmp_path):
    """On the server's own reactor a turn polls its clients' epoll set itself (not the reactor's
    ``_poller``): the turns are timed there, one record a turn that read something, with what it
    did counted."""
    import signal
    import socket
    import subprocess
    import sys
    import time

    from tests.support import free_port
    from twisted_namesrv.remoting import RemotingCommand, RequestCode

    port, out = free_port(), tmp_path / "T.jsonl"
    server = subprocess.Popen([sys.executable, str(BENCH / "server_turns.py"), "--over", "0", "--out", str(out), "--",
                               "--port", str(port), "--bind", "127.0.0.1", "--data-dir", str(tmp_path / "data")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        for _ in range(300):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                    s.sendall(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, opaque=1).encode())
                    assert s.recv(1 << 16)
                break
            except ConnectionRefusedError:
                time.sleep(0.1)
        else:
            pytest.fail("the server never answered")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    turns = [record for record in records if record[0] == "io"]
    assert turns
    # each turn says what it did: connections accepted, sockets served, registrations begun
    assert sum(turn[9] for turn in turns) >= 1 and sum(turn[10] for turn in turns) >= 2
    assert sum(turn[11] for turn in turns) == 0  # a cluster-info request, no registration


def test_the_longest_turns_say_what_they_did(server_turns, capsys):
    """A turn's record with its counts (connections accepted, sockets served, registrations begun)
    is reported with them; an older record without them, with its ready sockets alone."""
    records = [
        ["io", 1.0, 11.6, 1, 12.0, 0.01, 0.02, 0.0, 0, 420, 1, 0],
        ["io", 2.0, 2.3, 2, 2.3, 0.01, 0.0, 0.0, 0, 0, 9, 8],
        ["io", 3.0, 0.5, 1, 0.5, 0.01, 0.0, 0.0, 0],
    ]
    server_turns.report_kinds(records, 3)
    assert capsys.readouterr().out == (
        "reactor turn's reads: 3 of them; longest (ms of CPU) 11.6 (1 ready, 420 accepted, 0 registrations), "
        "2.3 (2 ready, 0 accepted, 8 registrations), 0.5 (1 ready)\n")


def test_the_sockets_a_turn_served_are_counted(server_turns):
    """A storm's turns: how many ready sockets each served (the brokers' share and a lookup's), the
    most first; records without the counts say nothing."""
    records = [
        ["io", 1.0, 0.3, 2, 0.3, 0.01, 0.0, 0.0, 0, 0, 9, 0],
        ["io", 1.1, 0.3, 2, 0.3, 0.01, 0.0, 0.0, 0, 0, 8, 0],
        ["io", 1.2, 0.3, 2, 0.3, 0.01, 0.0, 0.0, 0, 0, 9, 0],
        ["call", 1.3, 1.0, "Cooperator._tick", 1.0],
        ["io", 1.4, 0.1, 1, 0.1, 0.01, 0.0, 0.0, 0],
    ]
    assert server_turns.served_per_turn(records) == (
        "sockets served a turn: at most 9 (3 turns; served: turns 8: 1, 9: 2)")
    assert server_turns.served_per_turn(records[3:]) is None
