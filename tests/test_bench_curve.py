"""The scale curve's tool (tools/bench/curve.py behind ``scale.py --curve``, curve_report.py): a
run is written down step by step and a stopped run goes on where it stopped; the report reads
how each cost grows the way the doc says; client connections that cannot be opened say how
many were and why. The figures themselves are a benchmark's, never asserted."""

from __future__ import annotations

import importlib.util
import json
import os
import selectors
import socket
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "tools" / "bench"


@pytest.fixture
def curve(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import curve
    return curve


@pytest.fixture
def report(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import curve_report
    return curve_report


def test_steps_by_name_and_generation(curve):
    assert curve.step_named("base").compat == "4.9.8"
    assert curve.step_named("topics-1m").compat == "5.3.3"  # 200k topics a broker: only split registrations
    other = curve.step_named("topics-100k@5.3.3")
    assert (other.name, other.topics, other.compat) == ("topics-100k@5.3.3", 100_000, "5.3.3")
    assert curve.step_named("topics-1m@5.3.3") is curve.STEPS["topics-1m"]
    for bad in ("topics-2m", "base@4.0"):
        with pytest.raises(KeyError):
            curve.step_named(bad)


def test_a_big_table_goes_in_pieces_under_the_frame_limit(curve):
    topics = [f"T{i:07d}" for i in range(curve.SPLIT_TOPICS * 2 + 1)]
    frames = curve.register_frames("b", "127.0.0.1:1", topics, 1)
    assert len(frames) == 3
    assert max(len(f) for f in frames) < 16 << 20


def test_clients_that_cannot_connect_say_how_many_did_and_why(curve):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        with pytest.raises(curve.ClientsRefused, match=r"opened 0 of 3 client connections, then "
                                                         r"ConnectionRefusedError"):
            curve.open_clients(port, 3)


def test_the_server_runs_from_compiled_bytecode_as_installed(curve, tmp_path):
    """A checkout's package gets its bytecode before a server starts from it (RSS as installed)."""
    module = tmp_path / "twisted_namesrv" / "piece.py"
    module.parent.mkdir()
    module.write_text("VALUE = 1\n")
    curve.compiled(tmp_path)
    assert Path(importlib.util.cache_from_source(str(module))).is_file()


def test_a_stopped_server_leaves_no_process_of_its_group(curve, tmp_path):
    """A launcher's child that outlives it (here one that ignores SIGTERM) is stopped too before
    the next run starts: none of one server may run on into the next one's phases."""
    ours = (f"{sys.executable} -m twisted_namesrv --port {{port}} --bind 127.0.0.1 --data-dir {{data_dir}}"
            " --compat {compat}")
    server = curve.Server(f"sh -c \"(trap '' TERM; sleep 120) & exec {ours}\"", tmp_path, "group", core=None)
    server.wait_ready(60)
    server.stop(timeout=1)
    assert not curve.group_alive(server.proc.pid)


def scale(tmp: Path, *extra: str) -> subprocess.CompletedProcess:
    ours = (f"{sys.executable} -m twisted_namesrv --port {{port}} --bind 127.0.0.1 --data-dir {{data_dir}}"
            " --compat {compat}")
    (tmp / "scratch").mkdir(exist_ok=True)  # the tool's temporary folders, to see what it leaves
    return subprocess.run(
        [sys.executable, str(BENCH / "scale.py"), "--curve", "--steps", "tiny", "--rounds", "1",
         "--records", str(tmp / "runs.jsonl"), "--json", str(tmp / "curve.json"), "--markdown", str(tmp / "curve.md"),
         "--svg", str(tmp / "curve.svg"), "--compare", f"again={ours}", "--compare", "broken=false {port}",
         "--quiet-timeout", "0", *extra],
        cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ, "TMPDIR": str(tmp / "scratch")})


def test_the_longest_wait_is_split_into_the_servers_side_the_probes_and_neither(curve):
    """The probe's side is no longer left in 'neither': a 9 ms lookup whose probe waited 3 ms for
    core 1 and ran 1 ms, while the server ran 2 ms and waited 1 ms, leaves 2 ms to neither."""
    samples = [(10.0, 0.002, 0.1, 1.0, 0.0, 0.05, 1, 0.0, 0.0, 0.0, 0.0, 0.0),  # (start s, rtt s, own wait, ran,
               (10.1, 0.009, 3.0, 2.0, 1.0, 1.0, 2, 0.5, 1.5, 0.25, 2.5, 1.5),   # queued, own ran ms, slices,
                                                                                # ksoftirqd ran, waited; core 0's
                                                                                # ran, waited; other threads ran)
               (10.2, 0.001, 4.0, 0.0, 0.0, 0.0, 0, 0.0, 0.0, 0.0, 0.0, 0.0),  # the probe's longest own wait,
               (20.0, 0.050, 0.0, 0.0, 0.0, 0.0, 0, 0.0, 0.0, 0.0, 0.0, 0.0)]  # not the longest; outside the window
    got = curve.window(samples, 10.0, 11.0)
    assert got["probe_max_ms"] == 9.0 and got["probe_runqueue_max_ms"] == 4.0
    assert (got["probe_max_server_ran_ms"], got["probe_max_server_runqueue_ms"]) == (2.0, 1.0)
    assert (got["probe_max_own_runqueue_ms"], got["probe_max_own_ran_ms"]) == (3.0, 1.0)
    assert got["probe_max_server_slices"] == 2 and got["probe_max_neither_ms"] == 2.0
    assert (got["probe_max_softirqd_ran_ms"], got["probe_max_softirqd_runqueue_ms"]) == (0.5, 1.5)
    assert (got["probe_max_server_softirqd_ran_ms"], got["probe_max_server_softirqd_runqueue_ms"]) == (0.25, 2.5)
    assert got["probe_max_server_others_ran_ms"] == 1.5  # a thread of its pool or its log, part of the neither
    assert curve.longest_started(samples, 10.0, 11.0) == 10.1


def test_a_curve_run_is_written_as_it_goes_and_goes_on_where_it_stopped(tmp_path):
    """Each run is a line of the records file as soon as it ends; run again, the same command
    measures only what is missing (a failed run, a line cut by a kill), and the tables and the
    plot come from every run held."""
    done = scale(tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert [(r["step"], r["server"], "figures" in r) for r in runs] == [
        ("tiny", "ours", True), ("tiny", "again", True), ("tiny", "broken", False)]
    assert "server exited 1" in runs[2]["error"]
    figures = runs[0]["figures"]
    for phase in ("first_registration", "repeated_registration", "heartbeat_storm", "mass_disconnect"):
        assert figures[f"{phase}_s"] > 0 and figures[f"{phase}_probe_max_ms"] > 0
        # what else took the cores meanwhile: the probe's CPU, and the machine's that none of the three took
        assert figures[f"{phase}_probe_cpu_s"] >= 0 and figures[f"{phase}_others_cpu_s"] >= 0
        assert figures[f"{phase}_server_core_steal_s"] >= 0  # the host's, of the server's core
    assert runs[0]["quiet_before"] == {"waited_s": 0.0, "cores_busy": None}  # --quiet-timeout 0: no wait
    # what a scheduler trace of the run needs (core_holders.py): the processes, and when each phase's longest
    # lookup started, inside or just before its phase (a lookup waiting into it counts)
    assert {runs[0]["server_pid"], runs[0]["probe_pid"], runs[0]["curve_pid"]} <= set(range(1, 1 << 22))
    for phase, (t0, t1) in runs[0]["phase_windows"].items():
        at = runs[0]["probe_max_at"][phase]
        assert at <= t1 and at + figures[f"{phase}_probe_max_ms"] / 1e3 >= t0
    for phase in ("first_registration", "repeated_registration", "heartbeat_storm"):  # the brokers' side of each
        assert 0 < figures[f"{phase}_rtt_p50_ms"] <= figures[f"{phase}_rtt_max_ms"]
        assert figures[f"{phase}_load_cpu_s"] >= 0
    # the tiny step's load takes under half a millisecond of CPU in a phase at times (rounded to 0.0 ms:
    # a fresh clone's CI failed so); over its phases it is never nothing
    assert sum(figures[f"{phase}_load_cpu_s"] for phase in ("first_registration", "repeated_registration",
                                                              "heartbeat_storm")) > 0
    assert figures["rss_mib_registered"] > 0
    # a finished run's data and log are removed (a 1M step's Java log is near 900 MB); a failed run's log is kept,
    # named in its record, and the tool says where
    left = sorted(p.name.split("-")[0] for p in (tmp_path / "scratch").glob("namesrv-curve-*/*")
                  if p.suffix != ".properties")  # ours' configuration for the step
    assert left == ["broken", "broken"], left
    assert Path(runs[2]["log"]).exists() and "kept " in done.stderr
    with (tmp_path / "runs.jsonl").open("a") as f:
        f.write('{"round": 1, "step": "tiny", "ser')  # a run killed while writing its line

    again = scale(tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    lines = (tmp_path / "runs.jsonl").read_text().splitlines()
    rerun = [json.loads(line)["server"] for line in lines[4:]]
    assert rerun == ["broken"]  # only the failed run was measured again
    table = (tmp_path / "curve.md").read_text()
    assert "| 1k topics, 4 brokers, 50 conns | mass disconnect |" in table
    assert "longest wait: ours / again" in table
    ET.fromstring((tmp_path / "curve.svg").read_text())  # well-formed SVG
    summary = json.loads((tmp_path / "curve.json").read_text())
    assert {r["server"] for r in summary["records"]} == {"ours", "again", "broken"}
    assert len(summary["records"]) == 3  # the latest run of each

    only = subprocess.run([sys.executable, str(BENCH / "scale.py"), "--curve", "--steps", "tiny", "--rounds", "1",
                           "--records", str(tmp_path / "runs.jsonl"), "--report-only"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert only.returncode == 0 and "mass_disconnect_s" in only.stdout
    assert len((tmp_path / "runs.jsonl").read_text().splitlines()) == len(lines)


def synthetic(curve, report) -> dict:
    """ours: first registration linear in topics, constant in brokers; java: quadratic in brokers."""
    steps = [curve.step_named(n) for n in ("base", "topics-100k", "topics-1m", "brokers-1000", "brokers-5000")]
    rows = []
    for s in steps:
        ours = s.topics / 10_000 * 0.1
        java = 0.5 * (s.topics / 10_000) * (s.brokers / 10) ** 2
        rows.append({"step": s.name, "figure": "first_registration_s",
                     "ours": {"median": ours, "min": ours * 0.9, "max": ours * 1.1, "n": 3},
                     "java": {"median": java, "min": java, "max": java, "n": 3},
                     "ratio_to_java": {"median": ours / java, "min": ours / java, "max": ours / java, "n": 3}})
    return {"steps": [vars(s) for s in steps], "servers": {"ours": "ours", "java": "CMD"}, "rows": rows}


def test_how_a_cost_grows_is_read_from_the_ends_of_each_axis(curve, report):
    doc = synthetic(curve, report)
    assert [s["name"] for s in report.axis_series(doc, "topics")] == ["base", "topics-100k", "topics-1m"]
    assert [s["name"] for s in report.axis_series(doc, "brokers")] == ["base", "brokers-1000", "brokers-5000"]
    first = next(line for line in report.growth_table(doc).splitlines() if line.startswith("| first registration"))
    cells = [c.strip() for c in first.strip("|").split("|")][1:]
    topics_ours, topics_java, brokers_ours, brokers_java = cells[:4]
    assert topics_ours.endswith("k=1.00, linear") and topics_java.endswith("k=1.00, linear")
    assert brokers_ours.endswith("k=0.00, constant") and brokers_java.endswith("k=2.00, worse than linear")
    assert "×10 at ×10, ×100 at ×100" in topics_ours
    assert "generation" in report.growth_table(doc)  # 1M topics is a 5.3.3 step: said under the table
    assert [report.grows(k) for k in (0.1, 0.5, 1.0, 1.5, None)] == [
        "constant", "sub-linear", "linear", "worse than linear", "?"]


def test_the_plot_is_a_well_formed_svg_with_a_line_per_server_and_axis(curve, report):
    svg = ET.fromstring(report.svg(synthetic(curve, report)))
    lines = svg.findall("{http://www.w3.org/2000/svg}polyline")
    assert len(lines) == 2 * 2  # ours and java, along topics and brokers (the one figure given)


def test_every_step_of_the_curve_fits_the_route_tables_default_limits(curve):
    """The curve runs the server with its defaults, so the route tables' limits must stay above its
    largest step (issue 47): its tables counted as the server counts them, each broker a group of
    its own (masters in pairs share topics, not a brokerName), the probe's broker one more."""
    from twisted_namesrv.state.config import NamesrvConfig

    config = NamesrvConfig()
    steps = [step for name, step in curve.STEPS.items() if name != "tiny"]
    tables = {step.name: curve.broker_tables(step) + [("curve-probe", "127.0.0.1:19999", curve.PROBE_TOPICS)]
              for step in steps}
    groups = {name: len({broker for broker, _, _ in brokers}) for name, brokers in tables.items()}
    per_group = {name: max(len(topics) for _, _, topics in brokers) for name, brokers in tables.items()}
    entries = {name: sum(len(set(topics)) for _, _, topics in brokers) for name, brokers in tables.items()}
    assert per_group["topics-1m"] == 200_000 and entries["topics-1m"] == 2_000_002  # the largest tables
    assert groups["brokers-5000"] == 5_001  # the most groups and brokers
    assert max(per_group.values()) <= config["maxTopicsPerBroker"]
    assert max(groups.values()) <= config["maxBrokerGroups"]
    assert max(groups.values()) <= config["maxBrokers"]  # one broker a group
    assert max(entries.values()) <= config["maxTopicQueueEntries"]


def test_the_load_at_sched_idle_goes_back_to_the_normal_policy_before_the_next_server(curve):
    """``--load-idle``, ``--probe-idle``: the load, the probe at SCHED_IDLE while a step runs; the curve's process
    back at the normal policy after it, so the next server it starts (a child inherits the policy)
    runs as before. Tried in a child process: the test's own policy is left alone."""
    if not hasattr(os, "SCHED_IDLE"):
        pytest.skip("no SCHED_IDLE here")
    code = ("import os, sys; sys.path.insert(0, sys.argv[1]); import curve\n"
            "assert curve.load_priority(True) and os.sched_getscheduler(0) == os.SCHED_IDLE\n"
            "assert curve.probe_priority(idle=True) == 'idle' and os.sched_getscheduler(0) == os.SCHED_IDLE\n"
            "assert curve.load_priority(False) and os.sched_getscheduler(0) == os.SCHED_OTHER\n")
    subprocess.run([sys.executable, "-c", code, str(BENCH)], check=True, timeout=60)


class Answering:
    """A server in a thread of its own that answers every whole frame on every connection with a
    success (as a NameServer answers a registration or a lookup): what the curve's load and probe
    are counted against, in this thread."""

    def __init__(self, curve) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.answer = curve.frame(0, {}, b"")
        self.stopped = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        chosen = selectors.DefaultSelector()
        chosen.register(self.listener, selectors.EVENT_READ)
        pending: dict[socket.socket, bytes] = {}
        while not self.stopped:
            for key, _ in chosen.select(0.05):
                if key.fileobj is self.listener:
                    conn, _ = self.listener.accept()
                    chosen.register(conn, selectors.EVENT_READ)
                    pending[conn] = b""
                    continue
                conn = key.fileobj
                data = conn.recv(1 << 20)
                if not data:
                    chosen.unregister(conn)
                    conn.close()
                    continue
                data = pending[conn] + data
                while len(data) >= 4 and len(data) >= 4 + int.from_bytes(data[:4], "big"):
                    data = data[4 + int.from_bytes(data[:4], "big"):]
                    conn.sendall(self.answer)
                pending[conn] = data
        chosen.close()

    def close(self) -> None:
        self.stopped = True
        self.thread.join(10)
        self.listener.close()


def test_the_storms_load_runs_two_python_calls_a_frame(curve):
    """The brokers' load (curve.Load) sends prebuilt frames from one loop: a storm and a sending 8 in
    flight run two Python functions a frame (its send and its answer's check; the reads, the sends
    and the polls are the interpreter's C), whatever the timing, where each frame was an object, a
    push, a pull and a JSON decode (docs/benchmarks.md, what the curve's load and probe take)."""
    from tests.support import python_calls_run

    server = Answering(curve)
    conns = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(40)]
    try:
        for conn in conns:
            conn.setblocking(False)
        load = curve.Load(conns)
        frames = [[curve.frame(103, {"brokerName": f"b{i}"}, b"{}" * 50)] for i in range(len(conns))]
        trips: list[list[float]] = []
        load.send(frames, None)  # each connection watched from its first sending on
        in_flight = python_calls_run(lambda: trips.append(load.send(frames, None)))
        storm = python_calls_run(lambda: trips.append(load.send(frames, 0.02)))
        assert in_flight == storm == 3 + 2 * len(frames)  # the counted lambda, send, _send, then two a frame
        assert [len(t) for t in trips] == [len(frames)] * 2 and min(min(t) for t in trips) > 0
        load.close()
    finally:
        for conn in conns:
            conn.close()
        server.close()


def test_the_minimal_probe_runs_nothing_but_its_read_between_its_lookups(curve):
    """The probe's loop (curve.lookups) sends a prebuilt lookup and reads its answer: no Python runs
    but ``read_answer`` a lookup, and its stop is looked at once every PROBE_BATCH lookups; each
    sample is its start and its round trip, all the window reads of them."""
    from tests.support import python_calls_run

    class Stop:
        looked = 0

        def is_set(self) -> bool:
            self.looked += 1
            return self.looked > 2

    server = Answering(curve)
    requests = [curve.frame(105, {"topic": curve.PROBE_TOPIC}, opaque=curve.PROBE_OPAQUE + k)
                for k in range(curve.PROBE_BATCH)]
    try:
        with socket.create_connection(("127.0.0.1", server.port)) as s:
            s.settimeout(None)
            samples: list = []
            stop = Stop()
            calls = python_calls_run(lambda: samples.extend(curve.lookups(s, stop, requests)))
    finally:
        server.close()
    assert len(samples) == 2 * curve.PROBE_BATCH and stop.looked == 3
    assert calls == 2 + len(samples) + stop.looked  # the counted lambda, lookups, a read_answer each, is_set
    assert all(len(sample) == 2 and sample[1] > 0 for sample in samples)
    window = curve.window(samples, samples[0][0], samples[-1][0])
    assert set(window) == {"probe_max_ms", "lookup_p50_ms", "lookup_p99_ms"} and window["probe_max_ms"] > 0


def test_the_load_sends_big_tables_in_pieces_the_socket_takes_in_parts(curve):
    """A table of 1M topics goes in pieces of 8 MiB, each the next one sent after the answer to the
    last, and more than a socket takes at once: what is left is sent as the socket drains (Load's
    EPOLLOUT), in a storm as 8 in flight, and each broker's round trip runs to its last answer."""
    server = Answering(curve)
    conns = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(3)]
    pushed: list[int] = []
    try:
        for conn in conns:
            conn.setblocking(False)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 16)  # a piece never goes at once
        load = curve.Load(conns)
        push = load._push
        load._push = lambda fd, left: pushed.append(fd) or push(fd, left)
        frames = [[curve.frame(103, {"brokerName": f"b{i}"}, bytes(3 << 20)) for _ in range(2)] for i in range(3)]
        assert len(load.send(frames, None)) == 3
        assert len(load.send(frames, 0.01)) == 3
        assert set(pushed) == {conn.fileno() for conn in conns}
        load.close()
    finally:
        for conn in conns:
            conn.close()
        server.close()
