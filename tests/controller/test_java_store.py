"""The way back from this controller to Java 5.3.3's DLedger controller, and forward again (issue 46
item 8): Java's store read back byte for byte (tests/data/java-controller, written by Java through
the reference rig), our log written as a store Java replays to the same state, and the two
namesrv-admin commands that do it.  The drill with real brokers is in docs/controller.md."""

from __future__ import annotations

import io
import shutil
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twisted_namesrv.admin.cli import main
from twisted_namesrv.controller import java_store
from twisted_namesrv.controller.events import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    ReplicasSnapshotEvent,
    decode_event,
    encode_event,
)
from twisted_namesrv.controller.log import FileControllerLog, read_log, write_log
from twisted_namesrv.controller.replicas import ReplicasInfoManager

JAVA = Path(__file__).parents[1] / "data" / "java-controller"
RIG_FILE_SIZE = 64 << 20  # the reference rig's mappedFileSize


@pytest.fixture
def java_store_path(tmp_path) -> Path:
    """Java's controllerStorePath as Java left it: the data file at its full (sparse) size."""
    peer = tmp_path / "java" / "dledger-n0"
    (peer / "data").mkdir(parents=True)
    data = peer / "data" / f"{0:020d}"
    data.write_bytes((JAVA / "dledger-data-head.bin").read_bytes())
    with data.open("r+b") as handle:
        handle.truncate(RIG_FILE_SIZE)
    shutil.copy(JAVA / "checkpoint", peer / "checkpoint")
    return tmp_path / "java"


def replayed(events) -> ReplicasInfoManager:
    state = ReplicasInfoManager()
    for event in events:
        state.apply_event(event)
    return state


def test_a_store_java_wrote_reads_back_as_its_events_byte_for_byte(java_store_path):
    bodies = java_store.read_dledger(java_store.peer_directory(java_store_path, "n0"))
    assert len(bodies) == 11 and bodies[0] == b""  # DLedger's empty first entry
    events = [java_store.event_from_java(body) for body in bodies[1:]]
    assert [java_store.java_event_bytes(e) for e in events] == bodies[1:]  # as EventSerializer writes them
    assert events[:2] == [ApplyBrokerIdEvent("CtlCluster", "broker-ctl", "127.0.0.1:28911", 1,
                                             "127.0.0.1:28911;1795909332975"),
                          ElectMasterEvent("broker-ctl", True, 1)]
    group = replayed(events).summary()["broker-ctl"]
    assert group == {"clusterName": "CtlCluster", "brokers": {"1": "127.0.0.1:28911", "2": "127.0.0.1:28921"},
                     "masterBrokerId": None, "masterEpoch": 6, "syncStateSet": [1], "syncStateSetEpoch": 5}


def test_only_committed_entries_are_read(java_store_path):
    peer = java_store.peer_directory(java_store_path, "n0")
    (peer / "checkpoint").write_text("committedIndex=4\nendIndex=10\n")
    assert len(java_store.read_dledger(peer)) == 5
    (peer / "checkpoint").unlink()
    assert len(java_store.read_dledger(peer)) == 11  # no checkpoint: every entry


def test_a_damaged_store_is_refused_naming_file_and_byte(java_store_path):
    data = java_store.peer_directory(java_store_path, "n0") / "data" / f"{0:020d}"
    with data.open("r+b") as handle:
        handle.seek(290 + 24)  # the third entry's pos field
        handle.write(struct.pack(">q", 7))
    with pytest.raises(java_store.JavaStoreError, match=rf"{data}: entry 2 at byte 290 says pos 7"):
        java_store.read_dledger(data.parents[1])


def test_what_is_written_reads_back_across_files_as_dledger_lays_them_out(tmp_path):
    """Entries never span two data files: one that does not fit (with 8 bytes to spare) starts the
    next file behind a blank (magic -1 and its size); each file is exactly the mapped size."""
    bodies = [b"\x00\x02" + bytes([65 + i]) * (40 + i) for i in range(12)]
    peer = tmp_path / "dledger-n0"
    java_store.write_dledger(peer, bodies, data_file_size=400)
    files = sorted((peer / "data").iterdir())
    assert [f.name for f in files] == [f"{i * 400:020d}" for i in range(len(files))] and len(files) > 2
    assert all(f.stat().st_size == 400 for f in files)
    first = files[0].read_bytes()
    end = sum(48 + len(b) for b in bodies[:java_store_fit(bodies, 400)])
    assert struct.unpack_from(">ii", first, end) == (-1, 400 - end)  # the blank closing the first file
    assert java_store.read_dledger(peer) == bodies
    index = (peer / "index" / f"{0:020d}").read_bytes()
    assert len(index) == java_store.INDEX_FILE_SIZE
    magic, pos, size, number, term = struct.unpack_from(">iqiqq", index, 32 * 11)
    assert (magic, size, number, term) == (1, 48 + len(bodies[11]), 11, 0) and pos % 400 + size <= 400
    assert (peer / "checkpoint").read_text() == "committedIndex=11\nendIndex=11\n"
    with pytest.raises(java_store.JavaStoreError, match="already holds a DLedger store"):
        java_store.write_dledger(peer, bodies, data_file_size=400)


def java_store_fit(bodies: list[bytes], file_size: int) -> int:
    """How many entries the first data file takes (each with 8 bytes to spare, as DLedger appends)."""
    used = 0
    for count, body in enumerate(bodies):
        if used + 48 + len(body) + 8 > file_size:
            return count
        used += 48 + len(body)
    return len(bodies)


# -- our states as Java's events ---------------------------------------------------------------

EVENTS = st.one_of(
    st.builds(lambda i: ApplyBrokerIdEvent("C", "g", f"10.0.0.{i}:10911", i, f"10.0.0.{i}:10911;{i}"),
              st.integers(1, 5)),
    st.builds(lambda i: ElectMasterEvent("g", True, i), st.integers(1, 5)),
    st.just(ElectMasterEvent("g", False)),
    st.builds(lambda ids: AlterSyncStateSetEvent("g", tuple(sorted(ids))), st.sets(st.integers(1, 5), min_size=1)),
    st.builds(lambda ids: CleanBrokerDataEvent("g", tuple(sorted(ids))), st.sets(st.integers(1, 5), min_size=1)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(EVENTS, max_size=25))
def test_a_state_becomes_java_events_that_rebuild_it_exactly_or_is_refused(history):
    """Whatever history built a state, the events written for Java rebuild it (ids and addresses,
    check codes, next id, master, both epochs, the set) or the export is refused naming the group:
    never a Java controller with another state."""
    ours = replayed(history)
    try:
        events = java_store.events_for_snapshot(ours.snapshot())
    except java_store.JavaStoreError as exc:
        assert str(exc).startswith("g: ")
        return
    java_store.check_same_state(ours, events)
    assert all(java_store.event_from_java(java_store.java_event_bytes(e)) == e for e in events)


def test_the_states_real_clusters_reach_are_all_expressed():
    """Brokers joining, failing over, rejoining and one retired (its id cleaned): no refusal."""
    history = [ApplyBrokerIdEvent("C", "g", "a:1", 1, "a:1;1"), ElectMasterEvent("g", True, 1),
               ApplyBrokerIdEvent("C", "g", "b:1", 2, "b:1;2"), AlterSyncStateSetEvent("g", (1, 2)),
               ApplyBrokerIdEvent("C", "g", "c:1", 3, "c:1;3"), AlterSyncStateSetEvent("g", (1, 2, 3)),
               ElectMasterEvent("g", True, 2), AlterSyncStateSetEvent("g", (2, 3)), CleanBrokerDataEvent("g", (1,)),
               ElectMasterEvent("g", False), ElectMasterEvent("g", True, 3)]
    ours = replayed(history)
    events = java_store.events_for_snapshot(ours.snapshot())
    java_store.check_same_state(ours, events)
    assert ours.replica_info_table["g"].next_assign_broker_id == 4  # id 1 is not handed out again


def test_a_compacted_log_is_exported_as_the_state_it_holds():
    history = [ApplyBrokerIdEvent("C", "g", "a:1", 1, "a:1;1"), ElectMasterEvent("g", True, 1)]
    ours = replayed(history)
    log = [encode_event(ReplicasSnapshotEvent(ours.snapshot())), encode_event(ElectMasterEvent("g", False))]
    ours.apply_event(ElectMasterEvent("g", False))
    java_store.check_same_state(ours, java_store.java_events(log))
    with pytest.raises(java_store.JavaStoreError, match="after the log's first record"):
        java_store.java_events(list(reversed(log)))


# -- namesrv-admin controller-export / controller-import ------------------------------------------

def admin(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def test_import_from_java_then_export_back_gives_java_its_own_history(java_store_path, tmp_path):
    code, out, err = admin("controller-import", "--from", str(java_store_path), "--store", str(tmp_path / "ours"))
    assert code == 0, err
    assert out == (f"wrote 10 events to {tmp_path / 'ours' / 'controller.log'}\n"
                   "CtlCluster/broker-ctl: brokers 1=127.0.0.1:28911, 2=127.0.0.1:28921; master none, masterEpoch 6, "
                   "syncStateSet [1] at epoch 5; next id 3\n")
    ours = replayed(java_store.event_from_java(b) for b in java_store.read_dledger(java_store_path / "dledger-n0")
                    if java_store.event_from_java(b))
    assert replayed(map(decode_event, read_log(tmp_path / "ours"))).snapshot() == ours.snapshot()  # counts too
    code, out, err = admin("controller-export", "--store", str(tmp_path / "ours"), "--to", str(tmp_path / "back"),
                           "--mapped-file-size", str(RIG_FILE_SIZE))
    assert code == 0, err
    bodies = java_store.read_dledger(tmp_path / "back" / "dledger-n0")
    assert bodies == java_store.read_dledger(java_store_path / "dledger-n0")[1:]  # Java's events, byte for byte


def test_the_commands_refuse_to_write_over_a_history(java_store_path, tmp_path):
    write_log(tmp_path / "ours", [encode_event(ApplyBrokerIdEvent("C", "g", "a:1", 1, "a:1;1"))])
    code, out, err = admin("controller-import", "--from", str(java_store_path), "--store", str(tmp_path / "ours"))
    assert (code, out) == (1, "") and err == (f"error: controllerStorePath: {tmp_path / 'ours' / 'controller.log'} "
                                              "already holds events: move it away first\n")
    code, out, err = admin("controller-export", "--store", str(tmp_path / "ours"), "--to", str(java_store_path))
    assert (code, out) == (1, "") and "already holds a DLedger store: move it away first" in err
    code, out, err = admin("controller-export", "--store", str(tmp_path / "none"), "--to", str(tmp_path / "j"))
    assert code == 1 and "cannot read" in err and "controller.log" in err


def test_a_log_the_controller_wrote_is_read_without_changing_it(tmp_path):
    log = FileControllerLog(tmp_path)
    log.open()
    log.append([encode_event(ApplyBrokerIdEvent("C", "g", "a:1", 1, "a:1;1"))])
    log.close()
    before = (tmp_path / "controller.log").read_bytes()
    with (tmp_path / "controller.log").open("ab") as handle:
        handle.write(b"\x00\x00\x00")  # a torn tail, as a crash leaves
    assert len(read_log(tmp_path)) == 1
    assert (tmp_path / "controller.log").read_bytes() == before + b"\x00\x00\x00"  # read only: the tail stays
