"""Header values parsed as Java parses them."""

from __future__ import annotations

import pytest

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
])
def test_integers_as_long_and_integer_parse_them(value: str | None, bits: int, expected: int | None) -> None:
    # "٣" is 3 to Java: Integer.parseInt reads each char with Character.digit, which takes any Unicode digit;
    # 5,000 digits (a header field holds 64 KiB): Python's int() raised past 4,300, a traceback a request
    assert parse_java_integer(value, bits) == expected
    assert optional_long(value, bits) == expected


def test_what_brokers_send_is_read_without_the_general_rule(monkeypatch) -> None:
    """A header's usual integers (a brokerId, a CRC, a timeout: ASCII digits that fit a long) are
    read by int() alone; Java's general rule (any script's digits, signs, leading zeros past the
    range) is looked at only for the rest. A heartbeat reads four of them (on the old code each
    through the rule's regular expression)."""
    from twisted_namesrv.remoting import values

    looked: list[str] = []

    class Counted:
        def fullmatch(self, value: str):
            looked.append(value)
            return values.re.fullmatch(r"[+-]?\d+", value)
    monkeypatch.setattr(values, "JAVA_INTEGER", Counted())
    usual = ["0", "1", "1234567890", "30000", "999999999999999999", "000000000000000042"]
    assert [parse_java_integer(v) for v in usual] == [0, 1, 1234567890, 30000, 999999999999999999, 42]
    assert parse_java_integer("2147483648", 32) is None and parse_java_integer("2147483647", 32) == (1 << 31) - 1
    assert looked == []
    assert [parse_java_integer(v) for v in ("+7", "٣", "9223372036854775807", "-1")] == [7, 3, (1 << 63) - 1, -1]
    assert looked == ["+7", "٣", "9223372036854775807", "-1"]
