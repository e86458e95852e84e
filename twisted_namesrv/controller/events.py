"""The controller's events (Java's impl/event/*): the only way its state changes.

A request's handler works out its answer and the events it causes from the state as it is;
the events are written to the controller log (controller/log.py) and only once they are durable
applied to the state (ReplicasInfoManager.apply_event) and the answer sent.  At start, and on
becoming leader, the log's events are applied again in order: the same function both times.

Java has six event types; READ_EVENT (4) carries nothing and changes nothing (it is DLedger's
read barrier), so it is never written here.  Events are encoded as JSON objects whose
``eventType`` is Java's event name: readable with ``jq``, and opaque bytes to the log.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, ClassVar


class EventDecodeError(ValueError):
    """A log entry that is not one of our events (a corrupt or foreign store)."""


@dataclass(frozen=True, slots=True)
class AlterSyncStateSetEvent:
    TYPE: ClassVar[str] = "AlterSyncStateSetEvent"
    ID: ClassVar[int] = 1
    brokerName: str
    newSyncStateSet: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ApplyBrokerIdEvent:
    TYPE: ClassVar[str] = "ApplyBrokerIdEvent"
    ID: ClassVar[int] = 2
    clusterName: str
    brokerName: str
    brokerAddress: str
    newBrokerId: int
    registerCheckCode: str


@dataclass(frozen=True, slots=True)
class ElectMasterEvent:
    """``newMasterElected`` false: the master is gone and nobody could replace it."""

    TYPE: ClassVar[str] = "ElectMasterEvent"
    ID: ClassVar[int] = 3
    brokerName: str
    newMasterElected: bool = True
    newMasterBrokerId: int | None = None


@dataclass(frozen=True, slots=True)
class CleanBrokerDataEvent:
    """``brokerIdSetToClean`` None or empty: the whole broker group goes."""

    TYPE: ClassVar[str] = "CleanBrokerDataEvent"
    ID: ClassVar[int] = 5
    brokerName: str
    brokerIdSetToClean: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class UpdateBrokerAddressEvent:
    TYPE: ClassVar[str] = "UpdateBrokerAddressEvent"
    ID: ClassVar[int] = 6
    clusterName: str
    brokerName: str
    brokerAddress: str
    brokerId: int


@dataclass(frozen=True, slots=True)
class ReplicasSnapshotEvent:
    """Ours, not Java's: the whole state at one moment (ReplicasInfoManager.snapshot), so that a
    compacted log (FileControllerLog.compact) starts from it instead of from every event since the
    first.  Applying it replaces the state."""

    TYPE: ClassVar[str] = "ReplicasSnapshotEvent"
    ID: ClassVar[int] = 100
    groups: dict[str, Any]


EventMessage = (AlterSyncStateSetEvent | ApplyBrokerIdEvent | ElectMasterEvent | CleanBrokerDataEvent
                | UpdateBrokerAddressEvent | ReplicasSnapshotEvent)
EVENT_TYPES: dict[str, type[Any]] = {cls.TYPE: cls for cls in (
    AlterSyncStateSetEvent, ApplyBrokerIdEvent, ElectMasterEvent, CleanBrokerDataEvent, UpdateBrokerAddressEvent,
    ReplicasSnapshotEvent)}
_TUPLE_FIELDS = frozenset({"newSyncStateSet", "brokerIdSetToClean"})


def encode_event(event: EventMessage) -> bytes:
    record: dict[str, Any] = {"eventType": event.TYPE, **asdict(event)}
    return json.dumps(record, separators=(",", ":"), sort_keys=True).encode()


def decode_event(data: bytes) -> EventMessage:
    try:
        record = json.loads(data)
        kind = EVENT_TYPES[record.pop("eventType")]
        for name in _TUPLE_FIELDS & record.keys():
            if record[name] is not None:
                record[name] = tuple(int(v) for v in record[name])
        event: EventMessage = kind(**record)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise EventDecodeError(f"not a controller event ({type(exc).__name__}: {exc}): {data[:80]!r}") from None
    return event


__all__ = ["AlterSyncStateSetEvent", "ApplyBrokerIdEvent", "CleanBrokerDataEvent", "ElectMasterEvent",
           "EventDecodeError", "EventMessage", "ReplicasSnapshotEvent", "UpdateBrokerAddressEvent", "decode_event",
           "encode_event"]
