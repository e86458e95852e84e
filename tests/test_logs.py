"""JSON-lines logs: one object per line, carrying each broker event's and rejection's fields."""

from __future__ import annotations

import io
import json
import re
import struct

import pytest
from twisted.logger import globalLogPublisher
from twisted.python import usage

from tests.test_housekeeping import MASTER, register
from tests.web.test_metrics_and_api import Served
from twisted_namesrv import tap
from twisted_namesrv.logs import json_lines
from twisted_namesrv.remoting import RemotingCommand, RequestCode


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
    served = Served(tmp_path)
    broker, transport = served.connect()
    register(broker, transport)
    garbage, _ = served.connect()
    garbage.dataReceived(struct.pack(">i", -1))
    served.clock.advance(125)

    lines = records(json_log)
    events = [(r["route_event"], r["route_info"]["addr"]) for r in lines if "route_event" in r]
    assert events == [("registered", MASTER), ("expired", MASTER)]
    registered = next(r for r in lines if r.get("route_event") == "registered")
    assert registered["route_info"] == {"cluster": "c1", "broker": "broker-a", "id": 0, "addr": MASTER, "topics": 2}
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
