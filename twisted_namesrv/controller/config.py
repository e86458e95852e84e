"""ControllerConfig: Java's controller keys and defaults, read from the same ``-c`` file.

Java's NameServer with ``enableControllerInNamesrv=true`` fills a ControllerConfig from the
properties it was started with; so do we.  The controller's own listen address comes from
``controllerDLegerPeers`` (``n0-127.0.0.1:9878;n1-...``) at ``controllerDLegerSelfId``, or from
``--controller-port``/``--controller-bind``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import properties
from ..remoting.values import java_bool, parse_java_integer
from ..state.config import JAVA_TRIMMED, OURS, ConfigError, ConfigKey


class ControllerConfigError(ValueError):
    """A controller key the controller cannot run with (named in the message)."""


#: (name, default), in Java's declaration order: GET_CONTROLLER_CONFIG lists them so
CONTROLLER_KEYS: tuple[tuple[str, Any], ...] = (
    ("controllerType", "DLedger"),
    ("scanNotActiveBrokerInterval", 5000),
    ("controllerThreadPoolNums", 16),
    ("controllerRequestThreadPoolQueueCapacity", 50000),
    ("controllerDLegerGroup", None),
    ("controllerDLegerPeers", None),
    ("controllerDLegerSelfId", None),
    ("mappedFileSize", 1024 * 1024 * 1024),
    ("controllerStorePath", ""),
    ("electMasterMaxRetryCount", 3),
    ("enableElectUncleanMaster", False),
    ("isProcessReadEvent", False),
    ("notifyBrokerRoleChanged", True),
    ("scanInactiveMasterInterval", 5000),
    ("metricsExporterType", "DISABLE"),
    ("configBlackList", "configBlackList;configStorePath"),
)
CONTROLLER_KEY_NAMES = frozenset(name for name, _ in CONTROLLER_KEYS)
#: keys a remote UPDATE_CONTROLLER_CONFIG may change (the rest change listening, paths or threads)
UPDATABLE = frozenset({"enableElectUncleanMaster", "notifyBrokerRoleChanged", "isProcessReadEvent",
                       "electMasterMaxRetryCount", "metricsExporterType"})
_MIN_INTERVAL_MS = 100
#: the most elections a lost master begins (electMasterMaxRetryCount, Java's default 3): they follow
#: each other at once, so more changes nothing but the cost; each failed one is an event written and
#: an epoch, and the key is any peer's to change without ACL (2147483647: two billion fsynced records).
#: 0 elects nothing when a master is lost, as Java's loop; a negative value is refused (a typo)
ELECT_RETRIES_MAX = 16

#: the controller's store, a NameServer key too (Java's ControllerConfig controllerType: DLedger or
#: jRaft there; etcd here): one controller's own log on disk, or peers that agree through etcd
CONTROLLER_TYPES = ("DLedger", "etcd")
#: the keys the NameServer's config holds for the controller (guarded: no remote peer changes the store)
NAMESRV_KEYS = (
    ConfigKey("controllerType", "DLedger", OURS, guarded=True),
    ConfigKey("controllerEtcdEndpoints", "", OURS, guarded=True),
    ConfigKey("controllerEtcdKeyPrefix", "/rocketmq/controller/", OURS, guarded=True),
    ConfigKey("controllerEtcdLeaseTtlSeconds", 3, OURS, guarded=True),
)
#: etcd's shortest lease is about 2 s with its default timings
LEASE_TTL_RANGE = (2, 3600)


def etcd_endpoints(text: str) -> list[str]:
    """``controllerEtcdEndpoints``: ``http://host:port`` (or ``host:port``) separated by ``,`` or ``;``."""
    endpoints = []
    for item in text.replace(";", ",").split(","):
        item = item.strip().rstrip("/")
        if not item:
            continue
        if "://" not in item:
            item = "http://" + item
        if not item.startswith("http://") or not item[len("http://"):]:
            raise ValueError(f"etcd endpoint {item!r}: only http://host:port is supported")
        endpoints.append(item)
    if not endpoints:
        raise ValueError("no etcd endpoint given")
    return endpoints


def check_store_keys(values: Mapping[str, Any]) -> None:
    """The controller's store keys as the NameServer's config holds them (at start and on 318)."""
    if values["controllerType"] not in CONTROLLER_TYPES:
        raise ConfigError(f"controllerType: {values['controllerType']!r} is not one of "
                          f"{', '.join(CONTROLLER_TYPES)} (jRaft is not supported)")
    low, high = LEASE_TTL_RANGE
    if not low <= values["controllerEtcdLeaseTtlSeconds"] <= high:
        raise ConfigError(f"controllerEtcdLeaseTtlSeconds: {values['controllerEtcdLeaseTtlSeconds']} is out of range "
                          f"({low} to {high})")
    if values["controllerType"] == "etcd":
        try:
            etcd_endpoints(str(values["controllerEtcdEndpoints"]))
        except ValueError as exc:
            raise ConfigError(f"controllerEtcdEndpoints: {exc} (required with controllerType=etcd)") from None
    if not str(values["controllerEtcdKeyPrefix"]).startswith("/"):
        raise ConfigError(f"controllerEtcdKeyPrefix: {values['controllerEtcdKeyPrefix']!r} must start with '/'")


@dataclass(frozen=True, slots=True)
class ControllerPeer:
    """One entry of controllerDLegerPeers: a controller of the group (not a connection: context.Peer)."""

    peer_id: str
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def parse_peers(text: str | None) -> list[ControllerPeer]:
    """``n0-127.0.0.1:9878;n1-127.0.0.1:9868`` -> peers; ControllerConfigError on a bad entry."""
    peers = []
    for entry in (text or "").split(";"):
        entry = entry.strip()
        if not entry:
            continue
        peer_id, _, address = entry.partition("-")
        host, _, port = address.rpartition(":")
        number = parse_java_integer(port, 32)
        if not peer_id or not host or number is None or not 0 <= number <= 65535:
            raise ControllerConfigError(f"controllerDLegerPeers: {entry!r} is not id-host:port")
        peers.append(ControllerPeer(peer_id, host, number))
    return peers


class ControllerConfig:
    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        self.values: dict[str, Any] = dict(CONTROLLER_KEYS)
        self.update({k: v for k, v in (values or {}).items() if k in CONTROLLER_KEY_NAMES})

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> ControllerConfig:
        """The controller keys among a properties file's (strings) or a config's (typed) values."""
        return cls({k: v for k, v in props.items() if k in CONTROLLER_KEY_NAMES})

    def update(self, props: Mapping[str, Any]) -> None:
        """Convert every value first: a bad one changes nothing (ControllerConfigError names it)."""
        converted = {name: self._convert(name, value) for name, value in props.items()}
        retries = converted.get("electMasterMaxRetryCount", 0)
        if not 0 <= retries <= ELECT_RETRIES_MAX:  # from a file, a request or a typed config alike
            raise ControllerConfigError(f"electMasterMaxRetryCount: {retries} is out of range "
                                        f"(0 to {ELECT_RETRIES_MAX})")
        self.values.update(converted)

    def _convert(self, name: str, value: Any) -> Any:
        default = dict(CONTROLLER_KEYS)[name]
        if not isinstance(value, str):
            return value
        if isinstance(default, bool):
            return java_bool(value.strip())
        if isinstance(default, int):
            number = parse_java_integer(value.strip())
            if number is None:
                raise ControllerConfigError(f"{name}={value.strip()}: not a number")
            if name.endswith("Interval") and number < _MIN_INTERVAL_MS:
                raise ControllerConfigError(f"{name}: {number} is out of range (at least {_MIN_INTERVAL_MS})")
            return number
        return value.strip(JAVA_TRIMMED)  # String.trim(), as the NameServer's string keys

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    @property
    def peers(self) -> list[ControllerPeer]:
        return parse_peers(self.values["controllerDLegerPeers"])

    def self_peer(self) -> ControllerPeer | None:
        """This controller's entry of controllerDLegerPeers, or None when not configured."""
        self_id = self.values["controllerDLegerSelfId"]
        for peer in self.peers:
            if peer.peer_id == self_id:
                return peer
        if self.values["controllerDLegerPeers"] and self_id:
            raise ControllerConfigError(f"controllerDLegerSelfId: {self_id} is not among controllerDLegerPeers")
        return None

    def refuse_lone_peers(self) -> None:
        """Several peers with no consensus engine under them would each lead alone, with a log of
        their own: two controllers handing out the same broker id and epoch.  Java's DLedger is a
        Raft group; ours is not, so a Java-style multi-peer config (``controllerType=DLedger``, the
        default) is refused, naming the key and the way to run several controllers: etcd."""
        peers = self.peers
        if len(peers) > 1:
            raise ControllerConfigError(
                f"controllerDLegerPeers: {len(peers)} peers ({', '.join(p.peer_id for p in peers)}) with "
                f"controllerType={self.values['controllerType']} would each lead alone (two leaders); run several "
                "controllers through etcd: controllerType=etcd and controllerEtcdEndpoints in each NameServer's -c "
                "file (see docs/controller.md), or list only this controller's own peer")

    def properties_text(self) -> str:
        """GET_CONTROLLER_CONFIG's body: key=value lines (Java's getAllConfigsFormatString)."""
        def text(value: Any) -> str:
            return "" if value is None else "true" if value is True else "false" if value is False else str(value)

        return properties.dump((name, text(self.values[name])) for name, _ in CONTROLLER_KEYS)


_METRICS = "Java's controller metrics exporter (OpenTelemetry); this controller's metrics are on the metrics port"
_JRAFT = "a key of Java's jRaft controller, which this server does not run (controllerType jRaft is refused)"
#: Java 5.3.3's ControllerConfig and JraftConfig keys that mqnamesrv -c reads with enableControllerInNamesrv
#: and this controller does not act on, with why (schema.SERVER_SCHEMA's java_only: known, so --strict-config
#: accepts them; a warning when set)
JAVA_ONLY = {
    **dict.fromkeys(("metricsGrpcExporterTarget", "metricsGrpcExporterHeader", "metricGrpcExporterTimeOutInMills",
                     "metricGrpcExporterIntervalInMills", "metricLoggingExporterIntervalInMills",
                     "metricsPromExporterPort", "metricsPromExporterHost", "metricsLabel", "metricsInDelta"), _METRICS),
    # Java's setter is setProcessReadEvent (the -c key); GET_CONTROLLER_CONFIG shows the field, isProcessReadEvent
    "processReadEvent": "Java's DLedger controller applies reads through its log with it; reads here are local",
    **dict.fromkeys(("jRaftElectionTimeoutMs", "jRaftSnapshotIntervalSecs", "jRaftGroupId", "jRaftServerId",
                     "jRaftInitConf", "jRaftControllerRPCAddr", "jRaftScanWaitTimeoutMs"), _JRAFT),
}

