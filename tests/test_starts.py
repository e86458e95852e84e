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

from tests.support import server_config, start_server
from twisted_namesrv.starts import LIMIT, STARTS_FILE, count_start


def counted(path) -> tuple[int, Counter, Counter]:
    failures, refusals = Counter(), Counter()
    return count_start(path, failures, refusals), failures, refusals


def test_each_start_adds_one_to_the_count_in_the_file(tmp_path):
    path = tmp_path / "data" / STARTS_FILE
    assert [counted(path)[0] for _ in range(3)] == [1, 2, 3]
    assert json.loads(path.read_text()) == {"starts": 3}


@pytest.mark.parametrize(("content", "reason"), [
    (b'{"starts": 4', "corrupt"), (b'{"starts": -1}', "corrupt"), (b'{"starts": "7"}', "corrupt"),
    (b'{"starts": true}', "corrupt"), (b"[]", "corrupt"), (b"\x00" * 10, "corrupt"), (b"[" * LIMIT, "corrupt"),
    (b"\xff\xfe", "corrupt"),
    (b" " * (LIMIT + 1), "too_big"),
])
def test_a_file_that_is_not_a_count_starts_it_again_counted(tmp_path, content, reason):
    path = tmp_path / STARTS_FILE
    path.write_bytes(content)
    starts, failures, refusals = counted(path)
    assert (starts, failures, refusals) == (1, Counter(), Counter({("starts", reason): 1}))
    assert json.loads(path.read_text()) == {"starts": 1}


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
    assert json.loads((tmp_path / STARTS_FILE).read_text()) == {"starts": 2}
