"""Issue 47: a periodic store write (the topology's, the page's events) fsyncs its file and its
directory; on a busy disk that waited 0.4-0.9 s in the reactor thread, and every lookup with it.
FileWriter makes the write in a thread of the reactor's pool and tells the reactor thread when it is
done; a write that must be done first (a retirement, the stop) waits for the one in flight."""

from __future__ import annotations

import threading

import pytest_twisted
from twisted.internet import defer, reactor
from twisted.internet.task import deferLater

from twisted_namesrv import file_writer
from twisted_namesrv.file_writer import FileWriter
from twisted_namesrv.state.hosts import KeptHosts
from twisted_namesrv.state.store import StoreError


@pytest_twisted.inlineCallbacks
def test_a_periodic_write_is_made_in_a_thread_and_reported_in_the_reactors(tmp_path, monkeypatch):
    wrote_in: list[threading.Thread] = []
    write = file_writer.write_atomically

    def recorded(path, data, what="file"):
        wrote_in.append(threading.current_thread())
        write(path, data, what)
    monkeypatch.setattr(file_writer, "write_atomically", recorded)
    writer = FileWriter(reactor, tmp_path / "topology.json", "topologyPath")
    done: defer.Deferred[tuple[object, threading.Thread]] = defer.Deferred()
    writer.write_soon(b'{"format":1,"groups":[]}', lambda error: done.callback((error, threading.current_thread())))
    assert writer.in_flight
    error, told_in = yield done
    assert error is None and not writer.in_flight
    assert wrote_in != [threading.main_thread()] and told_in is threading.main_thread()  # the reactor's
    assert (tmp_path / "topology.json").read_bytes() == b'{"format":1,"groups":[]}'

    writer.write_now(b"{}")  # a retirement's: in this thread
    assert wrote_in[-1] is threading.main_thread() and (tmp_path / "topology.json").read_bytes() == b"{}"

    blocked = FileWriter(reactor, tmp_path / "a-file" / "x.json", "topologyPath")
    (tmp_path / "a-file").write_text("not a directory")
    failed: defer.Deferred[object] = defer.Deferred()
    blocked.write_soon(b"{}", failed.callback)
    assert isinstance((yield failed), StoreError)  # the writer's caller logs it, as before


def test_a_threads_write_that_starts_after_a_newer_one_is_skipped(tmp_path):
    """A periodic write handed to a thread, then a retirement's (or the stop's) write in the reactor
    thread before the pool's thread took the first one up: the older data was laid over the newer,
    and a retired group came back at the next start."""
    writer = FileWriter(object(), tmp_path / "topology.json", "topologyPath")
    older = writer._number()  # as write_soon numbers its write when it is asked for
    writer.write_now(b"newer")
    writer._write(older, b"older")  # the pool's thread, late
    assert (tmp_path / "topology.json").read_bytes() == b"newer"
    writer._write(writer._number(), b"newest")
    assert (tmp_path / "topology.json").read_bytes() == b"newest"


def test_a_periodic_write_that_fails_is_counted_as_every_stores_save(tmp_path):
    """The topology's and the events' writes on a full disk (here: a file where the directory
    should be) were a log line once per spell and no count; now each is namesrv_store_write_failures."""
    from collections import Counter

    from twisted.internet import task

    from twisted_namesrv.event_log import EventLogService
    from twisted_namesrv.events import RecentEvents
    from twisted_namesrv.state.topology import Topology
    from twisted_namesrv.topology_store import TopologyStoreService

    clock = task.Clock()
    (tmp_path / "a-file").write_text("not a directory")
    failures: Counter = Counter()
    topology = TopologyStoreService(Topology(clock.seconds, KeptHosts()), tmp_path / "a-file" / "topology.json",
                                    clock, Counter(), failures=failures)
    topology.topology.version += 1
    topology.save_if_changed()
    events = EventLogService(RecentEvents(clock.seconds, KeptHosts()), tmp_path / "a-file" / "events.json", clock,
                             failures=failures)
    events.events.seen += 1
    events.save_if_changed()
    assert sorted((store, n) for (store, _), n in failures.items()) == [("eventsPath", 1), ("topologyPath", 1)]


def test_a_write_made_at_once_that_fails_is_counted_too(tmp_path):
    """A retirement's write (and the stop's) is made at once: one that failed answered SYSTEM_ERROR
    with nothing counted; the writer counts every failed write of its file now."""
    from collections import Counter

    import pytest
    from twisted.internet import task

    from twisted_namesrv.state.store import StoreError
    from twisted_namesrv.state.topology import Topology
    from twisted_namesrv.topology_store import TopologyStoreService

    clock = task.Clock()
    (tmp_path / "a-file").write_text("not a directory")
    failures: Counter = Counter()
    topology = TopologyStoreService(Topology(clock.seconds, KeptHosts()), tmp_path / "a-file" / "topology.json",
                                    clock, Counter(), failures=failures)
    with pytest.raises(StoreError):
        topology.save_now()
    assert sorted((store, n) for (store, _), n in failures.items()) == [("topologyPath", 1)]


@pytest_twisted.inlineCallbacks
def test_a_peers_kv_put_and_config_update_wait_for_their_writes_and_nothing_else_does(tmp_path, monkeypatch):
    """PUT_KV_CONFIG and UPDATE_NAMESRV_CONFIG are any peer's (no ACL by default), and each fsynced its
    file in the reactor thread: one peer's flood of them (1,248 puts a second) held every lookup,
    22 ms at the median and 310 at most.  Now their writes are made in the reactor's pool: with both
    writes held, a lookup on another connection is answered, the put and the update only once their
    writes are done, and the KV table reads as saved until then."""
    from tests.support import connect, server_config, start_server
    from twisted_namesrv.remoting import RemotingCommand, RequestCode, ResponseCode

    held, release = [], threading.Event()
    write = file_writer.write_atomically

    def slow_disk(path, data, what="file"):
        if what in ("kvConfigPath", "configStorePath"):
            held.append((what, threading.current_thread()))
            release.wait(30)
        write(path, data, what)
    monkeypatch.setattr(file_writer, "write_atomically", slow_disk)
    service, port = yield from start_server(server_config(tmp_path))
    try:
        writer = yield connect(port)
        reader = yield connect(port)
        updater = yield connect(port)
        put = writer.call(RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {
            "namespace": "ORDER_TOPIC_CONFIG", "key": "TopicA", "value": "broker-a:4"}, opaque=1))
        update = updater.call(RemotingCommand.request(
            RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true\n", opaque=2))
        while len(held) < 2:
            yield deferLater(reactor, 0.01)
        lookup = yield reader.call(RemotingCommand.request(RequestCode.GET_KV_CONFIG, {
            "namespace": "ORDER_TOPIC_CONFIG", "key": "TopicA"}, opaque=3))
        assert lookup.code == ResponseCode.QUERY_NOT_FOUND  # answered while both writes wait; read as saved
        assert not put.called and not update.called
        assert {what for what, _ in held} == {"kvConfigPath", "configStorePath"}
        assert threading.main_thread() not in {thread for _, thread in held}
        release.set()
        assert (yield put).code == ResponseCode.SUCCESS and (yield update).code == ResponseCode.SUCCESS
        got = yield reader.call(RemotingCommand.request(RequestCode.GET_KV_CONFIG, {
            "namespace": "ORDER_TOPIC_CONFIG", "key": "TopicA"}, opaque=4))
        assert (got.code, got.ext.get("value")) == (ResponseCode.SUCCESS, "broker-a:4")
        assert b'"TopicA":"broker-a:4"' in (tmp_path / "kvConfig.json").read_bytes()
    finally:
        release.set()
        yield service.stopService()


@pytest_twisted.inlineCallbacks
def test_a_write_in_a_thread_that_raises_anything_else_is_told_as_failed_not_never(tmp_path):
    """A KV save's table is encoded in the thread (state/kv.py): an error there that is no OSError
    (a MemoryError at 8 MiB) was logged and its ``done`` never called, so the KV store thought the
    write still in flight: every later PUT_KV_CONFIG staged, never written nor answered, and each
    peer's connection held behind its put.  Now it is told as a StoreError, the file unchanged."""
    from collections import Counter

    (tmp_path / "kv.json").write_bytes(b"{}")
    failures: Counter[tuple[str, str]] = Counter()
    writer = FileWriter(reactor, tmp_path / "kv.json", "kvConfigPath", failures)

    def encode() -> bytes:
        raise MemoryError("the table could not be encoded")
    told: defer.Deferred[object] = defer.Deferred()
    writer.write_soon(encode, told.callback)
    error = yield told
    assert isinstance(error, StoreError) and "MemoryError" in str(error) and not writer.in_flight
    assert (tmp_path / "kv.json").read_bytes() == b"{}" and failures == {("kvConfigPath", "EUNKNOWN"): 1}
