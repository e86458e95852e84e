"""What needs attention in a capture, with its evidence: the top of report.html and summary.json.

The decoding tasks note the calls findings are made of (note_calls: answers with a non-zero code,
requests never answered, slow answers) and the connections with undecodable bytes, grouped, in
the tally each task returns as data; the per-broker liveness (liveness.py) says what happened to
each broker; the reading tasks say what each input file is. ``summary`` puts them together as the
documented summary.json (docs/capture-report.md: SCHEMA_VERSION says which layout).

An operator reads problems, not events: the evidence (one item per broker, client, topic or
connection) is grouped into one finding per kind and subject, and every event is said once.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from spark_analysis.analysis.clients import answers
from spark_analysis.analysis.controller import elections_untold, failover_words
from spark_analysis.capture import inputs
from spark_analysis.capture.packets import LINK_TYPES_READ
from spark_analysis.capture.reassembly import DEFAULT_SERVER_PORT
from spark_analysis.decode.controller import NO_REQUEST
from spark_analysis.decode.rows import is_cut_broker_addr
from spark_analysis.model.capture_points import CapturePoints, SecondPoint
from spark_analysis.model.endpoints import EndpointStory, Outage
from spark_analysis.model.periods import EXPIRY_SECONDS, NEAR_EXPIRY_S, Capture, ConnectionEnds, role
from spark_analysis.model.sessions import iso_datetime, iso_time
from spark_analysis.model.sessions import iso_seconds as _seconds
from spark_analysis.model.sessions import iso_time_or_none as _iso
from spark_analysis.model.tally import Groups, add, merge_earliest
from spark_analysis.model.translated import Translated
from twisted_namesrv.controller.codes import ControllerResponseCode
from twisted_namesrv.escapes import SHOWN_MAX, clipped_name, clipped_repr, escaped
from twisted_namesrv.remoting import RequestCode, ResponseCode
from twisted_namesrv.remoting.codes import code_name
from twisted_namesrv.remoting.foreign import HTTP, HTTP2, TLS
from twisted_namesrv.system_topics import PROXY_HEARTBEAT_SYNCER_TOPIC

#: an answer this late is slow: a third of the Java clients' default 3 s timeout
SLOW_MS = 1000.0
#: group keys of the calls noted (note_calls), and of undecodable connections
ANSWER_CODES, UNANSWERED, SLOW, UNDECODABLE = "answer_codes", "unanswered", "slow", "undecodable"
#: connections of which a capture of one direction holds one side only, by (server, the side not captured)
UNHEARD = "unheard"
#: answer frames with a non-zero code, paired with a request or not (note_error_answers)
ERROR_ANSWERS = "error_answers"
#: a finding, an item of evidence, a broker's liveness row: JSON-like dicts, as summary.json has them
Item = dict[str, Any]
CRITICAL, WARNING, INFO = "critical", "warning", "info"
SEVERITIES = (CRITICAL, WARNING, INFO)
#: the kinds of finding, in the order they are listed within a severity (docs/capture-report.md)
KINDS = ("packets_dropped", "files_missing", "files_overwritten", "began_mid_stream", "capture_cut",
         "clock_stepped_back", "one_way_capture", "bad_input", "records_not_read", "server_unread",
         "broker_connection_closed", "end_across_clock_step", "crc_failure",
         "registration_refused",
         "server_restart",
         "server_stopped", "failover", "heartbeat_expired", "expired_or_reconnected",
         "heartbeat_near_expiry", "topic_count_drop", "data_version_backwards", "broker_id_change",
         "broker_address_change", "topic_not_exist", "response_code", "turned_away", "unanswered", "slow_answer",
         "undecodable_connection", "controller_undecodable", "unpaired_error_answer", "retry_topic_lookup",
         "topic_made_on_first_use",
         "silence_not_captured",
         "broker_unregistered", "broker_alive_at_end", "broker_alive_before_missing", "address_in_sessions",
         "topic_deleted",
         "topics_deleted_from_broker", "write_perm_wiped", "write_perm_added", "refused_connections", "port_checked",
         "master_elected", "other_port_traffic", "other_server", "translated_copies", "cut_read_elsewhere",
         "same_traffic_twice")
#: topics RocketMQ makes per consumer group (retry, dead letters): looked up by every consumer at
#: start-up before they exist, so TOPIC_NOT_EXIST for them is expected
GROUP_TOPIC_PREFIXES = ("%RETRY%", "%DLQ%")
#: a topic deletion explains a broker's table losing that topic when it came this long before the table that still
#: had it was last seen (a slave's table follows its master's within seconds, and mqadmin deletes on the brokers
#: before the NameServers), or this long after the table that lacks it
DELETION_BEFORE_S, DELETION_AFTER_S = 60.0, 30.0
#: captures of the same traffic whose clocks differ this much have their stories' times that far apart
SKEWED_S = 1.0
#: well-known link types by number (pcap LINKTYPE_*)
LINK_TYPES = {0: "NULL", 1: "ETHERNET", 101: "RAW", 12: "RAW", 14: "RAW", 113: "LINUX_SLL", 276: "LINUX_SLL2",
              108: "LOOP", 258: "PKTAP", 228: "IPV4", 229: "IPV6", 239: "NFLOG"}
#: an input whose link type the reading does not decode (packets.LINK_TYPES_READ)
LINK_NOT_READ = "link type not read"
LINK_TYPES_SAID = ("Ethernet, Linux cooked v1/v2, BSD loopback, raw IP, Apple's PKTAP")



def note_calls(groups: Groups, calls: pa.StructArray) -> None:
    """Note a batch of schema.CALL_ROWS: answers with a non-zero code by (request code name,
    response code, remark, client, topic); requests never answered (not oneway) by (code name,
    client); answers slower than SLOW_MS by code name, the slowest as ``worst``; each key ends with
    the server endpoint asked, which calls_at takes off once the NameServers are known."""
    code, latency = calls.field("response_code"), calls.field("latency_ms")
    picks = ((ANSWER_CODES, pc.fill_null(pc.not_equal(code, 0), False),
              ("code_name", "response_code", "response_remark", "client", "topic", "server")),
             # a call whose answer may be among frames a snap length cut (``cut``) is not known unanswered
             (UNANSWERED, pc.and_(pc.and_(pc.is_null(code), pc.invert(pc.fill_null(calls.field("oneway"), False))),
                                  pc.invert(pc.fill_null(calls.field("cut"), False))),
              ("code_name", "client", "server")),
             (SLOW, pc.fill_null(pc.greater_equal(latency, SLOW_MS), False), ("code_name", "server")))
    for group, mask, key in picks:
        if not pc.any(mask).as_py():
            continue
        for row in pc.filter(calls, mask).to_pylist():
            worst = (row["latency_ms"], row["ts"], row["client"]) if group == SLOW else None
            add(groups, group, tuple(row[name] for name in key), 1, row["ts"], row["ts"], worst)


def note_error_answers(groups: Groups, frames: pa.StructArray) -> None:
    """Note a batch of schema.FRAME_ROWS' answers with a non-zero code by (response code, client,
    server), paired with a request or not: those no call holds (their request not captured, or its
    opaque or code cut) are what is left once the calls' are taken off (_unpaired_error_answers)."""
    error = pc.fill_null(pc.and_(answers(frames), pc.not_equal(frames.field("code"), 0)), False)
    if not pc.any(error).as_py():
        return
    for row in pc.filter(frames, error).to_pylist():
        add(groups, ERROR_ANSWERS, (row["code"], row["client"], row["server"]), 1, row["ts"], row["ts"])


def calls_at(groups: Groups, servers: set[str]) -> None:
    """Keep, of note_calls' groups, the calls to ``servers`` (the NameServers and controllers) and
    take the server off their keys: a broker's port captured with the NameServer's (tcpdump
    without a port filter) has answers of its own - a PULL_MESSAGE held by long polling, a
    consumer's first GET_CONSUMER_LIST_BY_GROUP - that are not the NameServer's to judge
    (other_server says that port was seen)."""
    for group in (ANSWER_CODES, UNANSWERED, SLOW, ERROR_ANSWERS):
        kept: Groups = {}
        for key, (count, first, last, worst) in groups.get(group, {}).items():
            if key[-1] in servers:
                add(kept, group, key[:-1], count, first, last, worst)
        groups[group] = kept.get(group, {})


def note_routes_found(found: dict[Any, float], calls: pa.StructArray) -> None:
    """Note a batch of schema.CALL_ROWS' route lookups answered with a route: by topic, the first
    (Tally.routes_found): when a topic was known, and a lookup before that is no warning. For a
    consumer group's retry or dead-letter topic also by (topic, client): when that client had its
    route, so that its TOPIC_NOT_EXIST after it is no start-up lookup (evidence: a later consumer of
    the same group asks before the topic reaches its NameServer, which is start-up again)."""
    served = pc.and_(pc.fill_null(pc.equal(calls.field("code"), int(RequestCode.GET_ROUTEINFO_BY_TOPIC)), False),
                     pc.fill_null(pc.equal(calls.field("response_code"), 0), False))
    if not pc.any(served).as_py():
        return
    table = pa.table({"topic": calls.field("topic"), "client": calls.field("client"),
                      "ts": calls.field("ts")}).filter(served)
    first = table.group_by("topic").aggregate([("ts", "min")])
    merge_earliest(found, dict(zip(first.column("topic").to_pylist(), first.column("ts_min").to_pylist(),
                                   strict=True)))
    group_topics = table.filter(pc.fill_null(pc.or_(*(pc.starts_with(table.column("topic"), prefix)
                                                      for prefix in GROUP_TOPIC_PREFIXES)), False))
    if group_topics.num_rows:
        per_client = group_topics.group_by(["topic", "client"]).aggregate([("ts", "min")])
        merge_earliest(found, dict(zip(zip(per_client.column("topic").to_pylist(),
                                           per_client.column("client").to_pylist(), strict=True),
                                       per_client.column("ts_min").to_pylist(), strict=True)))


def note_served(served: Counter[Any], calls: pa.StructArray) -> None:
    """Count a batch of schema.CALL_ROWS by (server endpoint, request code): what each endpoint is asked."""
    table = pa.table({"server": calls.field("server"), "code": calls.field("code")})
    for row in table.group_by(["server", "code"]).aggregate([([], "count_all")]).to_pylist():
        served[(row["server"], row["code"])] += row["count_all"]


def broker_label(broker: Item) -> str:
    """cluster / broker / id (role) / address, as operators name a broker."""
    ident = "?" if broker["broker_id"] is None else f"{broker['broker_id']} ({broker['role']})"
    return f"{broker['cluster'] or '?'} / {broker['broker_name'] or '?'} / {ident} / {broker['broker_addr']}"


#: the parts of broker_label, as a line shows them: a long part clipped by itself
LABEL_PARTS = " / "


def clipped_label(label: object, most: int = SHOWN_MAX) -> str:
    """A broker's label (broker_label) put into a line: each part clipped by itself (clipped_name),
    so that a broker or cluster named in 3,000 characters leaves its id, role and address in sight;
    clipped whole, the line said "DefaultCluster / broker-LLL...(3048 characters)" and nothing of
    who it was. A label of many short parts (a name holding the separator) is clipped whole past
    four parts' worth, so a line stays bounded."""
    text = str(label)
    shown = LABEL_PARTS.join(clipped_name(part, most) for part in text.split(LABEL_PARTS))
    return shown if len(shown) <= 4 * (most + 32) else clipped_name(text, 4 * most)


def broker_identity(broker: Item) -> str:
    """cluster / broker / id: who a broker is, whatever address or connection it registers from."""
    ident = "?" if broker["broker_id"] is None else broker["broker_id"]
    return f"{broker['cluster'] or '?'} / {broker['broker_name']} / {ident}"


#: how a broker stay's label is named by its NameServer (at_nameserver), in the findings and the report's pictures
StayNamer = Callable[[str, Item], str]


def at_nameserver(brokers: Iterable[Item]) -> StayNamer:
    """The one rule naming a broker stay's NameServer, for the findings and the report's pictures
    alike: where the run's brokers were seen at more than one NameServer (a broker registers with
    each it is given, and a kill closes its connection to each), every stay's label ends with its
    NameServer ("@ 127.0.0.1:9877"; "@ ?" for a stay no NameServer was told for, never "@ None"),
    else none does. ``brokers``: every stay of the run (Liveness.brokers), not the ones shown."""
    several = len({broker["server"] for broker in brokers}) > 1
    return lambda label, broker: f"{label} @ {broker['server'] or '?'}" if several else label


def input_files(files: list[inputs.CaptureFile], read: inputs.ReadTally) -> list[Item]:
    """Each input with what the reading tasks found of it; a capture without records is EMPTY."""
    rows = []
    for file in files:
        fact = read.files.get(file.path) or inputs.FileFacts()
        step = inputs.clock_step_back(fact.spans)
        rows.append({"path": file.path, "size": file.size, "link_type": _link_type(fact.link_type),
                     "clock_step_back_s": None if step is None else round(step[0], 6),
                     "clock_stepped_at": None if step is None else _iso(step[1]),
                     "clock_stepped_to": None if step is None else _iso(step[2]),
                     "records": fact.records, "first": _iso(fact.first), "last": _iso(fact.last),
                     "problem": fact.problem or (None if fact.records else inputs.EMPTY) or (
                         None if fact.link_type in LINK_TYPES_READ else LINK_NOT_READ),
                     "trailing_bytes": fact.trailing_bytes, "cut_records": fact.cut_records,
                     "uncaptured_bytes": fact.uncaptured_bytes, "cut_at": fact.cut_at or None,
                     "compression": fact.compression, "reason": fact.reason or _no_byte(file, fact),
                     **_unread_records_row(fact), **_snap_lengths_row(fact)})
    return rows


def _snap_lengths_row(fact: inputs.FileFacts) -> Item:
    """``cut_shortest`` of a file whose records were cut at different lengths (a pcapng's interfaces
    with their own snap lengths): only there, so that every other file's row is as it was."""
    return {"cut_shortest": fact.cut_shortest} if fact.cut_shortest and fact.cut_shortest != fact.cut_at else {}


def cut_at_text(f: Item) -> str:
    """Where a file's packets were cut, said: its snap length, or the range of its interfaces' ones."""
    if not f.get("cut_shortest"):
        return f"packets cut at {f['cut_at']:,} bytes (the snap length)"
    return (f"packets cut at {f['cut_shortest']:,} to {f['cut_at']:,} bytes (its interfaces' snap lengths; of a "
            f"packet captured on several, the copy that kept most is read)")


def _shortest(f: Item) -> Item:
    return {"cut_shortest": f["cut_shortest"]} if f.get("cut_shortest") else {}


def _no_byte(file: inputs.CaptureFile, fact: inputs.FileFacts) -> str | None:
    """Why a file of no byte holds nothing (inputs.NO_BYTE); None for any other."""
    return inputs.NO_BYTE if not file.size and not fact.records else None


def _unread_records_row(fact: inputs.FileFacts) -> Item:
    """A file's records of a link type not read, where it holds others that are (a pcapng's
    interfaces): only there, so that every other file's row is as it was."""
    if not fact.unread_records or fact.link_type not in LINK_TYPES_READ:
        return {}
    return {"unread_records": fact.unread_records, "unread_link_type": _link_type(fact.unread_link_type)}


def _unread_records_findings(files: list[Item]) -> Iterable[Item]:
    """A file whose records are partly of a link type not read (``dumpcap -i nflog -i lo``: NFLOG and
    Ethernet interfaces in one pcapng): its other records are read, these are not, and what they held
    is not in the report (a warning: that interface may have carried traffic no other did)."""
    for f in files:
        if f.get("unread_records"):
            yield _finding("records_not_read", WARNING, f"{clipped_name(f['path'])}: {f['unread_records']:,} of its "
                           f"{f['records']:,} records are of link type {f['unread_link_type']}, not read "
                           f"({LINK_TYPES_SAID}): an interface of another kind captured with those read; what "
                           f"they held is not in this report", path=f["path"], records=f["unread_records"],
                           link_type=f["unread_link_type"])


def note_cut_read_elsewhere(rows: list[Item], paths: set[str]) -> None:
    """Marks the input rows of files a snap length cut whose cut connections were all read from
    another capture point's copies (job.cut_read_elsewhere): their cut is information, not a limit
    of the report. Rows of other files are left as they were."""
    for row in rows:
        if row["path"] in paths:
            row["cut_read_elsewhere"] = True


def may_be_still_written(f: Item) -> bool:
    """Whether an input's problem is one a capture still being written has (inputs.still_written):
    its end cut inside a record, or no byte at all yet."""
    return f["problem"] == inputs.TRUNCATED or (f["problem"] == inputs.EMPTY and not f["size"])


def problem_text(f: Item) -> str:
    """What is wrong with an input file (an input_files row), for a person: with what to do when its
    bytes are compressed (in a format not read, or read but not named by its suffix)."""
    if f["problem"] == inputs.TRUNCATED:
        return f"{f['problem']} ({f['trailing_bytes']:,} bytes after the last whole record)"
    if quiet_file(f):
        return QUIET_FILE
    if f["problem"] in (inputs.NOT_INFLATED, inputs.EMPTY) and f["reason"]:
        return f"{f['problem']}: {f['reason']}"
    if f["problem"] == inputs.UNDATED:
        return str(f["reason"])
    if f["problem"] == LINK_NOT_READ:
        return (f"its link type, {f['link_type']}, is not read ({LINK_TYPES_SAID}): no packet of it was decoded; "
                f"capture with one of those (Linux: tcpdump -i any)")
    fmt = f.get("compression")
    if f["problem"] != inputs.NOT_A_CAPTURE or fmt is None:
        return str(f["problem"])
    if fmt not in inputs.READ_FORMATS:
        return f"{f['problem']}: {fmt}-compressed, a format not read (decompress it first)"
    suffix = inputs.READ_FORMATS[fmt][0]
    if str(f["path"]).lower().endswith(suffix):
        return f"{f['problem']}: {fmt}-compressed, but it does not inflate"
    return f"{f['problem']}: {fmt}-compressed, read when its name ends in {suffix}"


def _link_type(number: int | None) -> str | int | None:
    """A link type by name where known (LINK_TYPES), else its number."""
    return number if number is None else LINK_TYPES.get(number, number)


def file_spans(files: list[inputs.CaptureFile], read: inputs.ReadTally) -> tuple[tuple[float, float, str], ...]:
    """(first, last, path) of the inputs with records: which file a time came from."""
    facts = [(read.files.get(file.path), file.path) for file in files]
    return tuple(sorted((fact.first, fact.last, path) for fact, path in facts
                        if fact is not None and fact.first is not None and fact.last is not None))


#: names of files that sit beside captures (notes, steps, logs) and are never captures themselves
DOCUMENT_SUFFIXES = (".md", ".txt", ".rst", ".json", ".csv", ".log", ".out", ".err", ".yml", ".yaml", ".html", ".py",
                     ".sh", ".properties", ".conf", ".ini", ".xml", ".png", ".svg")


#: what a quiet_file is, said of one (its bad_input line: "PATH: ..."); quiet_files says it of several
QUIET_FILE = "no packets in it (a capture file of a quiet time: its header only)"


def quiet_files(paths: Sequence[str]) -> str:
    """The one line saying a rotation's files of quiet times (quiet_file): their finding's, and the
    console's after reading (a ring buffer by duration can make hundreds: the first LISTED, by name)."""
    if len(paths) == 1:
        return f"{clipped_name(paths[0])}: {QUIET_FILE}"
    return (f"{_plural(len(paths), 'capture file{s}')} with no packets in them (quiet times of a rotation): "
            + _first([clipped_name(path) for path in sorted(paths)]))


def quiet_file(f: Item) -> bool:
    """A capture file whose header is whole and holds no packet: a rotation's file of a quiet
    time (dumpcap's ring buffer by duration, editcap -i), not a file the report could not read (one
    of no byte, or compressed and inflating to none: inputs.NOTHING_INFLATED)."""
    return f["problem"] == inputs.EMPTY and bool(f["size"]) and f["reason"] is None


def _input_severity(f: Item) -> str:
    """A capture cut while a record was written, or one dating a packet where no date is, still has
    its other records read: a warning.  A notes or steps file that a directory brought along is not
    a capture, and says so as information (the operator's problems stay on top); any other input
    that is not a capture, or is empty or unreadable, is critical: a capture the report could not
    read."""
    if f["problem"] in inputs.READ_ANYWAY and f["records"]:
        return WARNING
    if quiet_file(f):
        return INFO
    if f["problem"] == inputs.NOT_A_CAPTURE and str(f["path"]).lower().endswith(DOCUMENT_SUFFIXES):
        return INFO
    return CRITICAL


def evidence(files: list[Item], groups: Groups, brokers: list[Item], responses: dict[tuple[Any, ...], Item],
             endpoints: list[Item] | None = None, stories: list[Item] | None = None,
             controller: Item | None = None, counts: dict[str, int] | None = None,
             others: list[Item] | None = None, routes_found: dict[Any, float] | None = None) -> list[Item]:
    """Every piece of evidence, critical first; each says what, where and when (docs/capture-report.md).
    An event is said once: route lookups answered TOPIC_NOT_EXIST are topic_not_exist, refused
    registrations crc_failure or registration_refused, never also response_code. ``responses``:
    response_groups(groups), which the response-code table shows too. ``controller``:
    analysis/controller.controller_story (its elections no fail-over tells, its undecodable calls).
    ``routes_found``: when each topic's route was first served (note_routes_found)."""
    spoken = {server: protocol for _, server, protocol in groups.get(UNDECODABLE, {}) if protocol}
    unheard_clients = {server for server, side in groups.get(UNHEARD, {}) if side == "client"}
    found: list[Item] = [*_step_findings(files, brokers),
                         *_cut_findings(files, counts or {}, endpoints or [], spoken, unheard_clients),
                         *(others or []), *_unread_records_findings(files)]
    lookups = [story for story in stories or [] if story["kind"] == "lookup_failed"]
    stories = [story for story in stories or [] if story["kind"] != "lookup_failed"]
    deletions = [story for story in stories if story["kind"] == "topic_deleted"]
    for f in files:
        if f["problem"]:
            severity = _input_severity(f)
            found.append(_finding("bad_input", severity, f"{clipped_name(f['path'])}: {problem_text(f)}",
                                  path=f["path"], problem=f["problem"], size=f["size"],
                                  trailing_bytes=f["trailing_bytes"], compression=f["compression"]))
    named = at_nameserver(brokers)
    missing_from = frozenset(item["from"] for item in found if item["kind"] == "files_missing")
    stepped = clock_steps(files)
    for broker in brokers:
        found += _broker_findings(broker, deletions, named, missing_from, stepped)
    found += _endpoint_findings(endpoints or [], brokers)
    found += _story_findings(stories or [])
    found += _controller_findings(controller, stories or [])
    told = {(story["old_master"], story["t"]) for story in stories or [] if story["kind"] == "failover"}
    found = [item for item in found if not (item["kind"] == "broker_connection_closed"
                                            and (item["broker_addr"], item["t"]) in told)]  # the fail-over tells it
    found += _addresses_across_sessions(brokers)
    explained = _tie_lookups(found, lookups)
    for (name, response, _, client, topic), (count, first, last, _) in sorted(
            groups.get(ANSWER_CODES, {}).items(), key=_by_key):
        if _is_topic_not_exist(name, response):
            count, first, last = _unexplained(explained, lookups, client, topic, count, first, last)
            if not count:
                continue
        if _is_topic_not_exist(name, response) and str(topic).startswith(GROUP_TOPIC_PREFIXES):
            had = (routes_found or {}).get((topic, client))
            if had is not None and last > had:
                found.append(_group_topic_gone(client, topic, count, first, last, had))
                continue
            found.append(_finding("retry_topic_lookup", INFO, f"{client} asked {count}x for the route of "
                                  f"{clipped_repr(topic)}: TOPIC_NOT_EXIST (a consumer group's retry or dead-letter "
                                  f"topic, made when first needed: normal at start-up)", topic=topic, client=client,
                                  count=count, first=_iso(first), last=_iso(last)))
        elif _is_topic_not_exist(name, response):
            made = _made_after(routes_found or {}, topic, last)
            registered = None if made is not None else _registered_after(explained, lookups, client, topic, last)
            found.append(_unknown_topic(client, topic, count, first, last, made, registered))
    for (name, response, remark), entry in responses.items():
        if _said_elsewhere(name, response):
            continue
        requesters = entry["requesters"]
        found.append(_finding("response_code", WARNING, f"{name} answered {said_code(response)} "
                              f"{entry['count']}x: {clipped_repr(remark)}; by {', '.join(sorted(requesters))}",
                              code_name=name, response_code=response, response_name=response_name(response),
                              remark=remark, count=entry["count"], requesters=requesters, first=_iso(entry["first"]),
                              last=_iso(entry["last"])))
    found += _unpaired_error_answers(groups)
    refusals = _turned_away(endpoints or [], groups)
    for (name, client), (count, first, last, _) in sorted(groups.get(UNANSWERED, {}).items(), key=_by_key):
        if client in refusals:
            found.append(_refused_requests(name, client, count, first, last, refusals[client]))
            continue
        found.append(_finding("unanswered", WARNING, f"{count} {name} request(s) from {client} never answered",
                              code_name=name, client=client, count=count, first=_iso(first), last=_iso(last)))
    for (name,), (count, first, last, worst) in sorted(groups.get(SLOW, {}).items(), key=_by_key):
        latency, t, client = worst
        found.append(_finding("slow_answer", WARNING, f"{count} {name} answer(s) took {SLOW_MS:,.0f} ms or more; "
                              f"slowest {latency:,.0f} ms at {iso_time(t)} for {client}", code_name=name, count=count,
                              max_ms=latency, max_at=iso_time(t), max_client=client, first=_iso(first),
                              last=_iso(last)))
    for (server, side), (count, *_) in sorted(groups.get(UNHEARD, {}).items(), key=_by_key):
        found.append(_one_way(server, side, count))
    beside = besides_nameservers(endpoints or [])
    for (conn_id, server, protocol), (count, *_) in sorted(groups.get(UNDECODABLE, {}).items(), key=_by_key):
        if beside(server):
            found.append(_finding("undecodable_connection", INFO, f"{shown_connection(conn_id)}: {count:,} bytes of "
                                  f"another protocol ({BESIDE}){_spoken(protocol)}", connection=conn_id, bytes=count,
                                  server=server, protocol=protocol))
            continue
        found.append(_finding("undecodable_connection", WARNING, f"{shown_connection(conn_id)}: {count:,} bytes "
                              f"that are no remoting frame (the rest of that direction is not decoded)"
                              f"{_spoken(protocol)}", connection=conn_id, bytes=count, server=server,
                              protocol=protocol))
    found.sort(key=lambda finding: (SEVERITIES.index(finding["severity"]), KINDS.index(finding["kind"])))  # stable
    return found


def shown_connection(conn_id: object) -> str:
    """A connection's id (``client>server@opened``, opened in epoch seconds: the key its rows share)
    put into a line: opened as the lines say every time, ISO UTC ("@1796113649.190110" said nothing
    to an operator); an id of another form as it is."""
    text = str(conn_id)
    ends, at, opened = text.rpartition("@")
    try:
        return f"{clipped_name(ends)}@{iso_time(float(opened))}" if at else clipped_name(text)
    except ValueError:
        return clipped_name(text)


def _turned_away(endpoints: list[Item], groups: Groups) -> dict[str, Item]:
    """Per client a server turned away (model/endpoints.turned_away: it closed the connection after the
    client's bytes without sending one): the server, when it closed, and whether the server's other
    connections speak TLS."""
    tls = {server for (_, server, protocol) in groups.get(UNDECODABLE, {}) if protocol == TLS}
    return {refusal["client"]: {"server": row["endpoint"], "t": refusal["t"], "tls": row["endpoint"] in tls}
            for row in endpoints for refusal in row.get("turned_away", ())}


def _refused_requests(name: str, client: str, count: int, first: Any, last: Any, refusal: Item) -> Item:
    """A client's unanswered requests on a connection its server turned away: a refusal the server's
    own packets show, not answers lost. TLS is named only where the server's other connections speak
    it: a plain-text client at a server that takes TLS only (tls.server.mode enforcing, Java's or
    ours, closes so); else the packets say no more than a close without a word."""
    why = ("its other connections here speak TLS: a plain-text client at a server that takes TLS only "
           "(tls.server.mode enforcing)" if refusal["tls"] else
           "the packets do not say why (a frame it could not decode, a client it will not serve)")
    return _finding("turned_away", WARNING, f"{client} turned away by {refusal['server']}: it closed the connection "
                    f"at {refusal['t']} after {count} {name} request(s), without sending a byte (a refusal, not an "
                    f"answer lost); {why}", server=refusal["server"], client=client, code_name=name, count=count,
                    first=_iso(first), last=_iso(last), t=refusal["t"], tls=refusal["tls"])


#: what bytes of another protocol on a NameServer's connection mean (twisted_namesrv/remoting/foreign.py)
SPOKEN = {TLS: "encrypted: a NameServer with tls.server.mode enforcing or permissive and clients with TLS on; "
               "capture where the traffic is plain to read it",
          HTTP: "a web server's port, not RocketMQ remoting",
          HTTP2: "gRPC: a 5.x proxy's gRPC port (its clients' traffic, not the NameServer's; the proxy's own "
                 "remoting talk to the NameServer is read at the NameServer's port), or a gRPC client given a "
                 "remoting port"}


def _one_way(server: str, side: str, count: int) -> Item:
    """Connections of which the capture holds one direction only (decode/rows.unheard_side)."""
    missing = ("its answers to them are not in the capture: not judged unanswered" if side == "server" else
               "what they were asked is not in the capture")
    return _finding("one_way_capture", WARNING, f"{server}: {count:,} connection(s) captured in one direction "
                    f"only: not one packet from the {side}'s side, though the other side acknowledged its bytes "
                    f"(a capture filter such as 'dst port', tcpdump -Q, or a one-way mirror); {missing}",
                    server=server, side=side, connections=count)


#: why a server no frame of is read is information, not a warning, in a capture that read NameServers elsewhere
BESIDE = "a port no NameServer was found on, in a capture with NameServers read on others: another service " \
         "captured beside them, as a capture with no port filter holds; not read"


def besides_nameservers(endpoints: list[Item]) -> Callable[[str | None], bool]:
    """Whether a server endpoint is another service captured beside the NameServers (ssh, a database,
    a web server in a capture taken with no port filter): no remoting request was read from it, and
    NameServers were read in the capture on other ports, none of them RocketMQ's default 9876. A
    server on a NameServer's port (another host's NameServer speaking TLS) or in a capture with no
    NameServer read at all stays a warning: there the unread traffic may be what was wanted."""
    ports = {row["endpoint"].rpartition(":")[2] for row in endpoints if row["kind"] == "nameserver"}
    rocketmq = {row["endpoint"] for row in endpoints if row["kind"] != "unknown"}
    if not ports:
        return lambda server: False
    ports.add(str(DEFAULT_SERVER_PORT))
    return lambda server: (server is not None and server not in rocketmq
                           and server.rpartition(":")[2] not in ports)


def _spoken(protocol: str | None) -> str:
    return f": {protocol} ({SPOKEN[protocol]})" if protocol else ""


def _step_findings(files: list[Item], brokers: Sequence[Item] = ()) -> Iterable[Item]:
    """A capture file whose packet times step back, said first (the story across the step is out
    of order, whatever the findings after it say): per file, how far, when and to when; how long
    it ran as stamped and at least as the clock on the wall ran (its capture period says the
    stamps' span: v5-pause-stepped's 219.2 s ran 309.2 s); and the broker stays stamped on both
    sides of the step (``brokers``: first seen before the times stamped twice, last seen after
    them), whose intervals (brokers.csv, measured between stamps in time order) mix the two
    (v5-pause-stepped's broker-b, 30 s apart throughout: p50 19.5 s)."""
    for f in files:
        if f.get("clock_step_back_s"):
            to, at = _seconds(f["clock_stepped_to"]), _seconds(f["clock_stepped_at"])
            first, last = _seconds(f["first"]), _seconds(f["last"])
            stamped = last - first
            # the stamps after the step run from ``to`` to the last: the wall's time is at least both stretches
            wall = (at - first) + (last - to) if last > at else stamped
            across = sorted(broker_label(b) for b in brokers if across_clock_step(b, [(to, at)]))
            mixed = (f"; the intervals of {_plural(len(across), 'broker stay{s}')} stamped on both sides of it "
                     f"(brokers.csv: interval_*, max_gap_s; across_clock_step true) are between stamps from "
                     f"before and after the step, not the broker's: {_first(list(map(clipped_label, across)))}"
                     if across else "")
            yield _finding("clock_stepped_back", WARNING, f"{clipped_name(f['path'])}: its packets' times step back "
                           f"{f['clock_step_back_s']:,.1f} s at {f['clock_stepped_at']} (to {f['clock_stepped_to']}): "
                           f"the clock that stamped them was stepped back (NTP, a VM restored from a snapshot), or "
                           f"files were joined out of order (mergecap -a); what was captured after the step is "
                           f"placed before what came earlier, so the report's story across it is out of order; "
                           f"it ran {stamped:,.1f} s as stamped (its capture period), at least {wall:,.1f} s of "
                           f"wall time{mixed}",
                           path=f["path"], seconds=f["clock_step_back_s"], at=f["clock_stepped_at"],
                           to=f["clock_stepped_to"], stamped_seconds=stamped, wall_seconds_at_least=wall,
                           brokers_across=across)


def clock_steps(files: list[Item]) -> list[tuple[float, float]]:
    """Each input's clock step back (input_files' rows) as (the time it stepped to, the latest time
    before it): the times between were stamped twice, before the step and after it."""
    return [(_seconds(f["clock_stepped_to"]), _seconds(f["clock_stepped_at"])) for f in files
            if f.get("clock_step_back_s")]


def across_clock_step(broker: Item, steps: Sequence[tuple[float, float]]) -> bool:
    """Whether a broker stay was stamped on both sides of a clock's step back (``steps``: clock_steps):
    first seen before the times stamped twice, last seen after them. Its registrations from before
    and after the step are interleaved in time order, so its intervals are between stamps of the two
    sides, not the broker's (clock_stepped_back names it; brokers.csv's ``across_clock_step``)."""
    first, last = broker["first_seen"], broker["last_seen"]
    return first is not None and last is not None and any(first < to and last > at for to, at in steps)


def note_clock_steps(brokers: Iterable[Item], files: list[Item]) -> None:
    """Marks each broker stay (brokers.csv, summary.json's brokers, the page's table) with
    ``across_clock_step``: whether its times and intervals are stamps from both sides of a clock's
    step back (across_clock_step), not wall time."""
    steps = clock_steps(files)
    for broker in brokers:
        broker["across_clock_step"] = across_clock_step(broker, steps)


def _cut_findings(files: list[Item], counts: dict[str, int], endpoints: list[Item],
                  spoken: dict[str, str], unheard_clients: Collection[str] = ()) -> Iterable[Item]:
    """A capture a snap length cut, said first (what it keeps decides what the report can know):
    per file, the packets cut, where, and the bytes they did not keep - sent and seen, so no loss; and
    each server endpoint whose traffic no frame could be read of, with why (``spoken``: the protocol
    its connections spoke instead, TLS or HTTP, per server)."""
    cut = [f for f in files if f.get("cut_records")]
    frames = counts.get("cut_frames", 0)
    for f in cut:
        if f.get("cut_read_elsewhere"):
            yield _finding("cut_read_elsewhere", INFO, f"{clipped_name(f['path'])}: {cut_at_text(f)}: "
                           f"{f['cut_records']:,} of {f['records']:,} packets, "
                           f"{f['uncaptured_bytes']:,} bytes not captured; every connection they belong to was read "
                           f"from another capture "
                           f"point's copy that kept more of it (same_traffic_twice): nothing read from this file "
                           f"is cut",
                           path=f["path"], cut_at=f["cut_at"], **_shortest(f), packets=f["cut_records"],
                           records=f["records"],
                           uncaptured_bytes=f["uncaptured_bytes"])
            continue
        yield _finding("capture_cut", WARNING, f"{clipped_name(f['path'])}: {cut_at_text(f)}: "
                       f"{f['cut_records']:,} of {f['records']:,} packets, "
                       f"{f['uncaptured_bytes']:,} bytes not captured (seen, not kept: no loss); {frames:,} frames "
                       f"in all partly read: their length, "
                       f"code, opaque "
                       f"and header fields where captured, their bodies not (topic counts, CRC checks, broker "
                       f"addresses cut, and answers whose opaque was cut are unknown, never guessed)",
                       path=f["path"], cut_at=f["cut_at"], **_shortest(f), packets=f["cut_records"],
                       records=f["records"],
                       uncaptured_bytes=f["uncaptured_bytes"], cut_frames=frames,
                       stream_bytes_not_captured=counts.get("uncaptured_bytes", 0),
                       unplaced_bytes=counts.get("unplaced_bytes", 0))
    cut = [f for f in cut if not f.get("cut_read_elsewhere")]
    why = (f"its packets were cut at {min(f['cut_at'] for f in cut):,} bytes, before any frame's header" if cut
           else "no frame of it decodes")
    beside = besides_nameservers(endpoints)
    for row in endpoints:
        if row["kind"] == "unknown" and row["accepted"] and row.get("empty") == row["accepted"]:
            yield _finding("port_checked", INFO, f"{row['endpoint']} accepted {row['accepted']:,} connection(s) that "
                           f"carried nothing either way (a port check: a launch script's poll, a load balancer's "
                           f"probe); what it is stays unknown", endpoint=row["endpoint"], accepted=row["accepted"])
        elif row["kind"] == "unknown" and row["accepted"] and beside(row["endpoint"]):
            yield _finding("server_unread", INFO, f"{row['endpoint']} accepted {row['accepted']:,} connection(s) "
                           f"of another protocol ({BESIDE}){_spoken(spoken.get(row['endpoint']))}",
                           endpoint=row["endpoint"], accepted=row["accepted"],
                           why="another service", protocol=spoken.get(row["endpoint"]))
        elif row["kind"] == "unknown" and row["accepted"]:
            protocol = spoken.get(row["endpoint"])
            said = f"its connections speak {protocol} ({SPOKEN[protocol]})" if protocol else (
                "its clients' side was not captured (one direction only)" if row["endpoint"] in unheard_clients
                else f"{why}; what it is stays unknown")
            yield _finding("server_unread", WARNING, f"{row['endpoint']} accepted {row['accepted']:,} connection(s), "
                           f"but nothing it was asked can be read: {said}", endpoint=row["endpoint"],
                           accepted=row["accepted"], why=why if protocol is None else f"speaks {protocol}",
                           protocol=protocol)


def other_traffic(others: Counter[Any], ports: Iterable[int]) -> list[Item]:
    """With --port, the RocketMQ traffic the reading left out, one info item per server port: what a
    --port narrower than the capture did not read is said, never dropped in silence (a controller's
    port, a broker's). ``others``: inputs.ReadTally.others; a port counts when a segment on it
    starts with a remoting frame."""
    by_port: dict[int, list[Any]] = {}
    for (port, client, what), n in others.items():
        entry = by_port.setdefault(port, [set(), 0, 0])
        if what == "frames" and n:
            entry[0].add(client)  # a connection carrying frames (not a refused or idle attempt)
        entry[1 if what == "segments" else 2] += n
    asked = ", ".join(map(str, sorted(ports)))
    return [_finding("other_port_traffic", INFO, f"port {port} carries RocketMQ traffic that --port {asked} left "
                     f"out: {len(clients):,} connection(s) carrying frames, from {_first(sorted(clients))}; "
                     f"{frames:,} segment(s) "
                     f"starting with a remoting frame ({segments:,} in all); give --port {port} too, or no --port, "
                     f"to read it", port=port, connections=len(clients), frames=frames, segments=segments)
            for port, (clients, segments, frames) in sorted(by_port.items()) if frames]


def dropped_packets(files: list[inputs.CaptureFile], read: inputs.ReadTally) -> list[Item]:
    """Packets a capture says it dropped itself (a pcapng's interface statistics, as dumpcap and
    tshark -w write them when they stop: its buffer was full), said first: what they held is not
    in the file, so a connection's bytes lost to gaps and a broker's silence there may be the
    capture's, not the network's. (tcpdump -w writes a classic pcap, which has no place for them:
    tcpdump says "N packets dropped by kernel" on stderr as it stops.)"""
    found = []
    for file in files:
        fact = read.files.get(file.path)
        if fact is None or not fact.dropped:
            continue
        # isb_ifrecv holds the dropped ones by the pcapng spec, not on Linux (dumpcap: 631 received, 5,442
        # dropped, 631 in the file): the count is said as the statistics give it, never as a share
        of = "" if fact.received is None else f" ({fact.received:,} received, by the same statistics)"
        found.append(_finding(
            "packets_dropped", WARNING, f"{clipped_name(file.path)}: the capture dropped {fact.dropped:,} packets{of}, "
            f"by its own interface statistics (its buffer was full: capture with a larger one, dumpcap -B, tcpdump -B, "
            f"and a port filter): what they held is unknown, so bytes lost to gaps in its connections and a "
            f"broker's silence may be the capture's, not the network's", path=file.path, dropped=fact.dropped,
            received=fact.received))
    return found


def missing_files(captures: Iterable[Capture]) -> list[Item]:
    """Files of a ring overwritten before its oldest kept (overwritten_files), and files of a
    rotated set missing between two it has (model/periods.rotated_sets: the later
    carries on the earlier's connections past bytes neither holds), said first: nothing was
    captured between them, so no broker's silence, expiry or server's outage is told across it,
    and what happened then is unknown. A ring (``tcpdump -C M -W N``) that wrapped overwrote them;
    with ``-z gzip`` it also leaves the newer files of the same name unzipped beside the old ones."""
    captures = list(captures)
    found = [overwritten for paths, gaps, kept_from in _rings_across_gaps(captures)
             if (overwritten := overwritten_files(paths, gaps, kept_from)) is not None]
    for capture in captures:
        if capture.after_missing is None:
            continue
        before, ended = capture.after_missing
        seconds = capture.first - ended
        found.append(_finding(
            "files_missing", WARNING, f"files of a rotated set are missing between {clipped_name(before)} and "
            f"{clipped_name(capture.paths[0])}: "
            f"{seconds:,.1f} s not captured, from {iso_time(ended)} to {iso_time(capture.first)} (its connections go "
            f"on past bytes neither file holds: a ring buffer, tcpdump -W, overwrote them, or they were not given); "
            f"nothing is told across it: what happened then is unknown", before=before, after=capture.paths[0],
            seconds=round(seconds, 3), **{"from": iso_time(ended)}, until=iso_time(capture.first)))
    return found


#: a file of a tcpdump ring (-W N): the name given with -w, then the file's number in the ring (as
#: many digits as N - 1 has), and a compressor's suffix when -z or the operator added one
RING_NAME = re.compile(r"^(?P<name>.*?)(?P<number>[0-9]+)(?:\.(?:gz|bz2|xz|zst|lz4))?$")


def _rings_across_gaps(captures: list[Capture]) -> Iterable[tuple[tuple[str, ...], frozenset[int], float]]:
    """Each chain of captures joined where files of a rotated set go missing between them (a capture's
    ``after_missing`` names the file before the gap): its files in time order, the positions of the
    files that follow a gap, and when its first file begins. A ring with a file lost in the middle is
    one ring still: its names say whether it wrapped."""
    after = {c.after_missing[0]: c for c in captures if c.after_missing is not None}
    lasts = {c.paths[-1] for c in captures}
    for head in captures:
        if head.after_missing is not None and head.after_missing[0] in lasts:
            continue  # not a chain's first
        paths, gaps = list(head.paths), set()
        following = after.get(paths[-1])
        while following is not None:
            gaps.add(len(paths))
            paths += following.paths
            following = after.get(paths[-1])
        yield tuple(paths), frozenset(gaps), head.first


def overwritten_files(paths: Sequence[str], gaps: Collection[int] = (), kept_from: float = 0.0) -> Item | None:
    """A ring that wrapped (``tcpdump -C M -W N``: files NAME0, NAME1, ... written in turn, the
    oldest overwritten): the capture's files, in time order, numbered 2, 0, 1. The oldest kept is
    not the ring's first file, and files numbered below it hold later packets: the ring came round
    to them, so they and every file numbered before them were written over since (at least the
    highest of them plus one), and nothing before ``kept_from`` (the first packet) was kept (a
    broker's stay or a connection begun earlier is seen from then on only). Said first, as files
    missing are. Only a ring's turn says so: each next file numbered one more, or 0, except after a
    gap (``gaps``: positions of files that follow files missing, _rings_across_gaps), where any
    number but the same may follow (2, then 1 after file 0 was lost: the ring still wrapped). Names
    in order (0, 1: a ring that wrapped whole laps looks so too) or stamped by time (-G with
    %H%M%S, past midnight) say nothing of files overwritten."""
    names = [RING_NAME.match(path.rsplit("/", 1)[-1]) for path in paths]
    if len(names) < 2 or not all(names):
        return None
    numbers = [int(m["number"]) for m in names if m]
    if len({(m["name"], len(m["number"])) for m in names if m}) != 1 or numbers[0] == 0:
        return None
    ring_turns = all(b != a if i + 1 in gaps else b in (a + 1, 0)
                     for i, (a, b) in enumerate(zip(numbers, numbers[1:], strict=False)))
    came_round = [n for n in numbers[1:] if n < numbers[0]]
    if not ring_turns or not came_round:
        return None  # in order (files not given, or not written), or no ring's turn: names stamped by time
    oldest, overwritten = paths[0], max(came_round) + 1
    return _finding("files_overwritten", WARNING, f"{clipped_name(oldest)} is the oldest file of a ring that wrapped "
                    f"(tcpdump -W): it is file {numbers[0]} of the ring and files numbered before it hold later "
                    f"packets, so at least {overwritten} file(s) written before it were overwritten; nothing before "
                    f"{iso_time(kept_from)} was kept: what happened then is unknown (brokers and connections "
                    f"begun earlier are seen from then on only)", path=oldest, overwritten=overwritten,
                    kept_from=iso_time(kept_from))


def began_mid_stream(captures: Iterable[Capture], ends: Mapping[str, Mapping[tuple[str, str], ConnectionEnds]],
                     sides: Mapping[tuple[str, str], str], nameservers: Collection[str],
                     brokers: Mapping[tuple[str, str], tuple[Any, ...]] | None = None,
                     stories: Mapping[str, EndpointStory] | None = None,
                     clients: Iterable[Item] = ()) -> list[Item]:
    """One info item per capture holding connections to a NameServer with no SYN where the capture
    first saw them (model/periods.ConnectionEnds.opened false), in its first file or a later one (a
    broker's connection silent through a short first file, tcpdump -G 10: v5-midsplit's broker-a at
    :9877 is first heard in the third): they were open when the capture began, so what was said over
    them before (a broker's first registrations, a client's first lookups) is not in it, and a
    broker's first_seen is the first time the capture saw it, not when it came. Said first, as files
    overwritten are. ``ends``: each file's (by name) connections; ``sides``: each one's server end;
    ``brokers``: who registered over each (client, server) pair of ends (a broker's identity: its
    name and address, the same broker at two NameServers once; one whose name a snap length cut is
    counted by connection); ``stories``: the server endpoints' (model/endpoints.py). A connection
    first seen after its server was seen not running (refusing connections: not started yet, or
    gone) was opened since, its SYN not captured (a capture that dropped packets or was paused:
    v5-gaps' client at a NameServer that started after the capture did), so it is not counted. A
    capture going on past files missing is no capture's start.
    Information, never in the headline: what the report judges is in the capture. Unless one of
    those connections closed within it with no request of its captured and none registered over it
    (``clients``: clients.csv's rows, the requests captured per client): who it was, a broker killed or a
    client gone, the capture cannot tell, nor the report judge its end (v4-wrap's broker-b, killed
    before a request of its was captured): then a warning that says so."""
    found = []
    requests: Counter[tuple[str, str]] = Counter()
    for row in clients:
        requests[(row["client"], row["server"])] += row["requests"] or 0
    for capture in captures:
        if capture.after_missing is not None:
            continue
        path = capture.paths[0]
        older = _open_before(capture, ends, sides, nameservers, stories or {})
        if not older:
            continue
        servers = sorted({sides[key] for key in older})
        who = [(brokers or {}).get((_other_end(key, sides[key]), sides[key])) for key in older]
        registered = len([found for found in who if found is not None])
        identities = {found for found in who if found is not None and found[0] is not None}
        unnamed = len([found for found in who if found is not None and found[0] is None])
        by_connection = f", {unnamed:,} more by connection (name not captured)" if unnamed else ""
        of_brokers = (f", {registered:,} of them brokers' (they registered over them: "
                      f"{_plural(len(identities), 'broker{s}')}{by_connection})" if registered else "")
        were = "was" if len(older) == 1 else "were"
        unjudged = sorted(_other_end(key, sides[key]) for key, broker in zip(older, who, strict=True)
                          if broker is None and not requests[(_other_end(key, sides[key]), sides[key])]
                          and _closed_in(capture, ends, key))
        unknown = (f"; {_plural(len(unjudged), 'connection{s}')} of them closed within the capture with no request "
                   f"of {'its' if len(unjudged) == 1 else 'theirs'} captured ({_first(unjudged)}): who "
                   f"{'it was' if len(unjudged) == 1 else 'they were'}, a broker killed or a client gone, and how "
                   f"{'it' if len(unjudged) == 1 else 'each'} ended, the report cannot judge" if unjudged else "")
        found.append(_finding(
            "began_mid_stream", WARNING if unjudged else INFO, f"{clipped_name(path)}: the capture began mid-stream: "
            f"{_plural(len(older), 'connection{s}')} to NameServer{'s' if len(servers) > 1 else ''} "
            f"{', '.join(servers)} {were} already open (no SYN){of_brokers}; what happened before "
            f"{iso_time(capture.first)} is not shown: a broker's first_seen is the first time it was seen, not "
            f"when it started{unknown}", path=path, connections=len(older),
            broker_connections=registered, brokers=len(identities), brokers_by_connection=unnamed,
            servers=servers, before=iso_time(capture.first), closed_unjudged=unjudged))
    return found


def _open_before(capture: Capture, ends: Mapping[str, Mapping[tuple[str, str], ConnectionEnds]],
                 sides: Mapping[tuple[str, str], str], nameservers: Collection[str],
                 stories: Mapping[str, EndpointStory]) -> list[tuple[str, str]]:
    """The connections to a NameServer a capture holds that were open when it began: no SYN in the
    file it first saw them in, none first seen after their server was seen not running."""
    seen: set[tuple[str, str]] = set()
    older = []
    for path in capture.paths:
        for key, found_ends in ends.get(path, {}).items():
            if key in seen:
                continue
            seen.add(key)
            server = sides.get(key)
            if found_ends.opened or server is None or server not in nameservers:
                continue
            down = _not_running_from(stories.get(server))
            if down is None or found_ends.first < down:
                older.append(key)
    return sorted(older)


def _closed_in(capture: Capture, ends: Mapping[str, Mapping[tuple[str, str], ConnectionEnds]],
               key: tuple[str, str]) -> bool:
    """Whether a connection closed (a FIN or RST, by either end) within the capture's files."""
    return any(found.closed or found.first_close is not None
               for found in (ends.get(path, {}).get(key) for path in capture.paths) if found is not None)


def _not_running_from(story: EndpointStory | None) -> float | None:
    """The first time a server's packets show it not running: an attempt it refused while nothing
    listened (before it started, after it stopped) or its going away; None if they never do."""
    if story is None:
        return None
    times = [first for _, first, _, _ in story.refused] + [outage.down for outage in story.outages]
    return min(times, default=None)


def _other_end(key: tuple[str, str], server: str) -> str:
    return key[1] if key[0] == server else key[0]


def translated_copies(translated: Translated) -> list[Item]:
    """One info item per translation whose connections were captured twice (model/translated.py):
    what each copy was counted as, so that a NameServer behind a published port is one, and what
    the NameServer saw is what the report names."""
    items = []
    for seen, kept, seen_client, kept_client, n in translated.seen_as():
        where = f"{seen} is {kept}" if seen != kept else f"client {seen_client} is {kept_client} at {seen}"
        items.append(_finding("translated_copies", INFO, f"{_plural(n, 'connection{s}')} captured twice, once with "
                              f"translated addresses (NAT: a published port, a container's traffic): {where}; "
                              f"each counted once, as the server saw it ({kept}, client {kept_client})",
                              seen_as=seen, counted_as=kept, client_seen_as=seen_client, client_counted_as=kept_client,
                              connections=n))
    return items


def second_points(points: CapturePoints) -> list[Item]:
    """One info item per server endpoint and pair of captures taken at two points of the same traffic
    (model/capture_points.py): which connections were read from which capture, and how far the clocks
    differ (a warning from SKEWED_S on: times across the two captures' own connections are that far apart)."""
    items = []
    for point in points.points:
        clock = ("" if point.clock_s is None else  # + 0.0: -0.0 (a tiny negative, rounded) is said "+0.000"
                 f"; its clock reads {round(point.clock_s, 3) + 0.0:+,.3f} s against the other's")
        items.append(_finding("same_traffic_twice", WARNING if abs(point.clock_s or 0.0) >= SKEWED_S else INFO,
                              f"{_plural(point.connections, 'connection{s}')} to {point.server} in "
                              f"{_files(point.paths)} are also in {_files(point.kept_paths)} (captured at two "
                              f"points: each read once, from the latter, {_why_read_from(point)}){clock}",
                              server=point.server, paths=list(point.paths), read_from=list(point.kept_paths),
                              connections=point.connections, clock_s=point.clock_s,
                              **({"kept_more": point.fuller} if point.fuller else {})))
    return items


def _why_read_from(point: SecondPoint) -> str:
    """Why the copies were read from that capture: it kept more of their bytes (a snap length cut
    the other's), or it holds most of the server's connections."""
    held = "the capture holding most of that server's connections, or the server's own"
    if not point.fuller:
        return held
    if point.fuller == point.connections:
        return "whose copies a snap length cut less: it kept the bytes the former's lost"
    return f"{point.fuller:,} of them because a snap length cut the former's copies more, the rest as {held}"


def _files(paths: tuple[str, ...]) -> str:
    first = clipped_name(paths[0])
    return first if len(paths) == 1 else f"{first} (and {len(paths) - 1} more file(s) of its rotation)"


def dropped_headline(found: list[Item]) -> str | None:
    """The headline's first words for a capture that dropped packets itself: 'the capture dropped
    12,142 packets: what they held is unknown'."""
    dropped = [item for item in found if item["kind"] == "packets_dropped"]
    if not dropped:
        return None
    return f"the capture dropped {sum(item['dropped'] for item in dropped):,} packets: what they held is unknown"


def encrypted_headline(found: list[Item]) -> str | None:
    """The headline's first words for NameServer traffic the report cannot read because it is
    encrypted: 'encrypted (TLS): 2 connections to 127.0.0.1:9876 cannot be read' (a NameServer with
    tls.server.mode enforcing or permissive, its clients with TLS on; another service's TLS, told
    as information, is not counted)."""
    connections: dict[str, int] = {}  # per endpoint: its TLS connections told one by one
    accepted: dict[str, int] = {}  # per endpoint nothing of which can be read: all it accepted (those among them)
    for item in found:
        if item.get("protocol") != "TLS" or item["severity"] != WARNING:
            continue
        if item["kind"] == "undecodable_connection":
            connections[item["server"]] = connections.get(item["server"], 0) + 1
        elif item["kind"] == "server_unread":
            accepted[item["endpoint"]] = item["accepted"]
    counts = {server: max(connections.get(server, 0), accepted.get(server, 0)) for server in {*connections, *accepted}}
    if not counts:
        return None
    return "encrypted (TLS): " + ", ".join(f"{_plural(count, 'connection{s}')} to {server}" for server, count
                                           in sorted(counts.items())) + " cannot be read"


def missing_headline(found: list[Item]) -> str | None:
    """The headline's first words for a rotated set with files missing: 'files missing from a
    rotated set: 8.4 s not captured'; for a ring that wrapped: 'a ring that wrapped: at least 2
    file(s) overwritten before NAME.pcap2 (kept from ...)'."""
    missing = [item for item in found if item["kind"] == "files_missing"]
    words = [f"files missing from a rotated set: {sum(item['seconds'] for item in missing):,.1f} s not captured"
             + (f" in {len(missing)} gaps" if len(missing) > 1 else "")] if missing else []
    words += [f"a ring that wrapped: at least {item['overwritten']} file(s) overwritten before {item['path']} "
              f"(kept from {item['kept_from']})" for item in found if item["kind"] == "files_overwritten"]
    return " · ".join(words) or None


def cut_headline(found: list[Item]) -> str | None:
    """The headline's first words for a capture a snap length cut: 'packets cut at 200 bytes: N
    frames partly read'; cut so short that a server's traffic cannot be read at all (-s 64: the
    TCP header's options reach past it, no byte of payload kept), 'packets cut at 64 bytes: before
    any frame's header, nothing read' (not "0 frames partly read", as if nothing were lost)."""
    cut = [item for item in found if item["kind"] == "capture_cut"]
    if not cut:
        return None
    at = sorted({item["cut_at"] for item in cut})
    unread = any(item["kind"] == "server_unread" and "cut at" in str(item.get("why")) for item in found)
    return (f"packets cut at {' / '.join(f'{n:,}' for n in at)} bytes: " + (
        "before any frame's header, nothing read" if unread and not cut[0]["cut_frames"] else
        f"{_plural(cut[0]['cut_frames'], 'frame{s}')} partly read"))


def step_headline(found: list[Item]) -> str | None:
    """The headline's first words for a capture whose clock stepped back: the story across the
    step is out of order, whatever the findings after say."""
    steps = [item for item in found if item["kind"] == "clock_stepped_back"]
    if not steps:
        return None
    largest = max(steps, key=lambda item: item["seconds"])
    return (f"packet times step back {largest['seconds']:,.0f} s at {largest['at']}"
            f"{f' (and in {len(steps) - 1} more file(s))' if len(steps) > 1 else ''}: the story across it is out "
            f"of order")


#: per kind: the evidence field naming what a finding counts, and that thing in the summary line
UNITS = {"packets_dropped": ("path", "capture file{s} whose capture dropped packets"),
         "files_missing": ("after", "gap{s} of missing files in a rotated set"),
         "files_overwritten": ("path", "ring{s} that wrapped, oldest files overwritten"),
         "began_mid_stream": ("path", "capture{s} begun with NameServer connections already open"),
         "capture_cut": ("path", "capture file{s} cut by a snap length"),
         "cut_read_elsewhere": ("path", "cut capture file{s} read from another point's copies"),
         "clock_stepped_back": ("path", "capture file{s} whose clock stepped back"),
         "one_way_capture": ("server", "server{s} captured in one direction only"),
         "server_unread": ("endpoint", "server{s} whose traffic cannot be read"),
         "port_checked": ("endpoint", "endpoint{s} only port-checked"),
         "other_port_traffic": ("port", "port{s} of RocketMQ traffic left out by --port"),
         "other_server": ("endpoint", "other RocketMQ server{s} captured (not judged)"),
         "translated_copies": ("seen_as", "address{s} whose connections were captured again translated (NAT)"),
         "same_traffic_twice": ("server", "server{s} whose connections two captures both hold (two capture points)"),
         "bad_input": ("path", "bad input file{s}"),
         "records_not_read": ("path", "capture file{s} with records of a link type not read"),
         "broker_connection_closed": ("broker", "broker{s} whose connection closed without unregistering"),
         "end_across_clock_step": ("broker", "broker{s} whose connection closed across a clock step"),
         "retry_topic_lookup": ("topic", "retry topic{s} looked up at consumer start"),
         "topic_made_on_first_use": ("topic", "topic{s} looked up before being made"),
         "broker_unregistered": ("broker", "broker{s} unregistered"),
         "broker_alive_at_end": ("broker", "broker{s} alive at the capture's end"),
         "broker_alive_before_missing": ("broker", "broker{s} alive where files go missing"),
         "server_restart": ("server", "NameServer restart{s}"), "server_stopped": ("server", "NameServer{s} stopped"),
         "failover": ("broker_name", "fail-over{s}"), "topic_deleted": ("topic", "topic{s} deleted"),
         "topics_deleted_from_broker": ("broker", "broker{s} whose topics an operator deleted"),
         "write_perm_wiped": ("broker_name", "write-permission wipe{s}"),
         "write_perm_added": ("broker_name", "write-permission restore{s}"),
         "refused_connections": ("endpoint", "endpoint{s} refusing connections"),
         "address_in_sessions": ("broker_addr", "note{s} of an address that was another broker in another session"),
         "heartbeat_expired": ("broker", f"broker{{s}} expired by the NameServer ({EXPIRY_SECONDS} s of silence)"),
         "expired_or_reconnected": ("broker", "broker{s} expired or back over another connection (addresses not "
                                    "captured)"),
         "crc_failure": ("broker", "broker{s} failing the body CRC"),
         "registration_refused": ("broker", "broker{s} refused registration"),
         "heartbeat_near_expiry": ("broker", f"broker{{s}} silent over {NEAR_EXPIRY_S} s"),
         "silence_not_captured": ("broker", "broker{s} whose silence is bytes the capture missed"),
         "topic_count_drop": ("broker", "broker{s} losing topics"),
         "data_version_backwards": ("broker", "broker{s} restarted"),
         "broker_id_change": ("broker", "broker{s} changing brokerId"),
         "broker_address_change": ("broker_name", "broker{s} moving address"),
         "topic_not_exist": ("topic", "unknown topic{s}"), "response_code": ("code_name", "kind{s} of error answer"),
         "turned_away": ("client", "client{s} turned away by a NameServer (closed with no answer)"),
         "unanswered": ("code_name", "request code{s} never answered"),
         "slow_answer": ("code_name", "slow request code{s}"),
         "undecodable_connection": ("connection", "undecodable connection{s}"),
         "controller_undecodable": ("why", "kind{s} of undecodable controller call"),
         "unpaired_error_answer": ("response_name", "kind{s} of error answer to a request not captured"),
         "master_elected": ("broker_name", "master election{s} by a controller")}
#: kinds whose noun names an event, not a thing: the headline counts each (two restarts of one
#: NameServer are "2 NameServer restarts"); the others count the distinct things UNITS names
EVENT_KINDS = frozenset({"server_restart", "failover", "master_elected", "write_perm_wiped", "write_perm_added"})
#: a request's name or topic a snap length cut (its frame's first bytes were kept, not its fields)
NOT_CAPTURED = "a {} whose name was not captured"
#: the same in a list of names
NAME_CUT = "(name not captured)"
#: evidence listed in a finding's one line before "and N more" (all of it is in ``evidence``)
LISTED = 6


#: the headline's first words when no endpoint was asked a NameServer's requests (the command's error says it too):
#: "nothing needs attention" alone would read as a healthy cluster
NO_NAMESERVER_FOUND = "no NameServer traffic found (no endpoint was asked a NameServer's requests)"
#: the same when a server's connections carried bytes none of which can be read (cut, encrypted): the
#: requests may have been a NameServer's, so not "no endpoint was asked"
NO_NAMESERVER_READ = "no NameServer traffic read (what servers were asked cannot be read: below)"


def attention(found: list[Item], nameservers: int = 1) -> Item:
    """summary.json's ``attention`` line and ``findings``: one finding per kind and subject (the
    request code, and response code, of call findings), most severe first, its evidence inside;
    the line leads with what the capture could not show (no NameServer in it, packets it dropped,
    traffic encrypted, files of a rotated set missing, packets a snap length cut, a clock stepped back)."""
    grouped: dict[tuple[Any, ...], list[Item]] = {}
    for item in found:
        grouped.setdefault((item["kind"], _subject(item)), []).append(item)
    problems = [_problem(kind, subject, items) for (kind, subject), items in grouped.items()]
    problems.sort(key=lambda p: (SEVERITIES.index(p["severity"]), KINDS.index(p["kind"]), -len(p["evidence"]),
                                 -sum(item.get("count", 1) for item in p["evidence"]), p["message"]))
    # a server speaking HTTP was read: it is a web server, no NameServer whose traffic is hidden (TLS, a cut)
    unread = any(item["kind"] == "server_unread" and item["severity"] == WARNING and item.get("protocol") != HTTP
                 for item in found)
    leads = [NO_NAMESERVER_READ if unread else NO_NAMESERVER_FOUND] if not nameservers else []
    leads += filter(None, [dropped_headline(found), encrypted_headline(found), missing_headline(found),
                           cut_headline(found), step_headline(found)])
    headline = _headline(problems)
    line = " · ".join([*leads, headline] if headline else leads) or "nothing needs attention"
    return {"attention": line, "findings": problems}


def _subject(item: Item) -> str | None:
    if item["kind"] == "bad_input":  # notes a directory brought along never share a critical line
        return ("quiet" if _quiet_item(item) else "notes") if item["severity"] == INFO else None
    if item["kind"] in ("undecodable_connection", "server_unread") and item["severity"] == INFO:
        return "another service"  # besides_nameservers: never counted in a warning's line
    if item["kind"] == "response_code":
        return f"{item['code_name']} {item['response_name']}"
    return item["code_name"] if item["kind"] in ("unanswered", "slow_answer") else None


def _problem(kind: str, subject: str | None, items: list[Item]) -> Item:
    """One finding of ``items``; its line and theirs with every control character shown escaped
    (escapes.py, as the server's log shows them): they name what peers chose (brokers, clusters,
    topics, remarks), and a raw ESC or CR in one rewrote the data engineer's terminal from the
    console's lines; a name past escapes.SHOWN_MAX characters is clipped where it was put into them
    (clipped_name, clipped_repr); the evidence's own fields keep every value exact."""
    severity = min((item["severity"] for item in items), key=SEVERITIES.index)
    named = len({str(item.get(UNITS[kind][0])) for item in items})
    units = len(items) if kind in EVENT_KINDS else len({_unit(kind, item) for item in items})
    message = items[0]["message"] if len(items) == 1 else _MESSAGES.get(kind, _listed)(items)
    # one broker is one, whatever names it
    by_connection, by_name = _counted_by(kind, items) if units > 1 or named > 1 else (0, 0)
    if (by_connection or by_name) and len(items) > 1:
        message = message.replace(_plural(named, UNITS[kind][1]), _counted(units, kind, by_connection, by_name), 1)
    failed = [lookup for item in items for lookup in item.get("failed_lookups", ())]
    if failed and len(items) > 1:  # one item says them in its own line
        message += (f"; then {sum(f['count'] for f in failed):,} route lookup(s) answered TOPIC_NOT_EXIST for "
                    f"{_tally(failed, 'topic', clients=True)}")
    for item in items:
        item["message"] = escaped(item["message"])
    problem = {"kind": kind, "severity": severity, "subject": subject, "units": units, "message": escaped(message),
               "evidence": items}
    if by_connection:  # only where some were: every other capture's summary as it was
        problem["by_connection"] = by_connection
    if by_name:
        problem["by_name"] = by_name
    return problem


def _unit(kind: str, item: Item) -> str | tuple[str, ...]:
    """What one unit of a finding is: its UNITS field, except a broker a snap length left without its
    address whose name was read (``identity``: cluster / name / id), which is that identity, so that
    each new connection it registers over after a reconnect is not one more broker."""
    identity = item.get("identity") if UNITS[kind][0] == "broker" else None
    return str(item.get(UNITS[kind][0])) if identity is None else ("identity", identity)


def _counted_by(kind: str, items: list[Item]) -> tuple[int, int]:
    """How many of a broker finding's brokers are named by their connection (a snap length cut their
    address and name: is_cut_broker_addr, no ``identity``), and how many by the name read without
    their address (``identity``). Each name by connection is one connection, so one broker registered
    with two NameServers, or back on a new connection, is two of them (or one of them and a broker
    named by its address); one by name is one broker over all its connections."""
    if UNITS[kind][0] != "broker":
        return 0, 0
    cut = [item for item in items if is_cut_broker_addr(item.get("broker_addr"))]
    return (len({str(item.get("broker")) for item in cut if item.get("identity") is None}),
            len({item["identity"] for item in cut if item.get("identity") is not None}))


def _counted(n: int, kind: str, by_connection: int, by_name: int = 0) -> str:
    """'2 brokers (2 counted by connection) whose …': a count of names that may be fewer brokers;
    '1 broker (1 counted by name, its address not captured) whose …': one over its connections."""
    said = [f"{by_connection:,} counted by connection"] if by_connection else []
    said += [f"{by_name:,} counted by name, {'its' if by_name == 1 else 'their'} address not captured"] if by_name \
        else []
    if not said:
        return _plural(n, UNITS[kind][1])
    noun = UNITS[kind][1].replace("broker{s}", f"broker{{s}} ({'; '.join(said)})", 1)
    return _plural(n, noun)


def _headline(problems: list[Item]) -> str:
    """E.g. '2 critical: 1 broker failing the body CRC, ... · 6 warnings: 8 unknown topics, ...'
    (what is only information is listed among the findings, not counted here)."""
    parts = []
    for severity in (CRITICAL, WARNING):
        units: Counter[Any] = Counter()
        by_connection: Counter[Any] = Counter()
        by_name: Counter[Any] = Counter()
        for p in problems:
            if p["severity"] == severity:
                units[p["kind"]] += p["units"]
                by_connection[p["kind"]] += p.get("by_connection", 0)
                by_name[p["kind"]] += p.get("by_name", 0)
        if units:
            rows = sum(p["severity"] == severity for p in problems)
            parts.append(f"{_plural(rows, CRITICAL if severity == CRITICAL else 'warning{s}')}: " + ", ".join(
                _counted(n, kind, by_connection[kind], by_name[kind]) for kind, n in units.items()))
    return " · ".join(parts)


def _plural(n: int, noun: str) -> str:
    """'1 broker', '3 brokers' of 'broker{s}'."""
    return f"{n:,} {noun.format(s='' if n == 1 else 's')}"


def _tally(items: list[Item], key: str, weight: str | None = "count", unit: str = "x", clients: bool = False,
           show: Callable[[object], str] = clipped_name, missing: str = "(none)") -> str:
    """'a (6x, 4 clients), b (2x), c, ... and 3 more', most first; once is said by no count; an item
    without ``key`` is said as ``missing``; each name by ``show`` (a long one clipped: clipped_name)."""
    counts: Counter[Any] = Counter()
    who: dict[object, set[Any]] = {}
    for item in items:
        counts[item.get(key)] += item[weight] if weight else 1
        who.setdefault(item.get(key), set()).add(item.get("client"))
    shown = []
    for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0]))):
        notes = ([f"{n:,}{unit}"] if n > 1 or unit != "x" else []) + (
            [_plural(len(who[name]), "client{s}")] if clients and len(who[name]) > 1 else [])
        shown.append(f"{missing if name is None else show(name)}" + (f" ({', '.join(notes)})" if notes else ""))
    return _first(shown)


def _first(shown: list[str]) -> str:
    return ", ".join(shown[:LISTED]) + (f" and {len(shown) - LISTED} more" if len(shown) > LISTED else "")


def _silences(items: list[Item]) -> str:
    """Brokers silent too long, the longest silence first: 'label (201.6 s), label (2x, longest 94.6 s)'."""
    longest: dict[str, list[Any]] = {}
    for item in items:
        entry = longest.setdefault(item["broker"], [0, 0.0])
        entry[0], entry[1] = entry[0] + 1, max(entry[1], item["seconds"])
    shown = [f"{clipped_label(broker)} ({f'{n}x, longest ' if n > 1 else ''}{seconds:,.1f} s)"
             for broker, (n, seconds) in sorted(longest.items(), key=lambda kv: (-kv[1][1], kv[0]))]
    return f"{_plural(len(longest), UNITS[items[0]['kind']][1])}: {_first(shown)}"


def _listed(items: list[Item]) -> str:
    """'N things: a, b (2x), ...'. A name a snap length cut is said so; such items cannot be told
    apart (two deletions of an uncaptured topic may be of one topic or of two): at least one more."""
    kind = items[0]["kind"]
    field, noun = UNITS[kind]
    known = {str(i.get(field)) for i in items if i.get(field) is not None}
    cut = len(known) < len({str(i.get(field)) for i in items})
    counted = len(items) if kind in EVENT_KINDS else len(known) + cut
    return (f"{'at least ' if cut and kind not in EVENT_KINDS else ''}{_plural(counted, noun)}: "
            + _tally(items, field, "count" if kind in ("crc_failure", "registration_refused") else None,
                     show=clipped_label if field == "broker" else clipped_name, missing=NAME_CUT))


def _topics(items: list[Item]) -> str:
    clients = {item["client"] for item in items}
    return (f"TOPIC_NOT_EXIST for {_plural(len({i['topic'] for i in items}), 'topic{s}')} from "
            f"{_plural(len(clients), 'client{s}')}: {_tally(items, 'topic', clients=True, missing=NAME_CUT)}")


def _answers(items: list[Item]) -> str:
    first = items[0]
    requesters: Counter[Any] = Counter()
    for item in items:
        requesters.update(item["requesters"])
    return (f"{first['code_name']} answered {first['response_name']} ({first['response_code']}) "
            f"{sum(i['count'] for i in items):,}x to {_plural(len(requesters), 'client{s}')}: "
            f"{_tally(items, 'remark', show=clipped_repr)}")


def _unanswered(items: list[Item]) -> str:
    return (f"{items[0]['code_name']}: {sum(i['count'] for i in items):,} request(s) never answered, from "
            f"{_plural(len(items), 'client{s}')}: {_tally(items, 'client')}")


def _undecodable(items: list[Item]) -> str:
    protocols = {item.get("protocol") for item in items}
    spoken = _spoken(protocols.pop()) if len(protocols) == 1 else ""
    return (f"{_plural(len(items), 'connection{s}')} carry bytes that are no remoting frame (the rest of that "
            f"direction is not decoded){spoken}: "
            f"{_tally(items, 'connection', 'bytes', ' bytes', show=shown_connection)}")


def _inputs(items: list[Item]) -> str:
    """Notes a directory brought along (steps, logs, TRUTH files: _input_severity) are no bad input."""
    if any(item["severity"] != INFO for item in items):
        return _listed(items)
    if all(map(_quiet_item, items)):
        return quiet_files([item["path"] for item in items])
    return (f"{_plural(len(items), 'file{s}')} beside the captures that are not captures (notes, logs), left out: "
            + _tally(items, "path", None))


def _quiet_item(item: Item) -> bool:
    """A bad_input item of a quiet_file: the only empty input that is information (_input_severity)."""
    return bool(item["problem"] == inputs.EMPTY and item["severity"] == INFO)


_MESSAGES = {"heartbeat_near_expiry": _silences, "silence_not_captured": _silences,
             "topic_not_exist": _topics, "bad_input": _inputs,
             "response_code": _answers, "unanswered": _unanswered, "undecodable_connection": _undecodable}


def _unknown_topic(client: Any, topic: Any, count: int, first: Any, last: Any, made: Any,
                   registered: float | None = None) -> Item:
    """A user topic answered TOPIC_NOT_EXIST: a warning, unless its route was served after every such
    answer (``made``), or a broker registered it with those NameServers after them (``registered``):
    then it did not exist yet, the usual first send with autoCreateTopicEnable."""
    facts = {"topic": topic, "client": client, "count": count, "first": _iso(first), "last": _iso(last)}
    if made is None and registered is None:
        named = NOT_CAPTURED.format("topic") if topic is None else clipped_repr(topic)
        return _finding("topic_not_exist", WARNING, f"{client} asked {count}x for the route of {named}: "
                        f"TOPIC_NOT_EXIST", **facts)
    since = (f"its route served from {_iso(made)}" if made is not None else
             f"a broker's registration brought it to the NameServer at {_iso(registered)}")
    return _finding("topic_made_on_first_use", INFO, f"{client} asked {count}x for the route of "
                    f"{clipped_repr(topic)} before it existed (TOPIC_NOT_EXIST until {_iso(last)}, {since}): "
                    f"{_made_by(topic)}", found_from=_iso(made),
                    registered_at=_iso(registered), **facts)


def _made_by(topic: Any) -> str:
    """Who makes a topic that did not exist at first: a 5.x proxy its own heartbeat syncer topic
    (system_topics.PROXY_HEARTBEAT_SYNCER_TOPIC) as it starts, else most often a broker on first send."""
    if topic == PROXY_HEARTBEAT_SYNCER_TOPIC:
        return ("a 5.x proxy's own topic (its heartbeat syncer's), which the proxy makes on its cluster's "
                "brokers as it starts, after this first lookup")
    return "a topic made on first use, e.g. by the broker's autoCreateTopicEnable"


def _group_topic_gone(client: Any, topic: Any, count: int, first: Any, last: Any, had: float) -> Item:
    """A consumer group's retry or dead-letter topic answered TOPIC_NOT_EXIST to a client after that
    client had been served its route: not a consumer's start-up lookup but a route gone (its brokers
    left, or it was deleted) with no cause the replay saw (a cut capture keeps no registration's topics)."""
    return _finding("topic_not_exist", WARNING, f"{client} asked {count}x for the route of {clipped_repr(topic)}: "
                    f"TOPIC_NOT_EXIST, the last at {_iso(last)}, after this client had been served its route at "
                    f"{_iso(had)} (a consumer group's retry or dead-letter topic, not only its start-up lookup: the "
                    f"route went away and what took it is not in the capture)", topic=topic, client=client,
                    count=count, first=_iso(first), last=_iso(last), served_to_client=_iso(had))


def _made_after(routes_found: dict[Any, float], topic: Any, last_unknown: Any) -> Any:
    """When the topic's route was first served, if every TOPIC_NOT_EXIST (up to ``last_unknown``) came
    before it: the topic did not exist yet. None if it was never served, or was unknown again after."""
    served = routes_found.get(topic)
    return served if served is not None and last_unknown <= served else None


def _registered_after(explained: set[int], lookups: list[Item], client: Any, topic: Any,
                      last_unknown: Any) -> float | None:
    """When a broker first registered the topic with the NameServers whose TOPIC_NOT_EXIST to
    ``client`` no other finding tells, where the replay saw each of them take it into its tables
    after those answers (their cause ``made_later``: replay.judge_lookups): the latest of those
    times, if after ``last_unknown``. A producer that sends by the default topic once its lookup
    failed makes the topic at its broker (autoCreateTopicEnable), whose next registration carries
    it, whether or not a lookup of it is captured since (v4-ops-late's TopicBusy: the producer was
    done before its next lookup). None if any of those NameServers did not."""
    causes = [lookup["cause"] for index, lookup in enumerate(lookups)
              if lookup["client"] == client and lookup["topic"] == topic and index not in explained]
    if not causes or any(cause is None or cause["kind"] != "made_later" for cause in causes):
        return None
    registered = max(_seconds(cause["t"]) for cause in causes)
    return registered if last_unknown <= registered else None


#: the name of a response code that neither the NameServer's nor a controller's codes hold
UNKNOWN_CODE = "unknown"


def response_name(code: int) -> str:
    """A response code's Java name: the NameServer's (remoting ResponseCode) or a controller's
    (ControllerResponseCode, CONTROLLER_NOT_LEADER 2007...); any other is ``unknown``, its number
    said beside it (the response-code table's own column, said_code), never the bare number for a
    name (a table whose name column repeats the code reads as one with nothing known in it)."""
    for codes in (ResponseCode, ControllerResponseCode):
        try:
            return codes(code).name
        except ValueError:
            continue
    return UNKNOWN_CODE


def said_code(code: int) -> str:
    """'TOPIC_NOT_EXIST (17)', or '2099 (unknown)' for a code no enum the report reads names."""
    name = response_name(code)
    return f"{code} ({name})" if name == UNKNOWN_CODE else f"{name} ({code})"


def _is_topic_not_exist(name: str, response: int) -> bool:
    return name == code_name(RequestCode.GET_ROUTEINFO_BY_TOPIC) and response == ResponseCode.TOPIC_NOT_EXIST


def _said_elsewhere(name: str, response: int) -> bool:
    """Answers a more specific finding already says: unknown topics and refused registrations."""
    return _is_topic_not_exist(name, response) or name == code_name(RequestCode.REGISTER_BROKER)


def _unpaired_error_answers(groups: Groups) -> Iterable[Item]:
    """Answers with a non-zero code that no call holds (their request not captured, a capture begun
    late, or its opaque or code a snap length cut), by response code: at -s 96 a consumer's
    TOPIC_NOT_EXIST answers were nowhere among the findings. Their request, topic and remark are
    unknown: said as information, never as a topic unknown or a request refused."""
    paired: Counter[Any] = Counter()
    for (_, response, _, client, _), (count, *_) in groups.get(ANSWER_CODES, {}).items():
        paired[(response, client)] += count
    by_code: dict[int, list[tuple[str, int, float, float]]] = {}
    for (response, client), (count, first, last, _) in sorted(groups.get(ERROR_ANSWERS, {}).items(), key=_by_key):
        left = count - paired[(response, client)]
        if left > 0:
            by_code.setdefault(response, []).append((client, left, first, last))
    for response, rows in sorted(by_code.items()):
        name, total = response_name(response), sum(left for _, left, _, _ in rows)
        clients = {client: left for client, left, _, _ in rows}
        listed = ", ".join(f"{client} ({left}x)" for client, left in sorted(clients.items(), key=lambda c: -c[1]))
        yield _finding("unpaired_error_answer", INFO, f"{total:,} answer(s) {said_code(response)} paired with no "
                       f"request (not captured, or an opaque cut): which request and topic each answers is unknown; "
                       f"to {listed}", response_code=response,
                       response_name=name, count=total, requesters=clients,
                       first=_iso(min(first for *_, first, _ in rows)), last=_iso(max(last for *_, last in rows)))


def _by_key(item: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple("" if part is None else str(part) for part in item[0])


def response_groups(groups: Groups) -> dict[tuple[Any, ...], Item]:
    """Answers with a non-zero code by (request code name, response code, remark), with requesters."""
    merged: dict[tuple[Any, ...], Item] = {}
    for (name, response, remark, client, _), (count, first, last, _) in sorted(
            groups.get(ANSWER_CODES, {}).items(), key=_by_key):
        entry = merged.setdefault((name, response, remark), {"count": 0, "first": first, "last": last,
                                                             "requesters": {}})
        entry["count"] += count
        entry["first"], entry["last"] = min(entry["first"], first), max(entry["last"], last)
        entry["requesters"][client] = entry["requesters"].get(client, 0) + count
    return merged


def _broker_findings(broker: Item, deletions: Sequence[Item] = (), named: StayNamer | None = None,
                     missing_from: Collection[str] = (), stepped: Sequence[tuple[float, float]] = ()
                     ) -> Iterable[Item]:
    """What one broker stay's story and silences tell, the stay named by ``named`` (at_nameserver:
    with its NameServer where the run's brokers were seen at several); ``missing_from``: when each
    gap of missing files begins (files_missing); ``stepped``: the times a clock stepped back over
    in a file, (stepped to, stepped from): stamped twice, before the step and after it."""
    addr = stay_fields(broker)
    shown = clipped_label(addr["broker"])  # the field keeps the label whole; a line shows it clipped
    label = shown if named is None else named(shown, broker)  # the field: the broker alone
    if broker["registrations"]:  # an address only named by other requests has no story of its own
        across = _across_step(broker, stepped)
        yield from (_story(broker, label, addr, missing_from) if across is None else
                    _end_across_step(broker, label, addr, across))
    for gap in broker["gaps"]:  # a silence past the expiry is the stay's end (the replay's expiry): said above
        when = f"from {iso_time(gap['from'])} to {iso_time(gap['to'])}" + (" (capture end)" if gap["open"] else "")
        if gap.get("missed"):  # the capture's silence, not the broker's (liveness: CAPTURE_MISSED)
            yield _finding("silence_not_captured", INFO, f"{label}: {gap['seconds']:,.1f} s without a captured "
                           f"sign of life {when}: its connection carried {gap['missed']:,} bytes the capture "
                           f"missed then (the capture's silence, not the broker's)", **addr, **_gap(gap),
                           missed_bytes=gap["missed"])
        elif gap.get("missed_in"):  # silent over NEAR_EXPIRY_S for certain, and bytes the capture missed in it
            yield _finding("heartbeat_near_expiry", WARNING, f"{label}: silent {gap['seconds']:,.1f} s {when} "
                           f"(over {NEAR_EXPIRY_S} s, half the expiry), save {gap['missed_in']:,} bytes of its "
                           f"connection the capture missed in it: whether those held a heartbeat is unknown, so no "
                           f"expiry is told", **addr, **_gap(gap), missed_bytes=gap["missed_in"])
        elif not gap["expired"]:
            yield _finding("heartbeat_near_expiry", WARNING, f"{label}: silent {gap['seconds']:,.1f} s {when} "
                           f"(over {NEAR_EXPIRY_S} s, half the expiry)", **addr, **_gap(gap))
    if broker["crc_failure_times"]:
        times = broker["crc_failure_times"]
        yield _finding("crc_failure", CRITICAL, f"{label}: {len(times)} registration(s) failed the body CRC "
                       f"(first {iso_time(times[0])})", **addr, count=len(times), times=[iso_time(t) for t in times])
    refused = [r for r in broker["refused"] if not r["crc_failure"]]  # CRC failures: said above
    if refused:
        codes = Counter(said_code(r["response_code"]) for r in refused)
        yield _finding("registration_refused", CRITICAL, f"{label}: {len(refused)} registration(s) refused "
                       f"({', '.join(f'{n}x {c}' for c, n in sorted(codes.items()))}; first "
                       f"{iso_time(refused[0]['t'])})", **addr, count=len(refused),
                       events=[{"t": iso_time(r["t"]), "response_code": r["response_code"]} for r in refused])
    for drop in broker["topic_drops"]:
        removed = drop.get("removed") or []
        facts = {**addr, "t": iso_time(drop["t"]), "topics_from": drop["from"], "topics_to": drop["to"],
                 "removed": removed}
        causes = _deleted_by_operator(drop, deletions, broker["server"])
        if causes:
            told = "; ".join(f"{clipped_repr(d['topic'])} deleted by {d['client'] or '?'} at {d['t']} "
                             f"(DELETE_TOPIC_IN_NAMESRV at {d['server']})" for d in causes)
            yield _finding("topics_deleted_from_broker", INFO, f"{label}: topics {drop['from']:,} -> {drop['to']:,} "
                           f"at {iso_time(drop['t'])}: {told}: an operator's deletion, not a loss", **facts,
                           deleted=[{key: d[key] for key in ("topic", "t", "client", "server")} for d in causes])
            continue
        gone = f" ({_first([clipped_repr(t) for t in removed])} gone)" if removed else ""
        yield _finding("topic_count_drop", WARNING, f"{label}: topics {drop['from']:,} -> {drop['to']:,} at "
                       f"{iso_time(drop['t'])}{gone}", **facts)
    for back in broker["version_backwards"]:
        yield _finding("data_version_backwards", WARNING, f"{label}: data version counter {back['from']} -> "
                       f"{back['to']} at {iso_time(back['t'])} (broker restarted?)", **addr, t=iso_time(back["t"]),
                       counter_from=back["from"], counter_to=back["to"], timestamp_from=back["data_version_ts_from"],
                       timestamp_to=back["data_version_ts_to"])


def stay_fields(broker: Item) -> Item:
    """What every finding of a broker stay names it by: its label, address and session, and where a
    snap length cut its address but not its name, its ``identity`` (broker_identity: _unit counts it)."""
    fields = {"broker": broker_label(broker), "broker_addr": broker["broker_addr"], "session": broker["session"]}
    if is_cut_broker_addr(broker["broker_addr"]) and broker["broker_name"] is not None:
        fields["identity"] = broker_identity(broker)
    return fields


def _across_step(broker: Item, stepped: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """The clock step whose twice-stamped times the stay's last silence (from its last heartbeat to
    its connection's close) reaches into, if its connection closed: packets stamped there may have
    come before the step or after it, so the silence is not measured."""
    if not stepped or broker["ended"] not in ("connection_closed", "expired"):
        return None
    at, last = broker["ended_at"], broker["last_alive"]
    if at is None or last is None:
        return None
    return next(((to, was) for to, was in stepped if last <= was and at >= to), None)


def _end_across_step(broker: Item, label: str, addr: Item, across: tuple[float, float]) -> Iterable[Item]:
    """A stay whose connection closed across a clock's step back: neither a crash (critical) nor an
    expiry is told. A capture whose clock stepped back 85 s while a broker was paused: the
    NameServer's idle close 120 s after its last heartbeat was stamped 31 s after it, and the report
    said 'connection closed without UNREGISTER_BROKER ... a crash or a kill' (critical)."""
    at = broker["ended_at"]
    to, was = across
    yield _finding("end_across_clock_step", WARNING, f"{label}: connection closed at {iso_time(at)} as stamped "
                   f"({broker['closed']}; last heartbeat {_iso(broker['last_alive'])}), across the clock's step "
                   f"back (from {iso_time(was)} to {iso_time(to)}: times between were stamped twice): how long it "
                   f"was silent, and whether this was the NameServer's expiry, a crash or a kill, is unknown",
                   **addr, t=iso_time(at), closed=broker["closed"], last_alive=_iso(broker["last_alive"]),
                   server=broker["server"], stepped_from=iso_time(was), stepped_to=iso_time(to))


def _expired_or_back(broker: Item, label: str, addr: Item) -> Item:
    """An expiry of a broker named by its connection that may be none (replay._may_be_back): brokers
    named so too first registered over other connections within its silence, and with the addresses
    cut, whether one of them was this broker back, renewed at the NameServer, cannot be told. Said so,
    with them, rather than as an expiry the NameServer's log may not have (a broker whose host changed
    its IP: back over a connection from its new address, its old connection closed idle a minute later)."""
    at, silence = broker["ended_at"], broker["silence_s"]
    how = (f"the NameServer closed its connection after {silence:,.1f} s of silence" if broker["closed"] else
           f"silent {silence:,.1f} s: the NameServer's scan removes it")
    back, ending = broker["maybe_back_as"], "this close" if broker["closed"] else "its scan then"
    named = ", ".join(f"{clipped_name(b['broker'])} at {iso_time(b['t'])}" for b in back[:3]) + (
        f" and {len(back) - 3} more" if len(back) > 3 else "")
    return _finding("expired_or_reconnected", WARNING, f"{label}: {how} at {iso_time(at)} (last heartbeat "
                    f"{_iso(broker['last_alive'])}): expired, unless it registered again over another connection "
                    f"meanwhile, as {named} did: a snap length cut the addresses, so which broker each connection "
                    f"registers cannot be told (the NameServer keys brokers by address: one back over a new "
                    f"connection is renewed, and {ending} removed nothing)", **addr, t=iso_time(at),
                    silence_s=round(silence, 3), seconds=round(silence, 3),
                    **{"from": iso_time(at - silence), "to": iso_time(at)}, open=False,
                    last_alive=_iso(broker["last_alive"]), server=broker["server"], closed=broker["closed"],
                    maybe_back_as=[{"broker": b["broker"], "t": iso_time(b["t"])} for b in back])


def _story(broker: Item, label: str, addr: Item, missing_from: Collection[str] = ()) -> Iterable[Item]:
    """How the broker's stay ended, as the NameServer's replay says (analysis/replay.py). A stay alive
    where files of a rotated set go missing (``missing_from``) is not alive at the capture's end: its
    capture ended there, and what became of it in the gap is unknown (the files after it tell a stay
    of their own)."""
    ended, at = broker["ended"], broker["ended_at"]
    if ended == "connection_closed":
        yield _finding("broker_connection_closed", CRITICAL, f"{label}: connection closed without UNREGISTER_BROKER "
                       f"at {iso_time(at)} ({broker['closed']}; last heartbeat {_iso(broker['last_alive'])}): "
                       f"a crash or a kill; the NameServer removed it from its routes at once", **addr,
                       t=iso_time(at), closed=broker["closed"], last_alive=_iso(broker["last_alive"]),
                       registered_again=_iso(broker["registered_again"]), server=broker["server"],
                       nameserver="removed the broker from its routes at once (onChannelDestroy)")
    elif ended == "expired" and broker.get("maybe_back_as"):
        yield _expired_or_back(broker, label, addr)
    elif ended == "expired":
        how = (f"the NameServer closed its connection after {broker['silence_s']:,.1f} s of silence"
               if broker["closed"] else f"silent {broker['silence_s']:,.1f} s: the NameServer's scan removes it")
        again = broker["registered_again"]
        back = ("" if again is None else f"; back {again - at:,.1f} s later: registered again at {iso_time(again)} "
                f"(a stay of its own: brokers.csv has a row for each)")
        yield _finding("heartbeat_expired", WARNING, f"{label}: expired at {iso_time(at)}: {how} (over the "
                       f"{EXPIRY_SECONDS} s expiry; last heartbeat {_iso(broker['last_alive'])}){back}", **addr,
                       t=iso_time(at), silence_s=round(broker["silence_s"], 3), seconds=round(broker["silence_s"], 3),
                       **{"from": iso_time(at - broker["silence_s"]), "to": iso_time(at)}, open=False,
                       last_alive=_iso(broker["last_alive"]), server=broker["server"], closed=broker["closed"],
                       registered_again=_iso(again), back_after_s=None if again is None else round(again - at, 3))
    elif ended == "unregistered":
        yield _finding("broker_unregistered", INFO, f"{label}: unregistered at {iso_time(at)} (a clean stop)",
                       **addr, t=iso_time(at))
    elif ended == "alive":
        silent = broker["trailing_s"] or 0.0
        ended = _iso(broker["last_alive"] + silent) if broker["last_alive"] is not None else "?"
        if ended in missing_from:
            yield _finding("broker_alive_before_missing", INFO, f"{label}: alive at {ended}, where files of the "
                           f"rotated set go missing (last heartbeat {_iso(broker['last_alive'])}, {silent:,.1f} s "
                           f"before): what became of it while nothing was captured is unknown", **addr,
                           last_alive=_iso(broker["last_alive"]), seconds=round(silent, 6), t=ended)
            return
        yield _finding("broker_alive_at_end", INFO, f"{label}: alive when its capture ended at {ended} (last "
                       f"heartbeat {_iso(broker['last_alive'])}, {silent:,.1f} s before)", **addr,
                       last_alive=_iso(broker["last_alive"]), seconds=round(silent, 6))


def endpoint_rows(stories: dict[str, Any], nameservers: set[str], served: Counter[Any],
                  controller_codes: frozenset[int] = frozenset()) -> list[Item]:
    """summary.json's ``endpoints``: every server endpoint found, what it is (NameServer,
    controller: asked ``controller_codes``, other: by the requests it was asked), its outages and
    refused attempts."""
    rows = []
    for endpoint, story in sorted(stories.items()):
        asked = {code for (server, code), n in served.items() if server == endpoint and n}
        kind = ("nameserver" if endpoint in nameservers else "controller" if asked & controller_codes
                else "other" if asked else "unknown")
        rows.append({"endpoint": endpoint, "kind": kind, "first": iso_time(story.first), "last": iso_time(story.last),
                     "accepted": story.accepted, "empty": story.empty, "first_accepted": _iso(story.first_accepted),
                     "requests": sum(n for (server, _), n in served.items() if server == endpoint),
                     "outages": [{"down": iso_time(o.down), "up": _iso(o.up), "closed": o.closed,
                                  "refused": o.refused, "unseen": o.unseen,
                                  # only where another address of the same listener told it: the rest as they were
                                  **({"seen_as": o.seen_as} if o.seen_as else {}),
                                  **_down_range_row(o), **_also_down_row(o)} for o in story.outages],
                     "refused": [{"count": n, "first": iso_time(a), "last": iso_time(b), "when": when}
                                 for n, a, b, when in story.refused]})
        if story.turned_away:  # only where there were: every other capture's summary as it was
            rows[-1]["turned_away"] = [{"client": client, "t": iso_time(t)}
                                       for client, t in sorted(story.turned_away.items())]
    return rows


def _one_listener_told(endpoints: list[Item]) -> tuple[set[tuple[str, str]], dict[tuple[str, str], list[str]]]:
    """Of the outages a listener's other addresses share (model/endpoints._one_listener): the
    (endpoint, down) that are told with the endpoint whose packets told them (a NameServer), and for
    each told one the other NameServer addresses it holds for (``also_as``): one restart of one server
    is one finding, not one per address."""
    nameservers = {row["endpoint"] for row in endpoints if row["kind"] == "nameserver"}
    shared: set[tuple[str, str]] = set()
    also: dict[tuple[str, str], list[str]] = {}
    for row in endpoints:
        for outage in row["outages"]:
            origin = outage.get("seen_as")
            if row["endpoint"] in nameservers and origin is not None:
                if origin in nameservers:
                    shared.add((row["endpoint"], outage["down"]))
                    also.setdefault((origin, outage["down"]), []).append(row["endpoint"])
    return shared, also


def _endpoint_findings(endpoints: list[Item], brokers: list[Item]) -> Iterable[Item]:
    """Restarts and stops of NameServers, attempts refused while nothing listened, and servers asked
    only what no NameServer serves (a broker's port captured too: its calls are not judged)."""
    shared, also_as = _one_listener_told(endpoints)
    by_endpoint = {row["endpoint"]: row for row in endpoints}
    for row in endpoints:
        endpoint = row["endpoint"]
        if row["kind"] == "other":
            yield _finding("other_server", INFO, f"{endpoint} was asked {row['requests']:,} request(s) no "
                           f"NameServer serves: a broker's port, or another RocketMQ server's, captured with the "
                           f"NameServer's; its answers are not judged here", endpoint=endpoint,
                           requests=row["requests"])
        if row["kind"] == "nameserver":
            for outage in row["outages"]:
                if (endpoint, outage["down"]) in shared:
                    continue  # told with the address whose packets told it
                also = also_as.get((endpoint, outage["down"]), [])
                named = (f"NameServer {endpoint} (also reached as {', '.join(also)}: the same port on another of "
                         f"this host's addresses, one listener)" if also else f"NameServer {endpoint}")
                more = {"also_as": also} if also else {}
                polls, polled = _polls_said(outage, by_endpoint)
                more.update(polled)
                if outage["up"] is None:
                    polls = polls and f"; meanwhile attempts refused: {polls}"
                    yield _finding("server_stopped", WARNING, f"{named} stopped at {outage['down']}: it "
                                   f"closed its {outage['closed']} connection(s) and took none again{polls}",
                                   server=endpoint, t=outage["down"], closed=outage["closed"], **more)
                    continue
                polls = polls and f", and {polls}"
                down_s = seconds_between(outage["down"], outage["up"])
                back = _came_back(brokers, endpoint, outage, row["outages"])
                went = (f"not listening by {outage['down']} (no connection open as it went: its first refused "
                        f"attempt), {_down_said(outage, down_s)}" if outage.get("unseen") else
                        f"went away at {outage['down']} (closed {outage['closed']} connection(s)), "
                        f"{_down_said(outage, down_s)}")
                if outage.get("seen_as"):  # its own packets held nothing of it: the other address's did
                    went = (f"not listening by {outage['down']} (told by the packets of {outage['seen_as']}, the "
                            f"same listener on another of this host's addresses), down at least {down_s:,.1f} s")
                yield _finding("server_restart", WARNING, f"{named} restarted: {went}, "
                               f"took connections again at {outage['up']}; {outage['refused']} attempt(s) refused "
                               f"meanwhile{polls}; {len(back)} broker(s) registered again: "
                               f"{', '.join(map(clipped_name, back)) or 'none'}",
                               server=endpoint, t=outage["down"], up=outage["up"], down_s=round(down_s, 3),
                               refused_while_down=outage["refused"], came_back=back, **more,
                               **{key: outage[key] for key in ("down_s_range",) if key in outage})
        count = sum(r["count"] for r in row["refused"])
        if count:
            whens = ", ".join(f"{r['count']} {r['when'].replace('_', ' ')}" for r in row["refused"])
            yield _finding("refused_connections", INFO, f"{count} connection attempt(s) to {endpoint} refused: "
                           f"nothing listening ({whens}; from {row['refused'][0]['first']})", endpoint=endpoint,
                           count=count, first=min(r["first"] for r in row["refused"]),
                           last=max(r["last"] for r in row["refused"]))


def _came_back(brokers: list[Item], endpoint: str, outage: Item, outages: list[Item]) -> list[str]:
    """The brokers that registered again at ``endpoint`` after a restart: first seen in the run that
    began at its ``up``, before the endpoint's next going. All those first seen after ``up`` were
    counted, a later run's too: a NameServer restarted twice, its brokers named by their connections
    (a snap length), had "4 broker(s) registered again" after its first restart, of two brokers."""
    until = min((o["down"] for o in outages if o["down"] > outage["up"]), default=None)
    stays = [(b["broker_addr"], iso_time(b["first_seen"])) for b in brokers
             if b["server"] == endpoint and b["first_seen"]]
    return sorted({addr for addr, first in stays if outage["up"] <= first and (until is None or first < until)})


def _down_range_row(outage: Outage) -> Item:
    """An outage's ``down_s_range`` and the packets that bound it, where they do (Outage.down_range):
    only there, so that every other outage's row is as it was."""
    bounds = outage.down_range()
    if bounds is None:
        return {}
    return {"down_s_range": [round(bounds[0], 3), round(bounds[1], 3)], "last_refused": _iso(outage.last_refused),
            **({"last_seen": _iso(outage.last_seen)} if outage.unseen else {})}


def _also_down_row(outage: Outage) -> Item:
    """An outage's ``also_down_as``: what other addresses of the same listener told of it by their own
    packets (model/endpoints._link_addresses); only where there are, so that every other row is as it was."""
    if not outage.also_down_as:
        return {}
    return {"also_down_as": [{"endpoint": o.endpoint, "down": iso_time(o.down), "unseen": o.unseen,
                              "refused": o.refused, "last_refused": _iso(o.last_refused), "up": _iso(o.up)}
                             for o in outage.also_down_as]}


def _polls_said(outage: Item, rows: Mapping[str, Item]) -> tuple[str, Item]:
    """The clause and the evidence (``polled_as``) telling what the other addresses of a restarted or
    stopped NameServer's listener saw of it, those that are no NameServer (a NameServer's is its own
    finding): at 127.0.0.1:9876 a launch script's or health check's polls refused every 0.1 s while the
    server its brokers reach as [::1]:9876 came back, and the first one it took again: the restart's
    window as those polls saw it, which nothing else told. Called polls only where every connection
    that address took carried nothing either way (its ``empty``)."""
    others = [o for o in outage.get("also_down_as", []) if rows[o["endpoint"]]["kind"] != "nameserver"]
    if not others:
        return "", {}
    said = []
    for other in others:
        row = rows[other["endpoint"]]
        what = (" (connections that carried nothing: polls, as a launch script's or a health check's)"
                if row["accepted"] and row["empty"] == row["accepted"] else "")
        refused = (f"{other['refused']:,} at {other['endpoint']}{what}"
                   + (f" from {other['down']} to {other['last_refused']}" if other["refused"] else ""))
        back = f", which took one again at {other['up']}" if other["up"] else ", which took none again"
        said.append(refused + back)
    clause = f"{'; '.join(said)}: the same port on another of this host's addresses, one listener"
    return clause, {"polled_as": [{"endpoint": o["endpoint"], "refused": o["refused"], "first": o["down"],
                                   "last": o["last_refused"], "up": o["up"]} for o in others]}


def _down_said(outage: Item, down_s: float) -> str:
    """How long a restarted NameServer was down, in words: a range where the packets bound it on both
    sides (at least while its attempts were refused, at most from its last packet before, or its
    closes, to the connection it took again), else what ``down_s`` is: from its going (its closes,
    or its first refused attempt) to that connection, at most or at least."""
    bounds = outage.get("down_s_range")
    if bounds is not None:
        seen = (f"its last packet before at {outage['last_seen']}, " if outage.get("last_seen") else "")
        return (f"down {bounds[0]:,.1f}-{bounds[1]:,.1f} s ({seen}its last refused attempt at "
                f"{outage['last_refused']})")
    if outage.get("unseen"):
        return f"down at least {down_s:,.1f} s"
    return f"down at most {down_s:,.1f} s (no attempt refused meanwhile: it may have listened before)"


def seconds_between(first: str, second: str) -> float:
    return (iso_datetime(second) - iso_datetime(first)).total_seconds()


def _story_findings(stories: list[Item]) -> Iterable[Item]:
    """What a session's stays tell together (analysis/replay.stories_of) and the admin requests."""
    for story in stories:
        kind = story["kind"]
        where = f"{clipped_name(story['cluster'] or '?')} / {clipped_name(story.get('broker_name') or '?')}"
        fields = {key: value for key, value in story.items() if key != "kind"}
        if kind == "failover":
            back = (f"; the old master back as slave at {story['old_master_back_as_slave_at']}"
                    if story["old_master_back_as_slave_at"] else "; the old master did not come back")
            yield _finding(kind, WARNING, f"{where}: fail-over: master {clipped_name(story['old_master'])} lost at "
                           f"{story['t']} ({story['how_lost'].replace('_', ' ')}), {clipped_name(story['new_master'])} "
                           f"made master at {story['new_master_at']}: no master for {story['no_master_s']:,.3f} s{back}"
                           f"{failover_words(story)}", **fields)
        elif kind == "broker_address_change":
            yield _finding(kind, WARNING, f"{where} / {story['broker_id']}: moved from {clipped_name(story['from'])} "
                           f"(it {story['left'].replace('_', ' ')} at {story['left_at']}) to "
                           f"{clipped_name(story['to'])} at {story['t']}", **fields)
        elif kind == "broker_id_change":
            after = f" after it {story['after'].replace('_', ' ')}" if story["after"] else ""
            yield _finding(kind, WARNING, f"{where} / {clipped_name(story['broker_addr'])}: brokerId "
                           f"{story['id_from']} ({role(story['id_from'])}) -> {story['id_to']} "
                           f"({role(story['id_to'])}) at {story['t']}{after}", **fields)
        elif kind == "topic_deleted":
            topic = (NOT_CAPTURED.format("topic") if story["topic"] is None
                     else f"topic {clipped_repr(story['topic'])}")
            yield _finding(kind, INFO, f"{topic} deleted at {story['server']} at {story['t']} by "
                           f"{story.get('client') or '?'} (DELETE_TOPIC_IN_NAMESRV)", **fields)
        elif kind in ("write_perm_wiped", "write_perm_added"):
            what = "wiped" if kind == "write_perm_wiped" else "given back"
            answered, topics = story.get("topics_answered"), story.get("topics") or 0
            held = f" ({_plural(topics, 'topic{s}')} of it held)"
            if answered is not None and answered != topics:  # the server's count first: the capture's is short
                held = (f" ({_plural(answered, 'topic{s}')} of it held, the NameServer answered; the capture "
                        f"holds {topics:,} of them: it misses some of what the NameServer held)")
            broker = clipped_name(story["broker_name"])
            if story["broker_name"] is None:  # cut by a snap length: which broker's topics it held is unknown
                broker, held = NOT_CAPTURED.format("broker"), ""
            yield _finding(kind, INFO, f"write permission of {broker} {what} at {story['server']} at "
                           f"{story['t']} by {story.get('client') or '?'}{held}", **fields)


def _controller_findings(controller: Item | None, stories: list[Item]) -> Iterable[Item]:
    """Elections within the capture that no fail-over tells (info), and controller calls that say
    nothing: a body cut short, not JSON or not of the layout, a header Java could not read, an
    unknown version (warnings), answers whose request was not captured (info)."""
    if not controller:
        return
    for item in elections_untold(controller, stories):
        yield _finding("master_elected", INFO, **item)
    for u in controller["undecodable"]:
        edge = u["why"] == NO_REQUEST
        yield _finding("controller_undecodable", INFO if edge else WARNING, f"{u['count']} {u['code_name']} call(s) "
                       f"at controller {u['controller']} undecodable: {u['why']} (from {u['first']}; not used)", **u)


def _gap(gap: Item) -> Item:
    return {"from": iso_time(gap["from"]), "to": iso_time(gap["to"]), "seconds": round(gap["seconds"], 6),
            "open": gap["open"]}


def _addresses_across_sessions(brokers: list[Item]) -> list[Item]:
    """A neutral note where one address was another broker in another session (another cluster,
    another day): said, never compared."""
    by_addr: dict[str, list[Item]] = {}
    for broker in brokers:
        if broker["registrations"]:
            by_addr.setdefault(broker["broker_addr"], []).append(broker)
    found = []
    for addr, seen in sorted(by_addr.items()):
        identities = {(b["cluster"], b["broker_name"], b["broker_id"]) for b in seen}
        if len({b["session"] for b in seen}) > 1 and len(identities) > 1:
            seen.sort(key=lambda b: b["first_seen"])
            found.append(_finding(
                "address_in_sessions", INFO, f"{clipped_name(addr)}: " + ", ".join(
                    f"{clipped_name(b['cluster'] or '?')} / {clipped_name(b['broker_name'] or '?')} / {b['broker_id']} "
                    f"in session {b['session']}"
                    for b in seen) + " (other sessions: not compared)", broker_addr=addr,
                sessions=[{"session": b["session"], "cluster": b["cluster"], "broker_name": b["broker_name"],
                           "broker_id": b["broker_id"]} for b in seen]))
    return found


def _deleted_by_operator(drop: Item, deletions: Sequence[Item], server: str) -> list[Item]:
    """The captured deletions (topic_deleted stories, at any NameServer) that explain a drop: each
    topic the table lost deleted between DELETION_BEFORE_S before the table that had it was last seen
    and DELETION_AFTER_S after the drop; empty if one is not (or the lost topics are not known). Of
    several (mqadmin deletes at every NameServer), the one at the stay's own ``server``, else the
    earliest: never the order the stories came in, which is the liveness stage's partitions'."""
    removed = drop.get("removed") or []
    low, high = drop["had_at"] - DELETION_BEFORE_S, drop["t"] + DELETION_AFTER_S
    causes = []
    for topic in removed:
        found = [d for d in deletions if d["topic"] == topic and low <= _seconds(d["t"]) <= high]
        if not found:
            return []
        causes.append(min(found, key=lambda d: (d["server"] != server, _seconds(d["t"]), d["server"])))
    return causes


#: the finding that tells each way a broker's stay ends (analysis/replay.py's ``end``)
_END_KINDS = {"expired": "heartbeat_expired", "connection_closed": "broker_connection_closed",
              "unregistered": "broker_unregistered"}


def _tie_lookups(found: list[Item], lookups: list[Item]) -> set[int]:
    """Each failed route lookup whose cause the replay saw goes under the finding that tells that
    cause (the broker's end, a fail-over telling it, the deletion, the restart), in its evidence
    (``failed_lookups``) and its message; returns the lookups so told (by index)."""
    told: set[int] = set()
    for index, lookup in enumerate(lookups):
        cause = lookup["cause"]
        if cause is not None and cause["kind"] == "made_later":
            continue  # not a route gone: the topic made later (topic_made_on_first_use says it)
        target = None if cause is None else next((item for item in found if _tells(item, cause, lookup)), None)
        if target is None:
            continue
        told.add(index)
        target.setdefault("failed_lookups", []).append(
            {key: lookup[key] for key in ("topic", "client", "count", "first", "last", "server")})
    for item in found:
        failed = item.get("failed_lookups")
        if failed:
            item["message"] += (f"; then {sum(f['count'] for f in failed):,} route lookup(s) answered TOPIC_NOT_EXIST "
                                f"for {_tally(failed, 'topic', clients=True)}: {_why(item)}")
    return told


def _tells(item: Item, cause: Item, lookup: Item) -> bool:
    """Whether a finding's item tells the cause a failed lookup had (by kind, subject and time)."""
    kind, when = cause["kind"], bool(item.get("t") == cause["t"])
    if kind == "departed":
        if item["kind"] == "failover":
            return when and bool(item.get("old_master") == cause["broker_addr"])
        return when and bool(item["kind"] == _END_KINDS.get(cause["end"]) and
                             item.get("broker_addr") == cause["broker_addr"])
    same_server = bool(item.get("server") == lookup["server"])
    if kind == "deleted":
        return when and same_server and bool(item["kind"] == "topic_deleted" and item.get("topic") == cause["topic"])
    return when and same_server and bool(item["kind"] == "server_restart")


def _why(item: Item) -> str:
    """Why the lookups the finding tells found no route."""
    if item["kind"] == "topic_deleted":
        return "the topic was deleted"
    if item["kind"] == "server_restart":
        return "the NameServer came back with no routes and had none for them yet (brokers re-register within 30 s)"
    return "the broker that left held the last route of those topics"


def _unexplained(explained: set[int], lookups: list[Item], client: Any, topic: Any, count: int, first: Any,
                 last: Any) -> tuple[int, Any, Any]:
    """A client's TOPIC_NOT_EXIST answers for a topic less those a cause's finding tells; first and
    last of the rest where the replay saw them (else as counted)."""
    mine = [(i, lookup) for i, lookup in enumerate(lookups) if lookup["client"] == client and lookup["topic"] == topic]
    told = sum(lookup["count"] for i, lookup in mine if i in explained)
    rest = [lookup for i, lookup in mine if i not in explained]
    count = max(count - told, 0)
    if told and rest:
        first = min(_seconds(lookup["first"]) for lookup in rest)
        last = max(_seconds(lookup["last"]) for lookup in rest)
    return count, first, last


def _finding(kind: str, severity: str, message: str, **evidence: Any) -> Item:
    return {"kind": kind, "severity": severity, "message": message, **evidence}
