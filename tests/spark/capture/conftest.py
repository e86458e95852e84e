"""The golden captures of real NameServer traffic (tests/data/golden), one test per capture."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import CAPTURES, require_captures

CAPTURE_FILES = sorted(CAPTURES.glob("*.pcap"))


@pytest.fixture(params=[p.name for p in CAPTURE_FILES] or ["<none>"])
def capture(request: pytest.FixtureRequest) -> Path:
    if not CAPTURE_FILES:
        require_captures(str(CAPTURES))
    return CAPTURES / request.param
