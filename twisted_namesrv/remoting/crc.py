"""The body checksum brokers put in REGISTER_BROKER's bodyCrc32: CRC32 & 0x7FFFFFFF.

crcmod's predefined ``crc-32`` names the checksum exactly (java.util.zip.CRC32's polynomial,
reflection and final xor).  zlib ships the same CRC with a slice-by-N table loop that runs
several times faster on big registration bodies, so it computes
every checksum once an import-time check shows that both agree.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import crcmod.predefined

from ..steps import STEP_BYTES, Steps, run_steps

#: (data, previous crc=0) -> crc, as zlib.crc32
_CRC_32: Callable[..., int] = crcmod.predefined.mkPredefinedCrcFun("crc-32")
_PROBE = bytes(range(256)) * 3


def _fastest_crc32() -> Callable[..., int]:
    return zlib.crc32 if zlib.crc32(_PROBE) == _CRC_32(_PROBE) else _CRC_32


_crc32 = _fastest_crc32()


def crc32_masked(data: bytes | memoryview | None) -> int:
    """UtilAll.crc32: java.util.zip.CRC32 with the top bit cleared; 0 for no body."""
    return run_steps(crc32_masked_steps(data))


def crc32_masked_steps(data: bytes | memoryview | None) -> Steps[int]:
    """crc32_masked a few megabytes per step (both CRC functions continue from a previous
    value), for big bodies answered in steps."""
    if not data:
        return 0
    crc, view, size = 0, memoryview(data), 16 * STEP_BYTES
    for start in range(0, len(view), size):
        crc = _crc32(view[start:start + size], crc)
        yield
    return crc & 0x7FFFFFFF
