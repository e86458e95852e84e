"""A capture that says it dropped packets itself (a pcapng's interface statistics, as dumpcap and
tshark -w write them when they stop) is said first: what those packets held is not in the file."""

from __future__ import annotations

import gzip
from pathlib import Path

from tests.spark.capture.test_pcapng import DUMPCAP_ISB, isb
from tests.spark.conftest import evidence_of, run_job, without_input
from tests.spark.test_silence import merged_pcapng


def test_packets_the_capture_dropped_are_said_first(spark, tmp_path: Path) -> None:
    """v5-expiry as dumpcap writes a pcapng, ending with dumpcap's real statistics block of a
    capture that dropped 12,142 of 79,970 packets: a warning, the headline's first words, step [2]
    of the log; the rest of the report as without it. Its statistics saying none dropped change
    nothing at all."""
    plain = merged_pcapng(["v5-expiry"], tmp_path / "plain.pcapng")
    dropped, clean = tmp_path / "dropped.pcapng", tmp_path / "clean.pcapng"
    dropped.write_bytes(plain.read_bytes() + DUMPCAP_ISB)
    clean.write_bytes(plain.read_bytes() + isb("<", 0, ifrecv=3_500, ifdrop=0))
    base = run_job(spark, [str(plain)], tmp_path / "out-plain", report=False)
    told = run_job(spark, [str(dropped)], tmp_path / "out-dropped", report=False)
    same = run_job(spark, [str(clean)], tmp_path / "out-clean", report=False)

    first = told.summary["findings"][0]
    assert (first["kind"], first["severity"]) == ("packets_dropped", "warning")
    [item] = first["evidence"]
    assert (item["path"], item["dropped"], item["received"]) == (str(dropped), 12_142, 79_970)
    # not "of 79,970": on Linux dumpcap's received count leaves the dropped out (631 received, 5,442 dropped)
    assert "dropped 12,142 packets (79,970 received, by the same statistics)" in item["message"]
    assert told.summary["attention"].startswith("the capture dropped 12,142 packets: what they held is unknown · ")
    assert any(f"\n      {item['message']}" in line for line in told.progress if line.startswith("[2]"))
    assert [without_input(b) for b in told.brokers] == [without_input(b) for b in base.brokers]
    assert [e for e in evidence_of(told.summary) if e[0] != "packets_dropped"] == evidence_of(base.summary)

    assert same.summary["findings"] == base.summary["findings"]
    assert same.summary["attention"] == base.summary["attention"]


#: the NameServer's port of a real capture that dropped packets: dumpcap -B 1 paused (kill -STOP) 47.7 s
#: over a burst of UDP datagrams (RocketMQ 5.3.3, broker-a and broker-b registering every 30 s), cut to
#: ``tcp port 9876`` (tcpdump -r ... -w ...); its packets as captured
DROPS = Path(__file__).resolve().parents[1] / "data" / "captures" / "dropped" / "v5-drops-9876.pcap.gz"


def test_a_silence_over_bytes_the_capture_missed_is_the_captures(spark, tmp_path: Path) -> None:
    """broker-a's requests in the pause, a registration among them, are missing from the capture, but its
    connection's sequence numbers go on past 7,300 bytes it sent then: its 67.1 s without a captured sign of life
    is the capture's, information, not a broker silent over 60 s (the headline, brokers.csv's
    near_expiry); broker-b, whose registrations the capture kept, is silent nowhere."""
    capture = tmp_path / "v5-drops-9876.pcap"
    capture.write_bytes(gzip.decompress(DROPS.read_bytes()))
    told = run_job(spark, [str(capture)], tmp_path / "out", report=False)

    kinds = {f["kind"]: f for f in told.summary["findings"]}
    assert "heartbeat_near_expiry" not in kinds and "heartbeat_expired" not in kinds
    assert "silent over" not in told.summary["attention"]
    found = kinds["silence_not_captured"]
    [item] = found["evidence"]
    assert (found["severity"], item["broker_addr"], item["missed_bytes"]) == ("info", "127.0.0.1:11911", 7_300)
    assert (item["from"], item["to"]) == ("2026-11-30T08:41:34.909490Z", "2026-11-30T08:42:41.971615Z")
    assert "its connection carried 7,300 bytes the capture missed then" in item["message"]
    assert {b["broker_name"]: (b["near_expiry"], b["ended"]) for b in told.brokers} == {
        "broker-a": ("0", "unregistered"), "broker-b": ("0", "unregistered")}
