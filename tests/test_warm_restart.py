"""--route-snapshot: written after changes at most once per interval, loaded at the next start,
and a damaged file costs a log line, not the start."""

from __future__ import annotations

import json
import os

from twisted.internet import task
from twisted.logger import capturedLogs, formatEvent

from tests.test_housekeeping import MASTER, START, config, register
from tests.web.test_metrics_and_api import Served, value
from twisted_namesrv.service import NamesrvService

INTERVAL = 10  # s


def served(tmp_path) -> Served:
    return Served(tmp_path, routeSnapshotPath=str(tmp_path / "routes.json"), routeSnapshotInterval=INTERVAL * 1000)


def started(tmp_path):
    """A served NameServer with its snapshot service running and broker-a registered."""
    world = served(tmp_path)
    world.service.snapshots.startService()
    broker, transport = world.connect()
    register(broker, transport)
    return world, world.service.snapshots, broker, transport


def test_changes_are_written_once_per_interval_and_at_stop(tmp_path):
    world, snapshots, broker, transport = started(tmp_path)
    register(broker, transport, name="broker-b", addr="10.0.9.9:10911")
    world.clock.advance(INTERVAL - 1)
    assert not (tmp_path / "routes.json").exists()  # nothing before the first check
    world.clock.advance(1)
    snapshots.finish_write()  # the write runs in a forked child
    saved = json.loads((tmp_path / "routes.json").read_bytes())
    assert sorted(saved["brokerAddrTable"]) == ["broker-a", "broker-b"]
    inode = (tmp_path / "routes.json").stat().st_ino  # a write replaces the file
    for _ in range(3):  # heartbeats that change nothing: no write, only the stamp "current at this check"
        register(broker, transport)
        world.clock.advance(INTERVAL)
    assert (tmp_path / "routes.json").stat().st_ino == inode
    assert (tmp_path / "routes.json").stat().st_mtime == world.clock.seconds()
    transport.loseConnection()  # both brokers leave with their connection
    world.clock.advance(0)  # at the reactor's next turn
    snapshots.stopService()
    assert json.loads((tmp_path / "routes.json").read_bytes())["brokerAddrTable"] == {}


def test_a_forked_write_holds_the_routes_of_its_fork(tmp_path):
    """Changes made while the child writes reach the next write, not a torn one."""
    world, snapshots, broker, transport = started(tmp_path)
    world.clock.advance(INTERVAL)  # forks the writer
    register(broker, transport, name="broker-b", addr="10.0.9.9:10911")
    snapshots.finish_write()
    assert sorted(json.loads((tmp_path / "routes.json").read_bytes())["brokerAddrTable"]) == ["broker-a"]
    world.clock.advance(INTERVAL)
    snapshots.finish_write()
    saved = json.loads((tmp_path / "routes.json").read_bytes())
    assert sorted(saved["brokerAddrTable"]) == ["broker-a", "broker-b"]
    snapshots.stopService()


def test_a_failed_forked_write_is_logged_and_retried(tmp_path):
    world, snapshots, _, _ = started(tmp_path)
    (tmp_path / "routes.json").mkdir()  # a directory where the file belongs: the child's rename fails
    with capturedLogs() as events:
        world.clock.advance(INTERVAL)
        snapshots.finish_write()
    assert any("cannot write route snapshot" in formatEvent(e) and "EISDIR" in formatEvent(e) for e in events)
    (tmp_path / "routes.json").rmdir()
    world.clock.advance(INTERVAL)  # nothing changed since, yet the failed write is tried again
    snapshots.finish_write()
    assert sorted(json.loads((tmp_path / "routes.json").read_bytes())["brokerAddrTable"]) == ["broker-a"]
    snapshots.stopService()


def test_failed_writes_are_counted_and_said_once_per_spell(tmp_path):
    """A full disk under the snapshot: every failed write counted by its errno (NamesrvStoreNotWritten
    reads it), one error line for the spell rather than one per check, one line when a write succeeds
    again; the stop's own write (in the foreground) is counted too. Before, each check logged an error
    and nothing was counted: no alert while the file aged past routeSnapshotMaxAge."""
    world, snapshots, broker, transport = started(tmp_path)
    (tmp_path / "routes.json").mkdir()  # the rename fails (EISDIR) as a full disk's write does (ENOSPC)
    with capturedLogs() as events:
        for _ in range(3):
            world.clock.advance(INTERVAL)
            snapshots.finish_write()
    said = [formatEvent(e) for e in events if "route snapshot" in formatEvent(e)]
    assert len(said) == 1 and "cannot write route snapshot" in said[0] and "EISDIR" in said[0], said
    samples = world.scrape()
    assert value(samples, "namesrv_store_write_failures_total", store="routeSnapshotPath", error="EISDIR") == 3
    assert value(samples, "namesrv_store_write_failures_total", store="routeSnapshotPath", error="ENOSPC") == 0
    assert ("namesrv_store_write_failures_total", (("error", "ENOSPC"), ("store", "routeSnapshotPath"))) in samples
    # failing now: NamesrvStoreNotWritten holds while it is, and ends once written again (not 10 minutes on)
    assert value(samples, "namesrv_store_failing", store="routeSnapshotPath", error="EISDIR") == 1
    assert value(samples, "namesrv_store_failing", store="routeSnapshotPath", error="ENOSPC") == 0
    assert ("namesrv_store_failing", (("error", "ENOSPC"), ("store", "topologyPath"))) in samples  # from the start
    (tmp_path / "routes.json").rmdir()
    with capturedLogs() as events:
        world.clock.advance(INTERVAL)
        snapshots.finish_write()
        world.clock.advance(INTERVAL)  # nothing new: a stamp, nothing said
    assert [formatEvent(e) for e in events] == [f"route snapshot {tmp_path / 'routes.json'} written again"]
    assert value(world.scrape(), "namesrv_store_failing", store="routeSnapshotPath", error="EISDIR") == 0
    os.remove(tmp_path / "routes.json")
    (tmp_path / "routes.json").mkdir()
    register(broker, transport, name="broker-b", addr="10.0.9.9:10911")  # a change for the stop to write
    snapshots.stopService()
    assert world.service.metrics.store_failures["routeSnapshotPath", "EISDIR"] == 4


def test_a_restart_serves_the_snapshot_until_brokers_expire(tmp_path):
    first = served(tmp_path)
    broker, transport = first.connect()
    register(broker, transport)
    first.service.snapshots.stopService()  # a clean stop writes the routes

    second = served(tmp_path)
    assert second.api.route("T1")["route"]["brokerDatas"][0]["brokerAddrs"] == {"0": MASTER}
    (member,) = second.api.clusters()["clusters"][0]["broker_groups"][0]["members"]
    assert member["addr"] == MASTER and not member["confirmed"]
    second.clock.advance(125)  # the 120 s heartbeat timeout and one scan
    assert second.api.route("T1") is None and second.service.state.routes.brokerLiveTable == {}


def test_a_damaged_snapshot_starts_empty(tmp_path):
    (tmp_path / "routes.json").write_bytes(b'{"format": 1, "profile": "5.3.3", "topicQueueTable": [')
    os.utime(tmp_path / "routes.json", (START, START))  # written just before the start, on its clock
    clock = task.Clock()
    clock.advance(START)
    service = NamesrvService.from_config(config(tmp_path, routeSnapshotPath=str(tmp_path / "routes.json")),
                                         reactor=clock)
    assert service.state.routes.topicQueueTable == {}
    assert (tmp_path / "routes.json.corrupt").read_bytes().endswith(b'"topicQueueTable": [')
    assert not (tmp_path / "routes.json").exists()


def test_a_snapshot_past_the_limits_is_not_served_and_the_server_starts(tmp_path):
    """Written while maxTopicsPerBroker allowed broker-a's two topics, read by a server that allows
    one: refused as broker-a's registration would be now, one line and a count, and the server starts
    empty (brokers register again within 30 s, each under the limits)."""
    first = served(tmp_path)
    broker, transport = first.connect()
    register(broker, transport)
    first.service.snapshots.stopService()

    with capturedLogs() as events:
        second = Served(tmp_path, routeSnapshotPath=str(tmp_path / "routes.json"), maxTopicsPerBroker=1)
    assert second.api.route("T1") is None and second.service.state.routes.brokerLiveTable == {}
    assert second.service.snapshots.loaded and second.service.readiness()["route_snapshot_loaded"]
    scrape = second.scrape()
    assert value(scrape, "namesrv_store_load_refusals_total", store="routeSnapshotPath", reason="over_limits") == 1
    (line,) = [formatEvent(e) for e in events if "route snapshot" in formatEvent(e)]
    assert "not served" in line and "maxTopicsPerBroker (1)" in line and "[max_topics_per_broker]" in line
    assert (tmp_path / "routes.json").exists()  # not damaged: not set aside; the next write replaces it


def test_a_snapshot_that_cannot_be_marked_current_is_a_failed_write(tmp_path, monkeypatch):
    """The data directory remounted read-only while the routes stay as they are: each check only marks the
    file current (its mtime), which failed in silence, so the snapshot aged past routeSnapshotMaxAge with
    nothing said, no count, no alert, and a restart then started with empty routes. Now the mark's failure
    is a failed write: one line, counted, namesrv_store_failing 1 until it can be marked again."""
    import errno

    from twisted_namesrv import warm_restart

    world, snapshots, _, _ = started(tmp_path)
    world.clock.advance(INTERVAL)
    snapshots.finish_write()  # written: from now on each check only marks it current
    real_utime = os.utime

    def read_only(path, times=None):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(warm_restart.os, "utime", read_only)
    with capturedLogs() as events:
        for _ in range(3):
            world.clock.advance(INTERVAL)
    said = [formatEvent(e) for e in events if "route snapshot" in formatEvent(e)]
    assert len(said) == 1 and "cannot mark" in said[0] and "EROFS" in said[0], said
    samples = world.scrape()
    assert value(samples, "namesrv_store_write_failures_total", store="routeSnapshotPath", error="EROFS") == 3
    assert value(samples, "namesrv_store_failing", store="routeSnapshotPath", error="EROFS") == 1
    monkeypatch.setattr(warm_restart.os, "utime", real_utime)
    with capturedLogs() as events:
        world.clock.advance(INTERVAL)
    assert [formatEvent(e) for e in events] == [f"route snapshot {tmp_path / 'routes.json'} written again"]
    assert value(world.scrape(), "namesrv_store_failing", store="routeSnapshotPath", error="EROFS") == 0
    snapshots.stopService()
