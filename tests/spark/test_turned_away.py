"""A server closing a client it sent nothing to is turning that client away, not going away, and not
an answer lost: its unanswered requests are told as the refusal the packets show.

A real capture of our NameServer with tls.server.mode enforcing: four TLS clients came and went
(each closed by the client), then a plain client asked GET_BROKER_CLUSTER_INFO and the server closed
it without a byte; the server was stopped 1.5 s later with nothing open. The report told "NameServer
127.0.0.1:9876 stopped at" that refusal: the stop was invented from the server answering a client.
"""

from __future__ import annotations

from collections import Counter

from spark_analysis.analysis import findings
from spark_analysis.model.endpoints import endpoint_stories
from spark_analysis.model.periods import ConnectionEnds
from spark_analysis.model.sessions import iso_time

SERVER = "127.0.0.1:9876"
ISN_CLIENT, ISN_SERVER = 1_000, 4_294_967_000  # the server's wraps past 2**32


def _connection(t: float, client_bytes: int, server_bytes: int, closed_by_server: bool) -> ConnectionEnds:
    """A connection opened by the client at ``t`` (its SYN, the server's SYN-ACK), a request of
    ``client_bytes``, an answer of ``server_bytes``, FINs each way: its ends as note_ends makes them.
    The client's port sorts below the server's: the client is the lower end, way 0."""
    client_next = (ISN_CLIENT + 1 + client_bytes + 1) % (1 << 32)
    server_next = (ISN_SERVER + 1 + server_bytes + 1) % (1 << 32)
    return ConnectionEnds(t, True, t + 1.0, True, t + 0.5, not closed_by_server, True, t + 0.001, (), t + 0.4,
                          (ISN_CLIENT, ISN_SERVER), (client_next, server_next))


def _ends(last_answered: bool) -> dict[tuple[str, str], ConnectionEnds]:
    ends = {(f"127.0.0.1:4{n}000", SERVER): _connection(10.0 * n, 700, 2_000, closed_by_server=False)
            for n in range(1, 5)}
    ends[("127.0.0.1:43322", SERVER)] = _connection(60.0, 120, 2_000 if last_answered else 0, closed_by_server=True)
    return ends


def test_a_plain_client_closed_without_an_answer_is_no_stop() -> None:
    story = endpoint_stories(_ends(last_answered=False))[SERVER]
    assert story.outages == [] and story.stopped is None
    assert story.accepted == 5


def test_a_server_that_answered_and_closed_its_last_busy_connection_still_stopped() -> None:
    """The rule as it was for a connection the server spoke on: closed by it, busy to then, none
    after: it stopped (the capture's end as it sees it)."""
    story = endpoint_stories(_ends(last_answered=True))[SERVER]
    assert story.stopped is not None and story.stopped.down == 60.5


def test_the_turned_away_client_is_kept_with_its_close() -> None:
    """Only the client whose bytes the server closed on without a word: not the four it served."""
    story = endpoint_stories(_ends(last_answered=False))[SERVER]
    assert story.turned_away == {"127.0.0.1:43322": 60.5}
    assert endpoint_stories(_ends(last_answered=True))[SERVER].turned_away == {}


def _said(tls: bool) -> list[dict]:
    """The findings of that capture: the plain client's GET_BROKER_CLUSTER_INFO unanswered, and (with
    ``tls``) the server's other connections TLS."""
    rows = findings.endpoint_rows(endpoint_stories(_ends(last_answered=False)), {SERVER}, Counter())
    groups: findings.Groups = {findings.UNANSWERED: {("GET_BROKER_CLUSTER_INFO", "127.0.0.1:43322"): [1, 60.2, 60.2,
                                                                                                      None]}}
    if tls:
        groups[findings.UNDECODABLE] = {("127.0.0.1:41000>127.0.0.1:9876@10.0", SERVER, "TLS"): [700, 10.0, 10.0,
                                                                                                  None]}
    return [f for f in findings.evidence([], groups, [], {}, rows) if f["kind"] != "undecodable_connection"]


def test_a_plain_client_turned_away_by_a_tls_server_is_said_refused_not_unanswered() -> None:
    """The report said '1 GET_BROKER_CLUSTER_INFO request(s) from 127.0.0.1:43322 never answered', as
    if an answer were lost or the server hung: the server's own packets show it closed the connection
    without a byte, and its other connections speak TLS."""
    said = _said(tls=True)
    assert [(f["kind"], f["severity"], f["client"], f["server"], f["tls"]) for f in said] == [
        ("turned_away", "warning", "127.0.0.1:43322", SERVER, True)]
    assert said[0]["t"] == iso_time(60.5)
    assert "without sending a byte" in said[0]["message"] and "tls.server.mode enforcing" in said[0]["message"]
    line = findings.attention(said)["attention"]
    assert "turned away" in line and "never answered" not in line


def test_without_tls_beside_it_the_refusal_names_no_cause() -> None:
    """The same close on a server with no TLS connection: a refusal still, its cause not invented."""
    said = _said(tls=False)
    assert [(f["kind"], f["tls"]) for f in said] == [("turned_away", False)]
    assert "TLS" not in said[0]["message"] and "do not say why" in said[0]["message"]
