"""The golden captures (real Java NameServer traffic) are in the repository, so a fresh clone proves
exactness: every capture the README of tests/data/golden describes is there, small, and no test looks
for captures outside the checkout."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support import CAPTURES

REPO = Path(__file__).resolve().parents[1]
OUTSIDE = "\"shared\" / " + "\"captures\""  # a path beside the checkout, as the tests once read
MAX_BYTES = 1_500_000  # test data stays small: the captures are about 0.9 MB


def test_the_captures_live_in_the_repository():
    assert CAPTURES.is_relative_to(REPO)
    named = set(re.findall(r"`(\w+\.pcap(?:ng)?)`", (CAPTURES / "README.md").read_text(encoding="utf-8")))
    present = {p.name for p in CAPTURES.glob("*.pcap*")}
    assert named and named <= present
    assert sum(p.stat().st_size for p in CAPTURES.iterdir()) < MAX_BYTES


def test_no_test_reads_captures_from_outside_the_checkout():
    outside = [str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("*.py")
               if OUTSIDE in p.read_text(encoding="utf-8")]
    assert outside == []
