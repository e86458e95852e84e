"""The report against the truth of real captures of Java NameServers (tests/data/captures/real/): every
finding and every brokers.csv row checked against what was done and what the Java NameServer logged.
Nothing invented, nothing missed; classes of events, never one file's wording (truth_check.py).

Each capture's files go to one run of the job as the other Spark tests run it, with no port given:
the report must find the NameServers itself."""

from __future__ import annotations

import copy
import csv
import io
import json
from pathlib import Path

import pytest

from spark_analysis.decode.schema import BROKERS_CSV_COLUMNS
from spark_analysis.output.brokers import brokers_csv
from tests.spark.conftest import run_job
from tests.spark.test_report import same_rows
from tests.spark.truth_check import _over_missing_files, judge, judge_brokers, seconds
from tests.spark.truth_reader.build import CUT_ADDR

REAL = Path(__file__).resolve().parents[1] / "data" / "captures" / "real"
CAPTURES = sorted(p.parent.name for p in REAL.glob("*/TRUTH.json"))


def truth_of(name: str) -> dict:
    return json.loads((REAL / name / "TRUTH.json").read_text())


# Known and open: a capture marked here is a strict xfail, which fails the suite the day
# the report gets it right, so the mark cannot outlive the bug.
KNOWN_WRONG: dict[str, str] = {}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(reason=KNOWN_WRONG[n], strict=True))
                                  if n in KNOWN_WRONG else n for n in CAPTURES])
def test_report_tells_the_truth_of_a_real_capture(spark, tmp_path: Path, name: str) -> None:
    truth = truth_of(name)
    out = run_job(spark, [str(REAL / name / f) for f in truth["files"]], tmp_path / "out", report=False)
    problems = judge(truth, out.summary)
    assert not problems, f"{name}: the report disagrees with the truth in {len(problems)} way(s):\n  " + \
        "\n  ".join(problems)


def test_one_rotated_file_alone_tells_what_happened_in_it(spark, tmp_path: Path) -> None:
    """An operator often reads the one file of a rotation (tcpdump -G) that holds the incident: in
    v4-cutrot's fourth file (cut at 200 bytes) both brokers' connections began files earlier, and
    broker-b is killed in it. The kill is told at its time, broker-a is alive at the file's end, and
    nothing else is said of them. broker-a's own UNREGISTER_BROKER, which names the whole run's
    broker-a 127.0.0.1:10911, is in a later file: here it is named by its connection."""
    truth = truth_of("v4-cutrot")
    killed, stopped = sorted(truth["stays"], key=lambda s: s["end"])  # connection_closed, unregistered
    stopped = dict(stopped, broker_addr=CUT_ADDR.format(client="127.0.0.1:57312"))
    out = run_job(spark, [str(REAL / "v4-cutrot" / "v4-cutrot-071650.pcap.gz")], tmp_path / "out", report=False)
    items = {(i["kind"], i.get("broker_addr")): i for f in out.summary["findings"] for i in f["evidence"]
             if i.get("broker_addr")}
    assert sorted(items) == [("broker_alive_at_end", stopped["broker_addr"]),
                             ("broker_connection_closed", killed["broker_addr"])]
    told = seconds(items[("broker_connection_closed", killed["broker_addr"])]["t"])
    assert abs(told - seconds(killed["ended_at"])) <= truth["tolerance_s"]
    assert {(r["broker_addr"], r["ended"]) for r in out.brokers} == {(killed["broker_addr"], "connection_closed"),
                                                                     (stopped["broker_addr"], "alive")}


def test_a_ring_with_its_middle_file_lost_tells_the_stretch_and_nothing_across_it(spark, tmp_path: Path) -> None:
    """v4-ring3 given without pcap0 (the ring's fourth file, 1.2 s of broker-a's heartbeats and the
    producer's traffic): the stretch missing said first with the ring's wrap, broker-a alive at the
    end as the truth has it, and no stop, expiry, close or silence told across the gap."""
    truth = truth_of("v4-ring3")
    files = [str(REAL / "v4-ring3" / f) for f in ("v4-ring3.pcap2.xz", "v4-ring3.pcap1.xz")]
    out = run_job(spark, files, tmp_path / "out", report=False)
    kinds = {item["kind"] for f in out.summary["findings"] for item in f["evidence"]}
    # the producer's TopicTest lookups failed before broker-a registered it (autoCreateTopicEnable): made later
    assert kinds == {"files_missing", "files_overwritten", "topic_made_on_first_use", "broker_alive_at_end",
                     "other_server"}
    missing = next(f["evidence"][0] for f in out.summary["findings"] if f["kind"] == "files_missing")
    assert (missing["before"], missing["after"]) == tuple(files)
    assert 1.0 < missing["seconds"] < 1.4  # pcap0's span, 14:16:27.150-14:16:28.326
    ring = next(f["evidence"][0] for f in out.summary["findings"] if f["kind"] == "files_overwritten")
    assert (ring["path"], ring["overwritten"]) == (files[0], truth["rings"][0]["overwritten"])
    stay = truth["stays"][0]
    assert [(r["broker_addr"], r["ended"]) for r in out.brokers] == [(stay["broker_addr"], "alive")]
    assert out.summary["attention"].startswith("files missing from a rotated set: 1.2 s not captured · a ring that "
                                               "wrapped: at least 2 file(s) overwritten before")


def test_a_capture_given_twice_tells_its_truth_once(spark, tmp_path: Path) -> None:
    """v5-pause's file given twice (`report x.pcap.gz x.pcap.gz`): read once, every stay and
    registration counted once, the same truth (read twice, it would be two capture points)."""
    truth = truth_of("v5-pause")
    path = str(REAL / "v5-pause" / truth["files"][0])
    out = run_job(spark, [path, path], tmp_path / "out", report=False)
    problems = judge(truth, out.summary)
    assert not problems, "\n  ".join(problems)
    assert [f["path"] for f in out.summary["inputs"]["files"]] == [path]


def test_the_corpus_is_there_and_small() -> None:
    """Every capture has its files, steps and NameServer log; a few MB in all."""
    assert len(CAPTURES) >= 6
    total = 0
    for name in CAPTURES:
        truth = truth_of(name)
        logs = truth.get("server_logs", ["namesrv.log"])  # none: no NameServer ran (a web server on its port)
        for f in [*truth["files"], "steps.txt", *logs]:
            assert (REAL / name / f).is_file(), (name, f)
        total += sum(p.stat().st_size for p in (REAL / name).iterdir())
    assert total < 9 * 512 * 1024  # 4.5 MiB


# The checker itself: it passes a report that tells each truth, and fails one that misses, invents or
# misnames a single event (so that the test above can fail for the right reasons only).

def _told(truth: dict) -> dict:
    """A summary.json that tells exactly the truth (its findings and its brokers), in the vocabulary
    truth_check reads."""
    items = []

    def add(kind: str, t: str | None, **fields) -> None:
        items.append({"kind": kind, "severity": "warning" if kind == "heartbeat_expired" else "info",
                      "message": kind, "t": t, **fields})

    failed_masters = {(f["old_master"], f["master_lost"]) for f in truth["failovers"]}
    rows = []
    for s in truth["stays"]:
        last_id = s["ids"][-1]["broker_id"]  # one a snap length cut: null, as in summary.json
        rows.append({"session": f"{s['namesrv']}@x", "server": s["namesrv"], "cluster": s["cluster"],
                     "broker_name": s["broker_name"], "broker_addr": s["broker_addr"], "broker_id": last_id,
                     "ended": s["end"], "first_seen": s["registered"], "registrations": s["registrations"]})
        if s["end"] == "alive":
            add("broker_alive_at_end", None, broker_addr=s["broker_addr"], server=s["namesrv"])
        elif s.get("across_clock_step"):
            add("end_across_clock_step", s["ended_at"], broker_addr=s["broker_addr"], server=s["namesrv"])
        elif s["end"] == "expired":
            add("heartbeat_expired", s["ended_at"], broker_addr=s["broker_addr"], silence_s=s["silence_s"],
                server=s["namesrv"])
        elif s["end"] == "unregistered":
            add("broker_unregistered", s["ended_at"], broker_addr=s["broker_addr"], server=s["namesrv"])
        elif s["end"] == "connection_closed" and (s["broker_addr"], s["ended_at"]) not in failed_masters:
            add("broker_connection_closed", s["ended_at"], broker_addr=s["broker_addr"], server=s["namesrv"])
    for ns in truth["nameservers"]:
        for before in ns["runs"][:-1]:
            add("server_restart", before["down"], server=ns["endpoint"])
        if ns["runs"][-1]["down"] and ns["runs"][-1].get("down_in_packets", True):
            add("server_stopped", ns["runs"][-1]["down"], server=ns["endpoint"])
    log = truth.get("controller_log")
    for f in truth["failovers"]:
        add("failover", f["master_lost"], server=f["namesrv"], broker_name=f["broker_name"],
            no_master_s=f["no_master_s"],
            new_master=f["new_master"], **_controller_view(f, log))
    for m in truth["moves"]:
        add("broker_address_change", m["at"], broker_name=m["broker_name"])
    for r in truth["renumbers"]:
        add("broker_id_change", r["at"], broker_addr=r["broker_addr"])
    for d in truth["topic_deletions"]:
        add("topic_deleted", d["at"], topic=d["topic"], server=d["namesrv"])
    for cut in truth.get("cuts", []):
        add("capture_cut", None, cut_at=cut["cut_at"], packets=cut["packets"],
            uncaptured_bytes=cut["bytes_not_captured"])
    for gap in truth.get("not_captured", []):
        if gap["missed_only"] and not _over_missing_files(truth, gap):  # files_missing tells those
            items.append({"kind": "silence_not_captured", "severity": "info", "message": "not captured",
                          "from": gap["from"], "to": gap["until"], "broker_addr": gap["broker_addr"],
                          "missed_bytes": gap["missed"], "server": gap["namesrv"]})
    for drop in truth.get("dropped", []):
        add("packets_dropped", None, dropped=drop["dropped"], received=drop["received"])
    for unread in truth.get("records_not_read", []):
        add("records_not_read", None, path=f"captures/{unread['file']}", records=unread["records"])
    for gap in truth.get("files_missing", []):
        add("files_missing", None, seconds=gap["seconds"], **{"from": gap["from"]}, until=gap["until"])
        for s in truth["stays"]:  # alive where the capture before the gap ended
            if seconds(s["registered"]) < seconds(gap["from"]) and (
                    s["ended_at"] is None or seconds(s["ended_at"]) > seconds(gap["until"])):
                add("broker_alive_before_missing", gap["from"], broker_addr=s["broker_addr"], server=s["namesrv"])
    for step in truth.get("clock_steps", []):
        add("clock_stepped_back", None, path=f"captures/{step['file']}", seconds=step["seconds"], at=step["at"],
            to=step["to"])
    for ring in truth.get("rings", []):
        add("files_overwritten", None, path=ring["oldest_kept"], overwritten=ring["overwritten"])
    for bad in truth.get("bad_inputs", []):
        add("bad_input", None, path=f"captures/{bad['file']}", problem=bad["problem"],
            trailing_bytes=bad["trailing_bytes"])
    counts = {(c["namesrv"], c["broker_name"], c["op"], c["at"]): c["topics"] for c in truth.get("topic_counts", [])}
    for w in truth["write_perm"]:
        add("write_perm_wiped" if w["op"] == "wipe" else "write_perm_added", w["at"], broker_name=w["broker_name"],
            server=w["namesrv"], topics=counts.get((w["namesrv"], w["broker_name"], w["op"], w["at"])))
    noise: dict[str, int] = {}
    for r in truth["refused"]:
        if r["when"] in ("never_listening", "before_start", "after_stop"):
            noise[r["endpoint"]] = noise.get(r["endpoint"], 0) + r["count"]
    for endpoint, count in noise.items():
        add("refused_connections", None, endpoint=endpoint, count=count)
    for other in truth.get("other_servers", []):
        if other["requests"]:
            add("other_server", None, endpoint=other["endpoint"], requests=other["requests"])
    for check in truth.get("port_checks", []):
        add("port_checked", None, endpoint=check["endpoint"], accepted=check["accepted"])
    for copied in truth.get("translated_copies", []):
        add("translated_copies", None, **copied)
    for unread in truth.get("unread_connections", []):
        add("undecodable_connection", None, connection=f"{unread['client']}>{unread['server']}@1.0",
            server=unread["server"], protocol=unread["protocol"], bytes=unread["bytes"])
    for server in truth.get("unread_servers", []):
        add("server_unread", None, endpoint=server["endpoint"], accepted=server["accepted"], why=server["why"])
    for refusal in truth.get("turned_away", []):
        add("turned_away", refusal["at"], client=refusal["client"], server=refusal["server"])
    for point in truth.get("second_point", []):
        add("same_traffic_twice", None, server=point["server"], paths=[f"captures/{f}" for f in point["copies_in"]],
            read_from=point["read_from"], connections=point["connections"], clock_s=point["clock_s"] - 0.004)
    add("topic_not_exist", None, topic="TopicTest")  # not judged
    unread = {u["endpoint"] for u in truth.get("unread_servers", [])}  # no NameServer to the report: cut unread
    summary = {"nameservers": [{"endpoint": ns["endpoint"]} for ns in truth["nameservers"]
                               if ns["endpoint"] not in unread],
               "findings": [{"kind": i["kind"], "evidence": [i]} for i in items], "brokers": rows}
    if log:
        def told(change: dict) -> dict:
            return {**change, "at": None, "after": change["logged"][0], "by": change["logged"][1]}

        summary["controller"] = {"groups": [{"controller": log["endpoint"], "broker_name": log["broker_name"],
                                             "elections": [told(e) for e in log["elections"]],
                                             "sync_state_sets": [told(x) for x in log["sync_state_sets"]]}]}
    return summary


def _controller_view(failover: dict, log: dict | None) -> dict:
    """A fail-over's controller fields as the controller logged them (none without its log)."""
    if not log:
        return {}
    election = min((e for e in log["elections"] if e["master_addr"] == failover["new_master"]),
                   key=lambda e: abs(seconds(e["logged"][0]) - seconds(failover["master_lost"])))
    before = max((x for x in log["sync_state_sets"] if x["sync_state_set_epoch"] < election["sync_state_set_epoch"]),
                 key=lambda x: x["sync_state_set_epoch"])
    return {"controller": log["endpoint"], "master_epoch": election["master_epoch"],
            "elected_at": None, "elected_after": election["logged"][0], "elected_by": election["logged"][1],
            "sync_state_set_before": before["sync_state_set"],
            "sync_state_set_epoch_before": before["sync_state_set_epoch"],
            "sync_state_set_after": election["sync_state_set"],
            "sync_state_set_epoch_after": election["sync_state_set_epoch"]}


def test_the_checker_reads_a_broker_s_exact_name_not_the_spreadsheet_s() -> None:
    """A broker whose name or cluster starts as a formula does (``-``, ``=``, ``+``, ``@``: a peer
    chooses them) is written to brokers.csv with a leading ``'``: the checker reads summary.json's
    exact names, or such a broker would be invented and its stay missed."""
    truth = copy.deepcopy(truth_of("v5-expiry"))
    for stay in truth["stays"]:
        stay["broker_name"], stay["cluster"] = f"-{stay['broker_name']}", f"={stay['cluster']}"
    summary = _told(truth)
    assert judge(truth, summary) == []
    written = brokers_csv([{column: seconds(row[column]) if column == "first_seen" else row.get(column)
                            for column in BROKERS_CSV_COLUMNS} for row in summary["brokers"]])
    spreadsheet = list(csv.DictReader(io.StringIO(written.decode())))
    assert all(row["broker_name"].startswith("'-") and row["cluster"].startswith("'=") for row in spreadsheet)
    assert judge_brokers(truth, spreadsheet)  # what reading brokers.csv's text would say


@pytest.mark.parametrize("name", CAPTURES)
def test_the_checker_passes_the_truth_and_fails_one_wrong_event(name: str) -> None:
    truth = truth_of(name)
    summary = _told(truth)
    assert judge(truth, summary) == []

    for n, finding in enumerate(summary["findings"]):  # each event left out is missed
        if finding["kind"] == "topic_not_exist":
            continue
        less = copy.deepcopy(summary)
        del less["findings"][n]
        assert any(p.startswith("missed") for p in judge(truth, less)), finding

    invented = copy.deepcopy(summary)
    invented["findings"].append({"kind": "broker_connection_closed", "evidence": [
        {"kind": "broker_connection_closed", "severity": "critical", "message": "made up",
         "broker_addr": truth["stays"][0]["broker_addr"] if truth["stays"] else "127.0.0.1:10911",  # v5-lonestop
         "t": truth["capture"]["last"]}]})
    assert any(p.startswith("invented") for p in judge(truth, invented))

    restart = copy.deepcopy(summary)
    restart["findings"].append({"kind": "server_restart", "evidence": [
        {"kind": "server_restart", "message": "made up",
         "server": truth["nameservers"][0]["endpoint"] if truth["nameservers"] else "127.0.0.1:9876",
         "t": truth["capture"]["first"]}]})
    assert any(p.startswith("invented") for p in judge(truth, restart))

    other = copy.deepcopy(summary)  # a server that is no NameServer, where the truth has none
    other["findings"].append({"kind": "other_server", "evidence": [
        {"kind": "other_server", "message": "made up", "endpoint": "127.0.0.1:1", "requests": 1}]})
    assert any(p.startswith("invented") for p in judge(truth, other))

    cut_short = copy.deepcopy(summary)  # a file cut inside its last record where the truth has none so
    cut_short["findings"].append({"kind": "bad_input", "evidence": [
        {"kind": "bad_input", "message": "made up", "path": "captures/x.pcap", "problem": "truncated",
         "trailing_bytes": 7}]})
    assert any(p.startswith("invented") for p in judge(truth, cut_short))

    checked = copy.deepcopy(summary)  # a port check at an endpoint where no connection carried nothing
    checked["findings"].append({"kind": "port_checked", "evidence": [
        {"kind": "port_checked", "message": "made up", "endpoint": "127.0.0.1:2", "accepted": 1}]})
    assert any(p.startswith("invented") for p in judge(truth, checked))

    late = copy.deepcopy(summary)  # an event told at another time
    timed = [f for f in late["findings"] if f["evidence"][0].get("t") and f["kind"] != "server_stopped"]
    if timed:
        timed[0]["evidence"][0]["t"] = truth["capture"]["first"] if timed[0]["evidence"][0]["t"] != \
            truth["capture"]["first"] else truth["capture"]["last"]
        assert any(p.startswith("wrong time") for p in judge(truth, late)), timed[0]

    for n, count in enumerate(truth.get("topic_counts", [])):  # a topic count the NameServer did not hold
        if not any(perm["at"] == count["at"] and perm["broker_name"] for perm in truth["write_perm"]):
            continue  # a change whose broker name a snap length cut: the report cannot tell its count
        miscounted = copy.deepcopy(summary)
        item = next(i for f in miscounted["findings"] for i in f["evidence"] if i["kind"].startswith("write_perm")
                    and i["t"] == count["at"] and i["broker_name"] == count["broker_name"])
        item["topics"] = count["topics"] + 1
        assert any(p.startswith("topic count of") for p in judge(truth, miscounted)), n
        item["topics"], item["topics_answered"] = count["topics"], count["topics"] + 1  # the answer's, misread
        assert any(p.startswith("topic count of") for p in judge(truth, miscounted)), n

    doubled = copy.deepcopy(summary)  # a broker's registrations counted twice (a connection captured twice)
    if doubled["brokers"]:  # none registered in v5-lonestop
        doubled["brokers"][0]["registrations"] *= 2
        assert any("registrations counted" in p for p in judge(truth, doubled))
    for n, copied in enumerate(truth.get("translated_copies", [])):  # a translation told wrong or twice
        for field, value in (("seen_as", copied["counted_as"]), ("connections", copied["connections"] + 1)):
            wrong_copy = copy.deepcopy(summary)
            item = next(i for f in wrong_copy["findings"] for i in f["evidence"] if i["kind"] == "translated_copies"
                        and i["seen_as"] == copied["seen_as"])
            item[field] = value
            assert judge(truth, wrong_copy), (n, field)
        twice = copy.deepcopy(summary)
        twice["findings"].append(next(f for f in summary["findings"] if f["kind"] == "translated_copies"))
        assert any(p.startswith("invented: translated_copies") for p in judge(truth, twice)), n
    for n, point in enumerate(truth.get("second_point", [])):  # two capture points' copies told wrong or twice
        for field, value in (("paths", point["read_from"]), ("read_from", point["copies_in"]),
                             ("connections", point["connections"] - 1), ("clock_s", point["clock_s"] + 0.02),
                             ("clock_s", None), ("severity", "warning")):
            wrong_point = copy.deepcopy(summary)
            item = next(i for f in wrong_point["findings"] for i in f["evidence"] if i["kind"] == "same_traffic_twice"
                        and i["server"] == point["server"])
            item[field] = value
            assert judge(truth, wrong_point), (n, field, value)
        twice = copy.deepcopy(summary)
        twice["findings"].append(next(f for f in summary["findings"] if f["kind"] == "same_traffic_twice"))
        assert any(p.startswith("invented: same_traffic_twice") for p in judge(truth, twice)), n
    if summary["brokers"]:  # a capture no broker registered in (v5-lonestop) has no row to get wrong
        wrong = copy.deepcopy(summary)
        across = any(s.get("across_clock_step") for s in truth["stays"])  # either end may be told there
        wrong["brokers"][0]["ended"] = "connection_closed" if wrong["brokers"][0]["ended"] != "connection_closed" \
            and not across else "alive"
        assert judge(truth, wrong)
        assert judge(truth, {**summary, "brokers": summary["brokers"] + [dict(summary["brokers"][0],
                                                                              broker_addr="127.0.0.1:1")]})
    if truth.get("controller_log"):  # the controller's elections and sets, and each fail-over's view of them
        for change in ("elections", "sync_state_sets"):
            for field, value in (("master_epoch", 99), ("sync_state_set", [7]), ("after", truth["capture"]["first"])):
                wrong_change = copy.deepcopy(summary)
                entry = wrong_change["controller"]["groups"][0][change][-1]
                if field not in entry:
                    continue
                entry[field] = value
                if field == "after":
                    entry["by"] = value
                assert judge(truth, wrong_change), (change, field)
            fewer = copy.deepcopy(summary)
            del fewer["controller"]["groups"][0][change][0]
            assert any(p.startswith("missed: controller") for p in judge(truth, fewer)), change
        for field, value in (("master_epoch", 1), ("sync_state_set_before", [2]), ("sync_state_set_after", [1, 2]),
                             ("elected_after", truth["capture"]["first"]), ("controller", None)):
            wrong_view = copy.deepcopy(summary)
            item = next(f["evidence"][0] for f in wrong_view["findings"] if f["kind"] == "failover")
            item[field] = value
            if field == "elected_after":
                item["elected_by"] = value
            assert judge(truth, wrong_view), field
    unknown = copy.deepcopy(summary)
    unknown["findings"].append({"kind": "x", "evidence": [{"kind": "something_new", "message": "?"}]})
    assert any("unknown finding kind" in p for p in judge(truth, unknown))


def test_a_wrong_guess_of_a_client_replays_again_and_changes_nothing(spark, tmp_path: Path) -> None:
    """Counted (``counted_cost=0``), v5-trio's mqadmin connection is guessed a client's: it gets
    more than it asks (the cluster's lists). Its decoding beside the replay finds an operator's
    request the replay needed: the replay runs again with every 4-tuple's events, and the report
    is the one made without guessing."""
    truth = truth_of("v5-trio")
    files = [str(REAL / "v5-trio" / f) for f in truth["files"]]
    plain = run_job(spark, files, tmp_path / "plain", report=False)
    guessed = run_job(spark, files, tmp_path / "guessed", report=False, counted_cost=0)
    assert any("replaying again with every 4-tuple's events" in line for line in guessed.progress)
    assert not any("replaying again" in line for line in plain.progress)
    assert (guessed.summary, guessed.brokers, guessed.counts) == (plain.summary, plain.brokers, plain.counts)
    assert same_rows(guessed, plain)
