"""What a capture holds, whatever its format: a Record per captured frame, read by records.py
(classic pcap) and pcapng.py."""

from __future__ import annotations

import mmap
from typing import NamedTuple

Buffer = bytes | bytearray | memoryview | mmap.mmap


class Record(NamedTuple):
    """One captured frame: capture time in seconds, link type, captured bytes, length on the wire,
    and where the captured bytes start in the buffer read."""

    ts: float
    linktype: int
    data: Buffer
    orig_len: int
    offset: int = 0
