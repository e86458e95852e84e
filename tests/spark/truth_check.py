"""The report's outputs judged against the truth of a real capture (tests/data/captures/real/*/TRUTH.json).

The truth was written from what the people who ran the cluster did (steps.txt) and what the Java
NameServer logged (namesrv.log), with the packets as the clock; its format is in that folder's README.
This module only compares: given a TRUTH.json and the report's summary.json (its brokers are
brokers.csv's rows with their exact values), it lists every disagreement in words (an empty list:
the report told the truth). It judges classes of events, never one file's wording: a finding is
known by its ``kind`` and its evidence fields (``broker_addr``, ``t``, ``server``/``endpoint``, ...),
a broker row by its identity and ``ended``.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

#: finding kind -> the class of event it tells (a kind missing here fails the check: say what it is)
KIND_CLASSES = {
    "broker_unregistered": "unregistered",
    "broker_connection_closed": "connection_closed",
    "heartbeat_expired": "expired",
    "server_stopped": "server_stopped",
    "server_restart": "restart",
    "failover": "failover",
    "broker_address_change": "move",
    "broker_id_change": "renumber",
    "topic_deleted": "topic_deletion",
    "write_perm_wiped": "write_perm",
    "write_perm_added": "write_perm",
    "refused_connections": "refused",
    "broker_alive_at_end": "alive",
    "heartbeat_near_expiry": "near_expiry",  # must fall in one of the truth's silences
    # an expiry of a broker named by its connection that may be none (another connection registered within
    # its silence): never required, as a silence; it must fall in one of the truth's silences
    "expired_or_reconnected": "near_expiry",
    "topic_count_drop": "topic_count_drop",  # must fall on a deletion or a broker's departure
    "topics_deleted_from_broker": "deleted_topics",  # each deletion it names must be a truth deletion, before it
    # no event of these classes happened in any capture of the corpus: each one is invented
    "data_version_backwards": "absent",
    "crc_failure": "absent",
    "registration_refused": "absent",
    # a capture file of no byte or cut inside its last record (a capture killed): exactly the truth's bad_inputs
    "bad_input": "bad_input",
    "undecodable_connection": "unread",  # bytes no remoting frame: must be one of the truth's unread_connections
    "turned_away": "turned_away",  # a client its server closed without a byte: the truth's turned_away, at its time
    # a capture file whose times step back (its clock stepped): exactly the truth's clock_steps
    "clock_stepped_back": "clock_step",
    # a stay whose end's silence reaches into times stamped twice: the truth's stays across_clock_step
    "end_across_clock_step": "across_step",
    "controller_undecodable": "absent",
    "master_elected": "election",  # a controller's election: must be one the controller logged (judge_controller)
    # files of a rotated set missing between two given (v5-zring-gz): exactly the truth's files_missing
    "files_missing": "missing",
    "files_overwritten": "ring",  # a ring that wrapped (its names): exactly the truth's rings, the count overwritten
    # a stay alive where files of a rotated set go missing: a truth stay across the truth's files_missing
    "broker_alive_before_missing": "alive_before_missing",
    # records of an interface of a link type not read, in a file of others: exactly the truth's records_not_read
    "records_not_read": "records_not_read",
    "packets_dropped": "dropped",  # what a pcapng's statistics say the capture dropped: exactly the truth's dropped
    # a silence over bytes of the broker's connection the capture never had: must be a truth silence with them
    "silence_not_captured": "not_captured",
    "capture_cut": "cut",  # packets a snap length cut: must be the truth's (its snap length and counts)
    "cut_read_elsewhere": "cut",  # the same, its cut connections all read from another point's copies
    "server_unread": "unread_server",  # a server nothing of which can be read: the truth's unread_servers
    "other_port_traffic": "absent",  # only with --port, which the truth test never gives
    "port_checked": "port_check",  # an endpoint whose accepted connections carried nothing: the truth's port_checks
    "other_server": "other_server",  # a server that is no NameServer (a broker's port): must be one of the truth's
    "translated_copies": "translated",  # connections captured twice under NAT: exactly the truth's translated_copies
    "same_traffic_twice": "second_point",  # connections two capture points both hold: exactly the truth's second_point
}
#: what clients saw (unknown topics, slow or failed answers): not in the NameServer's log, not judged; and
#: connections open before the capture began (began_mid_stream): what the capture cannot show, as the truth has it not
NOT_JUDGED = frozenset({"topic_not_exist", "retry_topic_lookup", "topic_made_on_first_use", "slow_answer",
                        "response_code", "unanswered", "unpaired_error_answer",
                        "address_in_sessions", "began_mid_stream"})
#: refused attempts that are noise (nothing listening), which the report must count
NOISE = ("never_listening", "before_start", "after_stop")


def seconds(text: str | None) -> float | None:
    """An ISO time (with Z or an offset) as epoch seconds."""
    if text in (None, ""):
        return None
    return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()


@dataclass
class Event:
    """One thing that happened, as the truth tells it, with the evidence kinds that may tell it."""

    cls: str
    what: str  # in words, for the failure message
    t: float | None = None
    until: float | None = None  # with t: a window
    required: bool = True
    match: dict[str, Any] = field(default_factory=dict)  # evidence fields that must be equal
    extra: dict[str, float] = field(default_factory=dict)  # numeric fields compared within the tolerance
    also: tuple[str, ...] = ()  # other classes that may tell it (the old master's close: the fail-over)
    where: str | None = None  # the NameServer endpoint, when an item names one it must be this


def _events(truth: dict) -> list[Event]:
    events: list[Event] = []
    failover_masters = {(f["old_master"], f["master_lost"]) for f in truth["failovers"]}
    for s in truth["stays"]:
        who = f"{s['cluster']} / {s['broker_name']} / {s['broker_addr']} (at {s['namesrv']})"
        ended = seconds(s["ended_at"])
        if s["end"] == "alive":
            events.append(Event("alive", f"{who} alive at the end", match={"broker_addr": s["broker_addr"]},
                                where=s["namesrv"]))
        elif s["end"] == "server_stopped":
            continue  # told by the endpoint's stop or restart (below) and by brokers.csv
        elif s.get("across_clock_step"):  # its silence unknown from the stamps: neither a crash nor an expiry
            events.append(Event("across_step", f"{who} {s['end']} at {s['ended_at']} as stamped, across a clock's "
                                "step back", ended, match={"broker_addr": s["broker_addr"]}, where=s["namesrv"]))
        else:
            extra = {"silence": s["silence_s"]} if s["end"] == "expired" else {}
            # the report tells a master's close by its fail-over; a clean unregister or an expiry keeps its own item
            also = ("failover",) if s["end"] == "connection_closed" and (
                s["broker_addr"], s["ended_at"]) in failover_masters else ()
            events.append(Event(s["end"], f"{who} {s['end']} at {s['ended_at']}", ended,
                                match={"broker_addr": s["broker_addr"]}, extra=extra, also=also, where=s["namesrv"]))
    for ns in truth["nameservers"]:
        runs = ns["runs"]
        for before, after in zip(runs, runs[1:], strict=False):
            events.append(Event("restart", f"{ns['endpoint']} restarted (down {before['down']}, up {after['up']})",
                                seconds(before["down"]), seconds(after["up"]), match={"endpoint": ns["endpoint"]},
                                extra={"down_s": seconds(after["up"]) - seconds(before["down"])}))
        if runs[-1]["down"] is not None:  # required when the packets show it (it closed open connections)
            events.append(Event("server_stopped", f"{ns['endpoint']} stopped at {runs[-1]['down']}",
                                seconds(runs[-1]["down"]), match={"endpoint": ns["endpoint"]},
                                required=runs[-1].get("down_in_packets", True)))
    for f in truth["failovers"]:
        events.append(Event("failover", f"fail-over of {f['broker_name']}: {f['old_master']} lost at "
                            f"{f['master_lost']}, {f['new_master']} master at {f['new_master_at']}",
                            seconds(f["master_lost"]), seconds(f["new_master_at"]),
                            match={"broker_name": f["broker_name"]}, extra={"no_master": f["no_master_s"]},
                            where=f["namesrv"]))
    for m in truth["moves"]:
        events.append(Event("move", f"{m['broker_name']} moved {m['from']} -> {m['to']} at {m['at']}",
                            seconds(m["at"]), match={"broker_name": m["broker_name"]}))
    for r in truth["renumbers"]:
        events.append(Event("renumber", f"{r['broker_addr']} brokerId {r['from_id']} -> {r['to_id']} at {r['at']}",
                            seconds(r["at"]), match={"broker_addr": r["broker_addr"]}))
    for gap in truth.get("not_captured", []):  # over bytes the capture never had: the capture's, or partly
        if gap["missed_only"]:
            # over files of a rotated set missing, files_missing tells it: nothing is told across it
            events.append(Event("not_captured", f"{gap['broker_addr']} not captured {gap['seconds']} s from "
                                f"{gap['from']} ({gap['missed']} bytes missed)", seconds(gap["from"]),
                                seconds(gap["until"]), required=not _over_missing_files(truth, gap),
                                match={"broker_addr": gap["broker_addr"], "missed_bytes": gap["missed"]},
                                where=gap["namesrv"]))
        else:  # a stretch over 60 s of it is the broker's own: a silence, never an expiry
            events.append(Event("near_expiry", f"{gap['broker_addr']} silent {gap['seconds']} s from {gap['from']}, "
                                f"{gap['missed']} bytes missed in it", seconds(gap["from"]), seconds(gap["until"]),
                                required=False, match={"broker_addr": gap["broker_addr"]}, where=gap["namesrv"]))
    for gap in truth.get("silences", []):  # a long silence may be told (a policy), never invented
        events.append(Event("near_expiry", f"{gap['broker_addr']} silent {gap['seconds']} s from {gap['from']}",
                            seconds(gap["from"]), seconds(gap["until"]), required=False,
                            match={"broker_addr": gap["broker_addr"]}, where=gap["namesrv"]))
    for step in truth.get("clock_steps", []):
        events.append(Event("clock_step", f"{step['file']}: its times step back {step['seconds']} s at {step['at']} "
                            f"(to {step['to']})", match={"file": step["file"]},  # its times: _extra_problems
                            extra={"seconds": step["seconds"], "at": seconds(step["at"]), "to": seconds(step["to"])}))
    for drop in truth.get("dropped", []):
        events.append(Event("dropped", f"{drop['file']}: the capture dropped {drop['dropped']} packets, received "
                            f"{drop['received']}", match={"dropped": drop["dropped"], "received": drop["received"]}))
    for gap in truth.get("files_missing", []):
        for stay in truth["stays"]:  # alive where the capture before the gap ended: nothing told across it
            if seconds(stay["registered"]) < seconds(gap["from"]) and (
                    stay["ended_at"] is None or seconds(stay["ended_at"]) > seconds(gap["until"])):
                events.append(Event("alive_before_missing", f"{stay['broker_addr']} alive where files go missing at "
                                    f"{gap['from']}", seconds(gap["from"]), match={"broker_addr": stay["broker_addr"]},
                                    where=stay["namesrv"]))
        events.append(Event("missing", f"files missing between {gap['before']} and {gap['after']}: {gap['seconds']} s "
                            f"from {gap['from']}", seconds(gap["from"]), extra={"seconds": gap["seconds"]}))
    for unread in truth.get("records_not_read", []):
        events.append(Event("records_not_read", f"{unread['file']}: {unread['records']} records of link type "
                            f"{unread['link_type']} not read", match={"records": unread["records"]}))
    for bad in truth.get("bad_inputs", []):
        events.append(Event("bad_input", f"{bad['file']}: {bad['problem']} ({bad['trailing_bytes']} bytes after its "
                            "last whole record)", match={"problem": bad["problem"],
                                                         "trailing_bytes": bad["trailing_bytes"]}))
    for ring in truth.get("rings", []):
        events.append(Event("ring", f"{ring['oldest_kept']}: the oldest file of a ring that wrapped, "
                            f"{ring['overwritten']} files overwritten before it",
                            match={"overwritten": ring["overwritten"]}))
    for cut in truth.get("cuts", []):
        events.append(Event("cut", f"{cut['file']}: {cut['packets']} packets cut at {cut['cut_at']} bytes, "
                            f"{cut['bytes_not_captured']} bytes not captured",
                            match={"cut_at": cut["cut_at"], "packets": cut["packets"],
                                   "uncaptured_bytes": cut["bytes_not_captured"]}))
    for d in truth["topic_deletions"]:
        events.append(Event("topic_deletion", f"topic {d['topic']} deleted at {d['namesrv']} at {d['at']}",
                            seconds(d["at"]), match={"topic": d["topic"]}, where=d["namesrv"]))
    for w in truth["write_perm"]:
        events.append(Event("write_perm", f"write permission of {w['broker_name']}: {w['op']} at {w['namesrv']} at "
                            f"{w['at']}", seconds(w["at"]), match={"broker_name": w["broker_name"], "op": w["op"]},
                            where=w["namesrv"]))
    for other in truth.get("other_servers", []):  # a capture with no port filter: a broker's own port
        events.append(Event("other_server", f"{other['endpoint']} asked {other['requests']} request(s) over "
                            f"{other['accepted']} connection(s), no NameServer", required=other["requests"] > 0,
                            match={"endpoint": other["endpoint"]}))
    for check in truth.get("port_checks", []):  # a launch script's poll of another address the NameServer took
        events.append(Event("port_check", f"{check['endpoint']} accepted {check['accepted']} connection(s) that "
                            f"carried nothing", match={"endpoint": check["endpoint"]}))
    by_endpoint: dict[str, list[dict]] = defaultdict(list)
    for r in truth["refused"]:
        by_endpoint[r["endpoint"]].append(r)
    for endpoint, entries in by_endpoint.items():
        noise = sum(r["count"] for r in entries if r["when"] in NOISE)
        total = sum(r["count"] for r in entries)
        events.append(Event("refused", f"{noise} refused connection attempts to {endpoint} (nothing listening)",
                            required=noise > 0, match={"endpoint": endpoint},
                            extra={"counts": (noise, total)}))  # type: ignore[dict-item]
    return events


def _id(broker_id: object) -> str | None:
    """A brokerId as text; one a snap length cut is empty in the CSV, null in the truth."""
    return None if broker_id in (None, "") else str(broker_id)


def _endpoint(item: dict) -> str | None:
    return item.get("server") or item.get("endpoint")


def _field(item: dict, name: str) -> Any:
    if name == "endpoint":
        return _endpoint(item)
    if name == "file":  # the report names a file by the path it was given
        return str(item.get("path", "")).replace("\\", "/").rsplit("/", 1)[-1]
    if name == "op":
        return {"write_perm_wiped": "wipe", "write_perm_added": "add"}.get(item["kind"])
    return item.get(name)


def _is(item: dict, name: str, value: Any) -> bool:
    """Whether the item's field is ``value``; an endpoint also where the item tells the same listener under
    other addresses of its host (``also_as``: one restart of a server reached at 127.0.0.1:9877 and at
    10.38.1.1:9877 is one finding naming both)."""
    return _field(item, name) == value or (name == "endpoint" and value in (item.get("also_as") or ()))


def _fits(event: Event, item: dict, cls: str, tolerance: float, timed: bool = True) -> bool:
    if cls != event.cls and cls not in event.also:
        return False
    if event.where is not None and _endpoint(item) is not None and not _is(item, "endpoint", event.where):
        return False
    if cls == event.cls and not all(_is(item, k, v) for k, v in event.match.items()):
        return False
    if cls != event.cls and cls == "failover" and item.get("broker_addr") not in (None, event.match.get("broker_addr")):
        return False
    if event.t is not None and timed:
        t = seconds(item.get("t") or item.get("from"))  # an instant, or the start of a span
        if t is None or not (event.t - tolerance <= t <= (event.until or event.t) + tolerance):
            return False
    return True


def _extra_problems(event: Event, item: dict, tolerance: float) -> list[str]:
    problems = []
    if event.cls == "missing" and abs(float(item.get("seconds") or 0.0) - event.extra["seconds"]) > tolerance:
        problems.append(f"{event.what}: {item.get('seconds')} s told")
    if event.cls == "restart" and item.get("down_s_range"):  # the range the packets bound must hold the truth's
        low, high = item["down_s_range"]
        if not low - tolerance <= event.extra["down_s"] <= high + tolerance:
            problems.append(f"{event.what}: down {low}-{high} s told, truth {event.extra['down_s']:.3f} s")
    if event.cls == "expired":
        if item.get("severity") != "warning":
            problems.append(f"{event.what}: told as {item.get('severity')}, not a warning")
        told = item.get("silence_s", item.get("seconds"))
        if told is not None and abs(float(told) - event.extra["silence"]) > tolerance:
            problems.append(f"{event.what}: silence told as {told} s, truth {event.extra['silence']} s")
    if event.cls == "clock_step":
        told = item.get("seconds")
        if told is None or abs(float(told) - event.extra["seconds"]) > tolerance:
            problems.append(f"{event.what}: a step of {told} s told")
        for name in ("at", "to"):
            when = seconds(item.get(name))
            if when is None or abs(when - event.extra[name]) > tolerance:
                problems.append(f"{event.what}: {name} {item.get(name)} told")
    if event.cls == "failover" and item["kind"] == "failover":
        told = item.get("no_master_s")
        if told is not None and abs(float(told) - event.extra["no_master"]) > tolerance:
            problems.append(f"{event.what}: no master for {told} s told, truth {event.extra['no_master']} s")
    return problems


def judge_findings(truth: dict, summary: dict) -> list[str]:
    """Every finding's evidence against the truth's events: what is missed, invented or told wrong."""
    tolerance = truth["tolerance_s"]
    events = _events(truth)
    items = [item for finding in summary.get("findings", []) for item in finding.get("evidence", [])]
    problems: list[str] = []
    told: dict[int, list[dict]] = defaultdict(list)
    refused_told: dict[str, int] = defaultdict(int)
    unfitted: list[tuple[dict, str]] = []
    translated_told: list[dict] = []
    unread_told: list[dict] = []
    unread_servers_told: set[str] = set()
    second_told: list[dict] = []
    for item in items:
        kind = item.get("kind")
        if kind in NOT_JUDGED:
            continue
        cls = KIND_CLASSES.get(kind)
        if cls is None:
            problems.append(f"unknown finding kind {kind!r}: add it to truth_check.KIND_CLASSES "
                            f"({item.get('message')})")
            continue
        if cls == "refused":
            refused_told[_endpoint(item)] += int(item.get("count") or 0)
            if not any(e.cls == "refused" and e.match["endpoint"] == _endpoint(item) for e in events):
                problems.append(f"invented: {kind}: {item.get('message')}")
            continue
        if cls == "translated":
            translated_told.append(item)
            continue
        if cls == "unread_server":
            if not any(u["endpoint"] == _endpoint(item) for u in truth.get("unread_servers", [])):
                problems.append(f"invented: {kind}: {item.get('message')}")
            unread_servers_told.add(_endpoint(item))
            continue
        if cls in ("unread", "turned_away"):
            unread_told.append(item)
            continue
        if cls == "second_point":
            second_told.append(item)
            continue
        if cls == "election":
            logged = (truth.get("controller_log") or {}).get("elections", [])
            if not any(e["master_epoch"] == item.get("master_epoch") and e["master_addr"] == item.get("master_addr")
                       for e in logged):
                problems.append(f"invented: {kind}: {item.get('message')}")
            continue
        if cls == "deleted_topics":
            t = seconds(item.get("t"))
            for deleted in item.get("deleted") or [None]:
                when = seconds((deleted or {}).get("t"))
                if deleted is None or t is None or when is None or when > t + tolerance or not any(
                        d["topic"] == deleted["topic"] and abs(seconds(d["at"]) - when) <= tolerance
                        for d in truth["topic_deletions"]):
                    problems.append(f"invented: {kind} names no deletion of the truth before it: {item.get('message')}")
            continue
        if cls == "topic_count_drop":
            t = seconds(item.get("t") or item.get("from"))
            near = [e for e in events if e.cls in ("topic_deletion", "unregistered", "connection_closed", "expired")
                    and e.t is not None and t is not None and abs(t - e.t) <= tolerance]
            if not near:
                problems.append(f"invented: {kind} with no deletion or departure at that time: {item.get('message')}")
            continue
        fitting = [i for i, e in enumerate(events) if _fits(e, item, cls, tolerance)]
        if not fitting:
            unfitted.append((item, cls))
            continue
        for i in fitting:
            told[i].append(item)
    problems += judge_translated(truth, translated_told) + judge_second_point(truth, second_told)
    problems += judge_unread(truth, unread_told)
    problems += [f"missed: {u['endpoint']} unread ({u['why']})" for u in truth.get("unread_servers", [])
                 if u["endpoint"] not in unread_servers_told]
    for item, cls in unfitted:
        # the right event at the wrong time (or with none), if nothing told it at its time: said once as
        # such, not as invented + missed; else a duplicate, invented
        untimed = [i for i, e in enumerate(events) if not told[i] and _fits(e, item, cls, tolerance, timed=False)]
        if untimed:
            problems.append(f"wrong time: {item['kind']} told at {item.get('t') or item.get('from')}; "
                            f"truth: {events[untimed[0]].what}")
            told[untimed[0]].append(item)
        else:
            problems.append(f"invented: {item['kind']}: {item.get('message')}")
    for i, event in enumerate(events):
        if event.cls == "refused":
            noise, total = event.extra["counts"]  # type: ignore[misc]
            count = refused_told.get(event.match["endpoint"], 0)
            if event.required and count not in (noise, total):
                problems.append(f"missed or miscounted: {event.what}; the report counts {count}")
            continue
        if not told[i]:
            if event.required:
                problems.append(f"missed: {event.what}")
            continue
        for item in told[i]:
            problems += _extra_problems(event, item, tolerance)
    return problems


def judge_unread(truth: dict, told: list[dict]) -> list[str]:
    """The report's undecodable connections and turned-away clients against the truth's
    (``unread_connections``: a client's bytes no remoting frame, TLS or not; ``turned_away``: a client
    its NameServer closed without a byte): each one told once, with its protocol or at its close,
    none missed, none invented."""
    unread = {(u["client"], u["server"]): u for u in truth.get("unread_connections", [])}
    refused = {(u["client"], u["server"]): u for u in truth.get("turned_away", [])}
    problems: list[str] = []
    seen: set[tuple[str, tuple[Any, Any]]] = set()
    for item in told:
        if item["kind"] == "undecodable_connection":
            key = (str(item.get("connection", "")).split(">", 1)[0], item.get("server"))
            expected = unread.get(key)
            wrong = expected is None or expected["protocol"] != item.get("protocol")
        else:
            key = (item.get("client"), item.get("server"))
            expected, at = refused.get(key), seconds(item.get("t"))
            wrong = expected is None
            off = None if expected is None or at is None else abs(at - (seconds(expected["at"]) or 0.0))
            if expected is not None and (off is None or off > truth["tolerance_s"]):
                problems.append(f"wrong time: turned_away told at {item.get('t')}; truth: {key[0]} turned away at "
                                f"{expected['at']}")
        if wrong or (item["kind"], key) in seen:
            problems.append(f"invented: {item['kind']}: {item.get('message')}")
        seen.add((item["kind"], key))
    problems += [f"missed: undecodable connection of {c} to {s}" for c, s in unread
                 if ("undecodable_connection", (c, s)) not in seen]
    problems += [f"missed: {c} turned away by {s}" for c, s in refused if ("turned_away", (c, s)) not in seen]
    return problems


#: what names one translation: the server endpoint and the client's host each copy was captured with
TRANSLATION = ("seen_as", "counted_as", "client_seen_as", "client_counted_as")


def judge_translated(truth: dict, told: list[dict]) -> list[str]:
    """The report's translated_copies items against the truth's (a connection captured twice under
    NAT, e.g. a container's published port): each translation named once with its number of
    connections, none missed, none invented."""
    expected = {tuple(t[k] for k in TRANSLATION): t["connections"] for t in truth.get("translated_copies", [])}
    problems = []
    seen: set[tuple] = set()
    for item in told:
        key = tuple(item.get(k) for k in TRANSLATION)
        if key not in expected or key in seen:
            problems.append(f"invented: translated_copies {dict(zip(TRANSLATION, key, strict=True))}: "
                            f"{item.get('message')}")
        elif item.get("connections") != expected[key]:
            problems.append(f"translated_copies {key[0]} as {key[1]}: {item.get('connections')} connections told, "
                            f"truth {expected[key]}")
        seen.add(key)
    problems += [f"missed: {n} connection(s) captured as {key[0]} (client {key[2]}) and counted as {key[1]} "
                 f"(client {key[3]}): no translated_copies item" for key, n in expected.items() if key not in seen]
    return problems


#: how far the told clock difference of two capture points may be from the truth's
CLOCK_TOLERANCE_S = 0.01
#: from this difference on, the report warns (docs/capture-report.md, same_traffic_twice)
SKEWED_S = 1.0


def _names(paths: list[str] | None) -> list[str]:
    """Capture files by name (the report names them by the paths it was given)."""
    return sorted(str(path).replace("\\", "/").rsplit("/", 1)[-1] for path in paths or [])


def judge_second_point(truth: dict, told: list[dict]) -> list[str]:
    """The report's same_traffic_twice items against the truth's second_point (captures of two hosts
    given together): per server endpoint, the files whose copies were left out and the files they were
    read from, exactly; their number; the clock difference within CLOCK_TOLERANCE_S, and said as info
    below SKEWED_S, as a warning from it. None missed, none invented."""
    expected = {(p["server"], tuple(sorted(p["copies_in"])), tuple(sorted(p["read_from"]))): p
                for p in truth.get("second_point", [])}
    problems, seen = [], set()
    for item in told:
        key = (item.get("server"), tuple(_names(item.get("paths"))), tuple(_names(item.get("read_from"))))
        point = expected.get(key)
        if point is None or key in seen:
            problems.append(f"invented: same_traffic_twice of {key[0]}: copies in {list(key[1])} read from "
                            f"{list(key[2])}: {item.get('message')}")
            continue
        seen.add(key)
        if item.get("connections") != point["connections"]:
            problems.append(f"same_traffic_twice of {key[0]}: {item.get('connections')} connections told, truth "
                            f"{point['connections']}")
        clock = item.get("clock_s")
        if clock is None or abs(float(clock) - point["clock_s"]) > CLOCK_TOLERANCE_S:
            problems.append(f"same_traffic_twice of {key[0]}: clock told {clock} s ahead, truth {point['clock_s']} s "
                            f"({point['clock_how']})")
        severity = "warning" if abs(point["clock_s"]) >= SKEWED_S else "info"
        if item.get("severity") != severity:
            problems.append(f"same_traffic_twice of {key[0]}: told as {item.get('severity')}, not {severity} "
                            f"(clocks {point['clock_s']} s apart)")
    problems += [f"missed: {p['connections']} connection(s) to {key[0]} in {list(key[1])} are copies of "
                 f"{list(key[2])}'s: no same_traffic_twice item" for key, p in expected.items() if key not in seen]
    return problems


def _registrations(who: str, rows: list[dict], stays: list[dict]) -> list[str]:
    """The REGISTER_BROKER requests brokers.csv counts for rows against the truth's stays (each
    request once: a connection captured twice, on two interfaces or under NAT, is not two)."""
    if any("registrations" not in s for s in stays):
        return []
    told, truth = sum(int(r.get("registrations") or 0) for r in rows), sum(s["registrations"] for s in stays)
    return [] if told == truth else [f"{who}: {told} registrations counted, truth {truth}"]


def _over_missing_files(truth: dict, gap: dict) -> bool:
    """Whether a stretch of a broker's connection the capture never had spans files of a rotated set
    missing (the truth's files_missing)."""
    return any(seconds(gap["from"]) <= seconds(m["from"]) and seconds(m["until"]) <= seconds(gap["until"])
               for m in truth.get("files_missing", []))


def _joined_across_missing_files(truth: dict, rows: list[dict]) -> list[dict]:
    """A broker's brokers.csv rows (in time order) as its stays: two rows of one stay, one session each
    side of files of a rotated set missing (the truth's files_missing: the report tells nothing across
    them, and its sessions end there), joined into one (the later row's end, both rows' registrations)."""
    gaps = [(seconds(m["from"]), seconds(m["until"])) for m in truth.get("files_missing", [])]
    joined: list[dict] = []
    for row in rows:
        before = joined[-1] if joined else None
        if before is not None and any(seconds(before.get("last_seen")) <= start and end <= seconds(
                row.get("first_seen")) for start, end in gaps):
            if before.get("ended") != "alive":  # how it ended was after the gap: told across it
                row = {**row, "ended": f"{before.get('ended')} (before files missing, told across them)"}
            joined[-1] = {**row, "first_seen": before.get("first_seen"), "registrations": int(
                before.get("registrations") or 0) + int(row.get("registrations") or 0)}
        else:
            joined.append(row)
    return joined


def judge_brokers(truth: dict, rows: list[dict]) -> list[str]:
    """The brokers (summary.json's, brokers.csv's rows) against the truth's stays: one row per broker
    and NameServer, or one per stay."""
    tolerance = truth["tolerance_s"]
    stays: dict[tuple, list[dict]] = defaultdict(list)
    for s in truth["stays"]:
        stays[(s["namesrv"], s["cluster"], s["broker_name"], s["broker_addr"])].append(s)
    got: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        endpoint = row.get("server") or str(row.get("session", "")).split("@")[0]
        # a name a snap length cut is empty in the CSV, null in the truth
        got[(endpoint, row["cluster"] or None, row["broker_name"] or None, row["broker_addr"])].append(row)
    problems = [f"invented brokers.csv row(s) for {' / '.join(map(str, key))}: {[r.get('ended') for r in rows]}"
                for key, rows in got.items() if key not in stays]
    for key, truth_stays in stays.items():
        who = " / ".join(map(str, key))
        rows = _joined_across_missing_files(truth, sorted(got.get(key, []),
                                                          key=lambda r: seconds(r.get("first_seen")) or 0.0))
        truth_stays = sorted(truth_stays, key=lambda s: seconds(s["registered"]))
        if not rows:
            problems.append(f"missed: no brokers.csv row for {who}")
        elif len(rows) == 1:
            row, last = rows[0], truth_stays[-1]
            if row.get("ended") not in _ends(last):
                problems.append(f"{who}: ended {row.get('ended')!r}, truth {last['end']!r} ({last['how']})")
            if _id(row.get("broker_id")) != _id(last["ids"][-1]["broker_id"]):
                problems.append(f"{who}: broker_id {row.get('broker_id')}, truth {last['ids'][-1]['broker_id']}")
            problems += _registrations(who, rows, truth_stays)
        elif len(rows) == len(truth_stays):
            for n, (row, stay) in enumerate(zip(rows, truth_stays, strict=True), 1):
                if row.get("ended") not in _ends(stay):
                    problems.append(f"{who} (stay {n}): ended {row.get('ended')!r}, truth {stay['end']!r} "
                                    f"({stay['how']})")
                first = seconds(row.get("first_seen"))
                if first is None or abs(first - seconds(stay["registered"])) > tolerance:
                    problems.append(f"{who} (stay {n}): first_seen {row.get('first_seen')}, truth {stay['registered']}")
                if _id(row.get("broker_id")) not in {_id(i["broker_id"]) for i in stay["ids"]}:
                    problems.append(f"{who} (stay {n}): broker_id {row.get('broker_id')}, truth {stay['ids']}")
                problems += _registrations(f"{who} (stay {n})", [row], [stay])
        else:
            problems.append(f"{who}: {len(rows)} brokers.csv rows for {len(truth_stays)} stay(s) "
                            f"(one row, or one per stay): {[r.get('ended') for r in rows]}")
    return problems


def _ends(stay: dict) -> set[str]:
    """What a stay's brokers.csv row may say of its end: the truth's; across a clock's step back
    (across_clock_step) either end the stamps can make of its close (the replay's ``ended``: its
    silence as stamped is not the one the NameServer counted)."""
    return {"expired", "connection_closed"} if stay.get("across_clock_step") else {stay["end"]}


def judge_endpoints(truth: dict, summary: dict) -> list[str]:
    """The NameServer endpoints the report found by itself, against the truth's."""
    # a NameServer nothing of which was captured (cut before any payload) is known by its port to
    # whoever captured it, not by its packets: the report names it unread (server_unread), not a NameServer
    unread = {u["endpoint"] for u in truth.get("unread_servers", [])}
    expected = {ns["endpoint"] for ns in truth["nameservers"]} - unread
    if "nameservers" in summary:
        found = {ns["endpoint"] if isinstance(ns, dict) else ns for ns in summary["nameservers"]}
    else:
        found = {row.get("server") for row in summary.get("calls_by_server", [])}
    if found != expected:
        return [f"NameServer endpoints found {sorted(map(str, found))}, truth {sorted(expected)}"]
    return []


def _overlaps(told: dict, logged: list[str], tolerance: float) -> bool:
    """A told time (``at``, or the span ``after``..``by``) against the log's whole seconds [first, last + 1)."""
    low, high = seconds(told.get("at") or told.get("after")), seconds(told.get("at") or told.get("by"))
    first, last = seconds(logged[0]), seconds(logged[1]) + 1.0
    return low is not None and high is not None and low <= last + tolerance and high >= first - tolerance


def _changes(summary: dict, what: str) -> list[tuple[dict, dict]]:
    """The controller's elections or syncStateSet changes the report places within the capture."""
    return [(g, x) for g in (summary.get("controller") or {}).get("groups", []) for x in g.get(what, [])
            if x.get("at") or x.get("after")]


def judge_controller(truth: dict, summary: dict) -> list[str]:
    """The controller's elections and syncStateSet changes (summary.json ``controller``) against
    what the Java controller logged (TRUTH.json ``controller_log``), and each fail-over's controller
    view against them: epochs, masters, sets and times; nothing invented, nothing missed."""
    tolerance = truth["tolerance_s"]
    log = truth.get("controller_log") or {"elections": [], "sync_state_sets": []}
    problems = []
    for what, key, fields in (("elections", "master_epoch", ("master_broker_id", "master_addr", "sync_state_set",
                                                              "sync_state_set_epoch")),
                              ("sync_state_sets", "sync_state_set_epoch", ("sync_state_set",))):
        told = _changes(summary, what)
        logged = {x[key]: x for x in log[what]}
        for group, change in told:
            truth_change = logged.get(change[key])
            name = f"{what[:-1]} {key} {change[key]} of {group.get('broker_name')} at {group.get('controller')}"
            if truth_change is None or group.get("broker_name") != log.get("broker_name") or group.get(
                    "controller") != log.get("endpoint"):
                problems.append(f"invented: controller {name}")
                continue
            problems += [f"controller {name}: {f} told {change.get(f)!r}, logged {truth_change[f]!r}"
                         for f in fields if change.get(f) != truth_change[f]]
            if not _overlaps(change, truth_change["logged"], tolerance):
                problems.append(f"wrong time: controller {name} told at {change.get('at')} / between "
                                f"{change.get('after')} and {change.get('by')}, logged {truth_change['logged']}")
        problems += [f"missed: controller {what[:-1]} {key} {k} ({x['log']})" for k, x in logged.items()
                     if k not in {c[key] for _, c in told}]
    elections = {e["master_epoch"]: e for e in log["elections"]}
    for finding in summary.get("findings", []):
        for item in finding.get("evidence", []):
            if item.get("kind") != "failover":
                continue
            if not item.get("controller"):
                if log["elections"]:
                    problems.append(f"missed: the controller's view of the fail-over at {item.get('t')}")
                continue
            election = elections.get(item.get("master_epoch"))
            if election is None or election["master_addr"] != item.get("new_master"):
                problems.append(f"fail-over at {item.get('t')}: masterEpoch {item.get('master_epoch')} of "
                                f"{item.get('new_master')} is no election the controller logged")
                continue
            before = max((x for x in log["sync_state_sets"] if x["sync_state_set_epoch"] < election[
                "sync_state_set_epoch"]), key=lambda x: x["sync_state_set_epoch"], default=None)
            said = {"sync_state_set_after": election["sync_state_set"],
                    "sync_state_set_epoch_after": election["sync_state_set_epoch"],
                    "sync_state_set_before": before and before["sync_state_set"],
                    "sync_state_set_epoch_before": before and before["sync_state_set_epoch"]}
            problems += [f"fail-over at {item.get('t')}: {f} told {item.get(f)!r}, logged {v!r}"
                         for f, v in said.items() if item.get(f) != v]
            when = {"at": item.get("elected_at"), "after": item.get("elected_after"), "by": item.get("elected_by")}
            if not _overlaps(when, election["logged"], tolerance):
                problems.append(f"wrong time: fail-over at {item.get('t')}: elected {when}, "
                                f"logged {election['logged']}")
    return problems


def judge_topic_counts(truth: dict, summary: dict) -> list[str]:
    """The topics the report says the NameServer held for a broker when its write permission was
    wiped or given back (the count it answered, ``topics_answered`` of the write_perm item, where
    captured, else the replay's, ``topics``) against the count the NameServer logged for that change
    (TRUTH.json ``topic_counts``), and the replay's too where the capture holds every registration
    whole (no snap length, nothing registered before it); and every route lookup a finding says its
    cause made fail came after that cause."""
    tolerance = truth["tolerance_s"]
    whole = not truth.get("cuts") and not any(stay.get("registered_before_capture") for stay in truth["stays"])
    items = [item for finding in summary.get("findings", []) for item in finding.get("evidence", [])]
    problems = []
    for count in truth.get("topic_counts", []):
        kind = "write_perm_wiped" if count["op"] == "wipe" else "write_perm_added"
        told = [item for item in items if item.get("kind") == kind and item.get("broker_name") == count["broker_name"]
                and _endpoint(item) == count["namesrv"] and abs((seconds(item.get("t")) or 0.0) - seconds(count["at"]))
                <= tolerance]
        if not told:
            continue  # the write-permission event itself is judged (missed) by judge_findings
        answered, replayed = told[0].get("topics_answered"), told[0].get("topics")
        for said, what in ((replayed if answered is None else answered, "told"), (replayed, "replayed")):
            if said != count["topics"] and (what == "told" or whole):
                problems.append(f"topic count of {count['broker_name']} at {count['namesrv']} at {count['at']}: "
                                f"{what} {said!r}, the NameServer held {count['topics']} ({count['log']})")
    for item in items:
        for lookup in item.get("failed_lookups") or []:
            cause, first = seconds(item.get("t")), seconds(lookup.get("first"))
            if cause is not None and first is not None and first < cause - tolerance:
                problems.append(f"{item['kind']} at {item.get('t')} told as the cause of lookups that failed before "
                                f"it ({lookup.get('topic')} from {lookup.get('first')})")
    return problems


def judge(truth: dict, summary: dict) -> list[str]:
    """Every disagreement of a report's summary.json with the truth. The brokers are summary.json's
    ``brokers`` (brokers.csv's columns, exact): brokers.csv writes a peer's text that a spreadsheet
    would run as a formula (starting ``= + - @``) with a leading ``'``, so a broker named ``-b`` is
    ``'-b`` there and would read as invented and missed."""
    return (judge_endpoints(truth, summary) + judge_brokers(truth, summary.get("brokers", []))
            + judge_findings(truth, summary) + judge_controller(truth, summary) + judge_topic_counts(truth, summary))
