"""Logs: JSON lines carrying each broker event's and rejection's fields; text and JSON lines, one per
event whatever control characters a peer put in a field (issue 44)."""

from __future__ import annotations

import errno
import io
import json
import os
import re
import struct
import subprocess
import sys
import threading

import pytest
from twisted.logger import LogLevel, eventAsText, formatTime, globalLogPublisher
from twisted.python import logfile, usage
from twisted.python.failure import Failure

from tests.support import python_calls_run
from tests.test_housekeeping import register
from tests.web.test_metrics_and_api import Served
from twisted_namesrv import launch, tap
from twisted_namesrv.escapes import CONTROLS, escaped
from twisted_namesrv.logs import (
    LevelFiltered,
    LineWriter,
    SizedLogFile,
    WholeWrites,
    configured_observer,
    event_as_json_line,
    event_as_text_line,
    json_lines,
    open_log_file,
    text_lines,
)
from twisted_namesrv.remoting import RemotingCommand, RequestCode
from twisted_namesrv.web.collector import EscapedRegistry, NamesrvCollector

#: this file's broker address, no other test's (the log is the whole process's)
OWN_ADDR = "10.77.0.1:10911"


@pytest.fixture
def json_log():
    out = io.StringIO()
    observer = json_lines(out)
    globalLogPublisher.addObserver(observer)
    yield out
    globalLogPublisher.removeObserver(observer)


def records(out: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_broker_events_and_rejected_frames_as_json_lines(tmp_path, json_log):
    """The log is the process's: an earlier test's server may log late (a connection it closes), and
    MASTER is every test's broker, so this broker's address is its own."""
    served = Served(tmp_path)
    broker, transport = served.connect()
    register(broker, transport, addr=OWN_ADDR)
    garbage, _ = served.connect()
    garbage.dataReceived(struct.pack(">i", -1))
    served.clock.advance(125)

    lines = records(json_log)
    own = [r for r in lines if "route_event" in r and r["route_info"]["addr"] == OWN_ADDR]
    assert [r["route_event"] for r in own] == ["registered", "expired"]
    registered = own[0]
    assert registered["route_info"] == {"cluster": "c1", "broker": "broker-a", "id": 0, "addr": OWN_ADDR, "topics": 2}
    assert registered["level"] == "info" and registered["message"].startswith("broker registered: cluster=c1")
    assert registered["namespace"] == "twisted_namesrv.housekeeping"
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", registered["time"])
    (rejected,) = [r for r in lines if "rejected" in r]
    assert rejected["rejected"] == "frame_length" and rejected["peer"].startswith("127.0.0.1:")
    assert rejected["level"] == "warn" and "negative frame length" in rejected["detail"]


def test_log_format_option():
    options = tap.Options()
    with pytest.raises(usage.UsageError, match="--log-format: xml"):
        options.parseOptions(["--log-format", "xml"])


def test_a_limit_is_logged_once_per_peer_host_and_counted_every_time(tmp_path, json_log):
    served = Served(tmp_path, headerMaxLength=1024)
    for _ in range(3):  # the same host comes back with the same oversized header
        proto, transport = served.connect()
        proto.dataReceived(struct.pack(">iI", 5000, 4096) + b"{" * 4996)  # a whole frame, header never parsed
        assert not transport.connected
    proto, transport = served.connect()
    proto.dataReceived(struct.pack(">i", -1))  # another limit: its own first warning
    warnings = [r for r in records(json_log) if r.get("limit") and r["level"] == "warn"]
    assert [w["limit"] for w in warnings] == ["header_length", "frame_length"]
    assert "header length 4096 exceeds 1024" in warnings[0]["detail"]
    assert "further hits of this limit from 127.0.0.1 are counted" in warnings[0]["message"]
    assert served.service.factory.metrics.rejected == {"header_length": 3, "frame_length": 1}


def test_the_dispatch_layers_records_reach_the_server_log(tmp_path, json_log):
    proto, _ = Served(tmp_path).connect()
    proto.dataReceived(RemotingCommand.request(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"listenPort=1\n",
                                               opaque=3, version=409).encode())
    # the processor's refusal goes through the shared Refusals (one line, one count per listener and reason)
    refused = [r for r in records(json_log) if "keys in black list" in r["message"]]
    assert refused and refused[0]["namespace"] == "twisted_namesrv.refusals" and refused[0]["level"] == "warn"
    assert refused[0]["refused"] == "config_key" and refused[0]["listener"] == "remoting"
    assert "listenPort" in refused[0]["message"] and "127.0.0.1:" in refused[0]["message"]


@pytest.mark.parametrize("name", ["\x1b[31mred", "\x1b]0;title\x07", "cr\rforged", "nl\n2026-11-28 forged",
                                  "lone\ud800", "\u202eevil", "nel\x85", "ls\u2028", "del\x7f", "nul\x00"])
def test_a_text_line_is_one_line_whatever_a_field_holds(name):
    """The one rule (escapes.py) where the line is formatted: one event, one line, writable as UTF-8."""
    event = {"log_format": "broker registered: broker={broker}", "broker": name, "log_time": 0.0,
             "log_namespace": "twisted_namesrv.housekeeping", "log_level": LogLevel.info}
    line = event_as_text_line(event)
    assert line.endswith("\n") and line.count("\n") == 1 and not CONTROLS.search(line[:-1])
    assert line.encode("utf-8") and f"broker={escaped(name)}" in line
    assert json.loads(event_as_json_line(event))["broker"] == name  # JSON escapes them itself, and keeps them
    assert not CONTROLS.search(event_as_json_line(event).rstrip("\n"))


def test_a_traceback_follows_on_indented_escaped_lines():
    try:
        raise ValueError("bad name \x1b[2J\nnot a log line")
    except ValueError:
        failure = Failure()
    line = event_as_text_line({"log_format": "process request {code} failed", "code": 100, "log_time": 0.0,
                               "log_failure": failure, "log_namespace": "x", "log_level": LogLevel.critical})
    first, *rest = line.rstrip("\n").split("\n")
    assert first.endswith("process request 100 failed") and rest and all(part.startswith("\t") for part in rest)
    assert "\x1b" not in line and "ValueError: bad name \\x1b[2J" in line


def test_text_lines_write_to_a_rotating_file_what_twisteds_own_could_not(tmp_path):
    """Twisted's LogFile encodes as UTF-8: a line with a lone surrogate raised and was lost."""
    observer = configured_observer("text", str(tmp_path / "namesrv.log"))
    observer({"log_format": "put {ns}", "ns": "a\ud800b", "log_time": 0.0, "log_namespace": "x",
              "log_level": LogLevel.info})
    assert (tmp_path / "namesrv.log").read_text(encoding="utf-8").endswith("put a\\ud800b\n")


class _Twistd(dict):
    """Stands in for twistd's ServerOptions: our options' parent."""


@pytest.mark.parametrize(("given", "file", "taken"), [
    ({}, None, True),  # twistd -n: stdout, with our escaped lines
    ({"logfile": "app.log"}, "app.log", True),
    ({"logfile": "-"}, None, True),
    ({"nodaemon": False}, "twistd.log", True),  # a daemon without --logfile: twistd's own default name
    ({"logger": "some.factory"}, None, "--logger some.factory"),  # an operator's --logger stays
    ({"syslog": True}, None, "--syslog"),
])
def test_twistds_own_text_observer_is_replaced_by_ours(given, file, taken):
    """``taken``: ours writes the log; else the operator's logging kept, which SIGUSR1 is told of."""
    options = tap.Options()
    options.parent = _Twistd({"logger": None, "logfile": None, "nodaemon": True, "syslog": False, **given})
    kept = launch.take_over_twistd_logging(options)
    assert (options.parent["logger"] == "twisted_namesrv.launch.twistd_log_observer") is (taken is True)
    assert kept == (None if taken is True else taken)
    assert launch.twistd_log_file(options) == file


def test_a_line_without_a_traceback_is_formatted_once_and_its_time_once_a_second(monkeypatch):
    """Every broker's registration is a line: at 5,000 brokers formatting each twice (with and
    without a traceback) and working its time out each time was a tenth of a registration's CPU.
    The lines are Twisted's all the same, to the second and its offset."""
    import twisted_namesrv.logs as logs

    texts, times = [], []
    monkeypatch.setattr(logs, "eventAsText", lambda *a, **k: texts.append(a) or eventAsText(*a, **k))
    monkeypatch.setattr(logs, "formatTime", lambda when: times.append(when) or formatTime(when))
    monkeypatch.setattr(logs, "format_time", getattr(logs, "_SecondsText", object)(), raising=False)
    when = 1_764_400_000.0
    lines = [event_as_text_line({"log_format": "broker {n}", "n": n, "log_time": when + n / 100,
                                 "log_namespace": "x", "log_level": LogLevel.info}) for n in range(250)]
    assert len(texts) == 250 and len(times) == 3  # seconds 0, 1 and 2
    assert lines[0] == f"{formatTime(when)} [x#info] broker 0\n"
    assert lines[-1] == f"{formatTime(when + 2.49)} [x#info] broker 249\n"
    assert logs.format_time(None) == "-" and logs.format_time(-0.5) == formatTime(-0.5)


def test_a_route_events_line_shows_braces_in_its_fields_as_they_are(json_log):
    """The route event's message is made before Twisted formats it (one line per registration):
    a brace a peer put in a name is text, not a field of the format, in text and JSON lines alike."""
    from twisted_namesrv.housekeeping import log_route_event

    text = io.StringIO()
    observer = LevelFiltered(text_lines(text), LogLevel.info)  # configured_observer("text") beside the JSON one
    globalLogPublisher.addObserver(observer)
    try:
        log_route_event("registered", {"cluster": "c{1}", "broker": "b{cluster}}", "id": 0, "addr": "h:{2"})
    finally:
        globalLogPublisher.removeObserver(observer)
    (record,) = [r for r in records(json_log) if "route_event" in r]
    assert record["message"] == "broker registered: cluster=c{1} broker=b{cluster}} id=0 addr=h:{2"
    assert record["route_info"]["broker"] == "b{cluster}}" and record["details"].startswith("cluster=c{1} ")
    assert text.getvalue().endswith("[twisted_namesrv.housekeeping#info] broker registered: cluster=c{1} "
                                    "broker=b{cluster}} id=0 addr=h:{2\n")


def test_a_route_events_line_is_written_as_made_without_running_a_format(monkeypatch):
    """A line per registration (5,000 at once at the curve's largest step): the message
    log_route_event made is written as it is, the line Twisted's eventAsText makes of it (a
    control character in a name escaped all the same), without Twisted's formatting."""
    from twisted_namesrv import logs
    from twisted_namesrv.housekeeping import log_route_event

    events: list[dict] = []
    globalLogPublisher.addObserver(events.append)
    try:
        log_route_event("registered", {"cluster": "c{1}", "broker": "b\x1b[2J", "id": 0, "addr": "h:1"})
    finally:
        globalLogPublisher.removeObserver(events.append)
    (event,) = [e for e in events if "route_event" in e]
    made = escaped(eventAsText(event, includeTraceback=False, formatTime=logs.format_time)) + "\n"
    monkeypatch.setattr(logs, "eventAsText", None)  # neither of Twisted's formatters is run
    monkeypatch.setattr(logs, "formatEvent", None)
    assert event_as_text_line(event) == made
    assert made.endswith("[twisted_namesrv.housekeeping#info] broker registered: cluster=c{1} broker=b\\x1b[2J "
                         "id=0 addr=h:1\n")
    message = json.loads(event_as_json_line(event))["message"]
    assert message == "broker registered: cluster=c{1} broker=b\x1b[2J id=0 addr=h:1"


@pytest.mark.parametrize("level", ["debug", "info", "warn", "error", "critical"])
def test_the_level_filter_lets_through_what_twisteds_would(level):
    """``--log-level``'s filter (logs.LevelFiltered, one look in a set at every line) passes the
    events Twisted's FilteringLogObserver with a LogLevelFilterPredicate of that level passes, at
    every level, namespace or none, and no others."""
    from twisted.logger import FilteringLogObserver, LogLevelFilterPredicate

    from twisted_namesrv.logs import LevelFiltered

    ours: list[dict] = []
    twisteds: list[dict] = []
    minimum = LogLevel.levelWithName(level)
    filtered = LevelFiltered(ours.append, minimum)
    reference = FilteringLogObserver(twisteds.append, [LogLevelFilterPredicate(defaultLogLevel=minimum)])
    events = [{"log_level": event_level, "log_namespace": namespace, "log_format": "x"}
              for event_level in [*LogLevel.iterconstants(), None] for namespace in ("a.b.c", "", None)]
    for event in events:
        filtered(event)
        reference(event)
    assert ours == twisteds and ours


def test_a_route_event_is_the_event_loggers_emit_makes():
    """logs.emit_made (a route event's line, one per registration, without Logger.emit's check of
    the level) gives the observers the event Logger.emit would: the same keys and values but the time."""
    from twisted.logger import Logger

    from twisted_namesrv.logs import TEXT_AS_IS, emit_made

    heard: list[dict] = []
    logger = Logger(namespace="twisted_namesrv.housekeeping", observer=heard.append)
    logger.emit(LogLevel.info, TEXT_AS_IS, log_text="broker registered: x", route_event="registered", details="x")
    emit_made(logger, LogLevel.info, "broker registered: x", route_event="registered", details="x")
    made_by_twisted, made = heard
    assert made.pop("log_time") >= made_by_twisted.pop("log_time") > 0
    assert made == made_by_twisted and made["log_logger"] is logger


CLIENT_HELLO = bytes.fromhex("16030100c4010000c00303") + bytes(32) + b"\x00\x00\x02\x13\x01\x01\x00"


@pytest.mark.parametrize(("first", "said"), [
    (b"GET /healthz HTTP/1.1\r\nHost: ns:9876\r\n\r\n", "its first bytes are HTTP: this port speaks RocketMQ remoting; "
                                                        "HTTP (the status page, /metrics, /healthz) is on port 9877"),
    (CLIENT_HELLO, "its first bytes are TLS: a client with TLS on (tls.enable=true), and this port does not speak "
                   "TLS (tls.server.mode=disabled)"),
    # a RocketMQ 5.x gRPC client given the NameServer's address instead of a proxy's: HTTP/2's preface
    (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x12\x04\x00",
     "its first bytes are HTTP/2: a gRPC client (RocketMQ 5.x's SDKs): this port speaks RocketMQ remoting; gRPC "
     "clients connect to a 5.x proxy's gRPC")])
def test_a_probe_or_client_speaking_http_or_tls_to_the_remoting_port_is_told_in_the_refusal(tmp_path, json_log, first,
                                                                                               said):
    """A Kubernetes httpGet probe or a load balancer's health check on 9876, a client with TLS on: read
    as a frame, their first bytes are a length over any limit (`GET ` is 1,195,725,860 with its
    header). The refusal's line says what they are and where HTTP is served; counted as before."""
    served = Served(tmp_path)
    proto, transport = served.connect()
    proto.dataReceived(first)
    assert not transport.connected
    told(json_log, said)
    assert served.service.factory.metrics.rejected == {"frame_length": 1}


@pytest.mark.parametrize("cut", [1, 2, 3])
def test_http_cut_before_its_fourth_byte_is_told_as_http(tmp_path, json_log, cut):
    """The first bytes may come in several reads (a proxy's, a slow probe's): the length word is
    whole, and refused, in a later one. The rule read only that read's bytes ("T /healthz ..."), so
    the line said nothing of HTTP; it reads the connection's first bytes."""
    served = Served(tmp_path)
    proto, transport = served.connect()
    request = b"GET /healthz HTTP/1.1\r\nHost: ns:9876\r\n\r\n"
    proto.dataReceived(request[:cut])
    assert transport.connected
    proto.dataReceived(request[cut:])
    assert not transport.connected
    told(json_log, "its first bytes are HTTP: this port speaks RocketMQ remoting")


def told(json_log, said: str) -> None:
    (rejected,) = [r for r in records(json_log) if "rejected" in r]
    assert rejected["rejected"] == "frame_length" and said in rejected["detail"], rejected["detail"]


def test_bytes_after_a_peer_s_frames_are_not_named_another_protocol(tmp_path, json_log):
    """Only a connection's first bytes can be another protocol's: after a frame was read, bytes
    that happen to start with `GET ` are a broken frame, said as before."""
    served = Served(tmp_path)
    proto, transport = served.connect()
    proto.dataReceived(RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, opaque=1,
                                               version=409).encode())
    assert transport.connected and transport.value()  # answered
    proto.dataReceived(b"GET / HTTP/1.1\r\n\r\n")
    assert not transport.connected
    (rejected,) = [r for r in records(json_log) if "rejected" in r]
    assert "first bytes" not in rejected["detail"]


class _FullDisk:
    """A raw file on a disk that fills up: ``room`` bytes more, then ENOSPC (a short write first)."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.data = bytearray()

    def write(self, data: bytes) -> int:
        if self.room <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        taken = bytes(data[:self.room])
        self.data += taken
        self.room -= len(taken)
        return len(taken)

    def flush(self) -> None:
        pass


def _line(text: str, when: float) -> dict:
    return {"log_format": "{text}", "text": text, "log_time": when, "log_namespace": "t", "log_level": LogLevel.info}


def test_a_full_disk_loses_lines_counted_and_the_log_says_so_once_it_can():
    """Before, Twisted's publisher swallowed the observer's OSError: every line was lost without a trace."""
    raw, warnings = _FullDisk(room=60), []
    writer = LineWriter(WholeWrites(raw), event_as_text_line, warn=warnings.append)
    writer(_line("first line", 1000.0))  # 45 bytes: fits
    writer(_line("cut here", 1001.0))  # 15 bytes fit: the line is cut
    writer(_line("lost", 1002.0))
    assert writer.lost == {"ENOSPC": 2} and len(warnings) == 1 and "ENOSPC" in warnings[0]
    raw.room = 10_000  # space again
    writer(_line("back", 1003.0))
    lines = raw.data.decode().split("\n")
    assert lines[0].endswith("first line") and len(lines[0]) + 1 + len(lines[1]) == 60  # the cut line's start, ended
    assert "2 log lines not written from " in lines[2] and "(ENOSPC: No space left on device)" in lines[2]
    assert "[logs#warn]" in lines[2].replace("twisted_namesrv.", "") and lines[3].endswith("back")
    assert writer.lost == {"ENOSPC": 2} and len(warnings) == 1


def test_short_writes_are_written_whole():
    class Trickle(_FullDisk):
        def write(self, data: bytes) -> int:
            return super().write(data[:3])

    raw = Trickle(room=1 << 20)
    WholeWrites(raw).write(b"a line longer than three bytes\n")
    assert raw.data == b"a line longer than three bytes\n"


def test_a_lines_flush_and_a_log_files_closed_are_the_raw_files_found_at_once():
    """Every log line is flushed (LineWriter; Twisted's log file's flush too), and a log file asks
    whether its file is closed before each line (_Whole.write): through ``__getattr__`` each first
    failed the usual look-up (an AttributeError made and dropped) and then made a Python call, a
    few thousand instructions a line, a first registration's.  The raw file's own are used."""
    raw = io.BytesIO()
    whole = WholeWrites(raw)
    assert python_calls_run(lambda: whole.flush()) == 1  # the lambda's own call, no other
    assert whole.closed is False
    raw.close()
    assert whole.closed is True
    with pytest.raises(ValueError):
        whole.flush()  # a closed file's flush refuses, as before


@pytest.mark.parametrize("twistds_order", [False, True], ids=["python -m", "twistd"])
def test_the_lost_lines_reach_metrics(tmp_path, twistds_order):
    """``python -m`` builds its log observer before the service; twistd calls makeService first and
    only then builds its logger (ApplicationRunner.run), so the count must not wait for the observer."""
    options = tap.Options()
    options.parseOptions(["--data-dir", str(tmp_path), "--port", "0", "--log-file", str(tmp_path / "n.log")])
    if twistds_order:
        service = tap.makeService(options)
        observer = options.log_observer()
    else:
        observer = options.log_observer()
        service = tap.makeService(options)
    observer.observer.lost["ENOSPC"] += 3
    collected = NamesrvCollector(service.state, service.factory, service.seen, service.seen.health).collect()
    families = {family.name: family for family in EscapedRegistry.made(collected)}  # as a scrape makes them
    samples = {sample.labels["error"]: sample.value for sample in families["namesrv_log_lines_lost"].samples
               if sample.name.endswith("_total")}
    # every errno the log can meet is served from the start: increase() reads a series born at 3 as 0 lost
    assert samples == {"ENOSPC": 3, "EIO": 0, "EMFILE": 0, "EROFS": 0, "EPIPE": 0, "EAGAIN": 0, "EBADF": 0}


def test_a_stdout_that_would_block_loses_the_line_counted_not_spins():
    """A non-blocking stdout (set so by another process sharing it) whose pipe is full: the raw
    write answers None, which WholeWrites added as 0 bytes and tried again forever, the reactor
    spinning until the reader drained it."""

    class Blocked(_FullDisk):
        def write(self, data: bytes) -> int | None:  # type: ignore[override]
            return None if self.room <= 0 else super().write(data)

    raw, warnings = Blocked(room=20), []
    writer = LineWriter(WholeWrites(raw), event_as_text_line, warn=warnings.append)
    writer(_line("cut by a full pipe", 1000.0))
    writer(_line("lost", 1001.0))
    assert writer.lost == {"EAGAIN": 2} and len(warnings) == 1
    raw.room = 10_000
    writer(_line("back", 1002.0))
    lines = raw.data.decode().split("\n")
    assert len(lines[0]) == 20 and "2 log lines not written" in lines[1] and lines[2].endswith("back")


def test_a_log_file_whose_reopen_failed_at_rotation_opens_again_once_it_can(tmp_path, monkeypatch):
    """Twisted's rotate closes the file, renames it and opens a new one: when that open failed (the
    descriptor table full), every later line went to the closed file, a ValueError the log's
    publisher swallowed: the log lost for good, uncounted."""
    log = SizedLogFile("n.log", str(tmp_path), rotateLength=200, maxRotatedFiles=3)
    writer = LineWriter(log, event_as_text_line, warn=lambda text: None)
    writer(_line("x" * 250, 1000.0))  # past the size: the next write rotates

    def no_descriptor(self) -> None:
        raise OSError(errno.EMFILE, "Too many open files")

    with monkeypatch.context() as patched:
        patched.setattr(logfile.LogFile, "_openFile", no_descriptor, raising=False)
        writer(_line("rotated into no file", 1001.0))
        writer(_line("still none", 1002.0))
    assert writer.lost == {"EMFILE": 2}
    writer(_line("back", 1003.0))
    text = (tmp_path / "n.log").read_text()
    assert "2 log lines not written" in text and text.endswith("back\n"), text
    assert writer.lost == {"EMFILE": 2}


def test_a_closed_stdout_loses_lines_counted_and_said_on_stderr(monkeypatch, capsys):
    """Started with stdout closed (``>&-``), Python's sys.stdout is None: the writer's every line
    raised AttributeError into Twisted's publisher, the log lost without a count or a word."""
    monkeypatch.setattr("sys.stdout", None)
    writer = text_lines()
    writer(_line("nowhere", 1000.0))
    writer(_line("nowhere either", 1001.0))
    assert writer.lost == {"EBADF": 2}
    assert "cannot write the log (EBADF" in capsys.readouterr().err


_PAUSED_READER = r"""
import json, os, sys
from twisted.logger import LogLevel
from twisted_namesrv.logs import text_lines
writer = text_lines()
for n in range(8000):  # 8000 lines of ~230 bytes: past a pipe's 64 KiB, past the writer's HELD_BYTES
    writer({"log_format": "{text}", "text": "x" * 200, "log_time": 1000.0 + n, "log_namespace": "t",
            "log_level": LogLevel.info})
sys.stderr.write(json.dumps(dict(writer.lost)) + "\n")
sys.stderr.flush()
os._exit(0)
"""


def test_a_stdout_pipe_whose_reader_pauses_never_blocks_the_writer():
    """stdout a pipe (``| less``, journald's socket) whose reader stopped reading: each line was written
    on the reactor's thread, which waited in write() until the reader read again, every broker and
    client waiting with it.  Now lines past a bounded buffer are lost and counted as EAGAIN."""
    child = subprocess.Popen([sys.executable, "-c", _PAUSED_READER], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    try:
        # a watchdog only: the child ends at once unless its writer blocks (the old one did, on the full pipe)
        assert child.wait(timeout=120) == 0
        said = child.stderr.readline()
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
        child.stderr.close()
    assert json.loads(said)["EAGAIN"] > 0, said


class _Paused:
    """A raw stdout whose write waits until ``go`` is set, as a pipe whose reader paused."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.data = b""

    def write(self, data: bytes) -> int:
        self.go.wait()
        self.data += data
        return len(data)

    def flush(self) -> None:
        pass


def test_lines_past_the_held_bytes_are_lost_counted_and_the_gap_said_once_the_reader_reads():
    raw, warnings = _Paused(), []
    line = len(event_as_text_line(_line("held 0", 1000.0)).encode())
    writer = LineWriter(WholeWrites(raw), event_as_text_line, warn=warnings.append, held=3 * line)
    for n in range(8):  # the first taken by the writer's thread (waiting in write), three held, four lost
        writer(_line(f"held {n}", 1000.0 + n))
    assert writer.lost["EAGAIN"] >= 4
    lost = writer.lost["EAGAIN"]
    raw.go.set()  # the reader reads again
    assert writer.drained(timeout=60)
    writer(_line("back", 2000.0))
    assert writer.drained(timeout=60)
    lines = raw.data.decode().splitlines()
    assert [line.rsplit(" ", 1)[1] for line in lines[:-2]] == [str(n) for n in range(8 - lost)], lines
    assert f"{lost} log lines not written from " in lines[-2] and "(EAGAIN: " in lines[-2]
    assert lines[-1].endswith("back") and writer.lost["EAGAIN"] == lost
    # said on stderr once, by the writer's thread (stderr is often the same stuck pipe)
    assert len(warnings) == 1 and "EAGAIN" in warnings[0]


@pytest.mark.parametrize("rotate", ["128MB", "daily"])
def test_logrotate_copytruncate_leaves_no_hole_and_the_next_line_first(tmp_path, rotate):
    """logrotate's copytruncate copies the file and truncates it in place. Twisted's log file was
    opened without O_APPEND: the next line went at the old offset, the file began with that many NUL
    bytes (grep: "binary file matches"), a sparse hole as long as the log had been."""
    log = open_log_file(str(tmp_path / "namesrv.log"), rotate)
    writer = LineWriter(log, event_as_text_line, warn=lambda text: None)
    for n in range(50):
        writer(_line(f"before {n}", 1000.0 + n))
    copied = (tmp_path / "namesrv.log").read_bytes()  # what copytruncate copies, then truncates
    with open(tmp_path / "namesrv.log", "r+b") as target:
        target.truncate(0)
    writer(_line("after the truncate", 1100.0))
    text = (tmp_path / "namesrv.log").read_bytes()
    assert b"\0" not in text and text.endswith(b"after the truncate\n") and text.count(b"\n") == 1, text[:80]
    assert copied.count(b"\n") == 50 and writer.lost == {}


@pytest.mark.parametrize("rotate", ["128MB", "daily"])
def test_a_line_the_run_before_cut_is_ended_before_this_runs_first(tmp_path, rotate):
    """The data disk filled under the log, then the server stopped: its last line was cut, and the next
    run's first line was glued to it ("... /tmp/sre18/fu2026-12-01T02:34:47+0000 [-] RemotingFactory
    starting on 9976"), a line no shipper parses and the start's line not found by grep."""
    (tmp_path / "namesrv.log").write_bytes(b"whole line\ncut by a full disk at 60 % of its le")
    log = open_log_file(str(tmp_path / "namesrv.log"), rotate)
    writer = LineWriter(log, event_as_text_line, warn=lambda text: None)
    writer(_line("this run's first", 1100.0))
    writer(_line("its second", 1101.0))
    lines = (tmp_path / "namesrv.log").read_text().splitlines()
    assert lines[:2] == ["whole line", "cut by a full disk at 60 % of its le"], lines
    assert lines[2].endswith("this run's first") and lines[3].endswith("its second") and len(lines) == 4
    log.close()
    (tmp_path / "namesrv.log").write_bytes(b"ended\n")  # a whole last line: nothing added
    log = open_log_file(str(tmp_path / "namesrv.log"), rotate)
    LineWriter(log, event_as_text_line, warn=lambda text: None)(_line("next", 1200.0))
    assert (tmp_path / "namesrv.log").read_text().splitlines()[1].endswith("next")


def test_a_copytruncated_log_rotates_by_its_size_not_by_what_was_written_before(tmp_path):
    """The size the file rotates at is the file's: after a copytruncate the server's own count of
    what it wrote would rotate a file that had just been emptied."""
    log = SizedLogFile("n.log", str(tmp_path), rotateLength=2000, maxRotatedFiles=3)
    writer = LineWriter(log, event_as_text_line, warn=lambda text: None)
    while (tmp_path / "n.log").stat().st_size < 1500:
        writer(_line("x" * 60, 1000.0))
    with open(tmp_path / "n.log", "r+b") as target:
        target.truncate(0)
    for n in range(10):  # what it wrote in all is past 2000 bytes, the file is not
        writer(_line("y" * 60, 1100.0 + n))
    assert not (tmp_path / "n.log.1").exists()
    assert (tmp_path / "n.log").read_text().count("y" * 60) == 10
    while not (tmp_path / "n.log.1").exists():  # and past 2000 bytes of its own, it rotates
        writer(_line("z" * 60, 1200.0))
    assert (tmp_path / "n.log.1").stat().st_size >= 2000 and (tmp_path / "n.log").read_text().count("z" * 60) == 1


def test_sigusr1_reopens_the_log_file_after_logrotate_renamed_it(tmp_path):
    """logrotate's create renames the file and makes a new one, then its postrotate sends SIGUSR1:
    Python's default action ended the server there and then (no clean stop, no line); now the file
    is reopened and the next lines go to the new one."""
    import os
    import signal

    from twisted_namesrv.logs import reopen_on_usr1

    class Reactor:
        def callFromThread(self, f, *args):  # noqa: N802 - Twisted's name
            f(*args)

    log = open_log_file(str(tmp_path / "namesrv.log"))
    writer = LineWriter(log, event_as_text_line, warn=lambda text: None)
    globalLogPublisher.addObserver(writer)
    before = signal.signal(signal.SIGUSR1, signal.SIG_DFL)  # a server this process started earlier installed one
    try:
        assert reopen_on_usr1(Reactor(), writer)
        writer(_line("before the rotation", 1000.0))
        os.rename(tmp_path / "namesrv.log", tmp_path / "namesrv.log.1")  # logrotate's create
        (tmp_path / "namesrv.log").touch()
        os.kill(os.getpid(), signal.SIGUSR1)  # its postrotate
        writer(_line("after it", 1001.0))
    finally:
        globalLogPublisher.removeObserver(writer)
        signal.signal(signal.SIGUSR1, before)
    assert "before the rotation" in (tmp_path / "namesrv.log.1").read_text()
    new = (tmp_path / "namesrv.log").read_text()
    assert "Received SIGUSR1, log file reopened: " in new and new.endswith("after it\n"), new


def test_a_reopen_whose_new_file_cannot_be_opened_loses_lines_counted_until_it_can(tmp_path):
    """Twisted's reopen deleted its file before opening the new one: an open that failed (the new
    file not the server's to open, a directory in its place) left none, and every later line raised
    AttributeError into the publisher, uncounted, the log gone until a restart."""
    import os

    log = open_log_file(str(tmp_path / "n.log"))
    writer = LineWriter(log, event_as_text_line, warn=lambda text: None)
    writer(_line("one", 1000.0))
    os.rename(tmp_path / "n.log", tmp_path / "n.log.1")
    os.mkdir(tmp_path / "n.log")
    with pytest.raises(OSError):
        log.reopen()
    writer(_line("two", 1001.0))
    assert writer.lost == {"EISDIR": 1}
    os.rmdir(tmp_path / "n.log")
    writer(_line("three", 1002.0))
    text = (tmp_path / "n.log").read_text()
    assert "1 log lines not written" in text and text.endswith("three\n"), text


def test_sigusr1_held_at_start_is_acted_on_once_the_handler_is_in_and_leaves_twistds_check_alone():
    """Held (logs.UsrOneHeld) from the launcher's first call: counted, not the end of the process; the
    handler installed after acts on it once; and twistd's own observer (or a --logger factory made
    as it) still installs its rotation "over None or SIG_DFL" (``not signal.getsignal``)."""
    import os
    import signal

    from twisted_namesrv.logs import _on_usr1, hold_usr1_at_start

    class Reactor:
        def __init__(self):
            self.calls = []

        def callFromThread(self, act):  # noqa: N802 - Twisted's name
            self.calls.append(act)

    before = signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    try:
        assert hold_usr1_at_start()
        assert not hold_usr1_at_start()  # held once
        os.kill(os.getpid(), signal.SIGUSR1)  # logrotate's postrotate, mid-start
        assert not signal.getsignal(signal.SIGUSR1)  # what twistd's file observer checks
        reactor, acted = Reactor(), []
        assert _on_usr1(reactor, lambda: acted.append(1))
        for act in reactor.calls:
            act()
        assert acted == [1]
        os.kill(os.getpid(), signal.SIGUSR1)
        assert len(reactor.calls) == 2
    finally:
        signal.signal(signal.SIGUSR1, before)


@pytest.mark.parametrize("rotate", ["128MB", "daily"])
@pytest.mark.parametrize("how", ["renamed", "deleted"])
def test_a_log_file_renamed_or_deleted_without_sigusr1_is_left_within_a_second(tmp_path, rotate, how, monkeypatch):
    """logrotate's create with no postrotate (or one whose signal missed): the server wrote on to
    namesrv.log.1 for good, the new namesrv.log empty, and once compress deleted namesrv.log.1, to a
    deleted file holding its space. Now the path is looked at once a second at most: a file moved or
    deleted is left for a new one at the path; the lines of that second go to the old one."""
    from twisted_namesrv import logs

    now = [1000.0]
    monkeypatch.setattr(logs._Whole, "monotonic", staticmethod(lambda: now[0]), raising=False)
    log = open_log_file(str(tmp_path / "namesrv.log"), rotate)
    writer = LineWriter(log, event_as_text_line, warn=lambda text: None)
    writer(_line("before the rotation", 1000.0))
    if how == "renamed":
        (tmp_path / "namesrv.log").rename(tmp_path / "namesrv.log.1")
        (tmp_path / "namesrv.log").touch()  # logrotate's create
    else:
        (tmp_path / "namesrv.log").unlink()
    now[0] += 0.5
    writer(_line("within the second", 1000.5))
    now[0] += 0.6
    writer(_line("after it", 1001.1))
    new = (tmp_path / "namesrv.log").read_text()
    assert new.endswith("after it\n") and new.count("\n") == 1, new
    if how == "renamed":
        assert (tmp_path / "namesrv.log.1").read_text().count("\n") == 2  # before and within, each once
    assert _open_under(tmp_path) == [str(tmp_path / "namesrv.log")]  # the old one not held
    log.close()


def _open_under(directory) -> list[str]:
    """The files under ``directory`` this process holds open (a deleted one says so)."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed since
            continue
        if target.startswith(str(directory)):
            held.append(target)
    return held


#: the Python calls of a route event's line written into a log file (``log_route_event`` to the
#: file's last write, the lambda's own call included): 23 when Twisted's log file took threading's
#: Python RLock at every line and flushed its unbuffered file
ROUTE_LINE_CALLS = 20


def test_a_route_events_line_into_a_log_file_takes_a_c_lock_and_no_flush(tmp_path, monkeypatch):
    """A broker's registration is a line in the log file (one a registration, 5,000 in a 5,000-broker
    start): the file's write is locked by a C RLock, not threading's Python one Twisted makes, and
    not flushed (Twisted opens the file unbuffered: its flush does nothing); the line is the same."""
    from twisted.logger import Logger
    from twisted.python import threadable

    from twisted_namesrv import housekeeping
    from twisted_namesrv.housekeeping import log_route_event

    threadable.init(1)  # as the reactor's threads make it: Twisted's log file then locks its writes
    writer = configured_observer("text", str(tmp_path / "namesrv.log"))
    monkeypatch.setattr(housekeeping, "log", Logger(namespace="twisted_namesrv.housekeeping", observer=writer))
    info = {"cluster": "DefaultCluster", "broker": "b00001", "id": 0, "addr": "127.0.0.1:10001", "topics": 4}
    log_route_event("registered", dict(info))  # the file opened, its lock made
    calls = python_calls_run(lambda: log_route_event("registered", dict(info)))
    lines = (tmp_path / "namesrv.log").read_text().splitlines()
    assert len(lines) == 2 and lines[0][24:] == lines[1][24:] == (
        " [twisted_namesrv.housekeeping#info] broker registered: cluster=DefaultCluster broker=b00001 id=0 "
        "addr=127.0.0.1:10001 topics=4")
    assert calls <= ROUTE_LINE_CALLS, calls


def test_lines_to_stdouts_unbuffered_descriptor_are_not_flushed(tmp_path):
    """stdout's descriptor is written unbuffered (standard_output): its raw file's flush does
    nothing, and is not called at every line (one a registration); a buffered stdout still is."""
    flushed: list[int] = []

    class Raw(io.FileIO):
        def flush(self) -> None:
            flushed.append(1)

    raw = Raw(str(tmp_path / "out"), "wb")
    LineWriter(WholeWrites(raw), lambda event: "a line\n")({"log_time": 0.0})
    assert (tmp_path / "out").read_text() == "a line\n" and flushed == []
    buffered = io.StringIO()
    flushes: list[int] = []
    buffered.flush = lambda: flushes.append(1)  # type: ignore[method-assign]
    LineWriter(buffered, lambda event: "a line\n")({"log_time": 0.0})
    assert flushes == [1]
