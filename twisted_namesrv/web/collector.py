"""The Prometheus view of the server: counters from ``metrics.Metrics`` and gauges read from
the state when scraped, in the text format every Prometheus server reads."""

from __future__ import annotations

import platform
from collections import Counter
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from twisted.copyright import version as twisted_version

from .. import __version__
from ..answer_cache import KEPT_CACHES
from ..audit import RESULTS
from ..budget import machine_limit
from ..context import NamesrvState
from ..escapes import escaped, has_controls
from ..lost_topics import CLEAN_STOP, DEPARTURES
from ..metrics import REJECT_REASONS, ROUTE_EVENT_KINDS, Metrics, code_labels, latency_buckets, request_labels
from ..observations import Observations
from ..outages import HealthWatch
from ..peers import PeersService
from ..server import PUSH_RESULTS, RemotingFactory

#: the series namesrv_store_write_failures has from the start (an alert has one to read before a failure)
STORES = ("kvConfigPath", "configStorePath", "topologyPath", "eventsPath", "starts", "routeSnapshotPath")
STORE_ERRORS = ("ENOSPC", "EMFILE", "EIO", "EROFS")
#: ... and the data directory removed while running (NamesrvService.check_data_dirs): born at its first
#: count, the series read by increase() as no increase at all, and NamesrvStoreNotWritten never fired for it
DATA_DIR_REMOVED = ("dataDirectory", "removed")
#: the stores written in the background, tried again at each tick: namesrv_store_failing's series
PERIODIC_STORES = ("eventsPath", "routeSnapshotPath", "topologyPath")
#: ... and namesrv_log_lines_lost: a full disk, a failing one, a read-only one or no descriptor left when a
#: rotation reopens the file, a stdout pipe whose reader left or is too slow (a non-blocking pipe), no stdout
#: at all; a series born at its first loss would be read by increase() as no loss at all
LOG_ERRORS = ("EAGAIN", "EBADF", "EIO", "EMFILE", "ENOSPC", "EPIPE", "EROFS")
#: ... and namesrv_store_load_refusals: files read at start that were not used, by why
LOADED_STORES = ("routeSnapshotPath", "topologyPath", "eventsPath", "starts")
LOAD_REFUSALS = ("ahead_of_clock", "corrupt", "not_regular", "over_limits", "too_big", "too_old", "unreadable")

class NamesrvCollector(Collector):
    def __init__(self, state: NamesrvState, factory: RemotingFactory, seen: Observations, health: HealthWatch,
                 peers: PeersService | None = None) -> None:
        self.state = state
        self.factory = factory
        self.seen = seen
        self.health = health
        self.peers = peers

    @property
    def metrics(self) -> Metrics:
        return self.seen.metrics

    def collect(self) -> Iterator[Metric | Later]:  # type: ignore[override]
        yield from self._requests()
        yield from self._traffic()
        yield from self._routes()
        yield from self._outages()
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
                                       "max_connections, idle (closed after serverChannelMaxIdleTimeSeconds), "
                                       "fd_reserve (the descriptors left would be fewer than fdReserve), "
                                       "fd_table_full (an accept found no descriptor: ulimit -n reached)",
                                       labels=["reason"])
        for reason in sorted(set(REJECT_REASONS) | set(metrics.rejected)):
            rejected.add_metric([reason], metrics.rejected[reason])
        yield rejected
        refusals = CounterMetricFamily("namesrv_refusals", "Connections and requests refused, by listener "
                                       "(remoting, controller, http) and reason: acl, not_tls, tls_handshake, "
                                       "config_key, config_value, config_size, fd_reserve, the limits of "
                                       "namesrv_rejected_total, memory_budget; on http unauthenticated, not_admin, "
                                       "host, not_loopback, max_connections, idle, request_timeout, fd_reserve "
                                       "(docs/security.md)", labels=["listener", "reason"])
        for listener, reason, count in self.state.refusals.series():
            refusals.add_metric([listener, reason], count)
        yield refusals
        yield CounterMetricFamily("namesrv_starts", "Starts of a NameServer on this data directory, this one "
                                  "included, counted in its starts.json across restarts: a crash loop faster "
                                  "than the scrapes shows here", value=metrics.starts)
        yield CounterMetricFamily("namesrv_unclean_starts", "Starts of those after a run that did not stop cleanly "
                                  "(killed, crashed: the clean stop's mark never written), this one included if so: "
                                  "a crash loop, where rolling restarts are not", value=metrics.unclean_starts)
        yield CounterMetricFamily("namesrv_acl_reload_failures", "Reloads of aclAccountsFile that did not load (half "
                                  "written, bad YAML, not a regular file): the accounts read before stay",
                                  value=metrics.acl_reload_failures)
        pushes = CounterMetricFamily("namesrv_broker_pushes", "Pushes to brokers (NOTIFY_MIN_BROKER_ID_CHANGE), by "
                                     "result: sent, failed, superseded by a newer one to the same address, dropped "
                                     "(too many in flight, or the descriptor reserve)", labels=["result"])
        for result in PUSH_RESULTS:
            pushes.add_metric([result], metrics.pushes[result])
        yield pushes
        started = CounterMetricFamily("namesrv_kept_started_over", "Times a kept cache of answers started over "
                                      "past its bound in bytes (or count): routes (the route bodies, 256 MiB), "
                                      "replies (the answer frames, 64 MiB), cluster_lists (GET_TOPICS_BY_CLUSTER's, "
                                      "64 MiB); often: a peer filling it, or a bound too small for the tables",
                                      labels=["cache"])
        for cache in KEPT_CACHES:
            started.add_metric([cache], self.state.answers.started_over[cache])
        yield started
        limit = machine_limit()
        if limit is not None:  # read at each scrape: a container's limit may be resized in place
            yield GaugeMetricFamily("namesrv_memory_limit_bytes", "The memory this process may use before the kernel "
                                    "kills it or refuses to give more: the least of the machine's, the cgroup's "
                                    "memory.max (a container's --memory, a pod's limit) and RLIMIT_AS/RLIMIT_DATA; "
                                    "process_resident_memory_bytes near it is an OOM kill on its way", value=limit)
        yield CounterMetricFamily("namesrv_received_bytes", "Bytes received", value=metrics.bytes_received)
        yield CounterMetricFamily("namesrv_sent_bytes", "Bytes of answers sent", value=metrics.bytes_sent)

    def _routes(self) -> Iterator[Metric]:
        routes = self.state.routes
        yield GaugeMetricFamily("namesrv_brokers_live", "Brokers in brokerLiveTable", value=len(routes.brokerLiveTable))
        yield GaugeMetricFamily("namesrv_broker_groups", "Broker names in brokerAddrTable",
                                value=len(routes.brokerAddrTable))
        yield GaugeMetricFamily("namesrv_clusters", "Clusters in clusterAddrTable", value=len(routes.clusterAddrTable))
        yield GaugeMetricFamily("namesrv_topics", "Topics in topicQueueTable (a big change counts as it is written "
                                "in, over a few turns)", value=routes.topics_written)
        yield GaugeMetricFamily("namesrv_topic_queue_entries", "(topic, broker group) entries of topicQueueTable "
                                "and topicQueueMappingInfoTable, as maxTopicQueueEntries counts them",
                                value=routes.queueEntries + routes.mappingEntries)
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

    def _outages(self) -> Iterator[Metric | Later]:
        """What an alert fires on (outages.py): every family is served from the first scrape, the
        counts at 0, so an alert needs no "absent()" clause."""
        health = self.health.health()
        # the outage counts, as /api/overview gives them (RouteHealth decides once): a group or cluster
        # stopped cleanly, or rejoining after this NameServer's restart, is not one; "> 0" paged for both
        yield GaugeMetricFamily("namesrv_broker_groups_without_master", "Broker groups known (in brokerAddrTable, "
                                "or remembered and absent) whose master (brokerId 0) is not live, but those stopped "
                                "cleanly (the group, or its master with a slave up) and those rejoining after this "
                                "NameServer's restart: the outages", value=len(health.masterless_outages))
        master = GaugeMetricFamily("namesrv_broker_group_master_live", "1 while the broker group's master "
                                   "(brokerId 0) is live, 0 while it is not: the group has members but no live "
                                   "master, or none at all (remembered, absent)", labels=["cluster", "broker"])
        absent = GaugeMetricFamily("namesrv_broker_group_absent", "1 while a broker group this NameServer has "
                                   "seen has no member in the routes (expected but absent, until it registers "
                                   "again or is retired), else 0", labels=["cluster", "broker"])
        rejoining = GaugeMetricFamily("namesrv_broker_group_rejoining", "1 while a broker group that was up when "
                                      "this NameServer went down has no live master yet and the restart's window "
                                      "for brokers to register again (readinessBrokerWait) is not over: expected "
                                      "back, not an outage (the alert rules leave this NameServer's view of it out)",
                                      labels=["cluster", "broker"])
        stopped = GaugeMetricFamily("namesrv_broker_group_stopped_cleanly", "1 while a broker group is absent "
                                    "because its last member unregistered (a clean stop, not a crash), else 0",
                                    labels=["cluster", "broker"])
        master_stopped = GaugeMetricFamily("namesrv_broker_group_master_stopped_cleanly", "1 while a broker group "
                                           "has no live master because its master unregistered (a clean stop) and a "
                                           "slave is up, else 0", labels=["cluster", "broker"])
        stopped_at = GaugeMetricFamily("namesrv_broker_group_stopped_cleanly_timestamp_seconds", "When the clean "
                                       "stop that left the broker group without a live master was seen (Unix time): "
                                       "its last member's unregistration, or its master's while a slave is up; a "
                                       "series only while namesrv_broker_group_stopped_cleanly or "
                                       "namesrv_broker_group_master_stopped_cleanly is 1", labels=["cluster", "broker"])
        members_absent = GaugeMetricFamily("namesrv_broker_group_members_absent", "Members of the broker group "
                                           "this NameServer has seen (a broker id at its last address) that are not in "
                                           "the routes now: a slave killed while its master serves on; every member "
                                           "of an absent group (until it registers again, or an operator retires the "
                                           "member: namesrv-admin retireBrokerGroup -b NAME -i ID)",
                                           labels=["cluster", "broker"])
        groups = health.groups  # made for this read, never changed: its series are made in the thread

        def by_group() -> Iterator[Metric]:
            for group in groups:
                labels = [group.cluster, group.broker]
                master.add_metric(labels, 1 if group.master_live else 0)
                absent.add_metric(labels, 1 if group.absent else 0)
                rejoining.add_metric(labels, 1 if group.rejoining else 0)
                stopped.add_metric(labels, 1 if group.stopped_cleanly else 0)
                master_stopped.add_metric(labels, 1 if group.master_stopped_cleanly else 0)
                members_absent.add_metric(labels, group.members_absent)
                stopped_cleanly_at = group.stopped_cleanly_at
                if stopped_cleanly_at is not None:
                    stopped_at.add_metric(labels, round(stopped_cleanly_at, 3))
            yield master
            yield absent
            yield rejoining
            yield stopped
            yield master_stopped
            yield members_absent
            yield stopped_at
        yield Later(by_group)
        yield GaugeMetricFamily("namesrv_rejoin_window_seconds_left", "Seconds left of the restart's window for "
                                "brokers to register again (readinessBrokerWait from the start; 0 once over)",
                                value=round(health.rejoin_left, 3))
        yield GaugeMetricFamily("namesrv_broker_groups_known", "Broker groups this NameServer has seen and that "
                                "were not retired (remembered across restarts)", value=health.known)
        yield GaugeMetricFamily("namesrv_broker_groups_back", "Known broker groups with a member that registered "
                                "since this NameServer started (N of namesrv_broker_groups_known back)",
                                value=health.back)
        yield GaugeMetricFamily("namesrv_broker_groups_absent", "Known broker groups with no member in the routes",
                                value=len(health.absent))
        yield CounterMetricFamily("namesrv_topology_refusals", "New broker groups not remembered because the "
                                  "topology held its limit (10,000 groups)",
                                  value=self.state.topology.refused)
        yield GaugeMetricFamily("namesrv_clusters_without_writable_queues", "Clusters known (in clusterAddrTable, "
                                "or remembered) in which no broker group takes writes (a live master with a "
                                "writable queue), but those stopped cleanly and those rejoining after this "
                                "NameServer's restart: the outages", value=len(health.clusters_not_writable_outages))
        writable = GaugeMetricFamily("namesrv_cluster_writable_broker_groups", "Broker groups of each cluster that "
                                     "take writes (a live master with a writable queue); 0 for a cluster whose "
                                     "groups are all absent", labels=["cluster"])
        cluster_rejoining = GaugeMetricFamily("namesrv_cluster_rejoining", "1 while a broker group of the cluster "
                                              "is rejoining (namesrv_broker_group_rejoining): its writable groups are "
                                              "not counted yet", labels=["cluster"])
        cluster_stopped = GaugeMetricFamily("namesrv_cluster_stopped_cleanly", "1 while every known broker group "
                                            "of the cluster stopped cleanly (its last members unregistered, or its "
                                            "master with a slave still up): it takes no writes, and nothing "
                                            "crashed", labels=["cluster"])
        clusters = health.writable_groups  # as health.groups

        def by_cluster() -> Iterator[Metric]:
            rejoining_clusters, stopped_clusters = set(health.rejoining_clusters), set(health.clusters_stopped_cleanly)
            for cluster, count in clusters.items():
                writable.add_metric([cluster], count)
                cluster_rejoining.add_metric([cluster], 1 if cluster in rejoining_clusters else 0)
                cluster_stopped.add_metric([cluster], 1 if cluster in stopped_clusters else 0)
            yield writable
            yield cluster_rejoining
            yield cluster_stopped
        yield Later(by_cluster)
        departed = GaugeMetricFamily("namesrv_brokers_departed", "Brokers that left in the last 10 minutes and are "
                                     "not back, by how: expired, closed, idle (crashes), unregistered (a clean stop)",
                                     labels=["kind"])
        kinds = Counter(event.kind for event in self.seen.departed.brokers())
        for kind in sorted(DEPARTURES):
            departed.add_metric([kind], kinds[kind])
        yield departed
        yield from self._flapping()
        yield from self._stalls()
        yield from self._peers()
        lost = self.seen.lost.recent(self.state.routes.routed_topics())
        yield GaugeMetricFamily("namesrv_lost_topics", "Application topics (system topics left out) whose last "
                                "broker left in the last 10 minutes and that no broker serves again",
                                value=len(lost))
        yield GaugeMetricFamily("namesrv_lost_topics_stopped_cleanly", "Of namesrv_lost_topics, those whose last "
                                "broker unregistered (a clean stop, not a crash)",
                                value=sum(topic.kind == CLEAN_STOP for topic in lost))

    def _flapping(self) -> Iterator[Metric]:
        """Brokers that keep leaving and coming back (flapping.py): by group, while they flap."""
        flaps = self.seen.flaps
        yield CounterMetricFamily("namesrv_broker_flapping_started", "Brokers that started flapping (left 3 "
                                  "times in 10 minutes without unregistering) since start", value=flaps.started)
        yield CounterMetricFamily("namesrv_broker_restarting_cleanly_started", "Brokers that started restarting "
                                  "cleanly (left 3 times in 10 minutes, fewer of them without unregistering) since "
                                  "start", value=flaps.started_clean)
        now = GaugeMetricFamily("namesrv_brokers_flapping", "Members of the broker group flapping now (left 3 "
                                "times in 10 minutes without unregistering: expired, closed, idle; not settled: 5 "
                                "minutes without registering or leaving); a series only while one flaps",
                                labels=["cluster", "broker"])
        clean = GaugeMetricFamily("namesrv_brokers_restarting_cleanly", "Members of the broker group restarting "
                                  "cleanly now (left 3 times in 10 minutes, fewer than 3 of them without "
                                  "unregistering: an operator's or a supervisor's restarts; not settled: 5 minutes "
                                  "without registering or leaving); a series only while one does",
                                  labels=["cluster", "broker"])
        for family, flapped in ((now, flaps.flapping()), (clean, flaps.restarting())):
            groups = Counter((str(flap.info.get("cluster")), str(flap.info.get("broker"))) for flap in flapped)
            for (cluster, broker), count in sorted(groups.items()):
                family.add_metric([cluster, broker], count)
            yield family

    def _stalls(self) -> Iterator[Metric]:
        """The server itself not running for over 5 s (stalls.py: SIGSTOP, a paused VM, a swapped-out
        process): served at 0 from the start, so that an increase() alert has a series."""
        stalls = self.seen.stalls
        yield CounterMetricFamily("namesrv_reactor_stalls", "Times since start the server did not run for over "
                                  "5 s (SIGSTOP, a paused VM or suspended machine, heavy swapping, or one turn "
                                  "that held it): nothing was answered meanwhile; each one is a warning line "
                                  "and an event on the status page", value=stalls.stalls)
        yield GaugeMetricFamily("namesrv_reactor_stall_longest_seconds", "The longest of those stalls since start, "
                                "in seconds (0: none)", value=stalls.longest)

    def _peers(self) -> Iterator[Metric]:
        """The peers view's last comparison: one series per peer once it has run."""
        up = GaugeMetricFamily("namesrv_peer_up", "1 when the last comparison read the peer NameServer's routes, "
                               "0 when it could not", labels=["peer"])
        differ = GaugeMetricFamily("namesrv_peer_differences", "Differences between this NameServer's routes and "
                                   "the peer's at the last comparison (namesrv-admin compare's; 0: they agree)",
                                   labels=["peer"])
        report = self.peers.report if self.peers is not None else None
        for result in report.results if report is not None else ():
            up.add_metric([result.addr], 1 if result.up else 0)
            if result.up:
                differ.add_metric([result.addr], result.differences)
        yield up
        yield differ

    def _kv(self) -> Iterator[Metric]:
        table = self.state.kv.configTable
        yield GaugeMetricFamily("namesrv_kv_namespaces", "KV config namespaces", value=len(table))
        yield GaugeMetricFamily("namesrv_kv_entries", "KV config entries", value=self.state.kv.entries())
        yield GaugeMetricFamily("namesrv_kv_unwritten", "1 while the KV config's file does not hold the table "
                                "the server serves (its data directory was removed while running), until it is "
                                "written again (tried every 5 s; a full disk holds it at 1): a restart now starts "
                                "without it", value=1 if self.state.kv.missing else 0)
        yield _by_store("namesrv_store_write_failures", "Saves that failed, by store and error: a KV change "
                        "(kvConfigPath) is then refused and nothing changed; an updateNamesrvConfig change "
                        "(configStorePath) is applied in memory only, until the restart, as Java's; the topology "
                        "(topologyPath), the page's events (eventsPath) and the route snapshot (routeSnapshotPath) are "
                        "written again at their next tick; the starts' count (starts) at the next start or stop",
                        "error", self.metrics.store_failures, STORES, STORE_ERRORS, (DATA_DIR_REMOVED,))
        failing = GaugeMetricFamily("namesrv_store_failing", "1 while the last write of a file written in the "
                                    "background (topologyPath, eventsPath, routeSnapshotPath) failed with this error "
                                    "and none succeeded since, else 0: NamesrvStoreNotWritten ends once it is written "
                                    "again, and names the error it fails with now", labels=["store", "error"])
        now_failing = self.metrics.store_failing
        for store in PERIODIC_STORES:
            seen = {error for (name, error) in self.metrics.store_failures if name == store}
            for error in sorted(set(STORE_ERRORS) | seen | {now_failing.get(store, STORE_ERRORS[0])}):
                failing.add_metric([store, error], 1 if now_failing.get(store) == error else 0)
        yield failing
        lost = CounterMetricFamily("namesrv_log_lines_lost", "Log lines not written because the log's file or "
                                   "stdout refused them (a full disk: ENOSPC), by error; once it can be written "
                                   "again, one warning line in the log gives their number and when",
                                   labels=["error"])
        for error in sorted(set(self.metrics.log_lines_lost) | set(LOG_ERRORS)):
            lost.add_metric([error], self.metrics.log_lines_lost[error])
        yield lost
        yield CounterMetricFamily("namesrv_event_lines_not_logged", "Log lines of peers' route and audit events "
                                  "(and Java's own lines of their write-permission and config updates) not written "
                                  "because the minute's lines past the listed events (a host's 20 rows a minute, all "
                                  "hosts' 60) already were 6,000 (5,000 for a host past its first 20 lines): a peer "
                                  "making events as fast as it can; each one is still counted by its own metric",
                                  value=self.seen.events.lines_not_logged)
        yield CounterMetricFamily("namesrv_systemd_watchdog_failures", "WATCHDOG=1 messages systemd could not be "
                                  "sent (WatchdogSec; NOTIFY_SOCKET gone or refused): the first of a run is one "
                                  "warning line, and one more when it is sent again",
                                  value=self.metrics.watchdog_failures)
        yield GaugeMetricFamily("namesrv_config_unsaved", "1 while a runtime configuration change "
                                "(updateNamesrvConfig) is in memory only, its save to configStorePath failed (a "
                                "read-only file: a ConfigMap): a restart goes back to the file",
                                value=1 if self.state.config.unsaved else 0)
        yield _by_store("namesrv_store_load_refusals", "Files read at start and not used, by store "
                        "(routeSnapshotPath, topologyPath) and reason: ahead_of_clock (a route snapshot stamped "
                        "after the host's clock's now: stepped back since, its age unknown), corrupt, not_regular "
                        "(a FIFO, device or symlink), over_limits (a route snapshot past a limit of the tables), "
                        "too_big, too_old (a route snapshot past routeSnapshotMaxAge), unreadable",
                        "reason", self.metrics.store_load_refusals, LOADED_STORES, LOAD_REFUSALS)

    def _admin_requests(self) -> Metric:
        """Every (operation, result) series from the start, so a rate or an alert on refusals has
        a series to read before the first refusal."""
        family = CounterMetricFamily("namesrv_admin_requests", "State-changing requests (the audit trail), by "
                                     "operation and result: ok, refused (ACL, config black list or a value's control "
                                     "characters), declined (the controller's not now: a broker retries), failed",
                                     labels=["operation", "result"])
        counts = self.seen.audit.counts
        for operation in self.seen.audit.operations:
            for result in RESULTS:
                family.add_metric([operation, result], counts[operation, result])
        return family

    def _heartbeats(self) -> Iterator[Metric | Later]:
        """One series per live broker (cardinality: the brokers), named by cluster, broker name and id,
        never by address: an alert on age / timeout > 0.5 is the status page's amber.  What the
        series say is read here (the tables change in the reactor's thread), in the order the tables
        hold it; sorted and made into series in the thread (Later)."""
        routes = self.state.routes
        now_ms = routes.now_ms()  # the heartbeats' steady clock (clocks.py)
        live_table, live_key = routes.brokerLiveTable, routes.live_key
        rows = [(name, broker_id, broker.cluster, live.lastUpdateTimestamp, live.heartbeatTimeoutMillis, live.restored)
                for name, broker in routes.brokerAddrTable.items() for broker_id, addr in broker.brokerAddrs.items()
                if (live := live_table.get(live_key(broker.cluster, addr))) is not None]

        def by_broker() -> Iterator[Metric]:
            labels = ["cluster", "broker", "broker_id"]
            age = GaugeMetricFamily("namesrv_broker_heartbeat_age_seconds", "Seconds since each live broker's "
                                    "last heartbeat (registration)", labels=labels)
            timeout = GaugeMetricFamily("namesrv_broker_heartbeat_timeout_seconds", "Each live broker's heartbeat "
                                        "timeout: it expires when its age passes this", labels=labels)
            restored = GaugeMetricFamily("namesrv_broker_restored", "1 while a live broker is only restored from "
                                         "the route snapshot and has not registered since", labels=labels)
            rows.sort(key=lambda row: (row[0], row[1]))  # by name (each group's own), then id
            for name, broker_id, cluster, last, timeout_ms, was_restored in rows:
                values = [str(cluster), str(name), str(broker_id)]
                age.add_metric(values, max(0.0, (now_ms - last) / 1000))
                timeout.add_metric(values, timeout_ms / 1000)
                restored.add_metric(values, 1 if was_restored else 0)
            yield age
            yield timeout
            yield restored
        yield Later(by_broker)

    def _build_info(self) -> Metric:
        info = GaugeMetricFamily("namesrv_build_info", "Always 1: this server's version, the Java generation it "
                                 "emulates, Python's and Twisted's versions, and its remoting port (the alerts "
                                 "name a NameServer by its scrape target's host and this port)",
                                 labels=["version", "compat", "python", "twisted", "listen_port"])
        bound = self.state.listen_address.rpartition(":")[2]
        port = bound if bound.isdigit() else str(self.state.config["listenPort"])
        info.add_metric([__version__, self.state.profile.name, platform.python_version(), twisted_version, port], 1)
        return info


def _by_store(name: str, documentation: str, label: str, counts: Counter[tuple[str, str]],
              stores: tuple[str, ...], values: tuple[str, ...],
              also: tuple[tuple[str, str], ...] = ()) -> Metric:
    """A counter by (store, ``label``), every pair of ``stores`` x ``values`` and of ``also`` served from
    the start."""
    family = CounterMetricFamily(name, documentation, labels=["store", label])
    for store, value in sorted(set(counts) | {(s, v) for s in stores for v in values} | set(also)):
        family.add_metric([store, value], counts[store, value])
    return family


def registry(state: NamesrvState, factory: RemotingFactory, seen: Observations, health: HealthWatch,
             peers: PeersService | None = None) -> CollectorRegistry:
    """Our families plus the process's own (CPU, resident memory, open files); ``health``: the
    status API's, so both read one computation."""
    from prometheus_client import ProcessCollector

    found = EscapedRegistry(auto_describe=False)
    found.register(NamesrvCollector(state, factory, seen, health, peers))
    ProcessCollector(registry=found)
    return found


class Later:
    """Families with a series per broker, group or cluster (peers make them: up to 360,000 series at
    the limits' defaults), read in the reactor's turn and made into series in any thread: ``made``
    runs there.  Read and made in the reactor's thread, a scrape of them held every request about
    3 s (8-9 us a series)."""

    def __init__(self, made: Callable[[], Iterable[Metric]]) -> None:
        self.made = made


class EscapedRegistry(CollectorRegistry):
    """A registry whose label values hold no control character (escapes.py: ``\\x1b``, ``\\u2028``
    as visible text): cluster and broker names are labels, and a broker registers them unsigned
    without ACL.  Raw, an ESC in a cluster name reached the terminal of whoever ran ``curl /metrics``
    (Prometheus's text format escapes only ``\\``, ``"`` and newlines), and a lone surrogate
    (``"\\ud800"`` in a JSON header) made every scrape fail with 500 while that broker was registered.

    ``read`` (in the reactor's thread) takes what the families say now; ``made`` (in any thread: the
    scrape's, apart.py) makes their series and escapes them; ``collect`` is both at once."""

    def collect(self) -> Iterator[Metric]:
        return self.made(self.read())

    def read(self) -> list[Metric | Later]:
        return list(super().collect())

    @staticmethod
    def made(read: Iterable[Metric | Later]) -> Iterator[Metric]:
        for item in read:
            for metric in item.made() if isinstance(item, Later) else (item,):
                if any(has_controls(value) for sample in metric.samples for value in sample.labels.values()):
                    metric.samples = [sample._replace(labels={name: escaped(text)
                                                              for name, text in sample.labels.items()})
                                      for sample in metric.samples]
                yield metric
