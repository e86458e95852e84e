"""A NameServer's starts counted in its data directory (starts.py: ``namesrv_starts_total``), so that a
crash loop faster than the scrapes shows: the count survives the process, and the first scrape after
any start sees every start before it.  The file fails as the stores do: read refused, the count starts
again; a save refused, the server starts all the same."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest
import pytest_twisted

from tests.hostile.faults import disk_full, tiny_tmpfs
from tests.support import server_config, start_server
from twisted_namesrv.starts import LIMIT, STARTS_FILE, STOPPED_SUFFIX, Counted, count_clean_stop, count_start


def counted(path) -> tuple[int, Counter, Counter]:
    failures, refusals = Counter(), Counter()
    return count_start(path, failures, refusals).starts, failures, refusals


def test_each_start_adds_one_to_the_count_in_the_file(tmp_path):
    path = tmp_path / "data" / STARTS_FILE
    assert [counted(path)[0] for _ in range(3)] == [1, 2, 3]
    assert json.loads(path.read_text()) == {"starts": 3, "unclean": 2, "running": True}  # none stopped cleanly


@pytest.mark.parametrize(("content", "reason"), [
    (b'{"starts": 4', "corrupt"), (b'{"starts": -1}', "corrupt"), (b'{"starts": "7"}', "corrupt"),
    (b'{"starts": true}', "corrupt"), (b"[]", "corrupt"), (b'"starts"', "corrupt"),
    (b'{"starts": 4, "unclean": -1, "running": false}', "corrupt"),
    (b'{"starts": 4, "unclean": 1, "running": 1}', "corrupt"),
    (b"\x00" * 10, "corrupt"), (b"[" * LIMIT, "corrupt"),
    (b"\xff\xfe", "corrupt"),
    (b" " * (LIMIT + 1), "too_big"),
])
def test_a_file_that_is_not_a_count_starts_it_again_counted(tmp_path, content, reason):
    path = tmp_path / STARTS_FILE
    path.write_bytes(content)
    starts, failures, refusals = counted(path)
    assert (starts, failures, refusals) == (1, Counter(), Counter({("starts", reason): 1}))
    assert json.loads(path.read_text()) == {"starts": 1, "unclean": 0, "running": True}


def test_a_fifo_in_its_place_is_not_read(tmp_path):
    path = tmp_path / STARTS_FILE
    os.mkfifo(path)
    starts, _, refusals = counted(path)
    assert starts == 1 and refusals == Counter({("starts", "not_regular"): 1})


def test_a_count_that_cannot_be_saved_is_this_runs_and_counted(tmp_path):
    (tmp_path / "data").write_text("a file where the data directory should be")
    starts, failures, refusals = counted(tmp_path / "data" / STARTS_FILE)
    assert starts == 1 and refusals == Counter({("starts", "unreadable"): 1})  # (ENOTDIR, read and written)
    assert sum(failures.values()) == 1 and next(iter(failures))[0] == "starts"


@pytest_twisted.inlineCallbacks
def test_every_start_of_a_server_on_its_data_dir_is_counted_and_served(tmp_path):
    """Two starts of a server on one data directory: the second serves 2, whether or not any scrape
    saw the first."""
    for expected in (1, 2):
        service, _ = yield start_server(server_config(tmp_path))
        try:
            assert service.metrics.starts == expected
        finally:
            yield service.stopService()
    assert json.loads((tmp_path / STARTS_FILE).read_text()) == {"starts": 2, "unclean": 0, "running": False}


def test_only_a_start_after_a_run_that_did_not_stop_cleanly_is_unclean(tmp_path):
    """Three rolling restarts in 15 minutes (every NameServer stopped cleanly three times) paged
    NamesrvRestarting (critical, "it keeps dying") on every NameServer, live with the 5.3.3 rig:
    the count could not tell them from a crash loop. A run that stops cleanly says so in the file."""
    path, failures = tmp_path / STARTS_FILE, Counter()
    first = count_start(path, failures, Counter())
    count_clean_stop(path, first, failures)  # SIGTERM: stopped cleanly
    second = count_start(path, failures, Counter())
    assert (first, second) == (Counted(1, 0), Counted(2, 0))
    third = count_start(path, failures, Counter())  # the second was killed: no clean stop's mark
    assert third == Counted(3, 1) and not failures


def test_a_file_of_a_server_before_the_clean_stops_mark_counts_its_last_run_clean(tmp_path):
    path = tmp_path / STARTS_FILE
    path.write_text('{"starts": 5}')  # an upgrade in place: no false unclean start
    assert count_start(path, Counter(), Counter()) == Counted(6, 0)


def test_a_clean_stop_that_cannot_be_marked_is_counted_unclean_next_time(tmp_path):
    """Neither prepared at the start nor writable at the stop: said and counted, the file as the
    start left it (running)."""
    path, failures = tmp_path / STARTS_FILE, Counter()
    (tmp_path / (STARTS_FILE + STOPPED_SUFFIX + ".tmp")).mkdir()  # the mark cannot be prepared (EISDIR)
    first = count_start(path, failures, Counter())
    assert sum(failures.values()) == 1
    (tmp_path / (STARTS_FILE + ".tmp")).mkdir()  # nor written at the stop
    count_clean_stop(path, first, failures)
    assert sum(failures.values()) == 2 and {store for store, _ in failures} == {"starts"}
    (tmp_path / (STARTS_FILE + ".tmp")).rmdir()
    assert count_start(path, failures, Counter()) == Counted(2, 1)


def test_a_clean_stop_on_a_full_disk_is_clean(tmp_path):
    """A SIGTERM on a full disk: the stores' last writes fail (counted, NamesrvStoreNotWritten), and
    the clean stop's mark did too, so three rolling restarts on a full disk paged NamesrvRestarting
    beside NamesrvStoreNotWritten. The mark prepared at the start is renamed in place: no space needed."""
    with tiny_tmpfs(tmp_path / "data") as data:
        path, failures = data / STARTS_FILE, Counter()
        first = count_start(path, failures, Counter())
        with disk_full(data):
            count_clean_stop(path, first, failures)
            assert not failures
            assert json.loads(path.read_text()) == {"starts": 1, "unclean": 0, "running": False}
            assert count_start(path, Counter(), Counter()) == Counted(2, 0)  # the disk still full


def test_a_crashed_run_s_prepared_mark_is_never_renamed_over_a_later_count(tmp_path):
    path, failures = tmp_path / STARTS_FILE, Counter()
    count_start(path, failures, Counter())  # killed: its prepared mark stays
    (tmp_path / (STARTS_FILE + ".tmp")).mkdir()  # the next start cannot write its count
    second = count_start(path, failures, Counter())
    assert second == Counted(2, 1) and not (tmp_path / (STARTS_FILE + STOPPED_SUFFIX)).exists()
    (tmp_path / (STARTS_FILE + ".tmp")).rmdir()
    count_clean_stop(path, second, failures)
    assert json.loads(path.read_text()) == {"starts": 2, "unclean": 1, "running": False}


@pytest_twisted.inlineCallbacks
def test_a_server_stopped_on_a_full_disk_starts_clean(tmp_path):
    """The whole server: its data directory fills up while it runs, SIGTERM (stopService), started
    again: its unclean starts stay 0; the stores' failed last writes are what it counted."""
    with tiny_tmpfs(tmp_path / "data") as data:
        config = server_config(tmp_path, kvConfigPath=str(data / "kvConfig.json"))
        service, _ = yield start_server(config)
        with disk_full(data):
            yield service.stopService()
            service, _ = yield start_server(config)
            try:
                assert (service.metrics.starts, service.metrics.unclean_starts) == (2, 0)
            finally:
                yield service.stopService()


@pytest_twisted.inlineCallbacks
def test_a_server_marks_its_clean_stop_and_serves_its_unclean_starts(tmp_path):
    service, _ = yield start_server(server_config(tmp_path))
    yield service.stopService()  # a clean stop
    service, _ = yield start_server(server_config(tmp_path))
    try:
        assert (service.metrics.starts, service.metrics.unclean_starts) == (2, 0)
        assert json.loads((tmp_path / STARTS_FILE).read_text())["running"] is True
    finally:
        service.counted = None  # as a kill -9: the stop never marks it
        yield service.stopService()
    service, _ = yield start_server(server_config(tmp_path))
    try:
        assert (service.metrics.starts, service.metrics.unclean_starts) == (3, 1)
    finally:
        yield service.stopService()


@pytest_twisted.inlineCallbacks
def test_a_start_after_a_run_that_did_not_stop_cleanly_says_so_in_its_log_and_on_the_page(tmp_path):
    """The page's "started" line read the same after a SIGTERM and after a kill -9: someone sent
    there by NamesrvRestarting could not tell which runs ended how."""
    from twisted.logger import formatEvent, globalLogPublisher

    lines: list[str] = []
    observer = lambda event: lines.append(formatEvent(event))  # noqa: E731
    service, _ = yield start_server(server_config(tmp_path))
    service.seen.events.feed_event("note", {"reason": "an event before the restarts"})
    yield service.stopService()  # a clean stop: its restart says nothing of how
    service, _ = yield start_server(server_config(tmp_path))
    try:
        started = [e.info["reason"] for e in service.seen.events.recent if e.kind == "started"]
        assert len(started) == 1 and "did not stop cleanly" not in started[0]
    finally:
        service.counted = None  # as a kill -9: the stop never marks it
        yield service.stopService()
    globalLogPublisher.addObserver(observer)
    try:
        service, _ = yield start_server(server_config(tmp_path))
    finally:
        globalLogPublisher.removeObserver(observer)
    try:
        started = [e.info["reason"] for e in service.seen.events.recent if e.kind == "started"]
        assert started[-1].startswith("NameServer restarted (twisted-namesrv ")
        assert "after a run that did not stop cleanly (killed, crashed" in started[-1]
        warned = [line for line in lines if "did not stop cleanly" in line]
        assert len(warned) == 1 and "namesrv_unclean_starts_total 1" in warned[0]
    finally:
        yield service.stopService()
