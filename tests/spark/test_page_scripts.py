"""The page's Content-Security-Policy hashes (report.py): the figures' inline scripts found as the
regular expression found them."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from spark_analysis.output import report

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

