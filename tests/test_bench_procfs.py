"""tools/bench/procfs.py: the one reader of /proc the benchmarks share (a process's CPU, its
descendants and memory, the cores' busy time, a thread's schedstat), on a /proc of the test's own."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "tools" / "bench"


@pytest.fixture
def procfs(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import procfs

    return procfs


def stat_line(pid: int, comm: str, ppid: int, utime: int, stime: int, cutime: int = 0, cstime: int = 0,
              minflt: int = 0, cminflt: int = 0, majflt: int = 0) -> str:
    middle = f"0 0 0 0 0 {minflt} {cminflt} {majflt} 0"  # pgrp ... cmajflt: fields 5 to 13
    return f"{pid} ({comm}) S {ppid} {middle} {utime} {stime} {cutime} {cstime} 20 0 1 0 100\n"


def fake_process(
    proc: Path,
    pid: int,
    comm: str,
    ppid: int,
    utime: int,
    stime: int,
    children: list[int],
    cutime: int = 0,
    cstime: int = 0,
    status: str = "",
) -> None:
    task = proc / str(pid) / "task" / str(pid)
    task.mkdir(parents=True)
    (proc / str(pid) / "stat").write_text(stat_line(pid, comm, ppid, utime, stime, cutime, cstime))
    (task / "children").write_text(" ".join(map(str, children)) + (" " if children else ""))
    (proc / str(pid) / "status").write_text(status)


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    """A server (1) whose launcher started a JVM (2, named with a ') ' in it) that started a worker (3)."""
    fake_process(tmp_path, 1, "sh", 0, 10, 5, [2], cutime=7, cstime=1, status="VmRSS:\t  1024 kB\nVmHWM:\t 2048 kB\n")
    fake_process(tmp_path, 2, "java) S 9 (x", 1, 300, 100, [3], status="Name:\tjava\nVmRSS:\t 4096 kB\n")
    fake_process(tmp_path, 3, "python3", 2, 20, 0, [], cutime=50, cstime=50)
    fake_process(tmp_path, 4, "other", 0, 999, 999, [])
    (tmp_path / "stat").write_text(
        "cpu  1000 10 200 5000 40 3 7 600 0 0\n"
        "cpu0 600 10 100 2000 20 2 3 300 0 0\n"
        "cpu1 400 0 100 3000 20 1 4 300 0 0\n"
        "intr 12345\n"
    )
    return tmp_path


def test_a_stat_line_is_read_after_the_last_parenthesis_of_its_name(procfs, proc) -> None:
    stat = procfs.pid_stat(2, proc)
    assert (stat.comm, stat.ppid, stat.own_ticks, stat.reaped_ticks) == ("java) S 9 (x", 1, 400, 0)
    assert procfs.pid_stat(99, proc) is None and procfs.pid_cpu_s(99, proc) == 0.0  # gone
    assert procfs.pid_cpu_s(2, proc) == 400 / procfs.TICKS
    (proc / "2" / "stat").write_text(stat_line(2, "java", 1, 300, 100, majflt=7))
    assert procfs.pid_major_faults(2, proc) == 7 and procfs.pid_major_faults(99, proc) == 0


def test_a_stat_lines_minor_faults_its_own_and_its_reaped_childrens(procfs, tmp_path) -> None:
    (tmp_path / "5").mkdir()
    (tmp_path / "5" / "stat").write_text(stat_line(5, "python3", 1, 1, 1, minflt=71_294, cminflt=12))
    stat = procfs.pid_stat(5, tmp_path)
    assert (stat.minflt, stat.cminflt, stat.utime, stat.stime) == (71_294, 12, 1, 1)


def test_the_descendants_are_found_by_children_files_and_by_parent_links_alike(procfs, proc) -> None:
    assert sorted(procfs.descendants(1, proc)) == [2, 3]
    assert sorted(procfs._descendants_by_parent(1, proc)) == [2, 3]
    for pid in (1, 2, 3, 4):  # a kernel without the children files
        (proc / str(pid) / "task" / str(pid) / "children").unlink()
    assert sorted(procfs.descendants(1, proc)) == [2, 3]
    assert procfs.tree_cpu_s(1, proc) == (15 + 400 + 20) / procfs.TICKS  # living ones' own CPU only


def test_a_kernel_thread_is_found_by_name_among_kthreadds_children_only(procfs, proc) -> None:
    fake_process(proc, 2000, "ksoftirqd/1", 5, 0, 0, [])  # a process that only calls itself so
    assert procfs.kernel_thread("ksoftirqd/1", proc) is None
    fake_process(proc, 21, "ksoftirqd/1", 2, 3, 9, [])
    fake_process(proc, 16, "ksoftirqd/0", 2, 3, 9, [])
    assert procfs.kernel_thread("ksoftirqd/1", proc) == 21


def test_memory_lines_by_name_zero_when_missing_none_when_gone(procfs, proc) -> None:
    assert procfs.status_kib(1, ("VmRSS", "VmHWM"), proc) == {"VmRSS": 1024, "VmHWM": 2048}
    assert procfs.status_kib(2, ("VmRSS", "VmHWM"), proc) == {"VmRSS": 4096, "VmHWM": 0}
    assert procfs.status_kib(99, ("VmRSS",), proc) is None


def test_cores_busy_leave_out_idle_iowait_and_steal_for_the_machine_and_for_some_cores(procfs, proc) -> None:
    """user + nice + system + irq + softirq; run.py counted steal too (600 ticks here), curve.py not."""
    assert procfs.cores_busy_s(None, proc) == (1000 + 10 + 200 + 3 + 7) / procfs.TICKS
    assert procfs.cores_busy_s({1}, proc) == (400 + 100 + 1 + 4) / procfs.TICKS
    assert procfs.cores_busy_s({0, 1}, proc) == procfs.cores_busy_s(None, proc)


def test_schedstat_read_once_or_through_a_kept_descriptor(procfs, tmp_path) -> None:
    path = tmp_path / "schedstat"
    path.write_text("2500000 1000000 42\n")
    assert procfs.schedstat_ns(path) == (2_500_000, 1_000_000)
    kept = procfs.Schedstat(path)
    assert kept.read() == (2.5, 1.0) and kept.read_ns() == (2_500_000, 1_000_000)
    assert procfs.parse_schedstat_slices(path.read_bytes()) == (2_500_000, 1_000_000, 42)
    assert kept.read_slices() == (2.5, 1.0, 42)
    kept.close()
    assert kept.read() == (0.0, 0.0) and procfs.Schedstat(tmp_path / "gone").read_ns() == (0, 0)
    assert kept.read_slices() == (0.0, 0.0, 0)
    with pytest.raises(OSError):
        procfs.schedstat_ns(tmp_path / "gone")


@pytest.mark.skipif(not Path(f"/proc/{os.getpid()}/stat").exists(), reason="Linux /proc")
def test_the_live_proc_reads(procfs) -> None:
    """This process's own figures, as Linux gives them: its CPU, memory and thread's schedstat."""
    assert procfs.pid_stat(os.getpid()).ppid == os.getppid()
    import resource  # the field read as majflt is the one the kernel counts as this process's major faults
    assert procfs.pid_major_faults(os.getpid()) == resource.getrusage(resource.RUSAGE_SELF).ru_majflt
    assert procfs.status_kib(os.getpid(), ("VmRSS",))["VmRSS"] > 0
    ran, _ = procfs.schedstat_ns(f"/proc/self/task/{threading.get_native_id()}/schedstat")
    assert ran > 0 and procfs.cores_busy_s() > 0


def test_a_launcher_chain_of_only_children_leads_to_the_server(procfs, proc) -> None:
    """curve.Server.main_pid read the children files itself, beside this reader."""
    assert procfs.launched(1, proc) == 3  # sh -> java -> python3
    assert procfs.launched(3, proc) == 3 and procfs.launched(99, proc) == 99  # no child; gone
    (proc / "1" / "task" / "1" / "children").write_text("2 4 ")
    assert procfs.launched(1, proc) == 1  # two children: the launcher is the server


def test_a_processs_threads_cpu_by_name_digits_dropped(procfs, proc) -> None:
    """spark_timeline.py parsed each thread's stat line itself (the JVM's compiler and task threads)."""
    for tid, name, utime in ((2, "java", 5), (21, "C2 CompilerThre0", 30), (22, "C2 CompilerThre1", 12)):
        task = proc / "2" / "task" / str(tid)
        task.mkdir(parents=True, exist_ok=True)
        (task / "stat").write_text(stat_line(tid, name, 1, utime, 1))
    assert procfs.thread_ticks(2, proc) == {"java": 6, "C CompilerThre": 44}
    assert procfs.thread_ticks(99, proc) == {}


def test_no_benchmark_reads_proc_but_procfs() -> None:
    import re

    reads = re.compile(r"""(Path|open|listdir|read_text)\(f?["']/proc""")
    found = {path.name: line.strip() for path in BENCH.glob("*.py") if path.name != "procfs.py"
             for line in path.read_text().splitlines() if reads.search(line)}
    assert found == {}


def thread_files(proc: Path, pid: int, tid: int, ran_ns: int, voluntary: int) -> None:
    task = proc / str(pid) / "task" / str(tid)
    task.mkdir(parents=True, exist_ok=True)
    (task / "schedstat").write_text(f"{ran_ns} 0 7\n")
    (task / "status").write_text(f"Name:\tpython\nvoluntary_ctxt_switches:\t{voluntary}\n"
                                 "nonvoluntary_ctxt_switches:\t5\n")


def test_the_other_threads_run_time_leaves_the_main_one_out_and_lists_new_threads_when_due(procfs, tmp_path) -> None:
    """A probe's lookup counts what the server's pool and log threads ran, never its main thread;
    a thread started since the last listing is counted from the next one, never between two reads."""
    thread_files(tmp_path, 10, 10, 9_000_000, 3)  # the main thread
    thread_files(tmp_path, 10, 11, 2_000_000, 4)
    others = procfs.OtherThreads(10, relist=0.1, proc=tmp_path)
    others.list_if_due(100.0)
    assert others.ran_ms() == 2.0
    thread_files(tmp_path, 10, 12, 5_000_000, 1)  # a pool's thread started meanwhile
    others.list_if_due(100.05)  # not due: the same threads
    assert others.ran_ms() == 2.0
    others.list_if_due(100.2)
    assert others.ran_ms() == 7.0
    assert procfs.thread_switches(10, tmp_path) == (3, 8)  # the main thread's sleeps, every thread's
    assert procfs.thread_switches(99, tmp_path) == (0, 0)  # gone
    others.close()
    assert procfs.OtherThreads(None).ran_ms() == 0.0  # no server process: nothing
