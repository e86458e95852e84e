"""A name past escapes.SHOWN_MAX characters (a topic, a broker's or cluster's name, a remark, a
capture file's path) in the lines made for people: clipped where it is put into the line
(escapes.clipped_name, clipped_repr), as the server's audit trail clips its values, never searched
for in a finished line; the fields the line was made of keep it whole."""

from __future__ import annotations

import html
from html.parser import HTMLParser
from pathlib import Path

from spark_analysis.analysis import findings
from tests.spark.conftest import run_job
from tests.spark.test_truth import REAL
from twisted_namesrv.escapes import SHOWN_MAX, clipped_name, clipped_repr

#: a capture's directory as deep as a path may be (each name under 256 bytes, the path longer)
DEEP = "/captures/" + "/".join(["d" * 60] * 6)


def test_a_long_path_is_clipped_in_the_lines_the_console_says_as_it_reads() -> None:
    """The console says a rotation's quiet files and a ring's overwritten files as it reads them
    (spark/job.py), before the findings are grouped: the search clipped names only there (in
    findings._problem), so these lines held a path of any length whole."""
    ring = [f"{DEEP}/ns.pcap2", f"{DEEP}/ns.pcap0", f"{DEEP}/ns.pcap1"]
    item = findings.overwritten_files(ring)
    assert item is not None and item["path"] == ring[0]  # the field: whole
    assert ring[0] not in item["message"] and item["message"].startswith(clipped_name(ring[0]))
    quiet = findings.quiet_files([f"{DEEP}/q0.pcap"])
    assert quiet == f"{DEEP[:SHOWN_MAX]}...({len(DEEP) + 8} characters): {findings.QUIET_FILE}"
    several = findings.quiet_files([f"{DEEP}/q{i}.pcap" for i in range(3)])
    assert DEEP not in several and several.count(f"...({len(DEEP) + 8} characters)") == 3


def test_clipped_repr_cuts_inside_the_quotes() -> None:
    """A topic said as Python writes it (quoted, its controls escaped) is cut inside its quotes."""
    assert clipped_repr("t") == "'t'" and clipped_repr(None) == "None"
    clipped = "'\\x1b" + "T" * (SHOWN_MAX - 1) + f"...({SHOWN_MAX + 1} characters)'"
    assert clipped_repr("\x1b" + "T" * SHOWN_MAX) == clipped


def test_the_console_s_lines_on_inputs_clip_a_long_path(spark, tmp_path: Path) -> None:
    """The job's own lines on what it read (a file that is no capture, here an empty one) named a
    path of any length whole; the fields (summary.json's inputs) keep it whole."""
    deep = tmp_path.joinpath(*["d" * 60] * 6)
    deep.mkdir(parents=True)
    (deep / "empty.pcap").write_bytes(b"")
    real = REAL / "v4-expiry" / "v4-expiry.pcap.gz"
    out = run_job(spark, [str(real), str(deep / "empty.pcap")], tmp_path / "out", report=False)
    path = str(deep / "empty.pcap")
    assert not [line for line in out.progress if path in line]
    assert any(clipped_name(path) in line for line in out.progress)
    assert path in {f["path"] for f in out.summary["inputs"]["files"]}


class _Elements(HTMLParser):
    """Every element of a page, with its attributes (as the browser's DOM holds them)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, dict(attrs)))


#: a broker's (and cluster's, remark's) name past SHOWN_MAX, with what an attribute must not hold raw
LONG_NAME = "\"><b onmouseover=x>" + "N" * 400


def test_the_page_s_tables_clip_a_long_name_with_the_whole_in_its_title(spark, tmp_path: Path) -> None:
    """report.html's tables showed a long name whole (escaped): a 3,000-character broker name was a
    cell of 3,000 characters. The cell shows it clipped as the findings' lines do, the whole in its
    title (escaped: the quote that would end the attribute is an entity); in headless Chromium the
    title is the whole name, nothing the name holds became markup, and the pictures are drawn with no
    word from the page's Content-Security-Policy."""
    from tests.spark.test_hostile_page import _csp_run, _registrations_named

    path = tmp_path / "long.pcap"
    path.write_bytes(_registrations_named(LONG_NAME.replace('"', '\\"').encode()))  # as JSON writes it
    out = run_job(spark, [str(path)], tmp_path / "out", report=True)
    broker = f"b{LONG_NAME}"
    assert [row["broker_name"] for row in out.brokers] == [broker]  # brokers.csv: whole
    page = (tmp_path / "out" / "report.html").read_text()
    section = page[page.index("<section id='brokers'>"):page.index("<section id='clients'>")]
    clipped = f"{html.escape(broker[:SHOWN_MAX])}...({len(broker)} characters)"
    assert f"<td title=\"{html.escape(broker)}\">{clipped}</td>" in section
    assert broker not in section.replace(f"title=\"{html.escape(broker)}\"", "")  # shown whole only in the title
    dom, console = _csp_run(tmp_path / "out" / "report.html", tmp_path, "long")
    assert "Content Security Policy" not in console, console
    cells = _Elements()
    cells.feed(dom)
    assert broker in {attrs.get("title") for tag, attrs in cells.found if tag == "td"}  # the title: whole
    assert not [tag for tag, attrs in cells.found if "onmouseover" in attrs]  # the name made no element
    for plot in ("timeline", "intervals", "topics", "requests", "latency"):
        div = dom[dom.index(f'id="plot-{plot}"'):]
        assert 'class="main-svg"' in div[:div.index("</svg>")], f"{plot} not drawn"


def test_a_broker_named_in_3000_characters_is_told_with_its_id_and_address(spark, tmp_path: Path) -> None:
    """v5-longname: a Java 5.3.3 NameServer took a broker named in 3,000 characters (answered SUCCESS,
    served its route, logged its unregister). The report told four refused stays with no broker id
    (the replay held its tables to our maxNameLength) and said nothing of them; then, told as a stay,
    its line clipped the whole label, "DefaultCluster / broker-LLL...(3048 characters)", leaving out
    its id and address. Each part of a label is clipped by itself: the name clipped, who it is kept."""
    out = run_job(spark, [str(REAL / "v5-longname" / "v5-longname.pcap.xz")], tmp_path / "out", report=False)
    name = "broker-" + "L" * 2993
    (row,) = [row for row in out.brokers if row["broker_name"] == name]  # brokers.csv: whole, one stay
    assert (row["broker_id"], row["role"], row["ended"], row["registrations"]) == ("0", "MASTER", "unregistered", "4")
    (found,) = [f for f in out.summary["findings"] if f["kind"] == "broker_unregistered"]
    (item,) = [e for e in found["evidence"] if e["broker_addr"] == "127.0.0.1:11911"]
    for line in (found["message"], item["message"]):  # the headline's list and the stay's own line
        assert f"DefaultCluster / {clipped_name(name)} / 0 (MASTER) / 127.0.0.1:11911" in line
        assert name not in line


def test_the_pictures_clip_each_part_of_a_long_broker_label() -> None:
    """report.html's pictures label each stay on their axis: a broker named in 3,000 characters
    (v5-longname) made a label that took the plots' whole width, the heartbeats squeezed into a
    sliver beside it. Each part of the label is clipped by itself, its id, role and address kept."""
    from spark_analysis.output.report import PICTURE_PART_MAX, stay_labels, timeline_rows

    name = "broker-" + "L" * 2993
    stay = {"cluster": "DefaultCluster", "broker_name": name, "broker_id": 0, "role": "MASTER",
            "broker_addr": "127.0.0.1:11911", "server": "127.0.0.1:9876", "first_seen": "2026-12-01T08:15:37Z",
            "ids": [{"broker_id": 0, "role": "MASTER", "from": "2026-12-01T08:15:37Z"}]}
    expected = f"DefaultCluster / {clipped_name(name, PICTURE_PART_MAX)} / 0 (MASTER) / 127.0.0.1:11911"
    assert stay_labels([stay], lambda label, broker: label) == [expected]
    assert [row[0] for row in timeline_rows([stay], lambda label, broker: label)] == [expected]
    assert len(expected) < 160
