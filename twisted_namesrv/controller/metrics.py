"""The controller's metrics, with the names Java's ControllerMetricsManager gives them
(``rocketmq_controller_*`` in Prometheus form): role, active brokers, elections by result,
requests by type and status, request latency in microseconds."""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, field

from .codes import ControllerRequestCode

#: request_latency buckets in microseconds (Java's controller histogram: 10 us .. 1 s)
LATENCY_BUCKETS_US = (10.0, 50.0, 100.0, 500.0, 1_000.0, 5_000.0, 10_000.0, 50_000.0, 100_000.0, 500_000.0,
                      1_000_000.0)
#: ControllerMetricsConstant.RequestType names (lower-cased, as the label is)
REQUEST_TYPES = {
    ControllerRequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: "controller_alter_sync_state_set",
    ControllerRequestCode.CONTROLLER_ELECT_MASTER: "controller_elect_master",
    ControllerRequestCode.CONTROLLER_REGISTER_BROKER: "controller_register_broker",
    ControllerRequestCode.CONTROLLER_GET_REPLICA_INFO: "controller_get_replica_info",
    ControllerRequestCode.CONTROLLER_GET_METADATA_INFO: "controller_get_metadata_info",
    ControllerRequestCode.CONTROLLER_GET_SYNC_STATE_DATA: "controller_get_sync_state_data",
    ControllerRequestCode.GET_BROKER_EPOCH_CACHE: "controller_get_broker_epoch_cache",
    ControllerRequestCode.NOTIFY_BROKER_ROLE_CHANGED: "controller_notify_broker_role_changed",
    ControllerRequestCode.BROKER_HEARTBEAT: "controller_broker_heartbeat",
    ControllerRequestCode.UPDATE_CONTROLLER_CONFIG: "controller_update_controller_config",
    ControllerRequestCode.GET_CONTROLLER_CONFIG: "controller_get_controller_config",
    ControllerRequestCode.CLEAN_BROKER_DATA: "controller_clean_broker_data",
    ControllerRequestCode.CONTROLLER_GET_NEXT_BROKER_ID: "controller_get_next_broker_id",
    ControllerRequestCode.CONTROLLER_APPLY_BROKER_ID: "controller_apply_broker_id",
}


@dataclass
class Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_US) + 1))
    total: float = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(LATENCY_BUCKETS_US, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        running = 0
        for bound, count in zip((*LATENCY_BUCKETS_US, float("inf")), self.counts, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else repr(bound), running))
        return out


@dataclass
class ControllerMetrics:
    #: (request_type, request_handle_status: success | failed | timeout)
    request_total: Counter[tuple[str, str]] = field(default_factory=Counter)
    request_latency: dict[str, Histogram] = field(default_factory=dict)
    #: elections that write no event to the log, so that only this process knows of them: (cluster,
    #: broker_set, keep_current_master | no_master_elected (a broker's own election that failed)).
    #: Those with an event are counted by the log's state (ReplicasInfoManager.elections): they
    #: survive a restart.
    election_total: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    #: appends to the controller log (Java: dledger_op_total), by status
    log_append_total: Counter[str] = field(default_factory=Counter)
    #: appends that failed (the change refused, nothing applied), by error: ENOSPC, EIO, ... or NotLeader
    log_append_failures: Counter[str] = field(default_factory=Counter)
    role_changes: int = 0

    def request(self, code: int, status: str, micros: float | None) -> None:
        kind = REQUEST_TYPES.get(code, "other")  # type: ignore[call-overload]  # IntEnum keys hash as ints
        self.request_total[kind, status] += 1
        if micros is not None:
            self.request_latency.setdefault(kind, Histogram()).observe(micros)

    def election(self, cluster: str, broker_set: str, code: int) -> None:
        """An election answered ``code`` without writing an event (2011 the master stays, 2012 the
        broker's own election failed); 0 and 2004 wrote an ElectMasterEvent, counted by the log."""
        result = {2011: "keep_current_master", 2012: "no_master_elected"}.get(code)
        if result is not None:
            self.election_total[cluster, broker_set, result] += 1

    def elections(self, logged: Counter[tuple[str, str, str]]) -> Counter[tuple[str, str, str]]:
        """rocketmq_controller_election_total: the log's ElectMasterEvents (``logged``) and this
        process's elections that wrote none."""
        return logged + self.election_total
