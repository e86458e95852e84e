"""The body checksum brokers put in REGISTER_BROKER's bodyCrc32: CRC32 & 0x7FFFFFFF."""

from __future__ import annotations

import crcmod.predefined

_crc32 = crcmod.predefined.mkPredefinedCrcFun("crc-32")


def crc32_masked(data: bytes | None) -> int:
    """UtilAll.crc32: java.util.zip.CRC32 with the top bit cleared; 0 for no body."""
    if not data:
        return 0
    return _crc32(data) & 0x7FFFFFFF
