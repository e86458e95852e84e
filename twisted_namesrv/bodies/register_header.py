"""The header of a REGISTER_BROKER request, read once with Java's rules, for the server
(processor.register_broker_steps) and for the capture decoder (spark_analysis.decode) alike."""

from __future__ import annotations

import sys

import msgspec

from ..remoting.values import java_bool, optional_long

ZONE_NAME = "__ZONE_NAME"
#: Integer.parseInt's range: -2^31 up to 2^31 - 1
_INT32 = 1 << 31


class RegisterBrokerHeader(msgspec.Struct, frozen=True, gc=False):
    """Each field as Java reads it. ``bodyCrc32``: absent, 0 or not a Java int means no check (0);
    ``brokerId``: a Java long, None where absent or malformed (``brokerIdText`` keeps what was sent);
    ``compressed``: a Java bool; ``enableActingMaster``: None where absent, else a Java bool.
    Frozen, compared and hashed by its fields; a msgspec Struct, made in C: every registration
    reads one (a frozen dataclass's thirteen fields set one by one were half of reading it)."""
    clusterName: str | None
    brokerAddr: str | None
    brokerName: str | None
    brokerId: int | None
    brokerIdText: str | None
    haServerAddr: str | None
    bodyCrc32: int
    bodyCrc32Declared: int | None
    compressed: bool
    zoneName: str | None
    enableActingMaster: bool | None
    enableActingMasterText: str | None
    heartbeatTimeoutMillis: int | None = None  # 5.x brokers' own expiry; None where absent or malformed

    @classmethod
    def from_ext(cls, ext: dict[str, str | None]) -> RegisterBrokerHeader:
        acting = ext.get("enableActingMaster")
        crc = optional_long(ext.get("bodyCrc32"))  # read once: the check's int32 is this, if in range
        return cls(
            clusterName=_shared(ext.get("clusterName")), brokerAddr=ext.get("brokerAddr"),
            brokerName=_shared(ext.get("brokerName")),
            brokerId=optional_long(ext.get("brokerId")), brokerIdText=ext.get("brokerId"),
            haServerAddr=ext.get("haServerAddr"),
            # an unmasked CRC fails parseInt
            bodyCrc32=crc if crc is not None and -_INT32 <= crc < _INT32 else 0, bodyCrc32Declared=crc,
            compressed=java_bool(ext.get("compressed")), zoneName=ext.get(ZONE_NAME),
            enableActingMaster=None if acting is None else java_bool(acting), enableActingMasterText=acting,
            heartbeatTimeoutMillis=optional_long(ext.get("heartbeatTimeoutMillis")))

    @property
    def missing(self) -> str | None:
        """The first of clusterName, brokerAddr, brokerName that is absent, else None."""
        for name in ("clusterName", "brokerAddr", "brokerName"):
            if getattr(self, name) is None:
                return name
        return None

    @property
    def names(self) -> tuple[str, str, str] | None:
        """(clusterName, brokerAddr, brokerName) when all three were sent, else None (see ``missing``)."""
        if self.clusterName is None or self.brokerAddr is None or self.brokerName is None:
            return None
        return self.clusterName, self.brokerAddr, self.brokerName


def _shared(name: str | None) -> str | None:
    """A cluster's or a group's name as one string for all who send it (``sys.intern``): the route
    tables and the renewals kept hold it for every member (5,000 brokers' copies were 0.45 MiB)."""
    return sys.intern(name) if type(name) is str else name
