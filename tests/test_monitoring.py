"""deploy/monitoring: the alert rules pass promtool's checks and their unit tests (firing on the outage
each names, quiet otherwise), the Prometheus config is valid, and every metric the rules and the
Grafana dashboard query is one a live server serves on /metrics (a NameServer with its controller,
a peer and a registered broker), from the first scrape. promtool comes with Debian's prometheus
(tools/setup-env.sh --deploy): skipped without it, failed in CI. The clean-stop case also runs end to
end: what the server serves while a cluster unregisters, and after a restart, through the shipped rules."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.support import free_port, wait_http

REPO = Path(__file__).resolve().parents[1]
MONITORING = REPO / "deploy" / "monitoring"
RULES = MONITORING / "namesrv-alerts.yaml"
DASHBOARD = MONITORING / "namesrv-dashboard.json"
ADMIN = Path(sys.executable).parent / "namesrv-admin"
#: PromQL words that look like metric names
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset",
            "inf", "nan"}
#: the outages the issue asks alerts for, each with an alert that covers it
EXPECTED_ALERTS = {"NamesrvBrokerGroupWithoutMaster", "NamesrvBrokerGroupAbsent", "NamesrvClusterNothingWritable",
                   "NamesrvBrokerNearExpiry",
                   "NamesrvRefusingTraffic", "NamesrvConfigChanged", "NamesrvKVChanged",
                   "NamesrvControllerWithoutLeader", "NamesrvDown", "NamesrvNoneAnswering", "NamesrvConfigNotSaved",
                   "NamesrvBrokersRejoining", "NamesrvBrokerGroupStoppedCleanly", "NamesrvClusterStoppedCleanly",
                   "NamesrvReactorStalled"}


def promtool() -> str:
    found = shutil.which("promtool")
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail("promtool missing: tools/setup-env.sh --deploy installs Debian's prometheus (tools/test.sh does)")
    pytest.skip("promtool missing: tools/setup-env.sh --deploy installs it (Debian's prometheus)")


def run_promtool(*args: str) -> str:
    done = subprocess.run([promtool(), *args], capture_output=True, text=True, cwd=MONITORING, timeout=120)
    output = done.stdout + done.stderr
    print(f"promtool {' '.join(args)}:\n{output}")  # the CI log shows promtool's own words
    assert done.returncode == 0, output
    return output


def test_promtool_checks_the_rules_and_the_config():
    assert "SUCCESS: 36 rules found" in run_promtool("check", "rules", RULES.name)
    assert "is valid prometheus config file syntax" in run_promtool("check", "config", "prometheus.yml")


def test_promtool_unit_tests_of_the_alerts_pass():
    assert "SUCCESS" in run_promtool("test", "rules", "namesrv-alerts.test.yaml")


def rules() -> list[dict]:
    """Every rule, recording rules (``record``) and alerts (``alert``)."""
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_every_alert_is_named_for_an_operator_and_unit_tested():
    alerts = {rule["alert"]: rule for rule in rules() if "alert" in rule}
    assert EXPECTED_ALERTS <= set(alerts)
    for name, rule in alerts.items():
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), name
        assert rule["annotations"]["summary"], name
    tested = set(re.findall(r"alertname: (\w+)", (MONITORING / "namesrv-alerts.test.yaml").read_text()))
    assert tested == set(alerts)


def test_every_alert_links_its_runbook_section():
    """Whoever is woken up gets a link to what to do: every alert's runbook_url names its own section of
    docs/operations.md ("### NamesrvDown" under "Alerts: what to do"), and that section names the alert.
    Before, no alert carried one."""
    from tests.test_docs import anchors

    operations = REPO / "docs" / "operations.md"
    text = operations.read_text(encoding="utf-8")
    runbook = text[text.index("\n## Alerts: what to do\n"):]
    runbook = runbook[:runbook.index("\n## ", 1)]
    sections = dict(re.findall(r"^### (\w+)\n\n(.+?)(?=^### |\Z)", runbook, re.MULTILINE | re.DOTALL))
    for rule in rules():
        if "alert" not in rule:
            continue
        name = rule["alert"]
        assert rule["annotations"].get("runbook_url") == f"docs/operations.md#{name.lower()}", name
        assert name.lower() in anchors(operations), name
        assert name in sections and rule["labels"]["severity"].capitalize() in sections[name], name
    assert sorted(sections) == sorted(rule["alert"] for rule in rules() if "alert" in rule)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: label matchers, strings, ranges, grouping
    clauses, function names and keywords taken out."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}", " ", expr)
    expr = re.sub(r"\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    expr = re.sub(r"\b[a-zA-Z_]\w*\s*\(", "(", expr)  # function and aggregation names
    return {word for word in re.findall(r"(?<![\w.$])[a-zA-Z_:][\w:]*", expr) if word.lower() not in KEYWORDS}


def test_metric_names_are_read_out_of_promql():
    assert metric_names('histogram_quantile(0.99, sum by (le, name) (rate(a_bucket{instance=~"$x", b="c"}[5m])))') \
        == {"a_bucket"}
    assert metric_names("max by (cluster) (x) == 0 and on (i) y / z > 0.5") == {"x", "y", "z"}
    assert metric_names('sum(rate(m{r!~"0|"}[$__rate_interval])) offset 5m') == {"m"}


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    queries = [t["expr"] for p in panels for t in p["targets"]]
    assert len(queries) >= len(panels)  # every panel queries something
    variables = [v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return queries + [re.sub(r"^label_values\((\w+),.*$", r"\1", v) for v in variables]


@pytest.fixture(scope="module")
def live_metrics(tmp_path_factory) -> tuple[set[str], set[str]]:
    """(sample names, family names) a NameServer serves on its first scrape with a controller, a
    peer NameServer and one broker registered (namesrv-admin simulate-broker)."""
    tmp = tmp_path_factory.mktemp("live")
    port, http, controller, peer = free_port(), free_port(), free_port(), free_port()
    server = subprocess.Popen([sys.executable, "-m", "twisted_namesrv", "--port", str(port), "--metrics-port",
                               str(http), "--controller-port", str(controller), "--data-dir", str(tmp),
                               "--nsaddr-list", f"127.0.0.1:{port};127.0.0.1:{peer}"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    broker = None
    try:
        wait_http(server, f"http://127.0.0.1:{http}/readyz")
        broker = subprocess.Popen([str(ADMIN), "-n", f"127.0.0.1:{port}", "simulate-broker", "--interval", "30"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert broker.stdout.readline().startswith("registered "), broker.stderr.read()
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=10) as answer:
            text = answer.read().decode()
    finally:
        for process in (broker, server):
            if process is not None:
                process.terminate()
                process.communicate(timeout=30)
    families = list(text_string_to_metric_families(text))
    return {s.name for f in families for s in f.samples}, {f.name for f in families}


def served(name: str, live: tuple[set[str], set[str]]) -> bool:
    samples, families = live
    if name in samples or name in families:
        return True
    return any(name.endswith(suffix) and name.removesuffix(suffix) in families
               for suffix in ("_total", "_bucket", "_count", "_sum"))  # a family without samples yet


#: series Prometheus itself writes (a NameServer does not serve them): every target's ``up``, and the
#: alerts' own state (NamesrvDown keeps naming a NameServer down past its rule's hour)
PROMETHEUS_OWN = {"up", "ALERTS"}


def test_every_metric_the_alerts_query_is_served(live_metrics):
    recorded = {rule["record"] for rule in rules() if "record" in rule}
    names = {name for rule in rules() for name in metric_names(rule["expr"])} - recorded - PROMETHEUS_OWN
    assert names and [name for name in sorted(names) if not served(name, live_metrics)] == []


def test_every_metric_the_dashboard_queries_is_served(live_metrics):
    names = {name for query in dashboard_queries() for name in metric_names(query)}
    assert len(names) >= 30
    assert [name for name in sorted(names) if not served(name, live_metrics)] == []


def test_the_dashboard_reads_every_series_the_outage_rules_read():
    """The dashboard and the rules agree: an outage the rules tell apart (a group rejoining after a
    restart, a cluster or group stopped cleanly, topics lost to a clean stop) is on the dashboard too.
    Before, its outage panels read only the older gauges: a cluster stopped cleanly, which the rules
    call a warning, showed red as 'Clusters with nothing writable', and a restart's rejoining groups red
    as without a master."""
    read = {name for query in dashboard_queries() for name in metric_names(query)}
    recorded = {rule["record"] for rule in rules() if "record" in rule}  # a name, not a series served
    assert sorted(outage_metric_names() - recorded - read) == []


def test_the_kubernetes_scrape_job_reads_the_manifests_annotations():
    job = yaml.safe_load((MONITORING / "prometheus-kubernetes-pods.yml").read_text())["scrape_configs"][0]
    manifest = {d["kind"]: d for d in yaml.safe_load_all((REPO / "deploy/kubernetes/namesrv.yaml").read_text())}
    annotations = manifest["StatefulSet"]["spec"]["template"]["metadata"]["annotations"]
    read = {label for rule in job["relabel_configs"] for label in rule["source_labels"]
            if label.startswith("__meta_kubernetes_pod_annotation_")}
    as_meta = {"__meta_kubernetes_pod_annotation_" + re.sub(r"[^a-zA-Z0-9]", "_", key) for key in annotations}
    assert read == as_meta


def test_the_dashboard_imports_as_grafana_reads_it():
    """Unique panel ids, each target with a refId and the data source variable, panels inside 24 columns,
    the NameServer variable in every query of a panel (rows and the controller's cluster-wide panels aside)."""
    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    assert dashboard["uid"] and dashboard["schemaVersion"] >= 36
    assert {v["name"] for v in dashboard["templating"]["list"]} == {"datasource", "instance"}
    for panel in panels:
        box = panel["gridPos"]
        assert box["x"] + box["w"] <= 24, panel["title"]
        for target in panel.get("targets", []):
            assert target["refId"] and target["datasource"]["uid"] == "${datasource}", panel["title"]
            if not target["expr"].startswith(("sum(rocketmq_controller", "sum by (election_result)",
                                              "sum by (cluster, broker_set)")):
                assert '$instance' in target["expr"], panel["title"]


# --- the clean-stop case end to end: what the server serves, through the shipped rules -------------------

#: the alerts a whole cluster stopped cleanly must raise, or must not
CLEAN_STOP_ALERTS = ("NamesrvBrokerGroupAbsent", "NamesrvClusterNothingWritable", "NamesrvBrokerGroupWithoutMaster",
                     "NamesrvBrokerCrashed", "NamesrvClusterStoppedCleanly", "NamesrvBrokerGroupStoppedCleanly")


def outage_metric_names() -> set[str]:
    """The metrics the outage rules read (namesrv-outages): the series a scrape must hand promtool."""
    (group,) = [g for g in yaml.safe_load(RULES.read_text())["groups"] if g["name"] == "namesrv-outages"]
    read = {name for rule in group["rules"] for name in metric_names(rule["expr"])}
    # and those their summaries query (a clean stop's "at T")
    return read | {name for rule in group["rules"] for text in rule.get("annotations", {}).values()
                   for name in re.findall(r"\b(namesrv_\w+)\{", text)}


def humanize_timestamp(seconds: float) -> str:
    """Prometheus's humanizeTimestamp: Go's time.Time printed in UTC, its fraction's trailing zeros cut."""
    import datetime

    moment = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    fraction = f"{moment.microsecond:06d}".rstrip("0")
    return moment.strftime("%Y-%m-%d %H:%M:%S") + (f".{fraction}" if fraction else "") + " +0000 UTC"


def as_input_series(scrapes: list[dict], instance: str) -> list[dict]:
    """promtool's input_series from scrapes 15 s apart: a series missing from a scrape after it was
    served is marked stale there, as Prometheus marks it, and has no sample after that."""
    keys = sorted({key for scrape in scrapes for key in scrape})
    series = []
    for name, labels in keys:
        values, seen = [], False
        for scrape in scrapes:
            if (name, labels) in scrape:
                values.append(repr(float(scrape[name, labels])))
                seen = True
            else:
                values.append("stale" if seen else "_")
                seen = False
        selector = ",".join(f"{k}={json.dumps(v)}" for k, v in (*labels, ("instance", instance)))
        series.append({"series": f"{name}{{{selector}}}", "values": " ".join(values)})
    return series


def expected(alert: str, at: float | None = None, **labels: str) -> dict:
    """The alert as the shipped rule renders it for these labels (its templates read only $labels, and a
    clean stop's time, ``at``: the " at T" its summary queries, left out when None)."""
    (rule,) = [rule for rule in rules() if rule.get("alert") == alert]
    when = "" if at is None else f" at {humanize_timestamp(at)}"
    rendered = {key: re.sub(r"\{\{ with printf .*?\{\{ end \}\}", when, text)
                for key, text in rule["annotations"].items()}
    rendered = {key: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m[1]], text)
                for key, text in rendered.items()}
    assert not any("{{" in text for text in rendered.values()), rendered
    return {"exp_labels": {**rule["labels"], **labels}, "exp_annotations": rendered}


def dashboard_stat(title: str) -> str:
    """The query of the dashboard's stat panel of that title, for every NameServer (``$instance``)."""
    (panel,) = [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["title"] == title]
    return panel["targets"][0]["expr"].replace("$instance", ".*")


def dashboard_reads(at: str, values: dict[str, int]) -> list[dict]:
    """promtool's promql_expr_test: at ``at``, each stat panel named shows that value."""
    return [{"expr": dashboard_stat(title), "eval_time": at, "exp_samples": [{"labels": "{}", "value": value}]}
            for title, value in values.items()]


def promtool_alerts(tmp_path, scrapes: list[dict], checks: list[dict], reads: list[dict] = ()) -> None:
    test = {"rule_files": [str(RULES)], "evaluation_interval": "15s",
            "tests": [{"interval": "15s", "input_series": as_input_series(scrapes, "ns-0:9877"),
                       "alert_rule_test": checks, "promql_expr_test": list(reads)}]}
    path = tmp_path / "clean-stop.test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    assert "SUCCESS" in run_promtool("test", "rules", str(path))


def test_a_whole_cluster_stopped_cleanly_alerts_through_the_shipped_rules_from_what_the_server_serves(tmp_path):
    """Issue 46 item 1 as Prometheus sees it: the series a NameServer serves while cluster cB's brokers
    unregister (mqshutdown broker), then for 15 minutes, then across a restart of the NameServer, go
    through promtool with the shipped rules. Before, cB's series left with its brokers: no alert. Then
    (an SRE's first hour) it paged as an outage of each group and of the cluster, the same alerts as a
    crash; then one warning said the cluster was stopped cleanly; now an info says it, and when."""
    from tests.test_audit import ask
    from tests.test_housekeeping import MASTER, register
    from tests.web.test_metrics_and_api import Served
    from twisted_namesrv.remoting import RequestCode, ResponseCode

    promtool()  # skipped (or failed in CI) before any work without it
    wanted = outage_metric_names()
    scrapes: list[dict] = []

    def scrape_every_15_s(served: Served, steps: int, heartbeat) -> None:
        for _ in range(steps):
            if len(scrapes) % 2 == 0:
                heartbeat()  # broker-a registers every 30 s, as brokers do
            scrapes.append({key: v for key, v in served.scrape().items() if key[0] in wanted})
            served.clock.advance(15)

    served = Served(tmp_path)
    served.service.topology.startService()
    brokers = {name: served.broker(addr, name, extra={"clusterName": cluster})
               for addr, name, cluster in ((MASTER, "broker-a", "c1"), ("10.0.2.1:10911", "broker-b1", "cB"),
                                           ("10.0.2.2:10911", "broker-b2", "cB"))}

    def heartbeat() -> None:
        register(*brokers["broker-a"], MASTER, "broker-a")

    scrape_every_15_s(served, 2, heartbeat)  # 0 s and 15 s: everything up
    for addr, name in (("10.0.2.1:10911", "broker-b1"), ("10.0.2.2:10911", "broker-b2")):  # at 30 s
        answer, _ = ask(served, RequestCode.UNREGISTER_BROKER, {"clusterName": "cB", "brokerAddr": addr,
                                                                "brokerName": name, "brokerId": "0"}, account=None)
        assert answer.code == ResponseCode.SUCCESS
        brokers[name][1].loseConnection()
    stopped_at = served.clock.seconds()
    scrape_every_15_s(served, 60, heartbeat)  # 30 s to 15 m 15 s

    # an info, saying when (the words an operator paged at 3 a.m. for a planned stop would want instead)
    stopped = [expected("NamesrvClusterStoppedCleanly", at=stopped_at, cluster="cB")]
    assert stopped[0]["exp_labels"]["severity"] == "info"
    assert stopped[0]["exp_annotations"]["summary"].startswith(
        f"Cluster cB stopped cleanly at {humanize_timestamp(stopped_at)} by unregistration")
    quiet = [{"eval_time": "15s", "alertname": alert, "exp_alerts": []} for alert in CLEAN_STOP_ALERTS]
    firing = [{"eval_time": at, "alertname": "NamesrvClusterStoppedCleanly", "exp_alerts": stopped}
              for at in ("30s", "15m")]
    not_a_crash = [{"eval_time": at, "alertname": alert, "exp_alerts": []} for at in ("30s", "15m")
                   for alert in ("NamesrvBrokerGroupWithoutMaster", "NamesrvBrokerCrashed", "NamesrvBrokerGroupAbsent",
                                 "NamesrvClusterNothingWritable", "NamesrvBrokerGroupStoppedCleanly",
                                 "NamesrvTopicsLost")]
    # the dashboard says what the rules say: amber "stopped cleanly", not red "nothing writable"
    stopped_panels = {"Clusters with nothing writable": 0, "Broker groups gone": 0, "Broker groups without a master": 0,
                      "Topics lost": 0, "Clusters stopped cleanly": 1, "Broker groups stopped cleanly": 2,
                      "Masters stopped cleanly, a slave up": 0}
    up_panels = {**stopped_panels, "Clusters stopped cleanly": 0, "Broker groups stopped cleanly": 0}
    reads = dashboard_reads("15s", up_panels) + dashboard_reads("30s", stopped_panels)
    reads += dashboard_reads("15m", stopped_panels)
    promtool_alerts(tmp_path, scrapes, quiet + firing + not_a_crash, reads)

    served.service.topology.stopService()  # the NameServer restarts (a kill -9 would lose at most 2 s)
    restarted = Served(tmp_path)
    connection = restarted.broker(MASTER, "broker-a")  # broker-a's next heartbeat reaches it
    scrape_every_15_s(restarted, 4, lambda: register(*connection, MASTER, "broker-a"))  # 15 m 30 s to 16 m 15 s
    after = [{"eval_time": "16m", "alertname": "NamesrvClusterStoppedCleanly", "exp_alerts": stopped}]
    after += [{"eval_time": "16m", "alertname": alert, "exp_alerts": []} for alert in
              ("NamesrvBrokerGroupAbsent", "NamesrvClusterNothingWritable", "NamesrvBrokerGroupWithoutMaster",
               "NamesrvBrokersRejoining")]
    reads += dashboard_reads("16m", {**stopped_panels, "Broker groups rejoining after a restart": 0})
    promtool_alerts(tmp_path, scrapes, quiet + firing + not_a_crash + after, reads)
