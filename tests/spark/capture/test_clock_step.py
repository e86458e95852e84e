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


def test_a_step_back_says_how_long_the_capture_ran_and_whose_intervals_mix_its_two_sides(tmp_path: Path) -> None:
    """v5-pause-stepped (v5-pause's packets from 14:17:40 stamped 90 s earlier): its capture period
    says the stamps' span, 219.2 s, where v5-pause's ran 309.2 s; the finding says both the stamped
    length and the wall time it ran at least (the stretches before and after the step: 304.1 s).
    broker-b, registering every 30 s across the step, has its registrations stamped twice over
    (0.005 s apart), so its brokers.csv intervals (p50 19.5 s) are between stamps of both sides:
    named. broker-a's stays, each on one side, are not."""
    import lzma
    real = REAL.parents[1] / "v5-pause-stepped" / "v5-pause-stepped.pcap.xz"
    path = tmp_path / "v5-pause-stepped.pcap"
    path.write_bytes(lzma.decompress(real.read_bytes()))
    rows = findings.input_files([CaptureFile(str(path), path.stat().st_size, 0)], read(path, 1 << 30))

    def stay(name: str, first: str, last: str) -> dict:
        return {"cluster": "DefaultCluster", "broker_name": name, "broker_id": 0, "role": "MASTER",
                "broker_addr": f"127.0.0.1:{11911 if name == 'broker-a' else 11931}",
                "first_seen": findings._seconds(f"2026-11-30T{first}Z"),
                "last_seen": findings._seconds(f"2026-11-30T{last}Z")}

    stays = [stay("broker-a", "14:15:31.139466", "14:16:06.548444"),
             stay("broker-a", "14:17:33.091956", "14:18:25.139572"),
             stay("broker-b", "14:15:56.965971", "14:18:37.700543")]
    (found,) = findings._step_findings(rows, stays)
    assert found["stamped_seconds"] == pytest.approx(219.213, abs=1e-3)  # 14:15:13.332 to 14:18:52.544
    assert found["wall_seconds_at_least"] == pytest.approx(143.803 + 160.293, abs=1e-3)
    assert found["brokers_across"] == ["DefaultCluster / broker-b / 0 (MASTER) / 127.0.0.1:11931"]
    assert "it ran 219.2 s as stamped (its capture period), at least 304.1 s of wall time" in found["message"]
