"""state/alike.py: one object per content, at most ``limit`` kept (past it, starting again)."""

from __future__ import annotations

from twisted_namesrv.state.alike import Alike


def test_alike_values_are_one_object_and_the_pool_starts_again_past_its_limit() -> None:
    alike: Alike[bytes] = Alike(2)
    first = b"".join([b"head", b"er"])
    assert alike(first) is first and alike(bytes(bytearray(b"header"))) is first
    alike(b"other")
    third = bytes(bytearray(b"third"))
    assert alike(third) is third and len(alike) == 1  # full: forgot the two, kept the third
    assert alike(bytes(bytearray(b"third"))) is third
    alike.clear()
    assert len(alike) == 0 and not alike
