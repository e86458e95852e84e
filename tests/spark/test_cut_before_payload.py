"""A capture cut before any byte of payload (tcpdump -s 64 on Ethernet: 14 + 20 + a 32-byte TCP
header with timestamps reach past it). Real capture v5-pause-s64: the report said the NameServer's
port "accepted 9 connection(s) that carried nothing either way (a port check ...)" and led with
"no NameServer traffic found (no endpoint was asked a NameServer's requests)" and "packets cut at
64 bytes: 0 frames partly read": brokers registered and clients asked routes over those
connections, every byte of it sent and seen, none kept."""

from __future__ import annotations

import numpy as np

from spark_analysis.analysis import findings
from spark_analysis.capture.inputs import Piece
from spark_analysis.capture.packets import ACK, SYN
from spark_analysis.capture.reassembly import SEGMENT
from spark_analysis.model.endpoints import endpoint_stories
from spark_analysis.model.periods import note_ends

KEY = ("127.0.0.1:54666", "127.0.0.1:9876")


def test_bytes_a_snap_length_cut_whole_are_bytes_the_connection_carried() -> None:
    rows = np.zeros(5, SEGMENT)
    rows["ts"] = [1.0, 1.001, 1.002, 2.0, 2.1]
    rows["flags"] = [SYN, SYN | ACK, ACK, ACK, ACK]
    rows["forward"] = [True, False, True, True, False]
    rows["seq"] = [100, 900, 101, 101, 901]
    rows["missing"] = [0, 0, 0, 2_683, 122]  # a registration and its answer: sent, seen, none kept
    ends: dict = {}
    note_ends(ends, Piece(KEY, "v5-pause-s64.pcap", rows.tobytes(), None))
    assert ends[KEY].last_payload == 2.1
    story = endpoint_stories(ends)["127.0.0.1:9876"]
    assert (story.accepted, story.empty) == (1, 0)  # no port check


def test_a_capture_cut_before_any_frame_says_nothing_was_read() -> None:
    found = [{"kind": "capture_cut", "severity": "warning", "message": "m", "path": "a.pcap", "cut_at": 64,
              "cut_frames": 0},
             {"kind": "server_unread", "severity": "warning", "message": "m", "endpoint": "127.0.0.1:9876",
              "accepted": 9, "why": "its packets were cut at 64 bytes, before any frame's header", "protocol": None}]
    assert findings.attention(found, nameservers=0)["attention"].startswith(
        "no NameServer traffic read (what servers were asked cannot be read: below) · packets cut at 64 bytes: "
        "before any frame's header, nothing read · ")
