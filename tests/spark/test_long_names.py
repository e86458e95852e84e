"""A name past escapes.SHOWN_MAX characters (a topic, a broker's or cluster's name, a remark, a
capture file's path) in the lines made for people: clipped where it is put into the line
(escapes.clipped_name, clipped_repr), as the server's audit trail clips its values, never searched
for in a finished line; the fields the line was made of keep it whole."""

from __future__ import annotations

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
