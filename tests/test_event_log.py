"""The status page's events survive a restart (event_log.py): written within EVENTS_SAVE_SECONDS
(so a kill -9 keeps them) and at a clean stop, bounded, numbered on; a damaged file is named,
kept aside and skipped, and a data directory that cannot be written never stops the server."""

from __future__ import annotations

import json

from twisted.logger import capturedLogs, formatEvent

from tests.web.test_metrics_and_api import Served
from twisted_namesrv.event_log import EVENTS_SAVE_SECONDS, decode_events
from twisted_namesrv.events import RECENT_EVENTS
from twisted_namesrv.state.hosts import KeptHosts


def run(tmp_path, **values) -> Served:
    served = Served(tmp_path, **values)
    served.service.events.startService()
    return served


def test_events_survive_a_kill_and_a_clean_stop_numbered_on(tmp_path):
    first = run(tmp_path)
    _, transport = first.broker()
    transport.loseConnection()
    first.clock.advance(EVENTS_SAVE_SECONDS)  # written by the timer: what a kill -9 now leaves
    killed = run(tmp_path)  # no stopService: as after kill -9
    events = killed.api.events()["events"]
    assert [(e["seq"], e["kind"]) for e in events] == [(1, "registered"), (2, "closed"), (3, "started")]
    assert "the 2 events below are from before" in events[-1]["reason"]
    assert events[1]["reason"] == "connection closed" and events[1]["broker"] == "broker-a"

    killed.broker()
    killed.service.events.stopService()  # a clean stop writes at once
    again = run(tmp_path)
    kinds = [(e["seq"], e["kind"]) for e in again.api.events()["events"]]
    assert kinds == [(1, "registered"), (2, "closed"), (3, "started"), (4, "registered"), (5, "started")]
    assert [e["seq"] for e in again.api.events(since=4)["events"]] == [5]


def test_the_file_is_bounded_to_the_pages_events(tmp_path):
    served = run(tmp_path)
    for number in range(RECENT_EVENTS + 50):  # (from a loopback peer: no host's or all hosts' rows to fold them)
        served.service.seen.events.route_event("registered", {"cluster": "c1", "broker": f"b{number}",
                                                                "addr": f"h{number}:1"}, "127.0.0.1:40000")
    served.service.events.stopService()
    kept = decode_events((tmp_path / "events.json").read_bytes())
    assert len(kept) == RECENT_EVENTS and kept[-1].info["broker"] == f"b{RECENT_EVENTS + 49}"


def test_a_damaged_file_is_named_kept_aside_and_skipped(tmp_path):
    (tmp_path / "events.json").write_bytes(b'{"format": 1, "events": [{"seq": 1, "ts"')  # cut by a full disk
    with capturedLogs() as logged:
        served = run(tmp_path)
    assert served.api.events()["events"] == []
    lines = [formatEvent(e) for e in logged]
    assert any(f"events file {tmp_path / 'events.json'} skipped (not JSON" in line and
               f"kept as {tmp_path / 'events.json.corrupt'}" in line for line in lines), lines
    assert (tmp_path / "events.json.corrupt").exists()
    (tmp_path / "other.json").write_text(json.dumps({"format": 1, "events": [{"seq": "x"}]}))
    with capturedLogs() as logged:
        run(tmp_path, eventsPath=str(tmp_path / "other.json"))
    assert any("event 0: ValueError" in formatEvent(e) or "event 0: KeyError" in formatEvent(e) for e in logged)


def test_a_run_without_events_writes_no_file(tmp_path):
    served = run(tmp_path)
    served.clock.advance(EVENTS_SAVE_SECONDS * 3)
    served.service.events.stopService()
    assert not (tmp_path / "events.json").exists()  # a start that fails leaves no file (nor data dir) behind


def test_an_unwritable_events_path_is_logged_once_and_the_server_goes_on(tmp_path):
    (tmp_path / "file").write_text("")
    served = run(tmp_path, eventsPath=str(tmp_path / "file" / "events.json"))  # its directory is a file
    with capturedLogs() as logged:
        served.broker()
        for _ in range(3):
            served.clock.advance(EVENTS_SAVE_SECONDS)
            served.service.seen.events.route_event("changed", {"broker": "broker-a"})
    errors = [formatEvent(e) for e in logged if "cannot write events file" in formatEvent(e)]
    assert len(errors) == 1, errors
    assert served.api.clusters()["clusters"][0]["broker_groups"][0]["members"][0]["live"]


def test_changed_events_fold_as_before_through_a_full_ring_and_a_restore():
    """A "changed" event finds the one it folds into by its info (RecentEvents._changed), not by
    comparing every event kept: it folds while that one is kept, starts again once it went out of
    the ring, and a restored run's events fold as this run's."""
    from twisted_namesrv.events import RECENT_EVENTS, RecentEvents

    events = RecentEvents(lambda: 5.0, KeptHosts())
    a, b = {"broker": "a", "topics": 1}, {"broker": "b", "topics": 1}
    for _ in range(3):
        events.route_event("changed", a)
    events.route_event("changed", b)
    events.route_event("changed", dict(reversed(a.items())))  # equal as dicts are: folds
    assert [(e.info["broker"], e.count, e.seq) for e in events.recent] == [("b", 1, 4), ("a", 4, 5)]
    events.route_event("changed", {"broker": "a", "topics": 2})  # another topic count: an event of its own
    for number in range(RECENT_EVENTS - 1):
        events.route_event("registered", {"broker": f"x{number}"})
    assert [e.info["broker"] for e in events.recent][:1] == ["a"]  # b and the first a are out of the ring
    events.route_event("changed", b)
    events.route_event("changed", a)
    assert [(e.info["broker"], e.count) for e in events.recent][-2:] == [("b", 1), ("a", 1)]
    again = RecentEvents(lambda: 6.0, KeptHosts())
    again.route_event("changed", b)
    again.restore(list(events.recent))
    again.route_event("changed", b)  # the restored b first (the oldest alike), as the walk found it
    assert [(e.info["broker"], e.count) for e in again.recent if e.info["broker"] == "b"] == [("b", 1), ("b", 2)]
    assert len(again.recent) == RECENT_EVENTS and again.recent[-1].seq > again.recent[-2].seq
    unhashable = {"broker": "c", "why": ["a list"]}
    again.route_event("changed", unhashable)
    again.route_event("changed", unhashable)
    assert again.recent[-1].count == 2 and sum(e.info["broker"] == "c" for e in again.recent) == 1


def test_lost_topics_of_an_older_file_or_a_damaged_entry(tmp_path):
    """A file without ``lost_topics`` (written by a server before it kept them) loads its events;
    a lost topic that is not one this server wrote is named, and the file kept aside, as a damaged event."""
    (tmp_path / "events.json").write_text(json.dumps({"format": 1, "events": [
        {"seq": 1, "ts": 1.0, "kind": "registered", "info": {"broker": "b"}, "count": 1, "first_ts": 1.0}]}))
    served = run(tmp_path)
    assert [e["kind"] for e in served.api.events()["events"]] == ["registered", "started"]
    assert served.api.clusters()["lost_topics"] == []
    (tmp_path / "other.json").write_text(json.dumps({"format": 1, "events": [], "lost_topics": [
        {"topic": "T", "cluster": "c1", "broker": "b", "addr": None, "kind": "registered", "reason": "", "ts": 1.0}]}))
    with capturedLogs() as logged:
        run(tmp_path, eventsPath=str(tmp_path / "other.json"))
    assert any("lost topic 0: ValueError: kind 'registered' is no departure" in formatEvent(e) for e in logged)
    assert (tmp_path / "other.json.corrupt").exists()


def test_a_lost_topic_is_kept_with_every_field_but_its_steady_stamp_in_their_order() -> None:
    import dataclasses

    from twisted_namesrv.event_log import lost_topic_item
    from twisted_namesrv.lost_topics import LostTopic

    topic = LostTopic("T", None, "broker-a", "127.0.0.1:10911", "closed", "connection closed", 1.5e9, 42.0)
    reference = dataclasses.asdict(topic)
    del reference["at"]
    assert json.dumps(lost_topic_item(topic)) == json.dumps(reference)  # the same bytes in the file


def test_saving_the_topics_a_mass_disconnect_lost_costs_a_call_a_topic() -> None:
    """Every save after a mass disconnect encodes up to 1,000 lost topics in the reactor thread:
    counted, about a Python call a topic (``dataclasses.asdict`` walked each field: 16 ms of the
    reactor's CPU in a trace, a lookup's wait)."""
    from tests.support import python_calls_run
    from twisted_namesrv.event_log import encode_events
    from twisted_namesrv.lost_topics import LIMIT, LostTopic

    lost = [LostTopic(f"T{i:04d}", "c", "broker-a", "127.0.0.1:10911", "closed", "connection closed", 1.5e9, 1.0)
            for i in range(LIMIT)]
    assert python_calls_run(lambda: encode_events([], lost)) <= LIMIT + 20
