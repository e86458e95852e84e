"""A capture that says it dropped packets itself (a pcapng's interface statistics, as dumpcap and
tshark -w write them when they stop) is said first: what those packets held is not in the file."""

from __future__ import annotations

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
