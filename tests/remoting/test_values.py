"""Header values parsed as Java parses them."""

from __future__ import annotations

import pytest

from twisted_namesrv.remoting import fastjson
from twisted_namesrv.remoting.values import java_bool, optional_long, parse_java_integer


@pytest.mark.parametrize(("value", "expected"), [("true", True), ("TRUE", True), ("True", True), ("false", False),
                                                 ("yes", False), ("1", False), ("", False), (None, False)])
def test_only_true_in_any_case_is_true(value: str | None, expected: bool) -> None:
    assert java_bool(value) is expected


@pytest.mark.parametrize(("value", "bits", "expected"), [
    ("42", 64, 42), ("+7", 64, 7), ("-9", 64, -9), ("9223372036854775807", 64, (1 << 63) - 1),
    ("9223372036854775808", 64, None), ("2147483647", 32, (1 << 31) - 1), ("2147483648", 32, None),
    ("-2147483648", 32, -(1 << 31)), ("1_0", 64, None), (" 0", 64, None), ("٣", 64, 3), ("", 64, None),
    (None, 64, None), ("0x10", 64, None), ("9" * 5000, 64, None), ("-" + "9" * 5000, 64, None),
    ("0" * 5000 + "7", 64, 7), ("-" + "0" * 5000 + "1", 32, -1), ("٠" * 5000 + "٣", 64, 3), ("+" + "0" * 5000, 64, 0),
    ("\U0001d7d2", 64, None), ("1\U0001d7ce", 32, None), ("-\U000104a1", 64, None), ("\uff14", 32, 4),
])
def test_integers_as_long_and_integer_parse_them(value: str | None, bits: int, expected: int | None) -> None:
    # "٣" is 3 to Java: Integer.parseInt reads each char with Character.digit, which takes any Unicode digit;
    # 5,000 digits (a header field holds 64 KiB): Python's int() raised past 4,300, a traceback a request;
    # a digit beyond U+FFFF (mathematical bold four, Osmanya one) is two chars to Java, no digit: it throws
    assert parse_java_integer(value, bits) == expected
    assert optional_long(value, bits) == expected


def test_plain_ascii_numbers_are_read_without_the_regex(monkeypatch: pytest.MonkeyPatch) -> None:
    # every number a Java peer's header carries (brokerId, bodyCrc32, heartbeatTimeoutMillis) is plain ASCII
    # digits: read with int() alone, the regex and the leading-zero scan kept for the rest (work counted)
    from twisted_namesrv.remoting import values

    matched = []

    class Counting:
        def fullmatch(self, text: str) -> object:
            matched.append(text)
            return values.JAVA_INTEGER_PATTERN.fullmatch(text)

    monkeypatch.setattr(values, "JAVA_INTEGER_PATTERN", values.JAVA_INTEGER, raising=False)
    monkeypatch.setattr(values, "JAVA_INTEGER", Counting())
    assert [parse_java_integer(text) for text in ("0", "123456789", "120000", "999999999999999999")] == [
        0, 123456789, 120000, 999999999999999999]
    assert parse_java_integer("2147483648", 32) is None and parse_java_integer("2147483647", 32) == (1 << 31) - 1
    assert matched == []
    assert parse_java_integer("-7") == -7 and parse_java_integer("٣") == 3 and matched == ["-7", "٣"]


@pytest.mark.parametrize("value", [-(1 << 63) - 1, -(1 << 63), -1, 0, 1, (1 << 63) - 1, 1 << 63, 1 << 200, True, False,
                                   1.0, "5"], ids=repr)
def test_the_longs_taken_as_they_are_are_those_java_numbers_answers_with_themselves(value: object) -> None:
    """fastjson.JAVA_LONG_INTS, which a caller tests in place of calling java_numbers (DataVersion's
    numbers), holds an int exactly when java_numbers answers it with itself, at the range's edges
    and past them; a bool, a float or a string always goes through java_numbers."""
    taken = type(value) is int and value in fastjson.JAVA_LONG_INTS
    try:
        answered = fastjson.java_numbers([value], fastjson.JAVA_LONG)
    except ValueError:
        answered = None
    assert taken == (answered is not None and type(value) is int and answered == [value])


def test_the_digits_taken_are_those_java_17_takes() -> None:
    """Java's Integer.parseInt reads a char at a time with Character.digit: the 370 decimal digits of
    the BMP (Java 17 and 25 alike, counted with Character.digit over 0..0xFFFF), never a digit beyond
    U+FFFF, which Python's ``\\d`` and int() take (290 more in Unicode 14). Taken, an ORDER_TOPIC_CONFIG
    value ``broker-a:\U0001d7d2`` passed the check every producer's route update then threw on."""
    taken = [c for c in range(0x110000) if parse_java_integer(chr(c)) is not None]
    assert len(taken) == 370 and max(taken) <= 0xFFFF
    assert sum(1 for c in range(0x10000, 0x110000) if chr(c).isdecimal()) > 0  # what Python alone would take
