"""The page's Content-Security-Policy hashes (report.py): the figures' inline scripts found as the
regular expression found them; plotly.js's hash read again when its file changes under a
long-lived driver, not the first one read kept for the process's life; and read while the Spark
jobs run."""

from __future__ import annotations

import importlib.util
import os
import pkgutil
import re
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_analysis.output import report
from tests.spark.conftest import run_job

#: how the page found its scripts before (the expression inline_scripts stands for)
SCRIPT = re.compile(r"<script[^>]*>(.*?)</script>", re.DOTALL)
PIECES = ["<script", "<script type='x'>", ">", "</script>", "</script", "<", "/", "a", "\n", "é", " "]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=16))
def test_inline_scripts_are_what_the_expression_found(pieces: list[str]) -> None:
    markup = "".join(pieces)
    assert list(report.inline_scripts(markup)) == SCRIPT.findall(markup)


def test_a_figure_s_scripts_are_found_whole() -> None:
    markup = "<div id='x'></div><script type=\"text/javascript\">if (a > b) {draw('<b>')}</script>" \
             "<p>between</p><script>\nsecond\n</script><script>never closed"
    assert list(report.inline_scripts(markup)) == ["if (a > b) {draw('<b>')}", "\nsecond\n"]


STYLE = "createElement(\"style\");s.id=\"maplibre\",s.textContent='.{}{{color:red}}'"


@pytest.fixture
def fake_plotly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A package named plotly whose plotly.js is a file of the test's, none of it read yet."""
    package = tmp_path / "plotly"
    (package / "package_data").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    spec = importlib.util.spec_from_file_location("plotly", package / "__init__.py",
                                                  submodule_search_locations=[str(package)])
    assert spec is not None
    monkeypatch.setitem(sys.modules, "plotly", importlib.util.module_from_spec(spec))
    monkeypatch.setattr(report, "_plotly_read", [])
    return package / report.PLOTLY_JS


def _written(path: Path, text: str, mtime_ns: int) -> None:
    path.write_text(text)
    os.utime(path, ns=(mtime_ns, mtime_ns))


def test_plotly_js_is_read_once_while_its_file_stays(fake_plotly: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _written(fake_plotly, "var v = 1;" + STYLE.format("one"), 1_000_000_000)
    reads = []
    monkeypatch.setattr(pkgutil, "get_data", lambda *args: reads.append(args) or fake_plotly.read_bytes())
    first = report._plotly_js()
    assert report._plotly_js() is first
    assert len(reads) == 1


def test_plotly_js_read_again_once_its_file_changed(fake_plotly: Path) -> None:
    _written(fake_plotly, "var v = 1;" + STYLE.format("one"), 1_000_000_000)
    before = report._plotly_js()
    # the same size, a later modification time: Plotly upgraded under the driver
    _written(fake_plotly, "var v = 2;" + STYLE.format("two"), 2_000_000_000)
    after = report._plotly_js()
    assert after.code == fake_plotly.read_bytes()
    assert after.script == report._hash(fake_plotly.read_bytes()) != before.script
    assert after.styles == (report._hash(b".two{color:red}"),) != before.styles
    assert report._plotly_js() is after



def test_plotly_js_is_ready_before_the_page_is_written(spark, synthetic, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Read and hashed while the Spark jobs run (job.report_ready), not by the driver's thread
    after the last job, with every core waiting for it."""
    monkeypatch.setattr(report, "_plotly_read", [])  # as in a one-shot run's driver
    reads, seen_by_the_page = [], []
    reading, writing = report._plotly_js, report.write_report
    monkeypatch.setattr(report, "_plotly_js", lambda: reads.append(threading.current_thread()) or reading())
    monkeypatch.setattr(report, "write_report", lambda *args: seen_by_the_page.append(list(reads)) or writing(*args))
    outputs = run_job(spark, [str(synthetic[0])], tmp_path / "out", report=True)
    assert len(seen_by_the_page) == 1 and len(seen_by_the_page[0]) == 1
    assert seen_by_the_page[0][0] is not threading.main_thread()
    assert (tmp_path / "out" / "report.html").read_bytes().count(report._plotly_js().script.encode()) == 1
    assert outputs.summary["counts"]
