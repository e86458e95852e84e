"""Header values as Java parses them: extFields are strings, and what Java makes of one (a boolean,
a boxed or unboxed number) decides what the NameServer does with it. The server's handlers and the
capture analysis read the same fields the same way."""

from __future__ import annotations

import re


class BadRequest(ValueError):
    """A header field or body whose absence or form makes Java fail with SYSTEM_ERROR: the
    dispatcher answers SYSTEM_ERROR with this message and refuses it as ``bad_request`` (refusals.py:
    one warning a peer host, every one counted, so a peer sending garbage in a loop does not flood the
    log), on every listener (the NameServer's, the controller's)."""


#: the largest body a handler decodes whole in the reactor's turn (QUERY_DATA_VERSION's DataVersion,
#: REGISTER_TOPIC_IN_NAMESRV's TopicRouteData, the controller's SyncStateSet): Java's brokers send
#: under 1 KiB of each (a DataVersion's three numbers, one broker's QueueData).  Java reads any size
#: in a thread of its pool; here every other peer waits for the decoding, and 16 MiB of JSON object
#: keys took 2 s of CPU (5.8 s written as fastjson's bare numbers, read through the json module)
BODY_AT_ONCE_MAX = 64 * 1024
#: the controller's GET_SYNC_STATE_DATA names broker sets (mqadmin getSyncStateSet -c: every set of a
#: cluster), up to 20,000 of them: a list of short names, decoded at once too
NAMES_BODY_MAX = 1024 * 1024


def small_body(body: bytes | memoryview | None, what: str, limit: int = BODY_AT_ONCE_MAX) -> bytes | None:
    """``body`` as bytes, to be decoded at once; a BadRequest (SYSTEM_ERROR, ``bad_request``) when it is
    over ``limit``, before a byte of it is read."""
    if body is not None and len(body) > limit:
        raise BadRequest(f"{what}: a body of {len(body)} bytes is over the {limit} read at once "
                         "(a broker sends under 1 KiB)")
    return None if body is None else bytes(body)


#: what Long.parseLong / Integer.parseInt accept, range aside: Character.digit takes any Unicode
#: decimal digit (Arabic-Indic, fullwidth...), as Python's ``\d`` on str does; no space, no '_'.  Java
#: reads the string a UTF-16 ``char`` at a time, so a digit beyond U+FFFF (mathematical bold U+1D7CE..,
#: Osmanya, Adlam: 290 of Python's ``\d``) is two surrogates, no digit, and throws: Java 17's BMP digits
#: are exactly Python's (370, checked with Character.digit), the rest are refused here as Java refuses them
JAVA_INTEGER = re.compile(r"[+-]?(?:(?![\U00010000-\U0010FFFF])\d)+")
#: ASCII digits no longer than this are below 2**63 whatever they are: int() of them needs no checks
#: but the range of the width asked for (every number a header of a Java peer carries takes this path)
_PLAIN_DIGITS = 18


def java_bool(value: str | None) -> bool:
    """Boolean.parseBoolean: only a case-insensitive "true" is true."""
    return value is not None and value.lower() == "true"


def parse_java_integer(value: str | None, bits: int = 64) -> int | None:
    """Long.parseLong / Integer.parseInt: decimal digits (any script's, as Java's Character.digit)
    with an optional sign, in range; None where Java throws (Python's int() alone would also take
    '1_0', ' 0' or a digit beyond U+FFFF, which Java reads as two surrogates)."""
    if value is None:
        return None
    if len(value) <= _PLAIN_DIGITS and value.isascii() and value.isdigit():  # the usual field: no regex, no scan
        number = int(value)
        return number if number < 1 << (bits - 1) else None
    if not JAVA_INTEGER.fullmatch(value):
        return None
    sign, digits = (value[0], value[1:]) if value[0] in "+-" else ("", value)
    first = next((i for i, digit in enumerate(digits) if int(digit)), len(digits))  # Java takes leading zeros
    if len(digits) - first > 20:  # out of range; int() would raise past 4,300 digits (a header holds 64 KiB)
        return None
    number = int(sign + (digits[first:] or "0"))
    return number if -(1 << (bits - 1)) <= number < (1 << (bits - 1)) else None


#: a boxed Integer/Long header field: Java swallows a parse error and keeps null (parse_java_integer's
#: None); the same function, not a call of it (a registration's header reads three)
optional_long = parse_java_integer
