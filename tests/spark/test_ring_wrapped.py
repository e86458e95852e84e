"""A tcpdump ring that wrapped (-C 1 -W 3: five files written, NAME.pcap2 holds the third,
pcap0 the fourth, pcap1 the fifth) read as one capture: its names say that files were overwritten
before the oldest kept. The report said nothing of it (real capture v4-ring3): the capture read as
one begun 66 s after tcpdump started, with nothing said missing."""

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
