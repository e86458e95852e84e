"""Without Spark: a 5.x controller's calls decoded through the server's own headers and bodies
(decode/controller.py), and its story (analysis/controller.py): elections, syncStateSet changes,
heartbeats, and each fail-over told with them. Failure first: a body cut short, not JSON, not of
the layout, a header Java could not read, an unknown version, an answer without its request: a
counted undecodable note, never a crash or a fact. And the real capture of a Java controller
against what it logged."""

from __future__ import annotations

import gzip
from collections import defaultdict

import pytest

from spark_analysis.analysis.controller import controller_story, elections_untold, with_controller_view
from spark_analysis.capture.conversation import conversation_of
from spark_analysis.capture.packets import PSH, tcp_segments
from spark_analysis.capture.reassembly import reassemble
from spark_analysis.capture.records import iter_records
from spark_analysis.decode.controller import (
    CONTROLLER_EVENT,
    CONTROLLER_UNDECODABLE,
    CONTROLLER_VIEW,
    NO_REQUEST,
)
from spark_analysis.decode.rows import CONTROLLER, CONTROLLER_NOTE, conversation_rows
from spark_analysis.decode.schema import CONTROLLER_ROWS
from spark_analysis.model.tally import Groups, add
from tests.spark.capture.builders import CLIENT, SERVER, client_stream, handshake, only, segment
from tests.spark.test_truth import REAL, truth_of
from tests.spark.truth_check import seconds
from twisted_namesrv.controller import bodies
from twisted_namesrv.controller.codes import ControllerRequestCode as Req
from twisted_namesrv.remoting import RemotingCommand
from twisted_namesrv.remoting.codes import V4_9_8, V5_3_3

CONTROLLER_AT = f"{SERVER[0]}:{SERVER[1]}"
GROUP = {"clusterName": "C", "brokerName": "g"}


def ask(code: int, opaque: int, ext: dict | None = None, body: bytes | None = None, version: int = V5_3_3,
        oneway: bool = False) -> RemotingCommand:
    return RemotingCommand.request(code, ext, body, opaque=opaque, version=version, oneway=oneway)


def said(request: RemotingCommand, header: dict | None = None, body: bytes | None = None, code: int = 0) -> bytes:
    """The controller's answer, as the server writes it (bodies.ext_of: Java's extFields)."""
    return RemotingCommand.response_to(request, code, ext=None if header is None else bodies.ext_of(header),
                                       body=body, version=V5_3_3).encode()


def decoded(calls: list[tuple[RemotingCommand, bytes | None]], orphans: tuple[bytes, ...] = ()
            ) -> tuple[list[dict], Groups]:
    """The CONTROLLER rows (as dicts) and the tally's notes of one connection carrying these calls."""
    requests = client_stream(*(request.encode() for request, _ in calls))
    answers = b"".join([a for _, a in calls if a is not None] + list(orphans))
    packets = handshake() + requests + ([(3.0, segment(SERVER, CLIENT, 5001, PSH, answers))] if answers else [])
    rows, groups = [], {}
    for kind, row in conversation_rows(conversation_of(only(reassemble(packets, frozenset({SERVER[1]}))))):
        if kind == CONTROLLER:
            rows.append(dict(zip(CONTROLLER_ROWS.names, row, strict=True)))
        elif kind == CONTROLLER_NOTE:
            add(groups, *row)
    return rows, groups


def test_an_election_a_sync_state_set_change_and_heartbeats_are_read_with_the_servers_codec() -> None:
    elect = ask(Req.CONTROLLER_ELECT_MASTER, 1, {**GROUP, "brokerId": "1", "designateElect": "false"})
    group = bodies.broker_member_group_bean("C", "g", {1: "10.0.0.9:10911", 2: "10.0.0.8:10911"})
    alter = ask(Req.CONTROLLER_ALTER_SYNC_STATE_SET, 2, {"brokerName": "g", "masterBrokerId": "1", "masterEpoch": "1"},
                bodies.sync_state_set_body({1, 2}, 1))
    info = ask(Req.CONTROLLER_GET_REPLICA_INFO, 3, {"brokerName": "g"})
    beat = ask(Req.BROKER_HEARTBEAT, 4, {**GROUP, "brokerAddr": "10.0.0.9:10911", "brokerId": "1", "epoch": "1"},
               oneway=True)
    rows, groups = decoded([
        (elect, said(elect, {"masterBrokerId": 1, "masterAddress": "10.0.0.9:10911", "masterEpoch": 1,
                             "syncStateSetEpoch": 1}, bodies.elect_master_body({1}, group))),
        (alter, said(alter, {"newSyncStateSetEpoch": 2}, bodies.sync_state_set_body({1, 2}, 2))),
        (info, said(info, {"masterBrokerId": 1, "masterAddress": "10.0.0.9:10911", "masterEpoch": 1},
                    bodies.sync_state_set_body({1, 2}, 2))),
        (beat, None)])
    assert [(r["code_name"], r["master_broker_id"], r["master_epoch"], r["sync_state_set"], r["sync_state_set_epoch"],
             r["note"]) for r in rows] == [
        ("CONTROLLER_ELECT_MASTER", 1, 1, [1], 1, None),
        ("CONTROLLER_ALTER_SYNC_STATE_SET", 1, 1, [1, 2], 2, None),
        ("CONTROLLER_GET_REPLICA_INFO", 1, 1, [1, 2], 2, None),
        ("BROKER_HEARTBEAT", None, None, None, None, None)]
    assert CONTROLLER_UNDECODABLE not in groups
    story = controller_story(groups, {CONTROLLER_AT}, end=3.0)
    (told,) = story["groups"]
    assert [(e["master_epoch"], e["master_addr"], e["at"] is not None) for e in told["elections"]] == [
        (1, "10.0.0.9:10911", True)]
    assert [(s["sync_state_set_epoch"], s["sync_state_set"], s["how"].split(" of")[0]) for s in
            told["sync_state_sets"]] == [(1, [1], "the election"), (2, [1, 2], "CONTROLLER_ALTER_SYNC_STATE_SET")]
    assert told["members"] == [{"broker_id": 1, "broker_addr": "10.0.0.9:10911"},
                               {"broker_id": 2, "broker_addr": "10.0.0.8:10911"}]
    assert [(h["broker_id"], h["heartbeats"], h["alive_at_end"]) for h in told["heartbeats"]] == [(1, 1, True)]
    assert story["counts"] == {"elections": 1, "sync_state_set_changes": 2, "heartbeats": 1, "undecodable": 0}
    assert controller_story(groups, set())["groups"] == []  # only at endpoints found to be controllers


ALTER_EXT = {"brokerName": "g", "masterBrokerId": "1", "masterEpoch": "1"}


@pytest.mark.parametrize(("request_", "answer_body", "why"), [
    (ask(Req.CONTROLLER_ALTER_SYNC_STATE_SET, 1, ALTER_EXT, b'{"syncStateSet":[1,2],"syncStateSetEp'), None,
     "body truncated"),
    (ask(Req.CONTROLLER_ALTER_SYNC_STATE_SET, 1, ALTER_EXT, b"\x00\xff not json"), None, "body not JSON"),
    (ask(Req.CONTROLLER_ALTER_SYNC_STATE_SET, 1, ALTER_EXT, b'{"syncStateSet":"1,2","syncStateSetEpoch":1}'), None,
     "not the layout: syncStateSet is not a list of broker ids"),
    (ask(Req.CONTROLLER_GET_REPLICA_INFO, 1, {"brokerName": "g"}), b'{"syncStateSet":[1],"syncStateSet',
     "body truncated"),
    (ask(Req.CONTROLLER_GET_REPLICA_INFO, 1, {"brokerName": "g"}), b"[1, 2]", "not the layout: the body is not a "
     "SyncStateSet object"),
    (ask(Req.CONTROLLER_GET_SYNC_STATE_DATA, 1, None, b'["g"]'), b'{"replicasInfoTable":{"g":{"masterEpoch":"x"}}}',
     "not the layout: the ReplicasInfo of 'g' has a number that is not one"),
    (ask(Req.CONTROLLER_GET_REPLICA_INFO, 1, {"brokerName": "g"}, version=V4_9_8), b'{"syncStateSet":[1]}',
     f"unknown version {V4_9_8}"),
    (ask(Req.CONTROLLER_GET_REPLICA_INFO, 1, {"brokerName": "g"}, version=9999), b'{"syncStateSet":[1]}',
     "unknown version 9999"),
    (ask(Req.CONTROLLER_ALTER_SYNC_STATE_SET, 1, {**ALTER_EXT, "masterEpoch": "one"},
         bodies.sync_state_set_body({1, 2}, 1)), None, "header field masterEpoch is not a number: 'one'"),
])
def test_a_controller_call_that_cannot_be_read_is_a_counted_note_never_a_fact(
        request_: RemotingCommand, answer_body: bytes | None, why: str) -> None:
    header = {"masterBrokerId": 1, "masterAddress": "10.0.0.9:10911", "masterEpoch": 7}
    if request_.code == Req.CONTROLLER_ALTER_SYNC_STATE_SET:
        header, answer_body = {"newSyncStateSetEpoch": 7}, bodies.sync_state_set_body({1, 2}, 7)
    rows, groups = decoded([(request_, said(request_, header, answer_body))])
    assert groups[CONTROLLER_UNDECODABLE] == {(CONTROLLER_AT, Req(request_.code).name, why): [1, 2.0, 2.0, None]}
    assert CONTROLLER_VIEW not in groups and CONTROLLER_EVENT not in groups  # nothing said of epoch 7
    assert [(r["note"], r["master_epoch"], r["sync_state_set"]) for r in rows] == [(why, None, None)]
    story = controller_story(groups, {CONTROLLER_AT})
    assert story["counts"]["undecodable"] == 1 and story["counts"]["elections"] == 0
    assert [(u["why"], u["count"]) for u in story["undecodable"]] == [(why, 1)]


def test_an_answer_whose_request_was_not_captured_is_a_note_not_a_view() -> None:
    info = ask(Req.CONTROLLER_GET_REPLICA_INFO, 1, {"brokerName": "g"})
    stray = said(ask(Req.CONTROLLER_GET_REPLICA_INFO, 77), {"masterBrokerId": 2, "masterAddress": "10.0.0.8:10911",
                                                             "masterEpoch": 9}, bodies.sync_state_set_body({2}, 9))
    rows, groups = decoded([(info, None)], orphans=(stray,))
    assert groups[CONTROLLER_UNDECODABLE] == {(CONTROLLER_AT, "?", NO_REQUEST): [1, 3.0, 3.0, None]}
    assert CONTROLLER_VIEW not in groups
    assert [r["note"] for r in rows] == [None]  # the unanswered request: the calls' own finding (unanswered)


def _views(*views: tuple) -> Groups:
    groups: Groups = {}
    for master_id, addr, epoch, ids, set_epoch, code, first, last in views:
        add(groups, CONTROLLER_VIEW, (CONTROLLER_AT, "g", master_id, addr, epoch, ids, set_epoch, code), 1, first, last)
    return groups


def test_an_election_no_request_asked_for_is_placed_between_the_answers_and_joins_the_nameservers_failover() -> None:
    groups = _views((1, "10.0.0.9:10911", 1, (1, 2), 2, "CONTROLLER_GET_REPLICA_INFO", 10.0, 20.0),
                    (2, "10.0.0.8:10911", 2, (2,), 3, "CONTROLLER_GET_REPLICA_INFO", 25.0, 40.0))
    add(groups, CONTROLLER_EVENT, (CONTROLLER_AT, "g", "member", None, 1, "10.0.0.9:10911", 0, None, None, None),
        1, 5.0, 5.0)
    story = controller_story(groups, {CONTROLLER_AT})
    (second,) = [e for e in story["groups"][0]["elections"] if e["master_epoch"] == 2]
    assert (second["at"], second["after"][17:26], second["by"][17:26]) == (None, "20.000000", "25.000000")
    failover = {"kind": "failover", "cluster": "C", "broker_name": "g", "t": "1970-01-01T00:00:21.000000Z",
                "old_master": "10.0.0.9:10911", "new_master": "10.0.0.8:10911",
                "new_master_at": "1970-01-01T00:00:21.500000Z"}
    (told,) = with_controller_view([failover], story)
    assert {k: told[k] for k in ("master_epoch", "master_epoch_before", "sync_state_set_before",
                                 "sync_state_set_after", "old_master_broker_id")} == {
        "master_epoch": 2, "master_epoch_before": 1, "sync_state_set_before": [1, 2], "sync_state_set_after": [2],
        "old_master_broker_id": 1}
    assert [e["master_epoch"] for e in elections_untold(story, [told])] == []  # the fail-over tells it
    elsewhere = {**failover, "broker_name": "other"}
    assert with_controller_view([elsewhere], story)[0]["controller"] is None  # another group: no view


def test_the_real_java_controllers_elections_and_sets_are_what_it_logged() -> None:
    """v5-failover: every controller call of the capture decodes, and its elections (masterEpoch,
    master, syncStateSet) and syncStateSet changes are those in the Java controller's log."""
    truth = truth_of("v5-failover")
    log = truth["controller_log"]
    data = gzip.decompress((REAL / "v5-failover" / "v5-failover.pcap.gz").read_bytes())
    connections = reassemble(tcp_segments(iter_records(data)), frozenset({28876, 28878}))
    groups: Groups = {}
    rows: dict[str, int] = defaultdict(int)
    for connection in connections:
        for kind, row in conversation_rows(conversation_of(connection)):
            if kind == CONTROLLER_NOTE:
                add(groups, *row)
            elif kind == CONTROLLER:
                rows[row[CONTROLLER_ROWS.names.index("code_name")]] += 1
    assert dict(rows) == {"BROKER_HEARTBEAT": 137, "CONTROLLER_GET_REPLICA_INFO": 27,
                          "CONTROLLER_GET_METADATA_INFO": 21, "CONTROLLER_GET_SYNC_STATE_DATA": 4,
                          "CONTROLLER_REGISTER_BROKER": 3,
                          "CONTROLLER_GET_NEXT_BROKER_ID": 2, "CONTROLLER_APPLY_BROKER_ID": 2,
                          "CONTROLLER_ALTER_SYNC_STATE_SET": 2, "CONTROLLER_ELECT_MASTER": 1}
    story = controller_story(groups, {log["endpoint"]}, end=seconds(truth["capture"]["last"]))
    assert story["undecodable"] == []
    (group,) = story["groups"]
    fields = ("master_epoch", "master_broker_id", "master_addr", "sync_state_set", "sync_state_set_epoch")
    assert [{k: e[k] for k in fields} for e in group["elections"]] == [{k: e[k] for k in fields}
                                                                       for e in log["elections"]]
    changed = [s for s in group["sync_state_sets"] if s["at"] or s["after"]]
    assert [(s["sync_state_set_epoch"], s["sync_state_set"]) for s in changed] == [
        (x["sync_state_set_epoch"], x["sync_state_set"]) for x in log["sync_state_sets"]]
    assert group["members"] == [{"broker_id": b["broker_id"], "broker_addr": b["broker_addr"]}
                                for b in log["broker_ids"]]
    assert [(h["broker_addr"], h["closed"], h["alive_at_end"]) for h in group["heartbeats"]] == [
        ("127.0.0.1:28911", "fin from client", False), ("127.0.0.1:28921", None, True),
        ("127.0.0.1:28911", None, True)]



def _decode_file(data: bytes, ports: frozenset[int]) -> Groups:
    groups: Groups = {}
    for connection in reassemble(tcp_segments(iter_records(data)), ports):
        for kind, row in conversation_rows(conversation_of(connection)):
            if kind == CONTROLLER_NOTE:
                add(groups, *row)
    return groups


def test_the_controllers_notice_to_the_new_master_closes_the_election_window() -> None:
    """The shared capture of a Java 5.3.3 controller also holds its NOTIFY_BROKER_ROLE_CHANGED to the
    brokers' ports: the election of masterEpoch 2 is then placed between the old master's heartbeat
    connection closing and that notice, as its steps file's timeline (from the same packets, by
    another reader) shows them; every syncStateSet change at its answer."""
    golden = REAL.parents[1] / "golden"
    steps = gzip.decompress((golden / "v5_controller_failover.steps.txt.gz").read_bytes()).decode()
    notice = next(line for line in steps.splitlines() if "NOTIFY_BROKER_ROLE_CHANGED(1008)" in line)
    altered = [line for line in steps.splitlines() if "<- controller  answer to 1001: code 0" in line]
    groups = _decode_file((golden / "v5_controller_failover.pcapng").read_bytes(),
                          frozenset({28876, 28878, 28911, 28921}))
    story = controller_story(groups, {"127.0.0.1:28878"})
    assert story["undecodable"] == []
    (group,) = story["groups"]
    second = next(e for e in group["elections"] if e["master_epoch"] == 2)
    assert "masterEpoch=2" in notice and "masterBrokerId=2" in notice and "syncStateSetEpoch=3" in notice
    assert (second["master_addr"], second["sync_state_set"], second["sync_state_set_epoch"]) == (
        "127.0.0.1:28921", [2], 3)
    assert second["by"][11:23] == notice[:12] and "NOTIFY_BROKER_ROLE_CHANGED to 127.0.0.1:28921" in second["how"]
    changed = {s["sync_state_set_epoch"]: s["at"][11:23] for s in group["sync_state_sets"] if s["at"]}
    assert [changed[int(line.split("newSyncStateSetEpoch=")[1].split()[0])] for line in altered] == [
        line[:12] for line in altered]
    failover = {"kind": "failover", "cluster": "CtlCluster", "broker_name": "broker-ctl",
                "t": "2026-11-26T16:45:23.216193Z", "old_master": "127.0.0.1:28911", "new_master": "127.0.0.1:28921",
                "new_master_at": "2026-11-26T16:45:23.292008Z"}
    (told,) = with_controller_view([failover], story)
    closed = next(h["closed_at"] for h in group["heartbeats"] if h["broker_addr"] == "127.0.0.1:28911")
    assert (told["elected_after"], told["elected_by"]) == (closed, second["by"])  # 48 ms
    assert told["master_epoch_before"] == 1 and told["old_master_in_sync_again_at"] is not None


def test_the_page_shows_the_controllers_story_only_where_there_is_one() -> None:
    from spark_analysis.output.report import _controller

    groups = _views((1, "10.0.0.9:10911", 1, (1,), 1, "CONTROLLER_GET_REPLICA_INFO", 10.0, 20.0),
                    (2, "10.0.0.8:10911", 2, (2,), 2, "CONTROLLER_GET_REPLICA_INFO", 25.0, 40.0))
    section = _controller(controller_story(groups, {CONTROLLER_AT}))
    assert "<section id='controller'>" in section and "10.0.0.8:10911" in section and "answering no captured" in section
    assert _controller(controller_story(groups, set())) == "" and _controller(None) == ""
