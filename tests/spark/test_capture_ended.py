"""A request carried by the last bytes a capture holds of a connection it never saw closed: the
capture stopped there, or a file still being written was read as far as it went (tcpdump writes
4 KiB blocks). Its answer is not in the capture because the capture ended, not because the server
did not answer: it was told "never answered" (a warning), as a request the server left unanswered
while the connection went on."""

from __future__ import annotations

from spark_analysis.capture.packets import ACK, FIN, PSH
from spark_analysis.decode.rows import CALL
from spark_analysis.decode.schema import CALL_ROWS
from tests.spark.capture.builders import CLIENT, SERVER, answer, client_stream, handshake, route_query, segment
from tests.spark.test_decode import rows_of

CUT, CODE = CALL_ROWS.names.index("cut"), CALL_ROWS.names.index("response_code")


def _calls(*after: tuple) -> list[tuple]:
    """Route lookups 1 (answered) and 2, then ``after``."""
    one, two = route_query(1), route_query(2)
    asked = client_stream(one) + client_stream(two, start=1001 + len(one), ts=4.0)
    answered = [(3.0, segment(SERVER, CLIENT, 5001, PSH | ACK, answer(1)))]
    return [(c[CODE], c[CUT]) for c in rows_of(handshake() + asked + answered + list(after))[CALL]]


def test_a_request_the_capture_ended_with_is_not_known_unanswered() -> None:
    assert _calls() == [(0, False), (None, True)]


def test_a_request_followed_by_its_connection_s_close_is_unanswered() -> None:
    fin = (9.0, segment(CLIENT, SERVER, 1001 + len(route_query(1)) * 2, FIN | ACK))
    assert _calls(fin) == [(0, False), (None, False)]


def test_a_request_followed_by_more_bytes_is_unanswered() -> None:
    more = (9.0, segment(SERVER, CLIENT, 5001 + len(answer(1)), PSH | ACK, answer(3)))
    assert _calls(more) == [(0, False), (None, False)]
