"""The Spark benchmark's view of where a core sits idle (tools/bench/spark_pcap.py): per stage of a
run, from Spark's event log, its tasks, its span and the core-seconds idle within it, and the
last stage's span (the liveness stage, one task per NameServer). The figures themselves are a
benchmark's, never asserted; what is asserted is how they are read from the log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

BENCH = Path(__file__).resolve().parents[1] / "tools" / "bench"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import spark_pcap
    return spark_pcap


def _task_end(stage: int, launch_ms: int, finish_ms: int) -> dict:
    return {"Event": "SparkListenerTaskEnd", "Stage ID": stage,
            "Task Info": {"Launch Time": launch_ms, "Finish Time": finish_ms}}


def test_idle_core_seconds_per_stage_in_order_of_their_tasks(bench):
    events = [
        {"Event": "SparkListenerJobStart", "Job ID": 2, "Stage IDs": [5]},
        {"Event": "SparkListenerJobStart", "Job ID": 3, "Stage IDs": [6, 7]},
        # decoding: two cores busy but for the last 0.5 s of one of them
        _task_end(6, 1_000, 4_000), _task_end(6, 1_000, 3_500),
        # the liveness stage: one task of 1.5 s, the other core's task empty
        _task_end(7, 4_010, 4_020), _task_end(7, 4_010, 5_510),
        # a stage logged earlier whose tasks ran first (stage ids are not the order they ran in)
        _task_end(5, 100, 900),
    ]
    found = bench.stage_idle(events, cores=2)
    assert [(s["tasks"], s["span_s"], s["idle_core_s"]) for s in found["stages"]] == [
        (1, 0.8, 0.8), (2, 3.0, 0.5), (2, 1.5, 1.49)]
    assert found["idle_core_s"] == pytest.approx(0.8 + (4.51 * 2 - 3.0 - 2.5 - 0.01 - 1.5))  # within each job
    assert found["last_stage_s"] == 1.5


def test_stages_side_by_side_count_their_idle_once(bench):
    """Two stages of one job running at once, a task each on one of the two cores: the job's
    cores were busy throughout, though each stage alone leaves one core idle."""
    events = [{"Event": "SparkListenerJobStart", "Job ID": 7, "Stage IDs": [8, 9]},
              _task_end(8, 0, 2_000), _task_end(9, 0, 2_000)]
    found = bench.stage_idle(events, cores=2)
    assert [s["idle_core_s"] for s in found["stages"]] == [2.0, 2.0]
    assert found["idle_core_s"] == 0


def test_no_tasks_no_stages(bench):
    assert bench.stage_idle([{"Event": "SparkListenerJobEnd"}], cores=2) == {
        "stages": [], "idle_core_s": 0, "last_stage_s": 0.0, "stages_s": 0.0}


def test_each_task_s_span_and_the_time_some_stage_ran(bench):
    """Each stage's tasks' spans in launch order; the time some stage ran counts two stages side by
    side once and the driver's gap between two jobs not at all: the rest of a run is the driver's."""
    events = [{"Event": "SparkListenerJobStart", "Job ID": 1, "Stage IDs": [1]},
              {"Event": "SparkListenerJobStart", "Job ID": 2, "Stage IDs": [2, 3]},
              _task_end(1, 100, 1_100), _task_end(1, 100, 900),  # the reading job
              _task_end(2, 1_300, 2_300), _task_end(3, 1_500, 2_600), _task_end(3, 2_300, 2_400)]
    found = bench.stage_idle(events, cores=2)
    assert [s["task_s"] for s in found["stages"]] == [[0.8, 1.0], [1.0], [1.1, 0.1]]
    assert found["stages_s"] == 1.0 + 1.3  # 0.1-1.1 s, then 1.3-2.6 s; the driver's 0.2 s between


def test_a_round_s_share_split_into_what_the_driver_and_idle_cores_cost(bench):
    """The share points a round lost, from its own runs against its own probe: had neither run the
    driver's time outside the stages, had the two-core run no idle core within its stages, and what
    is left below 1; the driver's seconds as a share of the two-core run."""
    one = {"job_s": 4.0, "outside_stages_s": 0.3, "idle_core_s": 0.0}
    two = {"job_s": 2.4, "outside_stages_s": 0.3, "idle_core_s": 0.2}
    lost = bench.share_lost(one, two, scaling=2.0)
    share, no_driver, no_idle = 4.0 / 2.4 / 2, 3.7 / 2.1 / 2, 4.0 / 2.3 / 2
    assert lost == {"share": round(share, 3), "driver": round(no_driver - share, 3),
                    "idle": round(no_idle - share, 3), "rest": round(1 - no_driver - (no_idle - share), 3),
                    "driver_of_job": 0.125}
    assert lost["share"] + lost["driver"] + lost["idle"] + lost["rest"] == pytest.approx(1, abs=0.002)
    whole = bench.share_lost({**one, "outside_stages_s": 0.0}, {**two, "outside_stages_s": 0.0, "idle_core_s": 0.0},
                             scaling=4.0 / 2.4)
    assert (whole["share"], whole["driver"], whole["idle"], whole["rest"]) == (1.0, 0.0, 0.0, 0.0)


def test_event_log_read_as_it_grows_whole_lines_only(bench, tmp_path):
    logged = tmp_path / "app-1.inprogress"
    logged.write_text(json.dumps({"Event": "a"}) + "\n" + '{"Event": "b"')  # the writer is mid-line
    log = bench.EventLog(tmp_path)
    assert log.new_events() == [{"Event": "a"}]
    with logged.open("a") as f:
        f.write('}\n{"Event": "c"}\n')
    assert log.new_events() == [{"Event": "b"}, {"Event": "c"}]
    assert log.new_events() == []


def test_the_two_core_probe_runs_alone_together_together_alone_and_takes_the_lesser_of_each(bench, monkeypatch):
    """The first alone run on core 0 is slowed (the Spark children's JVMs finishing): the former
    probe read that as two cores doing more than twice the work of one (2.2); the lesser of each
    core's two alone runs, over the lesser of the two together runs, does not (1.9)."""
    monkeypatch.setattr(bench.os, "sched_getaffinity", lambda pid: {0, 1})
    timed = iter([[2.2], [2.0], [2.0, 1.9], [2.1, 2.05], [2.0], [1.9]])
    order = []

    def probes(capture, cores, probed):
        order.append(tuple(cores))
        assert probed == [0, 1]  # the other core's work is counted while a copy runs alone
        return [(seconds, 1.0 if len(cores) == 1 else 1.05) for seconds in next(timed)], 0.0

    monkeypatch.setattr(bench, "probes", probes)
    found = bench.two_core_probe(Path("capture.pcap"))
    assert order == [(0,), (1,), (0, 1), (0, 1), (1,), (0,)]
    assert found["alone_s"] == [1.9, 2.0] and found["together_s"] == 2.0
    assert found["scaling"] == pytest.approx(3.9 / 2.0)
    assert found["scaling_first"] == pytest.approx(4.2 / 2.0)
    assert found["cpu_scaling"] == pytest.approx(2 / 1.05)  # side by side, each copy's CPU 5% more
    assert [run["kind"] for run in found["runs"]] == ["alone on 0", "alone on 1", "together", "together",
                                                      "alone on 1", "alone on 0"]


def test_the_probes_copies_set_malloc_as_the_workers_are_set(bench, monkeypatch):
    """A forked copy inherits its parent's malloc, not the workers' (their variables are read as a
    process starts): the probe sets the same values itself, from the one place that holds them."""
    from spark_analysis.spark.session import WORKER_MALLOC

    called = []

    class Libc:
        def mallopt(self, parameter, value):
            called.append((parameter, value))
            return 1

    monkeypatch.setattr(bench.ctypes, "CDLL", lambda name: Libc())
    bench._malloc_as_workers()
    assert called == [(-3, int(WORKER_MALLOC["MALLOC_MMAP_THRESHOLD_"])),
                      (-1, int(WORKER_MALLOC["MALLOC_TRIM_THRESHOLD_"]))]
