"""The Prometheus view of the server: counters from ``metrics.Metrics`` and gauges read from
the state when scraped, in the text format every Prometheus server reads."""

from __future__ import annotations

import platform
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from twisted.copyright import version as twisted_version

from .. import __version__
from ..audit import OPERATIONS, RESULTS
from ..context import NamesrvState
from ..metrics import REJECT_REASONS, ROUTE_EVENT_KINDS, Metrics, code_labels, latency_buckets, request_labels
from ..server import RemotingFactory


class NamesrvCollector(Collector):
    def __init__(self, state: NamesrvState, factory: RemotingFactory) -> None:
        self.state = state
        self.factory = factory

    @property
    def metrics(self) -> Metrics:
        return self.factory.metrics

    def collect(self) -> Iterator[Metric]:
        yield from self._requests()
        yield from self._traffic()
        yield from self._routes()
        yield from self._kv()
        yield self._admin_requests()
        yield from self._heartbeats()
        yield self._build_info()

    def _requests(self) -> Iterator[Metric]:
        requests, latency = self.metrics.requests_by_code()
        total = CounterMetricFamily("namesrv_requests", "Requests answered (or taken, for oneway), by request "
                                    "code and response code (empty: oneway)", labels=["code", "name", "response_code"])
        for (code, response_code), count in sorted(requests.items(), key=lambda item: (item[0][0], item[0][1] or 0)):
            total.add_metric(request_labels(code, response_code), count)
        yield total
        seconds = HistogramMetricFamily("namesrv_request_duration_seconds", "Server time from a request's bytes to "
                                        "its encoded answer, by request code", labels=["code", "name"])
        for code, histogram in sorted(latency.items()):
            seconds.add_metric(code_labels(code), list(latency_buckets(histogram)), histogram.total)
        yield seconds

    def _traffic(self) -> Iterator[Metric]:
        metrics = self.metrics
        yield GaugeMetricFamily("namesrv_connections", "Open client and broker connections",
                                value=len(self.factory.connections))
        yield CounterMetricFamily("namesrv_connections_accepted", "Connections accepted since start",
                                  value=metrics.connections_accepted)
        rejected = CounterMetricFamily("namesrv_rejected", "Frames and connections refused, by reason: frame_length "
                                       "(negative or over frameMaxLength), header_length (over headerMaxLength), "
                                       "undecodable (header or serialize type), "
                                       "max_connections, idle (closed after serverChannelMaxIdleTimeSeconds)",
                                       labels=["reason"])
        for reason in sorted(set(REJECT_REASONS) | set(metrics.rejected)):
            rejected.add_metric([reason], metrics.rejected[reason])
        yield rejected
        refusals = CounterMetricFamily("namesrv_refusals", "Connections and requests refused, by listener "
                                       "(remoting, controller, http) and reason: acl, not_tls, tls_handshake, the "
                                       "limits of namesrv_rejected_total, memory_budget; on http unauthenticated, "
                                       "not_admin, host (docs/security.md)", labels=["listener", "reason"])
        for listener, reason, count in self.state.refusals.series():
            refusals.add_metric([listener, reason], count)
        yield refusals
        yield CounterMetricFamily("namesrv_received_bytes", "Bytes received", value=metrics.bytes_received)
        yield CounterMetricFamily("namesrv_sent_bytes", "Bytes of answers sent", value=metrics.bytes_sent)

    def _routes(self) -> Iterator[Metric]:
        routes = self.state.routes
        yield GaugeMetricFamily("namesrv_brokers_live", "Brokers in brokerLiveTable", value=len(routes.brokerLiveTable))
        yield GaugeMetricFamily("namesrv_broker_groups", "Broker names in brokerAddrTable",
                                value=len(routes.brokerAddrTable))
        yield GaugeMetricFamily("namesrv_clusters", "Clusters in clusterAddrTable", value=len(routes.clusterAddrTable))
        yield GaugeMetricFamily("namesrv_topics", "Topics in topicQueueTable", value=len(routes.topicQueueTable))
        events = CounterMetricFamily("namesrv_broker_events", "Broker route events: registered, changed (new data "
                                     "version), expired (no heartbeat within its timeout), closed (connection lost), "
                                     "idle (its connection closed after serverChannelMaxIdleTimeSeconds), "
                                     "confirmed (restored from the route snapshot, then registered), "
                                     "unregistered, refused",
                                     labels=["event"])
        counted = self.metrics.route_events
        for kind in sorted(set(ROUTE_EVENT_KINDS) | set(counted)):
            events.add_metric([kind], counted[kind])
        yield events

    def _kv(self) -> Iterator[Metric]:
        table = self.state.kv.configTable
        yield GaugeMetricFamily("namesrv_kv_namespaces", "KV config namespaces", value=len(table))
        yield GaugeMetricFamily("namesrv_kv_entries", "KV config entries", value=sum(map(len, table.values())))

    def _admin_requests(self) -> Metric:
        """Every (operation, result) series from the start, so a rate or an alert on refusals has
        a series to read before the first refusal."""
        family = CounterMetricFamily("namesrv_admin_requests", "State-changing requests (the audit trail), by "
                                     "operation and result: ok, refused (ACL or config black list), failed",
                                     labels=["operation", "result"])
        counts = self.metrics.admin_requests
        for operation in sorted(OPERATIONS.values()):
            for result in RESULTS:
                family.add_metric([operation, result], counts[operation, result])
        return family

    def _heartbeats(self) -> Iterator[Metric]:
        """One series per live broker (cardinality: the brokers), named by cluster, broker name and id,
        never by address: an alert on age / timeout > 0.5 is the status page's amber."""
        routes, now_ms = self.state.routes, self.state.clock() * 1000
        labels = ["cluster", "broker", "broker_id"]
        age = GaugeMetricFamily("namesrv_broker_heartbeat_age_seconds", "Seconds since each live broker's last "
                                "heartbeat (registration)", labels=labels)
        timeout = GaugeMetricFamily("namesrv_broker_heartbeat_timeout_seconds", "Each live broker's heartbeat "
                                    "timeout: it expires when its age passes this", labels=labels)
        restored = GaugeMetricFamily("namesrv_broker_restored", "1 while a live broker is only restored from the "
                                     "route snapshot and has not registered since", labels=labels)
        for name, broker in sorted(routes.brokerAddrTable.items()):
            for broker_id, addr in sorted(broker.brokerAddrs.items()):
                live = routes.brokerLiveTable.get(routes.live_key(broker.cluster, addr))
                if live is None:
                    continue
                values = [str(broker.cluster), str(name), str(broker_id)]
                age.add_metric(values, max(0.0, (now_ms - live.lastUpdateTimestamp) / 1000))
                timeout.add_metric(values, live.heartbeatTimeoutMillis / 1000)
                restored.add_metric(values, 1 if live.restored else 0)
        yield age
        yield timeout
        yield restored

    def _build_info(self) -> Metric:
        info = GaugeMetricFamily("namesrv_build_info", "Always 1: this server's version, the Java generation it "
                                 "emulates, Python's and Twisted's versions",
                                 labels=["version", "compat", "python", "twisted"])
        info.add_metric([__version__, self.state.profile.name, platform.python_version(), twisted_version], 1)
        return info


def registry(state: NamesrvState, factory: RemotingFactory) -> CollectorRegistry:
    """Our families plus the process's own (CPU, resident memory, open files)."""
    from prometheus_client import ProcessCollector

    found = CollectorRegistry(auto_describe=False)
    found.register(NamesrvCollector(state, factory))
    ProcessCollector(registry=found)
    return found
