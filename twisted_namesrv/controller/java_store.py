"""Java 5.3.3's DLedger controller store, read and written: the way back from this controller to
Java's, and forward again.

Java's DLedger controller keeps no snapshot (DLedgerControllerStateMachine saves none): its state is
the replay of its DLedger log, each entry's body one event as EventSerializer writes it, a 2-byte
EventType id and fastjson's JSON of the event (keys sorted, nulls left out)::

    0002 {"brokerAddress":"127.0.0.1:28911","brokerName":"broker-ctl","clusterName":"CtlCluster",
          "eventType":"APPLY_BROKER_ID_EVENT","newBrokerId":1,"registerCheckCode":"127.0.0.1:28911;17959..."}

Our events are Java's, with the same fields (events.py), so each converts one to one; the one of ours
Java lacks, ReplicasSnapshotEvent (a compacted log), becomes the Java events that rebuild the state it
holds (``events_for_snapshot``).  The store (openmessaging DLedger 0.3.1.2, DLedgerMmapFileStore) is
``<controllerStorePath>/dledger-<selfId>/``:

- ``data/<20-digit offset>``: files of exactly ``mappedFileSize`` bytes (the controller's key, 1 GiB by
  default), entries back to back: magic 1 (4 bytes), size (4: header and body), index (8), term (8),
  pos (8: the entry's absolute offset), channel (4), chain crc (4), body crc (4: Java writes 0 for
  both), body size (4), body.  An entry that does not fit is preceded by a blank (magic -1, its size)
  filling the file; zeros after the last entry end the log;
- ``index/<20-digit offset>``: 32 bytes per entry (magic, pos, size, index, term), files of 160 MiB;
- ``checkpoint``: ``committedIndex`` and ``endIndex`` as properties: what Java has applied.

Checked against the reference rig: a store Java wrote reads back as its events, and a store written
here starts Java's controller with the state it holds (docs/controller.md#back-to-javas-controller).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .. import properties
from ..state.files import FILE_MODE, TEXT_FILE_LIMIT, read_regular_text
from .events import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    EventMessage,
    ReplicasSnapshotEvent,
    UpdateBrokerAddressEvent,
    decode_event,
)
from .replicas import ReplicasInfoManager

#: Java's EventType: (enum name, id); READ_EVENT (4) carries nothing and is skipped when read
JAVA_TYPES: dict[type[Any], tuple[str, int]] = {
    AlterSyncStateSetEvent: ("ALTER_SYNC_STATE_SET_EVENT", 1),
    ApplyBrokerIdEvent: ("APPLY_BROKER_ID_EVENT", 2),
    ElectMasterEvent: ("ELECT_MASTER_EVENT", 3),
    CleanBrokerDataEvent: ("CLEAN_BROKER_DATA_EVENT", 5),
    UpdateBrokerAddressEvent: ("UPDATE_BROKER_ADDRESS", 6),
}
_BY_ID = {type_id: (cls, name) for cls, (name, type_id) in JAVA_TYPES.items()}
READ_EVENT = 4
_SET_FIELDS = ("newSyncStateSet", "brokerIdSetToClean")

MAGIC, BLANK_MAGIC = 1, -1
_HEADER = struct.Struct(">iiqqqiiii")  # magic, size, index, term, pos, channel, chain crc, body crc, body size
_INDEX = struct.Struct(">iqiqq")  # magic, pos, size, index, term
#: DLedgerConfig's defaults: data files of 1 GiB (the controller's mappedFileSize), index files of 160 MiB
DEFAULT_DATA_FILE_SIZE = 1 << 30
INDEX_FILE_SIZE = _INDEX.size * 5 * 1024 * 1024
_MIN_BLANK = 8


class JavaStoreError(ValueError):
    """A Java store that cannot be read (names the file and offset), or a state Java's events cannot express."""


# -- events -----------------------------------------------------------------------------------

def java_event_bytes(event: EventMessage) -> bytes:
    """``event`` as Java's EventSerializer writes it."""
    try:
        name, type_id = JAVA_TYPES[type(event)]
    except KeyError:
        raise JavaStoreError(f"{type(event).__name__} has no Java counterpart") from None
    record = {"eventType": name, **{k: v for k, v in asdict(event).items() if v is not None}}
    for key in _SET_FIELDS:
        if key in record:
            record[key] = sorted(record[key])
    return type_id.to_bytes(2, "big") + json.dumps(record, sort_keys=True, separators=(",", ":")).encode()


def event_from_java(body: bytes) -> EventMessage | None:
    """One of Java's entry bodies as our event; None for an empty body and READ_EVENT."""
    if len(body) < 2:
        return None
    type_id = int.from_bytes(body[:2], "big")
    if type_id == READ_EVENT:
        return None
    if type_id not in _BY_ID:
        raise JavaStoreError(f"unknown event type {type_id}: {body[:80]!r}")
    cls, name = _BY_ID[type_id]
    try:
        record = json.loads(body[2:])
    except ValueError as exc:
        raise JavaStoreError(f"event type {type_id} is not JSON ({exc}): {body[:80]!r}") from None
    if record.pop("eventType", name) != name:
        raise JavaStoreError(f"event type {type_id} says it is {record.get('eventType')!r}: {body[:80]!r}")
    record["eventType"] = cls.TYPE  # our events.py JSON, checked by its decoder
    return decode_event(json.dumps(record).encode())


# -- our log's events as Java's -----------------------------------------------------------------

def java_events(entries: Iterable[bytes]) -> list[EventMessage]:
    """Our controller log's events (encoded as events.py writes them) as Java's controller can replay
    them: each as it is, a compacted log's ReplicasSnapshotEvent (its first record) as the events that
    rebuild the state it holds.  Java then holds exactly our state (``check_same_state``)."""
    out: list[EventMessage] = []
    for position, entry in enumerate(entries):
        event = decode_event(entry)
        if isinstance(event, ReplicasSnapshotEvent):
            if position:
                raise JavaStoreError("a ReplicasSnapshotEvent after the log's first record: not a log this "
                                     "controller wrote")
            out.extend(events_for_snapshot(event.groups))
        else:
            out.append(event)
    return out


def events_for_snapshot(groups: dict[str, Any]) -> list[EventMessage]:
    """Events that, replayed by Java's ReplicasInfoManager from nothing, build each group of a
    ReplicasInfoManager snapshot exactly: every broker id with its address and register check code,
    the next id to hand out, the master, the master epoch, the sync-state set and its epoch.

    Java's events only count up: each ElectMasterEvent adds one to the master epoch (and, when a
    master was elected, one to the set's epoch, the set becoming that master alone), each
    AlterSyncStateSetEvent one to the set's epoch, each ApplyBrokerIdEvent one to the next id. So
    a group is: its brokers applied; masterEpoch - 1 elections that elected nobody and the last one
    electing the master (or nobody); the set altered up to its epoch; then ids handed out before
    and since cleaned, applied and cleaned again so that the next id is the same."""
    events: list[EventMessage] = []
    for name, group in sorted(groups.items()):
        replicas, sync = group.get("replicas"), group.get("syncState")
        if replicas is None:
            if sync is not None:
                raise JavaStoreError(f"{name}: a sync state without brokers: Java's events cannot express it")
            continue  # elections counted for a group since cleaned: no state
        cluster = replicas["clusterName"]
        brokers = [(int(i), str(a), str(c)) for i, a, c in replicas["brokers"]]
        for broker_id, address, code in brokers:
            events.append(ApplyBrokerIdEvent(cluster, name, address, broker_id, code))
        gone = int(replicas["nextAssignBrokerId"]) - 1 - len(brokers)
        if gone < 0:
            raise JavaStoreError(f"{name}: nextAssignBrokerId {replicas['nextAssignBrokerId']} is below its "
                                 f"{len(brokers)} brokers + 1")
        if sync is not None:
            events.extend(_epochs(name, sync))
        elif not gone:
            gone_ids: tuple[int, ...] = (max(i for i, _, _ in brokers) + 1,)  # cleans nothing: see below
            events.append(CleanBrokerDataEvent(name, gone_ids))
            continue
        if gone:
            # ids handed out and since cleaned: applied and cleaned again. A clean that leaves the set
            # empty drops the group's sync state, as Java does: so a group without one (its set emptied
            # before any election) is rebuilt by the same clean, and one with an empty set cannot be
            if sync is not None and not sync["syncStateSet"]:
                raise JavaStoreError(f"{name}: {gone} broker id(s) handed out and cleaned with an empty "
                                     "sync-state set: Java's events cannot express it")
            # neither a broker's id nor one in the set (the clean would take it out of the set)
            taken = {broker_id for broker_id, _, _ in brokers} | {int(i) for i in (sync or {}).get("syncStateSet", ())}
            phantoms = tuple([i for i in range(1, len(taken) + gone + 2) if i not in taken][:gone])
            events.extend(ApplyBrokerIdEvent(cluster, name, "", i, "") for i in phantoms)
            events.append(CleanBrokerDataEvent(name, phantoms))
    return events


def _epochs(name: str, sync: dict[str, Any]) -> list[EventMessage]:
    master, master_epoch = sync["masterBrokerId"], int(sync["masterEpoch"])
    target_set, set_epoch = tuple(sorted(int(i) for i in sync["syncStateSet"])), int(sync["syncStateSetEpoch"])
    events: list[EventMessage] = []
    if master_epoch:
        events.extend(ElectMasterEvent(name, False) for _ in range(master_epoch - 1))
        last = ElectMasterEvent(name, True, int(master)) if master is not None else ElectMasterEvent(name, False)
        events.append(last)
    alters = set_epoch - (1 if master is not None and master_epoch else 0)
    elected_set = (int(master),) if master is not None and master_epoch else ()
    if alters < 0 or (alters == 0 and target_set != elected_set):
        raise JavaStoreError(f"{name}: sync-state set {list(target_set)} at epoch {set_epoch} after master epoch "
                             f"{master_epoch}: Java's events cannot express it")
    events.extend(AlterSyncStateSetEvent(name, target_set) for _ in range(alters))
    return events


def check_same_state(ours: ReplicasInfoManager, events: Iterable[EventMessage]) -> None:
    """Replay ``events`` as Java's ReplicasInfoManager would (ours is its port) and compare with
    ``ours``, election counts aside (Java keeps none): JavaStoreError naming the first group that differs."""
    replayed = ReplicasInfoManager()
    for event in events:
        replayed.apply_event(event)
    want, got = _without_counts(ours.snapshot()), _without_counts(replayed.snapshot())
    for name in sorted(want.keys() | got.keys()):
        if want.get(name) != got.get(name):
            raise JavaStoreError(f"{name}: the events would rebuild {got.get(name)}, not {want.get(name)}")


def _without_counts(groups: dict[str, Any]) -> dict[str, Any]:
    return {name: {k: v for k, v in group.items() if k != "elections"} for name, group in groups.items()
            if group.get("replicas") is not None or group.get("syncState") is not None}


# -- the DLedger store ---------------------------------------------------------------------------

def peer_directory(store_path: str | os.PathLike[str], self_id: str) -> Path:
    """Where Java's controller ``self_id`` keeps its DLedger store (DLedgerConfig.getDefaultPath)."""
    return Path(store_path) / f"dledger-{self_id}"


def read_dledger(peer_dir: Path) -> list[bytes]:
    """The bodies of every committed entry, oldest first (the checkpoint's committedIndex: what
    Java applied; without a checkpoint every entry)."""
    data_dir = peer_dir / "data"
    files = sorted(data_dir.iterdir(), key=lambda p: int(p.name)) if data_dir.is_dir() else []
    if not files:
        raise JavaStoreError(f"{data_dir}: no DLedger data files (is this Java's controllerStorePath and selfId?)")
    bodies: list[tuple[int, bytes]] = []
    expected = None
    for path in files:
        data, start, offset = path.read_bytes(), int(path.name), 0
        while offset + 8 <= len(data):
            magic, size = struct.unpack_from(">ii", data, offset)
            if magic == BLANK_MAGIC:
                break  # the rest of this file is blank: the log goes on in the next
            if size == 0:
                return _committed(peer_dir, bodies)  # zeros: the end of the log
            if magic != MAGIC or size < _HEADER.size or offset + size > len(data):
                raise JavaStoreError(f"{path}: not a DLedger entry at byte {offset} (magic {magic}, size {size})")
            _, _, index, _, pos, _, _, _, body_size = _HEADER.unpack_from(data, offset)
            if pos != start + offset or body_size + _HEADER.size != size:
                raise JavaStoreError(f"{path}: entry {index} at byte {offset} says pos {pos}, body {body_size}")
            if expected is not None and index != expected:
                raise JavaStoreError(f"{path}: entry {index} at byte {offset} follows entry {expected - 1}")
            bodies.append((index, data[offset + _HEADER.size:offset + size]))
            expected = index + 1
            offset += size
    return _committed(peer_dir, bodies)


def _committed(peer_dir: Path, bodies: list[tuple[int, bytes]]) -> list[bytes]:
    committed = _committed_index(peer_dir)
    return [body for index, body in bodies if committed is None or index <= committed]


def _committed_index(peer_dir: Path) -> int | None:
    checkpoint = peer_dir / "checkpoint"
    if not checkpoint.is_file():
        return None
    # Java writes and reads it as java.util.Properties (DLedger's IOUtils): the project's one codec
    value = properties.load(read_regular_text(checkpoint, TEXT_FILE_LIMIT, "latin-1")).get("committedIndex", "")
    return int(value) if value.strip().lstrip("-").isdigit() else None


def write_dledger(peer_dir: Path, bodies: list[bytes], data_file_size: int = DEFAULT_DATA_FILE_SIZE) -> None:
    """A DLedger store holding ``bodies`` as committed entries 0..n-1 of term 0 (a one-peer group's
    term, as Java's own store shows), for a controller whose mappedFileSize is ``data_file_size``
    (the data files must be exactly that long: DLedger refuses other sizes).  Refuses to write over
    a store that has data: Java's controller would hold two histories."""
    data_dir, index_dir = peer_dir / "data", peer_dir / "index"
    for directory in (data_dir, index_dir):
        if directory.is_dir() and any(directory.iterdir()):
            raise JavaStoreError(f"{directory} already holds a DLedger store: move it away first")
    files: list[bytearray] = [bytearray()]
    index = bytearray()
    for number, body in enumerate(bodies):
        size = _HEADER.size + len(body)
        if size + _MIN_BLANK > data_file_size:
            raise JavaStoreError(f"an event of {size} bytes does not fit a data file of {data_file_size}")
        if len(files[-1]) + size + _MIN_BLANK > data_file_size:
            blank = data_file_size - len(files[-1])
            files[-1] += struct.pack(">ii", BLANK_MAGIC, blank)
            files.append(bytearray())
        pos = (len(files) - 1) * data_file_size + len(files[-1])
        files[-1] += _HEADER.pack(MAGIC, size, number, 0, pos, 0, 0, 0, len(body)) + body
        index += _INDEX.pack(MAGIC, pos, size, number, 0)
    if len(index) > INDEX_FILE_SIZE:
        raise JavaStoreError(f"{len(bodies)} entries need more than one DLedger index file")
    for number, content in enumerate(files):
        _write_sized(data_dir / f"{number * data_file_size:020d}", bytes(content), data_file_size)
    _write_sized(index_dir / f"{0:020d}", bytes(index), INDEX_FILE_SIZE)
    last = len(bodies) - 1
    _write_sized(peer_dir / "checkpoint", f"committedIndex={last}\nendIndex={last}\n".encode(), None)


def _write_sized(path: Path, content: bytes, size: int | None) -> None:
    """``content`` then zeros up to ``size`` (sparse), fsync'd with its directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view):]
        if size is not None:
            os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
