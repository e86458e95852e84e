"""The report's plot helpers, without Spark: times where matplotlib's date axes expect them, and
log axes labelled in plain numbers."""

from __future__ import annotations

import re
from datetime import datetime, timezone

import pytest
from matplotlib.dates import date2num

from spark_analysis import report


def test_unix_times_become_matplotlib_date_numbers() -> None:
    times = [0.0, 1_800_000_000.5]
    expected = date2num([datetime.fromtimestamp(t, timezone.utc) for t in times])
    assert report._days(times) == pytest.approx(expected, abs=1e-9)


def test_log_axes_are_labelled_with_plain_numbers() -> None:
    for values, must_show in (([10, 100_000], {"10", "1,000", "100,000"}), ([0.5, 3], {"1", "2"})):
        figure, axes = report._figure()
        axes.barh(["a", "b"], values)
        report._log_x(axes)
        report._png(figure)  # draws the figure, which sets the tick labels
        labels = {label.get_text() for label in axes.get_xticklabels(minor=False) + axes.get_xticklabels(minor=True)}
        labels.discard("")
        assert must_show <= labels
        assert all(re.fullmatch(r"[0-9.,]+", label) for label in labels), labels
