"""A tcpdump ring that wrapped (-C 1 -W 3: five files written, NAME.pcap2 holds the third,
pcap0 the fourth, pcap1 the fifth) read as one capture: its names say that files were overwritten
before the oldest kept. The report said nothing of it (real capture v4-ring3): the capture read as
one begun 66 s after tcpdump started, with nothing said missing. With its middle file lost (pcap0 not
given), the two kept were two captures with files missing between them, and the ring's wrap went unsaid."""

from __future__ import annotations

from spark_analysis.analysis.findings import attention, missing_files
from spark_analysis.model.periods import Capture

KEPT_FROM = 1796048185.742342  # 2026-11-30T14:16:25.742342Z


def _capture(*names: str) -> Capture:
    return Capture(KEPT_FROM, KEPT_FROM + 23.0, tuple(f"caps/{name}" for name in names))


def test_a_ring_that_wrapped_names_its_files_overwritten_first() -> None:
    found = missing_files([_capture("v4-ring3.pcap2.gz", "v4-ring3.pcap0.gz", "v4-ring3.pcap1.gz")])
    assert [(f["kind"], f["severity"], f["path"], f["overwritten"], f["kept_from"]) for f in found] == [
        ("files_overwritten", "warning", "caps/v4-ring3.pcap2.gz", 2, "2026-11-30T14:16:25.742342Z")]
    assert attention(found)["attention"].startswith(
        "a ring that wrapped: at least 2 file(s) overwritten before caps/v4-ring3.pcap2.gz "
        "(kept from 2026-11-30T14:16:25.742342Z)")


def test_files_in_order_or_stamped_by_time_say_nothing_overwritten() -> None:
    for names in (("v4-wrap.pcap0", "v4-wrap.pcap1"),  # -W 2 after four files: cannot be told
                  ("ring.pcap1", "ring.pcap2"),  # file 0 not given
                  ("cap-235950", "cap-000050"),  # -G 60 past midnight, %H%M%S
                  ("ring.pcap2", "ring.pcap0", "other.pcap1"),
                  ("one.pcap",)):
        assert missing_files([_capture(*names)]) == [], names


def test_a_ring_with_its_middle_file_lost_still_says_it_wrapped_and_the_stretch_missing() -> None:
    """v4-ring3 given without pcap0 (its fourth file, 14:16:27.150-14:16:28.326): pcap2, then pcap1
    going on past bytes neither holds. Both said first: the stretch missing between them, and the
    wrap before pcap2 (file 1 holds later packets: files 0 and 1 were written over)."""
    pcap2_ends, pcap1_begins = 1796048187.140396, 1796048188.326021
    found = missing_files([
        Capture(KEPT_FROM, pcap2_ends, ("caps/v4-ring3.pcap2.gz",)),
        Capture(pcap1_begins, pcap1_begins + 20.0, ("caps/v4-ring3.pcap1.gz",),
                after_missing=("caps/v4-ring3.pcap2.gz", pcap2_ends))])
    assert [(f["kind"], f.get("path") or f.get("after"), f.get("overwritten")) for f in found] == [
        ("files_overwritten", "caps/v4-ring3.pcap2.gz", 2), ("files_missing", "caps/v4-ring3.pcap1.gz", None)]
    assert (found[1]["from"], found[1]["until"]) == ("2026-11-30T14:16:27.140396Z", "2026-11-30T14:16:28.326021Z")
    line = attention(found)["attention"]
    assert line.startswith("files missing from a rotated set: 1.2 s not captured · a ring that wrapped: at least 2")


def test_a_ring_that_skips_a_lost_file_without_wrapping_says_only_the_gap() -> None:
    """v4-ring (-W 5, never wrapped) without pcap2: 0, 1, then 3, 4 after the gap: files missing, no wrap."""
    found = missing_files([Capture(KEPT_FROM, KEPT_FROM + 10, ("caps/v4-ring.pcap0.xz", "caps/v4-ring.pcap1.xz")),
                           Capture(KEPT_FROM + 20, KEPT_FROM + 30, ("caps/v4-ring.pcap3.xz", "caps/v4-ring.pcap4.xz"),
                                   after_missing=("caps/v4-ring.pcap1.xz", KEPT_FROM + 10))])
    assert [f["kind"] for f in found] == ["files_missing"]
