"""One file holding two captures of different times (mergecap of a rotation with a pause in it, a
capture stopped and started again, ``mergecap -a``) is read as the two files would be: a silence
over PERIOD_GAP_S that no connection carries on over is a time nothing was captured. A silence some
connection carries on over is the network's (a partition captured on the NameServer's host), judged
within one capture as before. Real captures of the corpus (tests/data/captures/real/) joined or
stretched in time, against the report of the files apart."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import pytest

from spark_analysis.capture.inputs import PERIOD_GAP_S, Silence, TimeSpan, silences
from spark_analysis.model.periods import ConnectionEnds, file_parts
from tests.spark.capture.builders import pcapng_block, pcapng_idb, pcapng_shb
from tests.spark.conftest import Outputs, run_job, without_input
from tests.spark.test_rotated import record_ends, records
from tests.spark.test_truth import REAL, truth_of

#: findings whose message names an input file (they differ between a file and its parts by name only)
_NAMING_FILES = ("bad_input", "capture_cut", "began_mid_stream")


def _pcap(name: str) -> bytes:
    return gzip.decompress((REAL / name / truth_of(name)["files"][0]).read_bytes())


def _frames(data: bytes) -> list[tuple[float, bytes, int]]:
    """(time, frame as captured, its length on the wire) of each record of a little-endian classic pcap."""
    found = records(data)
    ends = record_ends(data, found)
    return [(t, data[offset + 16:end], struct.unpack_from("<I", data, offset + 12)[0])
            for (offset, t), end in zip(found, ends, strict=True)]


def _epb(interface: int, t: float, frame: bytes, wire: int) -> bytes:
    """An enhanced packet block keeping the record's length on the wire (a snap length's cut)."""
    ticks = round(t * 1e6)
    header = struct.pack("<IIIII", interface, ticks >> 32, ticks & 0xFFFFFFFF, len(frame), wire)
    return pcapng_block("<", 6, header + frame)


def _link_type(data: bytes) -> int:
    return int(struct.unpack_from("<I", data, 20)[0])


def merged_pcapng(names: list[str], out: Path) -> Path:
    """The captures as mergecap writes them into one pcapng file: an interface each (their link
    types may differ), their packets in time order."""
    datas = [_pcap(name) for name in names]
    packets = sorted((t, interface, frame, wire) for interface, data in enumerate(datas)
                     for t, frame, wire in _frames(data))
    out.write_bytes(pcapng_shb("<") + b"".join(pcapng_idb("<", _link_type(data)) for data in datas) + b"".join(
        _epb(interface, t, frame, wire) for t, interface, frame, wire in packets))
    return out


def _apart(names: list[str], into: Path) -> list[str]:
    into.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in names:
        paths.append(into / f"{name}.pcap")
        paths[-1].write_bytes(_pcap(name))
    return [str(p) for p in paths]


def same_report(joined: Outputs, apart: Outputs) -> None:
    """The report of the files apart, but for the input names: brokers.csv, findings, capture
    periods and gaps, endpoints and counts (but for the bytes)."""
    def evidence(summary: dict) -> list[tuple]:
        return sorted((item["kind"], item["severity"], item["message"]) for f in summary["findings"]
                      for item in f["evidence"] if item["kind"] not in _NAMING_FILES)

    assert [without_input(b) for b in joined.brokers] == [without_input(b) for b in apart.brokers]
    assert evidence(joined.summary) == evidence(apart.summary)
    assert joined.summary["inputs"]["periods"] == apart.summary["inputs"]["periods"]
    assert joined.summary["inputs"]["gaps"] == apart.summary["inputs"]["gaps"]
    assert {k: v for k, v in joined.summary["counts"].items() if k != "bytes"} == {
        k: v for k, v in apart.summary["counts"].items() if k != "bytes"}
    assert joined.summary["endpoints"] == apart.summary["endpoints"]


def test_two_captures_merged_into_one_pcapng_are_the_two_captures(spark, tmp_path: Path) -> None:
    """v5-cut (tcpdump -s 200, Linux cooked) and v5-expiry (Ethernet), ~16 h apart, merged as
    mergecap merges them: the two files' report. Read as one capture, the brokers alive when the
    first capture stopped were said expired 120 s later (the NameServer's scan), their closes in
    the 16 h nothing captured."""
    names = ["v5-expiry", "v5-cut"]
    apart = run_job(spark, _apart(names, tmp_path / "apart"), tmp_path / "out-apart", report=False)
    merged = merged_pcapng(names, tmp_path / "merged.pcapng")
    joined = run_job(spark, [str(merged)], tmp_path / "out-merged", report=False)
    assert len(apart.summary["inputs"]["periods"]) == 2
    [gap] = apart.summary["inputs"]["gaps"]
    assert gap["cause"] == "nothing captured" and gap["seconds"] > 16 * 3600
    same_report(joined, apart)
    assert {b["input"] for b in joined.brokers} == {str(merged)}
    assert any(f"{merged}: 2 captures in one file: nothing captured" in line for line in joined.progress)


def test_a_file_joined_at_a_byte_range_boundary_is_cut_there(spark, tmp_path: Path) -> None:
    """Two captures of one link type joined into one classic pcap (``mergecap -a -F pcap``), read
    by byte ranges: one range ends with the first capture, the next starts with the second, and a
    later boundary falls inside it. The silence is found between the ranges; each range's ends go
    to its part of the file."""
    names = ["v4-expiry", "v5-ours"]  # 3.6 h apart, both Ethernet
    datas = [_pcap(name) for name in names]
    joined_bytes = datas[0] + datas[1][24:]
    path = tmp_path / "joined.pcap"
    path.write_bytes(joined_bytes)
    first_of_second = len(datas[0])
    # ranges of a size that divides the first capture's: one starts with the second capture
    split = next(first_of_second // k for k in range(2, 64) if first_of_second % k == 0)
    assert len(joined_bytes) - first_of_second > split  # and another boundary falls inside it
    apart = run_job(spark, _apart(names, tmp_path / "apart"), tmp_path / "out-apart", report=False)
    joined = run_job(spark, [str(path)], tmp_path / "out-joined", report=False, split_size=split)
    assert len(apart.summary["inputs"]["periods"]) == 2
    same_report(joined, apart)


def test_a_silence_of_the_network_within_a_file_stays_one_capture(spark, tmp_path: Path) -> None:
    """v5-expiry with no packet for 90 s in its middle, every connection going on after it from
    where it stopped (a total partition captured on the NameServer's host, healed): one capture,
    its silences judged within it, not a time nothing was captured."""
    data = _pcap("v5-expiry")
    found = records(data)
    middle = (found[0][1] + found[-1][1]) / 2
    stretched = bytearray(data)
    for offset, t in found:
        if t >= middle:
            ticks = round((t + 90.0) * 1e6)
            struct.pack_into("<II", stretched, offset, ticks // 10**6, ticks % 10**6)
    path = tmp_path / "partition.pcap"
    path.write_bytes(bytes(stretched))
    whole = run_job(spark, [str(path)], tmp_path / "out", report=False, split_size=len(data) // 3)
    [period] = whole.summary["inputs"]["periods"]
    assert period["seconds"] == pytest.approx(found[-1][1] - found[0][1] + 90, abs=1e-3)
    assert whole.summary["inputs"]["gaps"] == []
    assert len({b["session"] for b in whole.brokers}) == 1


def test_a_capture_paused_while_brokers_went_on_is_two_captures(spark, tmp_path: Path) -> None:
    """v4-expiry without its packets of 90 s in its middle, as a capture stopped and started again
    (or a rotation with a pause in it) and joined: the brokers' connections go on after it past the
    heartbeats the pause missed. The report of the two halves as two files, where one capture
    read the brokers silent 90 s."""
    data = _pcap("v4-expiry")
    found = records(data)
    ends = record_ends(data, found)
    middle = (found[0][1] + found[-1][1]) / 2
    halves = [b"".join(data[offset:end] for (offset, t), end in zip(found, ends, strict=True) if keep(t))
              for keep in (lambda t: t < middle - 45, lambda t: t >= middle + 45)]
    apart = []
    for index, half in enumerate(halves):
        apart.append(tmp_path / f"half-{index}.pcap")
        apart[-1].write_bytes(data[:24] + half)
    joined = tmp_path / "joined.pcap"
    joined.write_bytes(data[:24] + b"".join(halves))
    two = run_job(spark, [str(p) for p in apart], tmp_path / "out-apart", report=False)
    one = run_job(spark, [str(joined)], tmp_path / "out-joined", report=False)
    [gap] = two.summary["inputs"]["gaps"]
    assert gap["cause"] == "nothing captured" and gap["seconds"] > 90
    same_report(one, two)


# -- the rule alone, without Spark --------------------------------------------------------------------

BROKER = ("127.0.0.1:10911", "127.0.0.1:9876")
LOOKUP = ("127.0.0.1:40000", "127.0.0.1:9876")


def _ends(first: float, last: float, seq: int, *, opened: bool = False, closed: bool = False) -> ConnectionEnds:
    return ConnectionEnds(first, opened, last, closed, first_seq=(seq, seq + 7), next_seq=(seq + 100, seq + 107))


def test_silences_are_found_within_and_between_byte_ranges() -> None:
    spans = [TimeSpan(24, 0.0, 50.0, 0.0, 0.0, (Silence(500, 20.0, 20.0 + PERIOD_GAP_S + 1),)),
             TimeSpan(1000, 50.0 + PERIOD_GAP_S + 5, 300.0, 0.0, 0.0),
             # measured from the file's latest time, not the range's: 300 -> 340 is no silence
             TimeSpan(2000, 250.0, 300.0, 50.0, 250.0, (Silence(2500, 260.0, 340.0),))]
    assert silences(reversed(spans)) == [Silence(500, 20.0, 81.0), Silence(1000, 50.0, 115.0)]


def test_a_silence_no_connection_carries_on_over_cuts_the_file() -> None:
    """Only new connections after it: two parts, each with its own ends, named by when they start."""
    before = {BROKER: _ends(0.0, 100.0, 1000)}
    after = {BROKER: _ends(1000.0, 1100.0, 9000, opened=True), LOOKUP: _ends(1001.0, 1002.0, 5, opened=True)}
    parts = file_parts(((0.0, 1100.0, "f.pcap"),), {"f.pcap": [Silence(7000, 100.0, 1000.0)]},
                       {"f.pcap": {24: before, 7000: after}})
    assert [(first, last) for first, last, _ in parts.spans] == [(0.0, 100.0), (1000.0, 1100.0)]
    names = [name for _, _, name in parts.spans]
    assert names == ["f.pcap from 1970-01-01T00:00:00Z", "f.pcap from 1970-01-01T00:16:40Z"]
    assert [parts.ends[name] for name in names] == [before, after]
    assert {parts.path(name) for name in names} == {"f.pcap"}


def test_a_silence_a_connection_carries_on_over_is_the_network_s() -> None:
    """The NameServer's idle-close FIN after the silence goes on from where the broker's connection
    stopped: one part, the file's own name, the ends of both stretches merged."""
    before = {BROKER: _ends(0.0, 100.0, 1000)}
    after = {BROKER: _ends(220.0, 220.0, 1100, closed=True), LOOKUP: _ends(221.0, 222.0, 5, opened=True)}
    parts = file_parts(((0.0, 222.0, "f.pcap"),), {"f.pcap": [Silence(7000, 100.0, 220.0)]},
                       {"f.pcap": {24: before, 7000: after}})
    assert parts.spans == ((0.0, 222.0, "f.pcap"),)
    assert parts.ends["f.pcap"][BROKER] == before[BROKER].merge(after[BROKER])
    assert parts.ends["f.pcap"][LOOKUP] == after[LOOKUP]
    # the same connection going on past bytes the capture missed: a capture paused while it went on
    missed = {BROKER: _ends(220.0, 220.0, 1300, closed=True)}
    assert len(file_parts(((0.0, 222.0, "f.pcap"),), {"f.pcap": [Silence(7000, 100.0, 220.0)]},
                          {"f.pcap": {24: before, 7000: missed}}).spans) == 2
    # a byte range starting inside a stretch is merged into it
    again = file_parts(((0.0, 222.0, "f.pcap"),), {"f.pcap": [Silence(7000, 100.0, 220.0)]},
                       {"f.pcap": {24: before, 5000: {LOOKUP: _ends(50.0, 51.0, 5, opened=True)}, 7000: after}})
    assert again.ends["f.pcap"][LOOKUP].first == 50.0
