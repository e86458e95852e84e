"""A pcapng of two interfaces, one of a link type not read: ``dumpcap -i nflog -i lo`` writes NFLOG and
Ethernet records in one file. Its link type was its first record's: where that was an NFLOG one, the
whole file was named "link type not read" and its Ethernet records (the NameServer's traffic) were
read but the file told unread; where it was an Ethernet one, the NFLOG records were dropped unsaid."""

from __future__ import annotations

from pathlib import Path

from spark_analysis.analysis import findings
from spark_analysis.capture import inputs
from spark_analysis.capture.packets import SYN
from tests.spark.capture.builders import CLIENT, SERVER, ethernet, ipv4, pcapng_epb, pcapng_idb, pcapng_shb, tcp

NFLOG, ETHERNET = 239, 1


def _two_interfaces(first_interface: int) -> bytes:
    """An NFLOG interface (0) and an Ethernet one (1); the first record is of ``first_interface``."""
    frame = ethernet(ipv4(CLIENT[0], SERVER[0], tcp(CLIENT, SERVER, 1000, SYN)))
    nflog = b"\x02\x00\x00\x05" + bytes(40)  # an NFLOG header and TLVs: nothing this reader decodes
    order = [(0, nflog), (1, frame)] if first_interface == 0 else [(1, frame), (0, nflog)]
    records = [pcapng_epb("<", interface, 1_000_000 * (10 + n), body) for n, (interface, body) in enumerate(order)]
    records.append(pcapng_epb("<", 1, 1_000_000 * 20, frame))
    return pcapng_shb("<") + pcapng_idb("<", NFLOG) + pcapng_idb("<", ETHERNET) + b"".join(records)


def _row(tmp_path: Path, data: bytes) -> dict:
    path = tmp_path / "two.pcapng"
    path.write_bytes(data)
    file = inputs.CaptureFile(str(path), len(data), 0)
    tally = inputs.ReadTally()
    list(inputs.read_task([inputs.Split(file, 0, len(data))], 9876, tally))
    (row,) = findings.input_files([file], tally)
    return row


def test_a_file_whose_first_record_is_of_an_interface_not_read_is_read_by_its_others(tmp_path: Path) -> None:
    row = _row(tmp_path, _two_interfaces(first_interface=0))
    assert (row["problem"], row["link_type"]) == (None, "ETHERNET")
    assert (row["unread_records"], row["unread_link_type"]) == (1, "NFLOG")


def test_records_of_an_interface_not_read_are_said_whichever_record_came_first(tmp_path: Path) -> None:
    for first in (0, 1):
        row = _row(tmp_path, _two_interfaces(first_interface=first))
        said = list(findings._unread_records_findings([row]))
        assert [(f["kind"], f["severity"], f["records"], f["link_type"]) for f in said] == [
            ("records_not_read", findings.WARNING, 1, "NFLOG")]
        assert "1 of its 3 records are of link type NFLOG, not read" in said[0]["message"]


def test_a_file_of_one_link_type_not_read_is_still_named_so(tmp_path: Path) -> None:
    frame = b"\x02\x00\x00\x05" + bytes(40)
    data = pcapng_shb("<") + pcapng_idb("<", NFLOG) + pcapng_epb("<", 0, 10_000_000, frame)
    row = _row(tmp_path, data)
    assert (row["problem"], "unread_records" in row) == (findings.LINK_NOT_READ, False)
