"""The stores the server writes itself and reads back at start -- the page's events
(``events.json``), the remembered topology (``topology.json``) and the route snapshot -- replaced
by a local user who may write the data directory.  Java's NameServer has none of them, so it would
start whatever they hold; so does this one: a file it did not write is logged once, counted in
``namesrv_store_load_refusals_total{store,reason}``, kept aside as ``.corrupt`` and skipped.

Before, three contents raised out of the start with a traceback (exit 1): 100,000 nested ``[``
(a RecursionError, which is no ValueError), an ``Infinity`` (or ``1e999``) where an integer is read
(``int()``'s OverflowError), and NaN was taken as an event's time, which made ``/api/events`` a
document no browser parses (``NaN`` is no JSON).  An events file had no size limit either."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from twisted.internet import reactor
from twisted.logger import capturedLogs, formatEvent

from tests.hostile.test_not_regular_files import no_blocking
from tests.support import server_config
from twisted_namesrv.clocks import owners_view
from twisted_namesrv.event_log import FILE_LIMIT as EVENTS_FILE_LIMIT
from twisted_namesrv.service import load

DEEP = b"[" * 100_000 + b"]" * 100_000
EVENT = {"seq": 1, "ts": 1.5, "kind": "registered", "info": {"broker": "b"}, "count": 1, "first_ts": 1.5}
GROUP = {"cluster": "c", "broker": "b", "since": 1.0, "left": None, "how": None, "members": [[0, "h:1", 1.0]],
         "up": [0]}


def events(**changed: object) -> bytes:
    return json.dumps({"format": 1, "events": [{**EVENT, **changed}]}).encode()


def topology(**changed: object) -> bytes:
    return json.dumps({"format": 1, "groups": [{**GROUP, **changed}]}).encode()


#: (store key, file name, content): each a file this server never writes
HOSTILE = [
    ("eventsPath", "events.json", b'{"format":1,"events":' + DEEP + b"}"),
    ("eventsPath", "events.json", events(seq=float("inf"))),  # json.dumps writes Infinity
    ("eventsPath", "events.json", events(seq=1e308).replace(b"1e+308", b"1e999")),
    ("eventsPath", "events.json", events(ts=float("nan"))),
    ("eventsPath", "events.json", b'{"format":1,"events":[],"lost_topics":' + DEEP + b"}"),
    ("topologyPath", "topology.json", b'{"format":1,"groups":' + DEEP + b"}"),
    ("topologyPath", "topology.json", topology(members=[[float("inf"), "h:1", 1.0]])),
    ("topologyPath", "topology.json", topology(since=float("nan"))),
    ("routeSnapshotPath", "snapshot.json", DEEP),
    ("routeSnapshotPath", "snapshot.json", b'{"format":1,"x":NaN}'),
]


@pytest.mark.parametrize(("store", "name", "content"), HOSTILE,
                         ids=["events-deep", "events-infinity", "events-1e999", "events-nan", "lost-deep",
                              "topology-deep", "topology-infinity", "topology-nan", "snapshot-deep", "snapshot-nan"])
def test_a_store_file_it_did_not_write_is_refused_counted_and_the_server_starts(tmp_path: Path, store: str,
                                                                               name: str, content: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    config = server_config(tmp_path, routeSnapshotPath=str(tmp_path / "snapshot.json"))
    with capturedLogs() as logged:
        loaded = load(config, owners_view(reactor))  # before: RecursionError / OverflowError out of the start
    refusals = loaded.owners.seen.metrics.store_load_refusals
    assert refusals == {(store, "corrupt"): 1}
    errors = [formatEvent(e) for e in logged if e["log_level"].name == "error"]
    assert len(errors) == 1 and str(path) in errors[0], errors
    assert "Traceback" not in errors[0] and (tmp_path / f"{name}.corrupt").read_bytes() == content
    assert not path.exists()
    shown = loaded.events.events.recent
    assert all(event.kind != "registered" for event in shown)  # nothing of the file taken
    assert not loaded.owners.state.topology.clusters() and not loaded.owners.state.routes.brokerAddrTable


def test_an_events_file_past_its_limit_is_not_read(tmp_path: Path) -> None:
    """A 2 GB file swapped in was read whole (and then parsed) at start; now its size is checked first."""
    path = tmp_path / "events.json"
    with path.open("wb") as sparse:
        sparse.truncate(EVENTS_FILE_LIMIT + 1)
    with capturedLogs() as logged:
        loaded = load(server_config(tmp_path), reactor)
    assert loaded.owners.seen.metrics.store_load_refusals == {("eventsPath", "too_big"): 1}
    (line,) = [formatEvent(e) for e in logged if e["log_level"].name == "error"]
    assert f"events file {path} not readable" in line and f"over the {EVENTS_FILE_LIMIT}" in line
    assert path.exists()  # not damaged: not ours to move


@pytest.mark.parametrize(("store", "kind"), [("eventsPath", "fifo"), ("eventsPath", "device"),
                                             ("eventsPath", "directory"), ("routeSnapshotPath", "fifo"),
                                             ("routeSnapshotPath", "device")])
def test_no_regular_file_at_a_store_it_writes_itself_is_a_refusal_and_the_server_starts(
        tmp_path: Path, store: str, kind: str) -> None:
    """A FIFO, a device or a directory at eventsPath or routeSnapshotPath stopped the start
    (``cannot start: eventsPath: ...: a FIFO (named pipe), not a regular file``), where the
    topology file at the same place was skipped and Java, which keeps neither, starts. Now each is
    one line, counted ``not_regular``, and the server starts; nothing blocks (state/files.py).
    (A directory at routeSnapshotPath is still refused as the start checks where it writes: the
    path the operator named cannot take a snapshot.)"""
    path = tmp_path / "store"
    if kind == "fifo":
        target = tmp_path / "pipe.fifo"
        os.mkfifo(target)
        path.symlink_to(target)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    values = {store: str(path), "routeSnapshotMaxAge": 0}  # /dev/zero's time: any age is served
    with no_blocking(), capturedLogs() as logged:
        loaded = load(server_config(tmp_path, **values), owners_view(reactor))
    assert loaded.owners.seen.metrics.store_load_refusals == {(store, "not_regular"): 1}
    (line,) = [formatEvent(e) for e in logged if e["log_level"].name == "error"]
    assert str(path) in line and "not a regular file" in line, line


def test_the_files_this_server_writes_still_load(tmp_path: Path) -> None:
    """What the refusals must never catch: the writers' own files, numbers with exponents included."""
    (tmp_path / "events.json").write_bytes(events(ts=1.7e9, first_ts=1.7e9))
    (tmp_path / "topology.json").write_bytes(topology(since=1.7e9))
    loaded = load(server_config(tmp_path), reactor)
    assert not loaded.owners.seen.metrics.store_load_refusals
    assert [e.kind for e in loaded.events.events.recent] == ["registered", "started"]
    assert loaded.owners.state.topology.clusters()
