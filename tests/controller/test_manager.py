"""ControllerManager on a fake clock: turns through the log, the controller's own elections
(retried as Java's triggerElectMaster), the heartbeat scan, and replay at start."""

from __future__ import annotations

from twisted.internet import task

from twisted_namesrv.controller.config import ControllerConfig
from twisted_namesrv.controller.log import FileControllerLog, SoleLeader
from twisted_namesrv.controller.manager import ControllerManager


def manager_on(tmp_path, clock: task.Clock, pushes: list | None = None, closed: list | None = None):
    store = FileControllerLog(tmp_path)
    store.open()
    manager = ControllerManager(ControllerConfig(), store, SoleLeader("127.0.0.1:1"), clock.seconds,
                                notifier=lambda addr, frame: (pushes if pushes is not None else []).append(addr),
                                close_channel=(closed if closed is not None else []).append)
    manager.start()
    return manager, store


def join(manager: ControllerManager, broker_id: int, timeout: int = 10_000) -> None:
    addr = f"127.0.0.1:{10000 + broker_id}"
    manager.submit(lambda: manager.replicas.apply_broker_id("C", "g", broker_id, f"{addr};1"))
    manager.heartbeats.on_broker_heartbeat("C", "g", addr, broker_id, timeout, f"ch{broker_id}", 0, 0, 0, 0)


def master_and_slave(manager: ControllerManager, master_timeout: int = 10_000, slave_timeout: int = 10_000) -> None:
    """Group g: 1 the master, 2 in its sync-state set, both beating."""
    join(manager, 1, master_timeout)
    join(manager, 2, slave_timeout)
    manager.elect_master("C", "g", 1, False, "broker")
    manager.submit(lambda: manager.replicas.alter_sync_state_set("g", 1, 1, frozenset({1, 2}), 1, manager.alive))


def test_a_master_that_goes_with_nobody_to_follow_leaves_the_group_masterless(tmp_path) -> None:
    clock = task.Clock()
    manager, store = manager_on(tmp_path, clock)
    join(manager, 1)
    join(manager, 2)  # alive, but never in the sync-state set
    manager.elect_master("C", "g", 1, False, "broker")
    manager.on_channel_close("ch1")
    info = manager.replicas.sync_state_set_info_table["g"]
    # three attempts (electMasterMaxRetryCount), each recording "no master": the epoch grows by three
    assert (info.master_broker_id, info.master_epoch) == (None, 4)
    assert manager.elections["g"]["code"] == 2004 and manager.elections["g"]["trigger"] == "controller"
    store.close()
    replayed, again = manager_on(tmp_path, clock)
    assert replayed.replicas.summary() == manager.replicas.summary()
    again.close()


def test_the_heartbeat_scan_closes_silent_brokers_and_elects(tmp_path) -> None:
    clock, pushes, closed = task.Clock(), [], []
    manager, store = manager_on(tmp_path, clock, pushes, closed)
    master_and_slave(manager, 3_000, 60_000)
    clock.advance(2)
    manager.scan_not_active_broker()
    assert closed == [] and manager.replicas.sync_state_set_info_table["g"].master_broker_id == 1
    clock.advance(1.5)
    manager.scan_not_active_broker()
    assert closed == ["ch1"]
    info = manager.replicas.sync_state_set_info_table["g"]
    assert (info.master_broker_id, info.master_epoch, info.sync_state_set) == (2, 2, {2})
    assert pushes[-1] == "127.0.0.1:10002"  # the new master is told; the silent one is not
    store.close()


def test_a_long_log_is_compacted_at_start_into_the_same_state(tmp_path) -> None:
    clock = task.Clock()
    manager, store = manager_on(tmp_path, clock)
    master_and_slave(manager)
    manager.on_channel_close("ch1")  # 2 takes over: epochs 2 and 3
    manager.submit(lambda: manager.replicas.clean_broker_data("C", "g", "1", False, manager.alive))
    before = manager.replicas.snapshot()
    store.close()
    assert before["g"]["syncState"]["masterEpoch"] == 2 and store.records > 5

    store = FileControllerLog(tmp_path)
    store.open()
    again = ControllerManager(ControllerConfig(), store, SoleLeader(), clock.seconds)
    again.compact_after = 3
    again.start()
    assert store.records == 1 and again.replicas.snapshot() == before  # one snapshot record, same state
    again.submit(lambda: again.replicas.apply_broker_id("C", "g", 3, "127.0.0.1:10003;1"))
    store.close()
    third, third_store = manager_on(tmp_path, clock)
    assert third.replicas.snapshot()["g"]["replicas"]["brokers"] == [[2, "127.0.0.1:10002", "127.0.0.1:10002;1"],
                                                                      [3, "127.0.0.1:10003", "127.0.0.1:10003;1"]]
    assert third.replicas.get_next_broker_id("C", "g").header["nextBrokerId"] == 4  # ids are never handed out twice
    third_store.close()


def test_a_log_passing_compact_after_while_running_is_compacted_into_the_same_state(tmp_path) -> None:
    """Any peer (no ACL on a standalone controller) can force elections: two fake brokers of one
    group, the slave put in the sync-state set and designated master in turn, made 60 elections a
    second in the attack run, the log growing 12 KB/s for as long as the process ran -- it was
    compacted only at start."""
    clock = task.Clock()
    manager, store = manager_on(tmp_path, clock)
    manager.compact_after = 5
    master_and_slave(manager)
    for _ in range(20):
        info = manager.replicas.sync_state_set_info_table["g"]
        master = info.master_broker_id
        manager.submit(lambda m=master, i=info: manager.replicas.alter_sync_state_set(
            "g", m, i.master_epoch, frozenset({1, 2}), i.sync_state_set_epoch, manager.alive))
        manager.elect_master("C", "g", 3 - master, True, "admin")
        assert store.records <= manager.compact_after + 2  # one turn's events past it, then compacted
    assert manager.replicas.sync_state_set_info_table["g"].master_epoch == 21  # every election went through
    before = manager.replicas.snapshot()
    store.close()
    replayed, again = manager_on(tmp_path, clock)
    assert replayed.replicas.snapshot() == before
    again.close()


def test_every_leadership_replays_before_answering(tmp_path) -> None:
    """Another leader's events (written to the shared store meanwhile) are there once this one leads."""
    from twisted_namesrv.controller.events import ApplyBrokerIdEvent, encode_event

    class Switch:
        is_leader, leader_address = False, "127.0.0.1:2"

        def subscribe(self, callback) -> None:
            self.callback = callback

    clock, leadership = task.Clock(), Switch()
    store = FileControllerLog(tmp_path)
    store.open()
    manager = ControllerManager(ControllerConfig(), store, leadership, clock.seconds)
    manager.start()
    refused = []
    manager.submit(lambda: manager.replicas.get_next_broker_id("C", "g"), write=False).addCallback(refused.append)
    assert refused[0].code == 2007
    store.append([encode_event(ApplyBrokerIdEvent("C", "g", "a:1", 1, "a:1;1"))])  # the other leader's
    leadership.is_leader = True
    leadership.callback(True, "127.0.0.1:1")
    assert manager.ready and manager.replicas.get_next_broker_id("C", "g").header["nextBrokerId"] == 2
    store.append([encode_event(ApplyBrokerIdEvent("C", "g", "a:2", 2, "a:2;1"))])
    leadership.callback(True, "127.0.0.1:1")  # a new term while leading: replayed again
    assert manager.replicas.get_next_broker_id("C", "g").header["nextBrokerId"] == 3
    leadership.is_leader = False
    leadership.callback(False, "127.0.0.1:2")
    assert not manager.ready
    store.close()


def test_the_inactive_master_scan_elects_when_a_master_timed_out(tmp_path) -> None:
    clock = task.Clock()
    manager, store = manager_on(tmp_path, clock)
    master_and_slave(manager, 3_000, 60_000)
    manager.scan_inactive_master()
    assert manager.replicas.sync_state_set_info_table["g"].master_broker_id == 1  # alive: nothing to do
    clock.advance(5)  # past the first interval as leader; 1's heartbeat is too old, though not yet scanned out
    manager.scan_inactive_master()
    info = manager.replicas.sync_state_set_info_table["g"]
    assert (info.master_broker_id, info.master_epoch) == (2, 2)
    assert manager.elections["g"]["oldMaster"] == 1 and manager.elections["g"]["trigger"] == "controller"
    store.close()


def test_a_new_leader_elects_no_master_within_its_first_interval(tmp_path) -> None:
    """After a restart no heartbeat is known: the slave that beats first must not replace a master
    whose beat is a moment behind.  The scan runs from the start (TimerService), but elects only one
    scanInactiveMasterInterval after the leadership began (Java's DLedgerController starts it then)."""
    from twisted.application.internet import TimerService

    clock = task.Clock()
    manager, store = manager_on(tmp_path, clock)
    master_and_slave(manager)
    store.close()

    clock.advance(100)
    restarted, store = manager_on(tmp_path, clock)  # replayed: master 1, no heartbeats known
    scan = TimerService(1, restarted.scan_inactive_master)
    scan.clock = clock
    scan.startService()  # scans at once, then every second
    restarted.heartbeats.on_broker_heartbeat("C", "g", "127.0.0.1:10002", 2, 10_000, "ch2", 0, 0, 0, 0)
    clock.pump([1] * 4)  # 4 s: the master has not beaten yet, the slave has
    assert restarted.in_first_heartbeat_grace()
    assert restarted.replicas.sync_state_set_info_table["g"].master_broker_id == 1 and restarted.elections == {}
    restarted.heartbeats.on_broker_heartbeat("C", "g", "127.0.0.1:10001", 1, 10_000, "ch1", 0, 0, 0, 0)
    clock.pump([1] * 10)  # the master is back: no election ever
    assert restarted.replicas.sync_state_set_info_table["g"].master_broker_id == 1 and restarted.elections == {}
    scan.stopService()
    store.close()


def test_a_master_silent_past_the_first_interval_is_replaced(tmp_path) -> None:
    clock = task.Clock()
    manager, store = manager_on(tmp_path, clock)
    master_and_slave(manager)
    store.close()
    restarted, store = manager_on(tmp_path, clock)
    restarted.heartbeats.on_broker_heartbeat("C", "g", "127.0.0.1:10002", 2, 10_000, "ch2", 0, 0, 0, 0)
    clock.advance(4.9)
    restarted.scan_inactive_master()
    assert restarted.replicas.sync_state_set_info_table["g"].master_broker_id == 1
    clock.advance(0.1)  # scanInactiveMasterInterval (5 s) since the leadership: the master never came back
    restarted.scan_inactive_master()
    assert restarted.replicas.sync_state_set_info_table["g"].master_broker_id == 2
    assert restarted.elections["g"]["trigger"] == "controller"
    store.close()


def election_series(manager: ControllerManager) -> dict[tuple[str, ...], float]:
    """rocketmq_controller_election_total as /metrics serves it."""
    from types import SimpleNamespace

    from twisted_namesrv.controller.web import ControllerCollector

    (family,) = [f for f in ControllerCollector(SimpleNamespace(manager=manager)).collect()
                 if f.name == "rocketmq_controller_election"]
    return {(s.labels["cluster"], s.labels["broker_set"], s.labels["election_result"]): s.value
            for s in family.samples}


def test_the_election_counts_survive_a_restart_and_a_compaction(tmp_path) -> None:
    """The dashboard's Elections panel was empty after a restart: the counts lived in the process.
    What the log records (each ElectMasterEvent, elected or not) is counted from it."""
    clock = task.Clock()
    manager, store = manager_on(tmp_path, clock)
    master_and_slave(manager)  # 1 elected
    manager.elect_master("C", "g", 2, False, "broker")  # 1 is alive: it stays (2011), nothing logged
    manager.on_channel_close("ch1")  # 2 takes over
    before = election_series(manager)
    assert before == {("C", "g", "new_master_elected"): 2, ("C", "g", "keep_current_master"): 1}
    store.close()

    restarted, store = manager_on(tmp_path, clock)
    assert election_series(restarted) == {("C", "g", "new_master_elected"): 2}  # 2011 wrote nothing to the log
    store.close()
    store = FileControllerLog(tmp_path)
    store.open()
    compacted = ControllerManager(ControllerConfig(), store, SoleLeader(), clock.seconds)
    compacted.compact_after = 1
    compacted.start()
    assert store.records == 1 and election_series(compacted) == {("C", "g", "new_master_elected"): 2}
    store.close()


def test_the_elections_a_lost_master_makes_are_bounded_whatever_a_peer_set(tmp_path) -> None:
    """electMasterMaxRetryCount is one of UPDATE_CONTROLLER_CONFIG's keys (any peer's without ACL), and
    each failed attempt is an event written (fsynced) and an epoch: set to 2147483647, one master gone
    with nobody to follow it began two billion elections (2,000 of them: 2,003 records, 214 KB and
    0.6 s of CPU), the log growing until the disk was full and the epoch, an int in Java, past its
    range. The key is refused past ELECT_RETRIES_MAX, and a lost master makes at most that many."""
    import pytest

    from twisted_namesrv.controller.config import ELECT_RETRIES_MAX, ControllerConfigError

    clock = task.Clock()
    manager, store = manager_on(tmp_path, clock)
    with pytest.raises(ControllerConfigError, match="electMasterMaxRetryCount: 2147483647 is out of range"):
        manager.config.update({"electMasterMaxRetryCount": "2147483647"})
    assert manager.config["electMasterMaxRetryCount"] == 3
    manager.config.update({"electMasterMaxRetryCount": str(ELECT_RETRIES_MAX)})
    join(manager, 1)
    join(manager, 2)
    manager.elect_master("C", "g", 1, False, "broker")
    manager.on_channel_close("ch1")
    assert manager.replicas.sync_state_set_info_table["g"].master_epoch == 1 + ELECT_RETRIES_MAX
    store.close()


def test_a_negative_retry_count_is_refused_and_zero_elects_nothing_as_in_java(tmp_path) -> None:
    """Java's triggerElectMaster runs ``for (i = 0; i < electMasterMaxRetryCount; i++)``: 0 or less
    elects nothing when a master is lost (its failover left to an operator's electMaster).  Here -5 was
    taken as given and a lost master still had one election (``max(1, ...)``): neither Java's meaning
    nor a refusal.  A negative value is a typo: refused, as past ELECT_RETRIES_MAX; 0 is Java's."""
    import pytest

    from twisted_namesrv.controller.config import ControllerConfigError

    clock = task.Clock()
    manager, store = manager_on(tmp_path, clock)
    with pytest.raises(ControllerConfigError, match=r"electMasterMaxRetryCount: -5 is out of range \(0 to 16\)"):
        manager.config.update({"electMasterMaxRetryCount": "-5"})
    assert manager.config["electMasterMaxRetryCount"] == 3
    manager.config.update({"electMasterMaxRetryCount": "0"})
    join(manager, 1)
    join(manager, 2)
    manager.elect_master("C", "g", 1, False, "broker")
    manager.on_channel_close("ch1")
    info = manager.replicas.sync_state_set_info_table["g"]
    assert (info.master_broker_id, info.master_epoch) == (1, 1)
    store.close()
