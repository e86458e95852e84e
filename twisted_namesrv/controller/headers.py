"""The controller's request and response headers, read once with Java's rules, for the server
(processor.py: what a handler is asked) and for the capture decoder (spark_analysis.decode.controller:
what a broker asked and what the controller answered) alike.

extFields are strings; a boxed Long or Integer field Java cannot parse makes its
``decodeCommandCustomHeader`` fail (the server answers SYSTEM_ERROR): here a ``BadRequest`` naming
the field. An absent field is None. Response headers are what ``replicas.py`` writes
(``ControllerResult.header``), read back by their Java names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..remoting.values import BadRequest, java_bool, optional_long

Ext = Mapping[str, str | None]


def text(ext: Ext, name: str, required: bool = False) -> str | None:
    value = ext.get(name)
    if value is None and required:
        raise BadRequest(f"the custom field <{name}> is null")
    return value


def required(ext: Ext, name: str) -> str:
    value = text(ext, name, True)
    assert value is not None
    return value


def long_field(ext: Ext, name: str, bits: int = 64) -> int | None:
    """A boxed Long (``bits`` 32: Integer) field: None when absent, BadRequest when malformed."""
    value = ext.get(name)
    number = optional_long(value, bits)
    if value is not None and number is None:
        raise BadRequest(f"header field {name} is not a number: {value[:40]!r}")
    return number


# -- requests ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AlterSyncStateSetRequestHeader:
    """CONTROLLER_ALTER_SYNC_STATE_SET (1001): the master asking for a new syncStateSet (the body)."""

    brokerName: str | None
    masterBrokerId: int | None
    masterEpoch: int | None

    @classmethod
    def from_ext(cls, ext: Ext) -> AlterSyncStateSetRequestHeader:
        return cls(text(ext, "brokerName"), long_field(ext, "masterBrokerId"), long_field(ext, "masterEpoch", 32))


@dataclass(frozen=True, slots=True)
class ElectMasterRequestHeader:
    """CONTROLLER_ELECT_MASTER (1002): a broker (or an admin, ``designateElect``) asking for an election."""

    clusterName: str
    brokerName: str
    brokerId: int | None
    designateElect: bool

    @classmethod
    def from_ext(cls, ext: Ext) -> ElectMasterRequestHeader:
        return cls(text(ext, "clusterName") or "", text(ext, "brokerName") or "", long_field(ext, "brokerId"),
                   java_bool(text(ext, "designateElect")))


@dataclass(frozen=True, slots=True)
class RegisterBrokerToControllerRequestHeader:
    """CONTROLLER_REGISTER_BROKER (1003): a broker with its id registering its address."""

    clusterName: str | None
    brokerName: str | None
    brokerId: int | None
    brokerAddress: str

    @classmethod
    def from_ext(cls, ext: Ext) -> RegisterBrokerToControllerRequestHeader:
        return cls(text(ext, "clusterName"), text(ext, "brokerName"), long_field(ext, "brokerId"),
                   required(ext, "brokerAddress"))


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatRequestHeader:
    """BROKER_HEARTBEAT (904) as the controller reads it: a broker alive in its eyes."""

    clusterName: str
    brokerAddr: str
    brokerName: str
    brokerId: int
    heartbeatTimeoutMills: int | None
    epoch: int | None
    maxOffset: int | None
    confirmOffset: int | None
    electionPriority: int | None

    @classmethod
    def from_ext(cls, ext: Ext) -> BrokerHeartbeatRequestHeader:
        """BadRequest("Heart beat with empty brokerId") where the controller answers
        CONTROLLER_INVALID_REQUEST (processor.broker_heartbeat)."""
        broker_id = long_field(ext, "brokerId")
        if broker_id is None:
            raise BadRequest("Heart beat with empty brokerId")
        return cls(required(ext, "clusterName"), required(ext, "brokerAddr"), required(ext, "brokerName"), broker_id,
                   long_field(ext, "heartbeatTimeoutMills"), long_field(ext, "epoch", 32), long_field(ext, "maxOffset"),
                   long_field(ext, "confirmOffset"), long_field(ext, "electionPriority", 32))


@dataclass(frozen=True, slots=True)
class ApplyBrokerIdRequestHeader:
    """CONTROLLER_APPLY_BROKER_ID (1013): a broker claiming an id; its address leads registerCheckCode."""

    clusterName: str
    brokerName: str
    appliedBrokerId: int
    registerCheckCode: str

    @classmethod
    def from_ext(cls, ext: Ext) -> ApplyBrokerIdRequestHeader:
        broker_id = long_field(ext, "appliedBrokerId")
        if broker_id is None:
            raise BadRequest("the custom field <appliedBrokerId> is null")
        return cls(text(ext, "clusterName") or "", text(ext, "brokerName") or "", broker_id,
                   required(ext, "registerCheckCode"))

    @property
    def brokerAddress(self) -> str:
        """ApplyBrokerIdEvent's brokerAddress: registerCheckCode up to its ';'."""
        return self.registerCheckCode.split(";")[0]


# -- responses (as replicas.py writes them) ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MasterHeader:
    """What a response header says of a group's master: ElectMasterResponseHeader,
    GetReplicaInfoResponseHeader and RegisterBrokerToControllerResponseHeader (which has it only
    while the master is alive) carry masterBrokerId, masterAddress, masterEpoch; the first and the
    last also syncStateSetEpoch. Every field None where absent."""

    masterBrokerId: int | None
    masterAddress: str | None
    masterEpoch: int | None
    syncStateSetEpoch: int | None

    @classmethod
    def from_ext(cls, ext: Ext) -> MasterHeader:
        return cls(long_field(ext, "masterBrokerId"), text(ext, "masterAddress"), long_field(ext, "masterEpoch", 32),
                   long_field(ext, "syncStateSetEpoch", 32))


def new_sync_state_set_epoch(ext: Ext) -> int | None:
    """AlterSyncStateSetResponseHeader.newSyncStateSetEpoch."""
    return long_field(ext, "newSyncStateSetEpoch", 32)
