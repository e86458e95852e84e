"""The frame and the ROCKETMQ binary header declared with construct: what the server's
struct-based codec (remoting/frame.py, remoting/header.py) is checked against on every captured
frame.  construct is a test dependency: the declarations parse no traffic in the server (its
compiled parser skips length checks hostile input must not get past, and costs tens of times more
per frame than struct)."""

from __future__ import annotations

from functools import cache
from typing import Any

from twisted_namesrv.remoting.frame import HEADER_LENGTH_MASK


@cache
def frame_struct() -> Any:
    """The frame as a construct definition (imported and compiled only when used)."""
    from construct import Bytes, Int32sb, Int32ub, Struct, this

    return Struct(
        "length" / Int32sb,
        "header_word" / Int32ub,
        "header" / Bytes(this.header_word & HEADER_LENGTH_MASK),
        "body" / Bytes(this.length - 4 - (this.header_word & HEADER_LENGTH_MASK)),
    ).compile()


@cache
def binary_header_struct() -> Any:  # a construct Struct (construct is untyped)
    """RocketMQSerializable's layout as a construct definition (imported on first use).
    extFields are read only when their length is positive, and must fit in the header."""
    from construct import (
        FixedSized,
        GreedyRange,
        If,
        Int8ub,
        Int16sb,
        Int32sb,
        PascalString,
        Struct,
        Terminated,
        this,
    )

    entry = Struct("key" / PascalString(Int16sb, "utf8"), "value" / PascalString(Int32sb, "utf8"))
    return Struct(
        "code" / Int16sb,
        "language" / Int8ub,
        "version" / Int16sb,
        "opaque" / Int32sb,
        "flag" / Int32sb,
        "remark" / PascalString(Int32sb, "utf8"),
        "ext_length" / Int32sb,
        "ext" / If(this.ext_length > 0,
                   FixedSized(this.ext_length, Struct("entries" / GreedyRange(entry), Terminated))),
    )
