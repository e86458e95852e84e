"""docs/operations.md's metric table is what ``/metrics`` serves: every family, its labels, and the
``reason``/``event`` values it lists, each at 0 before anything happened; and the per-broker
heartbeat gauges and build info alerts and dashboards rely on."""

from __future__ import annotations

import platform
import re
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from twisted.copyright import version as twisted_version

from tests.test_housekeeping import START
from tests.web.test_metrics_and_api import Served, value
from twisted_namesrv import __version__

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
#: the columns of the table: metric(s), type, labels, meaning
ROW = re.compile(r"^\| (`namesrv_[^|]*?) *\| (\w+) *\| *([^|]*?) *\| (.*) \|$")


def documented() -> dict[str, tuple[str, set[str], str]]:
    """Each family the docs list (as Prometheus names it, counters without ``_total``) ->
    (type, label names, meaning)."""
    section = DOCS.read_text().split("### `/metrics`", 1)[1].split("\n### ", 1)[0]
    found = {}
    for line in section.splitlines():
        row = ROW.match(line)
        if row is None:
            continue
        names, kind, labels, meaning = row.groups()
        label_names = {name for name in re.findall(r"`(\w+)`", labels)}
        for name in re.findall(r"`(namesrv_\w+)`", names):
            family = name.removesuffix("_total") if kind == "counter" else name
            found[family] = (kind, label_names, meaning)
    return found


def families(served: Served) -> dict:
    text = generate_latest(served.registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text) if f.name.startswith("namesrv_")}


def test_the_docs_table_lists_exactly_the_families_served_with_their_types_and_labels(tmp_path):
    served = Served(tmp_path)
    served.broker()  # so the per-broker families have series whose labels can be compared
    docs, scraped = documented(), families(served)
    assert sorted(docs) == sorted(scraped)
    for name, family in scraped.items():
        kind, labels, _ = docs[name]
        assert family.type == kind, name
        served_labels = {label for sample in family.samples for label in sample.labels if label not in ("le",)}
        assert served_labels == labels or not family.samples, name  # namesrv_peer_*: series only with peers


def test_every_reason_and_event_the_docs_list_is_served_at_zero_from_the_start(tmp_path):
    docs, samples = documented(), Served(tmp_path).scrape()
    for family, label in (("namesrv_rejected", "reason"), ("namesrv_broker_events", "event")):
        listed = set(re.findall(r"`(\w+)`", docs[family][2])) - {"frameMaxLength", "headerMaxLength",
                                                                 "serverChannelMaxIdleTimeSeconds",
                                                                 "receiveMemoryBudget", "fdReserve",
                                                                 "maxConnectionsPerHost"}
        served = {dict(labels)[label] for name, labels in samples if name == family + "_total"}
        assert listed == served, family
        assert all(value(samples, family + "_total", **{label: v}) == 0 for v in served)
    refusals = {dict(labels)["reason"] for name, labels in samples if name == "namesrv_refusals_total"}
    assert set(re.findall(r"`(\w+)`", docs["namesrv_refusals"][2])) - {"remoting", "controller", "http"} <= refusals


def test_each_live_broker_has_its_heartbeat_age_timeout_and_restored_flag(tmp_path):
    served = Served(tmp_path)
    served.broker()
    served.clock.advance(70)
    broker = {"cluster": "c1", "broker": "broker-a", "broker_id": "0"}
    samples = served.scrape()
    assert value(samples, "namesrv_broker_heartbeat_age_seconds", **broker) == 70
    assert value(samples, "namesrv_broker_heartbeat_timeout_seconds", **broker) == 120
    assert value(samples, "namesrv_broker_restored", **broker) == 0
    assert served.clock.seconds() == START + 70

    served.clock.advance(60)  # expired: its series go with it
    samples = served.scrape()
    assert not [name for name, _ in samples if name.startswith("namesrv_broker_heartbeat")]


def test_build_info_names_what_runs(tmp_path):
    samples = Served(tmp_path).scrape()
    assert value(samples, "namesrv_build_info", version=__version__, compat="5.3.3", python=platform.python_version(),
                 twisted=twisted_version, listen_port="9876") == 1  # the remoting port: what alerts name
