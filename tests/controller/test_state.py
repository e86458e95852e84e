"""The controller's pure state: ReplicasInfoManager's answers and events, DefaultElectPolicy's
order, the heartbeat manager on a fake clock, and events read back as written."""

from __future__ import annotations

import pytest

from twisted_namesrv.controller import events as ev
from twisted_namesrv.controller.codes import ControllerResponseCode as Code
from twisted_namesrv.controller.elect import DefaultElectPolicy
from twisted_namesrv.controller.heartbeat import BrokerHeartbeatManager
from twisted_namesrv.controller.replicas import ReplicasInfoManager


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def committed(manager: ReplicasInfoManager, result):
    """Apply a result's events, as the controller does once they are durable (through the codec)."""
    for event in result.events:
        manager.apply_event(ev.decode_event(ev.encode_event(event)))
    return result


@pytest.fixture
def world():
    clock = Clock()
    beats = BrokerHeartbeatManager(clock)
    unclean = {"on": False}
    manager = ReplicasInfoManager(lambda: unclean["on"])
    policy = DefaultElectPolicy(beats.is_broker_active, beats.get_broker_live_info)
    return clock, beats, manager, policy, unclean


def join(manager, beats, broker_id: int, epoch: int = 0, offset: int = 0, priority: int = 0, timeout: int = 10_000):
    addr = f"127.0.0.1:{10000 + broker_id}"
    committed(manager, manager.apply_broker_id("C", "g", broker_id, f"{addr};{broker_id}"))
    beats.on_broker_heartbeat("C", "g", addr, broker_id, timeout, f"ch{broker_id}", epoch, offset, None, priority)


def test_first_election_takes_the_broker_that_asked_and_epochs_only_grow(world) -> None:
    clock, beats, manager, policy, _ = world
    join(manager, beats, 1)
    join(manager, beats, 2)
    result = committed(manager, manager.elect_master("g", 1, False, policy))
    assert (result.code, result.header["masterBrokerId"], result.header["masterEpoch"]) == (0, 1, 1)
    again = manager.elect_master("g", 2, False, policy)
    assert again.code == Code.CONTROLLER_MASTER_STILL_EXIST and not again.events
    assert again.header == {"masterBrokerId": 1, "masterAddress": "127.0.0.1:10001", "masterEpoch": 1,
                            "syncStateSetEpoch": 1}
    committed(manager, manager.alter_sync_state_set("g", 1, 1, frozenset({1, 2}), 1, beats.is_broker_active))
    beats.on_broker_channel_close("ch1")  # the master goes
    result = committed(manager, manager.elect_master("g", -1, False, policy))
    info = manager.sync_state_set_info_table["g"]
    assert (result.code, info.master_broker_id, info.master_epoch, info.sync_state_set_epoch) == (0, 2, 2, 3)
    assert info.sync_state_set == {2}


def test_policy_orders_by_epoch_then_offset_then_priority(world) -> None:
    clock, beats, manager, policy, _ = world
    for broker_id, epoch, offset, priority in ((1, 5, 0, 0), (2, 4, 900, 0), (3, 4, 900, 1), (4, 4, 100, 0)):
        join(manager, beats, broker_id, epoch, offset, priority)
    committed(manager, manager.elect_master("g", 1, False, policy))
    committed(manager, manager.alter_sync_state_set("g", 1, 1, frozenset({1, 2, 3, 4}), 1, beats.is_broker_active))
    beats.on_broker_channel_close("ch1")
    assert committed(manager, manager.elect_master("g", None, False, policy)).header["masterBrokerId"] == 2
    assert policy.last.candidates == [2, 3, 4] and "best" in policy.last.why


def test_heartbeat_timeout_ends_a_broker_on_the_fake_clock(world) -> None:
    clock, beats, manager, policy, _ = world
    join(manager, beats, 1, timeout=3_000)
    assert beats.is_broker_active("C", "g", 1)
    clock.ms += 3_001
    assert not beats.is_broker_active("C", "g", 1)
    gone = beats.scan_not_active_broker()
    assert [(i.broker_id, info.channel) for i, info in gone] == [(1, "ch1")] and beats.broker_live_table == {}


def test_no_candidate_leaves_no_master_and_bumps_the_epoch_only_when_the_controller_asked(world) -> None:
    clock, beats, manager, policy, unclean = world
    join(manager, beats, 1)
    join(manager, beats, 2)
    committed(manager, manager.elect_master("g", 1, False, policy))  # set {1}; 2 is not in sync
    beats.on_broker_channel_close("ch1")
    by_broker = manager.elect_master("g", 2, False, policy)
    assert (by_broker.code, by_broker.remark, by_broker.events) == (2012, "Failed to elect a new master", [])
    by_controller = committed(manager, manager.elect_master("g", -1, False, policy))
    assert by_controller.code == Code.CONTROLLER_MASTER_NOT_AVAILABLE
    info = manager.sync_state_set_info_table["g"]
    assert (info.master_broker_id, info.master_epoch, info.sync_state_set) == (None, 2, {1})
    unclean["on"] = True  # enableElectUncleanMaster: any alive replica will do
    result = committed(manager, manager.elect_master("g", -1, False, policy))
    assert (result.code, info.master_broker_id, info.master_epoch) == (0, 2, 3)


def test_designated_broker_wins_only_when_alive_in_the_set(world) -> None:
    clock, beats, manager, policy, _ = world
    join(manager, beats, 1)
    join(manager, beats, 2)
    committed(manager, manager.elect_master("g", 1, False, policy))
    assert manager.elect_master("g", 2, True, policy).code == 2012  # 2 is not in the sync-state set
    committed(manager, manager.alter_sync_state_set("g", 1, 1, frozenset({1, 2}), 1, beats.is_broker_active))
    result = committed(manager, manager.elect_master("g", 2, True, policy))
    assert (result.code, result.header["masterBrokerId"]) == (0, 2)


def test_alter_sync_state_set_refusals_say_why_as_java(world) -> None:
    clock, beats, manager, policy, _ = world
    join(manager, beats, 1)
    join(manager, beats, 2)
    committed(manager, manager.elect_master("g", 1, False, policy))
    alive = beats.is_broker_active
    cases = [
        (("nope", 1, 1, frozenset({1, 2}), 1), 2013, "Broker metadata is not existed"),
        (("g", 1, 1, frozenset({1}), 1), 2013,
         "The newSyncStateSet is equal with oldSyncStateSet, no needed to update syncStateSet"),
        (("g", 2, 1, frozenset({1, 2}), 1), 2002,
         "Rejecting alter syncStateSet request because the current leader is:{1}, not {2}"),
        (("g", 1, 0, frozenset({1, 2}), 1), 2000,
         "Rejecting alter syncStateSet request because the current master epoch is:{1}, not {0}"),
        (("g", 1, 1, frozenset({1, 2}), 0), 2001,
         "Rejecting alter syncStateSet request because the current syncStateSet epoch is:{1}, not {0}"),
        (("g", 1, 1, frozenset({1, 7}), 1), 2003,
         "Rejecting alter syncStateSet request because the replicas {7} don't exist"),
        (("g", 1, 1, frozenset({2}), 1), 2013,
         "Rejecting alter syncStateSet request because the newSyncStateSet don't contains origin leader {1}"),
    ]
    for args, code, remark in cases:
        result = manager.alter_sync_state_set(*args, alive)
        assert (result.code, result.remark, result.events) == (code, remark, []), args
    beats.on_broker_channel_close("ch2")
    result = manager.alter_sync_state_set("g", 1, 1, frozenset({1, 2}), 1, alive)
    assert (result.code, result.remark) == (2006, "Rejecting alter syncStateSet request because the replicas {2} "
                                                  "don't alive")


def test_broker_ids_are_never_given_twice(world) -> None:
    clock, beats, manager, policy, _ = world
    assert manager.get_next_broker_id("C", "g").header["nextBrokerId"] == 1
    first = manager.apply_broker_id("C", "g", 2, "a:1;1")
    assert (first.code, first.remark) == (2014, "Broker-set: g hasn't been registered in controller, but broker try "
                                                "to apply brokerId: 2")
    committed(manager, manager.apply_broker_id("C", "g", 1, "a:1;1"))
    assert manager.apply_broker_id("C", "g", 1, "a:1;1").code == 0  # the same broker again: its own id
    assert manager.apply_broker_id("C", "g", 1, "b:1;2").code == 2014
    assert manager.get_next_broker_id("C", "g").header["nextBrokerId"] == 2
    unknown = manager.register_broker("C", "g", 9, "a:1", beats.is_broker_active)
    assert (unknown.code, unknown.remark) == (2010, "BrokerId: 9 hasn't been registered in broker-set: g")
    moved = manager.register_broker("C", "g", 1, "a:2", beats.is_broker_active)
    assert [type(e).__name__ for e in moved.events] == ["UpdateBrokerAddressEvent"]


def test_sync_state_data_works_out_each_group_once_however_often_it_is_named(world, monkeypatch) -> None:
    """GET_SYNC_STATE_DATA names groups (any peer's, a read: open without aclReadRequired); Java puts
    each into a map, one entry a name.  Each was worked out again for every time it was named: a body
    of 1 MiB naming one group of 64 ids 262,144 times built 16 M replica identities in the reactor."""
    clock, beats, manager, policy, _ = world
    join(manager, beats, 1)
    worked = []
    real = manager.replicas_info
    monkeypatch.setattr(manager, "replicas_info", lambda name, alive: worked.append(name) or real(name, alive))
    once = manager.get_sync_state_data(["g"], beats.is_broker_active)
    assert manager.get_sync_state_data(["g", "x"] * 1000, beats.is_broker_active).body == once.body
    assert worked == ["g", "g", "x"]


def test_clean_broker_data(world) -> None:
    clock, beats, manager, policy, _ = world
    join(manager, beats, 1)
    join(manager, beats, 2)
    committed(manager, manager.elect_master("g", 1, False, policy))
    alive = beats.is_broker_active
    assert manager.clean_broker_data("C", "g", None, False, alive).remark == "Broker g is still alive, clean up failure"
    assert manager.clean_broker_data("C", "g", "2", False, alive).remark == "Broker [g,  2] is still alive, clean up " \
                                                                             "failure"
    assert manager.clean_broker_data("C", "g", "x", False, alive).code == 2009
    assert manager.clean_broker_data("C", "h", None, True, alive).remark == "Broker h is not existed,clean broker " \
                                                                            "data failure."
    beats.on_broker_channel_close("ch2")
    committed(manager, manager.clean_broker_data("C", "g", "2", False, alive))
    assert manager.replica_info_table["g"].broker_id_table() == {1: "127.0.0.1:10001"}
    committed(manager, manager.clean_broker_data("C", "g", None, True, alive))
    assert manager.replica_info_table == {} and manager.sync_state_set_info_table == {}


def test_events_read_back_as_written_and_garbage_is_refused() -> None:
    for event in (ev.AlterSyncStateSetEvent("g", (1, 2)), ev.ApplyBrokerIdEvent("C", "g", "a:1", 1, "a:1;5"),
                  ev.ElectMasterEvent("g", False, None), ev.CleanBrokerDataEvent("g", (3,)),
                  ev.CleanBrokerDataEvent("g"), ev.UpdateBrokerAddressEvent("C", "g", "a:2", 1)):
        assert ev.decode_event(ev.encode_event(event)) == event
    for garbage in (b"", b"[]", b'{"eventType":"ReadEvent"}', b'{"eventType":"ElectMasterEvent"}', b"\xff"):
        with pytest.raises(ev.EventDecodeError):
            ev.decode_event(garbage)


def test_the_pure_state_imports_no_twisted() -> None:
    """replicas, events, elect, heartbeat, bodies, codes and config: the state layer, clock injected."""
    import subprocess
    import sys

    code = ("import sys; import twisted_namesrv.controller.replicas, twisted_namesrv.controller.elect, "
            "twisted_namesrv.controller.heartbeat, twisted_namesrv.controller.config; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'twisted'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
