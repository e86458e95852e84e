"""brokers.csv and clients.csv as a spreadsheet reads them: a peer's text is never a formula."""

from __future__ import annotations

import csv
import io

from spark_analysis.analysis.clients import CLIENT_COLUMNS
from spark_analysis.decode.schema import BROKERS_CSV_COLUMNS
from spark_analysis.output.brokers import brokers_csv, clients_csv

FORMULAS = ['=HYPERLINK("http://evil.example/x","open")', "+1+2", "-2+3", "@SUM(A1)", "\t=1", "\r=1"]


def read(data: bytes) -> list[dict[str, str]]:
    """As a spreadsheet or csv.reader of a file opened with newline="" reads the file: a \r or \n
    outside quotes ends a row."""
    return list(csv.DictReader(io.StringIO(data.decode(), newline="")))


def test_a_broker_or_cluster_named_as_a_formula_is_written_as_text() -> None:
    """A broker registered as =HYPERLINK(...) (any peer can, as with Java's NameServer) is a cell
    starting with a quote, as a spreadsheet writes such text; numbers, negative ones too, stay numbers."""
    rows = [dict.fromkeys(BROKERS_CSV_COLUMNS) | {"broker_name": name, "cluster": name, "broker_id": -1,
                                              "registrations": 3, "broker_addr": "10.0.0.1:10911"}
            for name in FORMULAS + ["broker-a"]]
    written = read(brokers_csv(rows))
    assert [row["broker_name"] for row in written] == [f"'{name}" for name in FORMULAS] + ["broker-a"]
    assert all(row["cluster"] == row["broker_name"] for row in written)
    assert {row["broker_id"] for row in written} == {"-1"} and {row["registrations"] for row in written} == {"3"}


def test_a_client_s_language_as_a_formula_is_written_as_text() -> None:
    rows = [dict.fromkeys(CLIENT_COLUMNS) | {"language": "=cmd|' /C calc'!A0", "version": "V4_9_8", "requests": 1}]
    (written,) = read(clients_csv(rows))
    assert written["language"] == "'=cmd|' /C calc'!A0" and written["version"] == "V4_9_8"


def test_a_lone_carriage_return_in_a_name_stays_inside_its_cell() -> None:
    """A broker name holding \r: Python's writer left it unquoted (only \n, the line terminator,
    is quoted), and a spreadsheet started a new row there with the columns after it shifted."""
    rows = [dict.fromkeys(BROKERS_CSV_COLUMNS) | {"broker_name": "a\rb", "cluster": "C", "broker_id": 0},
            dict.fromkeys(BROKERS_CSV_COLUMNS) | {"broker_name": "broker-b", "cluster": "C", "broker_id": 1}]
    written = read(brokers_csv(rows))
    assert [(row["broker_name"], row["broker_id"]) for row in written] == [("a\rb", "0"), ("broker-b", "1")]


def test_a_negative_duration_is_written_as_a_number_not_as_text() -> None:
    """The quote is for text a peer chose: a duration the writer formats (seconds to the
    millisecond) is a number, negative or not; formatted first and then quoted, ``-0.500`` was
    ``'-0.500``, a text cell no sum or sort takes as the number it is."""
    row = dict.fromkeys(BROKERS_CSV_COLUMNS) | {"broker_name": "-b", "cluster": "C", "broker_id": 0,
                                           "interval_p50_s": -0.5, "max_gap_s": 31.25, "body_len_median": -2.0}
    (written,) = read(brokers_csv([row]))
    assert (written["interval_p50_s"], written["max_gap_s"], written["body_len_median"]) == ("-0.500", "31.250",
                                                                                             "-2.000")
    assert written["broker_name"] == "'-b"
