"""A capture whose clock stepped back (NTP's first sync, a VM restored from a snapshot, files joined
out of order with mergecap -a) is said first, wherever the byte ranges the reading tasks take
cut it: the report's story across the step is out of order, and it says so rather than telling
crashes, expiries and restarts that did not happen."""

from __future__ import annotations

import gzip
import re
import struct
from itertools import pairwise
from pathlib import Path

import pytest

from spark_analysis.analysis import findings
from spark_analysis.capture.inputs import CaptureFile, ReadTally, Split, clock_step_back, read_task

REAL = Path(__file__).resolve().parents[2] / "data" / "captures" / "real" / "v4-ours" / "v4-ours.pcap.gz"


def stepped(path: Path, seconds: float) -> Path:
    """The real capture with the clock stepped by ``seconds`` halfway through (a classic pcap)."""
    data = gzip.decompress(REAL.read_bytes())
    assert data[:4] == b"\xd4\xc3\xb2\xa1"  # microseconds, little-endian
    out, at, records = bytearray(data[:24]), 24, []
    while at < len(data):
        sec, usec, incl, orig = struct.unpack_from("<IIII", data, at)
        records.append((sec, usec, incl, orig, data[at + 16:at + 16 + incl]))
        at += 16 + incl
    for index, (sec, usec, incl, orig, body) in enumerate(records):
        out += struct.pack("<IIII", int(sec + seconds) if index >= len(records) // 2 else sec, usec, incl, orig) + body
    path.write_bytes(out)
    return path


def read(path: Path, range_size: int) -> ReadTally:
    file = CaptureFile(str(path), path.stat().st_size, 0)
    tally = ReadTally()
    cuts = [*range(0, file.size, range_size), file.size]
    for start, stop in pairwise(cuts):  # one reading task per byte range
        for _ in read_task([Split(file, start, stop)], (9876,), tally):
            pass
    return tally


@pytest.mark.parametrize("range_size", [1_000, 7_919, 1 << 30])
def test_a_step_back_is_found_wherever_the_ranges_cut_the_file(tmp_path: Path, range_size: int) -> None:
    path = stepped(tmp_path / "back.pcap", -3600)
    step = clock_step_back(read(path, range_size).files[str(path)].spans)
    assert step is not None and 3599 < step[0] < 3601 and step[1] - step[2] == pytest.approx(step[0])
    ahead = stepped(tmp_path / "forward.pcap", 3600)  # a step forward is a silence: nothing in the times tells it
    assert clock_step_back(read(ahead, range_size).files[str(ahead)].spans) is None


def test_a_step_back_is_a_warning_said_with_the_file_and_when(tmp_path: Path) -> None:
    path = stepped(tmp_path / "back.pcap", -3600)
    files = [CaptureFile(str(path), path.stat().st_size, 0)]
    rows = findings.input_files(files, read(path, 1 << 30))
    (found,) = [f for f in findings.evidence(rows, {}, [], {}) if f["kind"] == "clock_stepped_back"]
    assert found["severity"] == findings.WARNING and found["path"] == str(path)
    assert re.search(r"times step back 3,(599|600)\.\d s at 2026-11-28T", found["message"])
    assert 3599 < found["seconds"] < 3601
    assert findings.attention([found])["attention"].startswith("packet times step back 3,")
    untouched = tmp_path / "untouched.pcap"
    untouched.write_bytes(gzip.decompress(REAL.read_bytes()))
    rows = findings.input_files([CaptureFile(str(untouched), untouched.stat().st_size, 0)], read(untouched, 1 << 30))
    assert rows[0]["clock_step_back_s"] is None
