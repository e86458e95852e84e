"""The shared captures of real NameServer traffic, one test per capture."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import require_captures

CAPTURES = Path(__file__).resolve().parents[3].parent / "shared" / "captures"
CAPTURE_FILES = sorted(CAPTURES.glob("*.pcap"))


@pytest.fixture(params=[p.name for p in CAPTURE_FILES] or ["<none>"])
def capture(request: pytest.FixtureRequest) -> Path:
    if not CAPTURE_FILES:
        require_captures(str(CAPTURES))
    return CAPTURES / request.param
