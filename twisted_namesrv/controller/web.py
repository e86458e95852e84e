"""The controller on the status port: Prometheus families named as Java's controller metrics
(``rocketmq_controller_*``) and ``/api/controller`` for the status page's section."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from ..server import PUSH_RESULTS
from .service import ControllerService


class ControllerCollector(Collector):
    def __init__(self, controller: ControllerService) -> None:
        self.controller = controller

    def collect(self) -> Iterator[Metric]:
        manager = self.controller.manager
        metrics = manager.metrics
        role = GaugeMetricFamily("rocketmq_controller_role", "This controller's role: 1 on the current one "
                                 "(leader: answers; follower: answers 2007)", labels=["role"])
        role.add_metric(["leader"], 1 if manager.ready else 0)
        role.add_metric(["follower"], 0 if manager.ready else 1)
        yield role
        active = GaugeMetricFamily("rocketmq_controller_active_broker_num", "Brokers alive by heartbeat, by "
                                   "cluster and broker group", labels=["cluster", "broker_set"])
        for cluster, groups in sorted(manager.heartbeats.get_active_brokers_num().items()):
            for name, count in sorted(groups.items()):
                active.add_metric([cluster, name], count)
        yield active
        elections = CounterMetricFamily("rocketmq_controller_election_total", "Elections by result: "
                                        "new_master_elected, keep_current_master, no_master_elected (those the "
                                        "controller log records are counted from it: they survive a restart)",
                                        labels=["cluster", "broker_set", "election_result"])
        for labels, count in sorted(metrics.elections(manager.replicas.elections).items()):
            elections.add_metric(list(labels), count)
        yield elections
        requests = CounterMetricFamily("rocketmq_controller_request_total", "Requests by type and handle status "
                                       "(success, failed)", labels=["request_type", "request_handle_status"])
        for pair, total in sorted(metrics.request_total.items()):
            requests.add_metric(list(pair), total)
        yield requests
        latency = HistogramMetricFamily("rocketmq_controller_request_latency_us", "Time from a request's bytes "
                                        "to its encoded answer, microseconds (log writes included)",
                                        labels=["request_type"])
        for kind, histogram in sorted(metrics.request_latency.items()):
            latency.add_metric([kind], histogram.buckets(), histogram.total)
        yield latency
        appends = CounterMetricFamily("rocketmq_controller_log_append_total", "Event batches written to the "
                                      "controller log (Java: dledger_op_total), by status", labels=["status"])
        for status, count in sorted(metrics.log_append_total.items()):
            appends.add_metric([status], count)
        yield appends
        failures = CounterMetricFamily("rocketmq_controller_log_append_failures", "Event batches the controller "
                                       "log refused (nothing applied, the request answered an error), by error: "
                                       "ENOSPC, EIO, EMFILE, NotLeader...", labels=["error"])
        for error in sorted(set(metrics.log_append_failures) | {"ENOSPC", "EIO", "NotLeader"}):
            failures.add_metric([error], metrics.log_append_failures[error])
        yield failures


def controller_status(controller: ControllerService) -> dict[str, Any]:
    """``/api/controller``: role, leader, and each broker group with its last election."""
    manager = controller.manager
    groups = []
    for name, group in manager.replicas.summary().items():
        cluster = group["clusterName"]
        members = {broker_id: {"address": address, "alive": manager.alive(cluster, name, int(broker_id))}
                   for broker_id, address in group["brokers"].items()}
        groups.append({"brokerName": name, **group, "brokers": members,
                       "lastElection": manager.elections.get(name)})
    return {"address": manager.address, "group": manager.group, "selfId": manager.self_id,
            "leader": manager.ready, "leaderAddress": manager.address if manager.ready
            else manager.leadership.leader_address, "eventsApplied": manager.events_applied,
            "pushes": {result: controller.notifier.counts[result] for result in PUSH_RESULTS},
            "term": getattr(manager.leadership, "term", None),  # the etcd leadership's (None: a sole leader)
            "groups": groups}
