"""The heartbeat timeline tells each part of a broker's stay with the role it held then: on a real
capture of a controller-mode fail-over (tests/data/captures/real/v5-failover), the slave made master
within its stay has a row as slave (its heartbeats before the promotion) and one as master (those
after), not one row labelled by its last role."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pytest

from spark_analysis.analysis import findings
from spark_analysis.output import report
from tests.spark.conftest import run_job
from tests.spark.test_truth import REAL, truth_of
from tests.spark.truth_check import seconds


def _values(array: dict | list) -> np.ndarray:
    """A trace's numbers, typed (report._numbers) or a plain list."""
    if isinstance(array, dict):
        return np.frombuffer(base64.b64decode(array["bdata"]), f"<{array['dtype']}")
    return np.asarray(array)


def test_a_slave_made_master_within_its_stay_is_told_as_each_on_the_timeline(spark, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    name = "v5-failover"
    truth = truth_of(name)
    [promoted] = [s for s in truth["stays"] if len(s["ids"]) > 1]  # one stay, two brokerIds
    before, after = promoted["ids"]
    assert (before["role"], after["role"]) == ("SLAVE", "MASTER")
    kept: dict = {}
    monkeypatch.setattr(report, "write_report", lambda out, summary, liveness, *_: kept.update(liveness=liveness))
    run_job(spark, [str(REAL / name / f) for f in truth["files"]], tmp_path / "out")
    liveness = kept["liveness"]
    shown = report.plotted_brokers(liveness.brokers)
    named = findings.at_nameserver(liveness.brokers)
    figure = report.heartbeat_timeline(shown, liveness.time_bins, named)
    labels = figure["layout"]["yaxis"]["ticktext"]
    [stay] = [b for b in shown if b["broker_addr"] == promoted["broker_addr"]]
    rows = [n for n, label in enumerate(labels) if label.split(" from ")[0].endswith(f"/ {promoted['broker_addr']}")]
    assert len(rows) == 2, labels
    slave, master = rows
    assert f"/ {before['broker_id']} (SLAVE) / {promoted['broker_addr']}" in labels[slave]
    assert f"/ {after['broker_id']} (MASTER) / {promoted['broker_addr']}" in labels[master]
    assert labels[master].endswith(f"from {report._time(stay['ids'][1]['from'])[:19]}")  # when it became master
    promoted_at = seconds(after["from"])
    assert abs(stay["ids"][1]["from"] - promoted_at) <= truth["tolerance_s"]
    half_bin = max(liveness.time_bins.widths) / 2
    ticks = {slave: [], master: []}
    for trace in figure["data"]:
        if trace.get("name") == "heartbeats":
            for x, y in zip(_values(trace["x"]) / 1000.0, _values(trace["y"]), strict=True):
                if int(y) in ticks:
                    ticks[int(y)].append(float(x))
    assert ticks[slave] and ticks[master]
    assert max(ticks[slave]) <= promoted_at + half_bin and min(ticks[master]) >= promoted_at - half_bin
    # the other pictures, a row per stay: its roles in order
    assert f"/ {before['broker_id']} (SLAVE) then {after['broker_id']} (MASTER) / {promoted['broker_addr']}" in \
        " ".join(report.stay_labels(shown, named))


def test_a_broker_registered_with_several_nameservers_is_named_by_each_on_the_pictures() -> None:
    """A broker registers with every NameServer it is given (`-n 'a;b;c'`): its stays at each are
    rows of their own, named by the NameServer, as every stay of a run with several NameServers
    is, in the pictures as in the findings (findings.at_nameserver: one rule); stays at one
    NameServer still alike are named by when each registered (v4-multi's files read with a gap
    between them: two sessions at :9876)."""
    broker = {"cluster": "DefaultCluster", "broker_name": "broker-a", "broker_id": "0", "role": "MASTER",
              "broker_addr": "127.0.0.1:10911"}
    shown = [{**broker, "server": "127.0.0.1:9876", "first_seen": 100.0},
             {**broker, "server": "127.0.0.1:9876", "first_seen": 300.0},
             {**broker, "server": "127.0.0.1:9877", "first_seen": 100.0},
             {**broker, "broker_name": "broker-b", "broker_addr": "127.0.0.1:10921", "server": "127.0.0.1:9876",
              "first_seen": 100.0}]
    named = findings.at_nameserver(shown)
    labels = report.stay_labels(shown, named)
    base = "DefaultCluster / broker-a / 0 (MASTER) / 127.0.0.1:10911"
    assert labels == [f"{base} @ 127.0.0.1:9876 from {report._time(100.0)}",
                      f"{base} @ 127.0.0.1:9876 from {report._time(300.0)}",
                      f"{base} @ 127.0.0.1:9877",
                      "DefaultCluster / broker-b / 0 (MASTER) / 127.0.0.1:10921 @ 127.0.0.1:9876"]
    rows = [row.label for row in report.timeline_rows([{**b, "ids": None} for b in shown], named)]
    assert rows == labels  # the timeline's rows as the other pictures'
    # the findings name each stay as the pictures do (they named broker-b's, the pictures did not)
    stays = [{**b, "session": f"{b['server']}@x", "registrations": 1, "ended": "unregistered", "ended_at": 400.0,
              "gaps": [], "crc_failure_times": [], "refused": [], "topic_drops": [], "version_backwards": []}
             for b in shown[2:]]
    said = [item["message"] for item in findings.evidence([], {}, stays, {}) if item["kind"] == "broker_unregistered"]
    assert [message.split(": ")[0] for message in said] == [f"{base} @ 127.0.0.1:9877", labels[3]]


def test_a_stay_without_its_nameserver_is_named_so_not_none() -> None:
    """A stay whose server is not known beside one at a NameServer: "@ ?", not Python's "@ None"."""
    broker = {"cluster": "c", "broker_name": "b", "broker_id": "0", "role": "MASTER", "broker_addr": "h:1",
              "first_seen": 100.0}
    stays = [{**broker, "server": None}, {**broker, "server": "127.0.0.1:9876"}]
    assert report.stay_labels(stays, findings.at_nameserver(stays)) == [
        "c / b / 0 (MASTER) / h:1 @ ?", "c / b / 0 (MASTER) / h:1 @ 127.0.0.1:9876"]


def test_a_topic_panel_with_no_count_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """tcpdump -s 128 of brokers registering (v5-midsplit): every body cut, no topic count read. The
    panel "Topics per broker" was drawn empty, as if the brokers held no topics; it says why now."""
    from spark_analysis.model.periods import TimeBins

    bins = TimeBins.over([(0.0, 100.0)])
    monkeypatch.setattr(report, "stay_labels", lambda shown, named: [f"broker {n}" for n in range(len(shown))])
    unread = {"bins": {"bin": [0, 1], "topics": [None, None]}}
    figure = report.topic_counts([unread], bins, None)
    assert not figure["data"]
    assert [a["text"] for a in figure["layout"].get("annotations", [])] == [report.NO_TOPIC_COUNT]
    read = {"bins": {"bin": [0, 1], "topics": [3, 3]}}
    assert not report.topic_counts([read], bins, None)["layout"].get("annotations")
    assert not report.topic_counts([], bins, None)["layout"].get("annotations")  # no broker: nothing to say
