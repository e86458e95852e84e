"""report.html: what the cluster did, as PNG plots embedded in one self-contained page.

Every plot is drawn from aggregates computed in Spark: the per-broker liveness (brokers.py: time
bins of the plotted brokers, interval buckets, gaps) and the calls and latency buckets per code that
the decoding tasks counted (latency.py). The driver holds a few thousand numbers however large the
capture.
"""

from __future__ import annotations

import base64
import html
import io
import multiprocessing
import os
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime, timezone
from functools import partial

import numpy as np
from matplotlib.dates import date2num
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter
from pyspark.sql import SparkSession

from spark_analysis.brokers import (
    EXPIRY_SECONDS,
    INTERVAL_BUCKET_S,
    INTERVAL_RANGE_S,
    PLOTTED_BROKERS,
    TIME_BINS,
    Liveness,
    iso_time,
    plot_order,
)
from spark_analysis.latency import PERCENTILES, CodeStats
from spark_analysis.schema import BROKER_COLUMNS

LEGEND_BROKERS = 12
TOP_CODES = 25
_SUMMARY = (("records", "pcap records"), ("segments", "TCP segments on the port"), ("connection", "connections"),
            ("frame", "frames"), ("request", "requests"), ("response", "responses"), ("unanswered", "unanswered"),
            ("registration", "REGISTER_BROKER requests"), ("crc_failures", "CRC failures"),
            ("gaps", "capture gaps"), ("lost_bytes", "bytes lost to gaps"), ("brokers", "brokers"))


def write_report(spark: SparkSession, out: str, liveness: Liveness, codes: list[CodeStats], counts: Counter,
                 write_bytes: Callable[[SparkSession, str, bytes], None]) -> None:
    shown = plotted_brokers(liveness.brokers)
    plots = _draw([
        ("Heartbeat timeline per broker", partial(heartbeat_timeline, shown, liveness)),
        ("Intervals between heartbeats", partial(interval_histogram, liveness.interval_counts)),
        ("Topics per broker over time", partial(topic_counts, shown, liveness)),
        ("Request mix by code", partial(request_mix, codes)),
        ("Latency percentiles by code", partial(latency_percentiles, codes)),
    ])
    write_bytes(spark, f"{out}/report.html", _page(liveness.brokers, counts, plots).encode())


def _draw(plots: list[tuple[str, Callable[[], bytes]]]) -> list[tuple[str, bytes]]:
    """Draw the plots; with a second core, the first (the largest) in a forked child meanwhile:
    drawing is the driver's only serial work after the last job (0.5 s on one core, 0.35 s on two)."""
    if len(os.sched_getaffinity(0)) < 2:
        return [(title, draw()) for title, draw in plots]
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as child:
        first = child.submit(plots[0][1])
        rest = [(title, draw()) for title, draw in plots[1:]]
        return [(plots[0][0], first.result()), *rest]


def plotted_brokers(brokers: list[dict]) -> list[str]:
    """The brokers Liveness has bins of."""
    return [b["broker_addr"] for b in sorted(brokers, key=plot_order)[:PLOTTED_BROKERS]]


def heartbeat_timeline(shown: list[str], liveness: Liveness) -> bytes:
    """Heartbeats per broker and time bin as shades (an image: cheap for any number of bins), gaps
    over the expiry as red bars."""
    time_bins = liveness.time_bins
    row_of = {addr: index for index, addr in enumerate(shown)}
    heartbeats = np.zeros((len(shown), TIME_BINS + 1))  # the last event falls into bin TIME_BINS
    for addr in shown:
        for index, count, _ in liveness.bins.get(addr, ()):
            heartbeats[row_of[addr], index] = count
    figure, axes = _figure(height=max(2.5, 0.28 * len(shown) + 1.2), y_labels=shown)
    span = _days([time_bins.start, time_bins.start + (TIME_BINS + 1) * time_bins.width])
    axes.imshow(np.ma.masked_equal(heartbeats, 0), aspect="auto", interpolation="nearest", cmap="Blues",
                vmin=0, extent=(*span, len(shown) - 0.5, -0.5))
    axes.xaxis_date()
    gaps = [(row_of[addr], t - interval, t) for addr, t, interval in liveness.gaps if addr in row_of]
    if gaps:
        rows, silent_from, silent_to = zip(*gaps, strict=True)
        axes.hlines(rows, _days(silent_from), _days(silent_to), color="tab:red", linewidth=4,
                    label=f"gap > {EXPIRY_SECONDS} s")
        axes.legend(fontsize=7, loc="upper right")
    axes.set_yticks(range(len(shown)), shown, fontsize=7)
    axes.set_xlabel("time (UTC); shade: heartbeats per time bin")
    return _png(figure)


def interval_histogram(counts: dict[int, int]) -> bytes:
    figure, axes = _figure()
    axes.bar([b * INTERVAL_BUCKET_S for b in counts], list(counts.values()), width=INTERVAL_BUCKET_S, align="edge")
    axes.axvline(EXPIRY_SECONDS, color="tab:red", linestyle="--", label=f"expiry ({EXPIRY_SECONDS} s)")
    axes.set_xlabel(f"seconds between heartbeats of a broker (last bar: {INTERVAL_RANGE_S} s and more)")
    axes.set_ylabel("intervals")
    axes.legend()
    return _png(figure)


def topic_counts(shown: list[str], liveness: Liveness) -> bytes:
    figure, axes = _figure()
    plotted = 0
    for addr in shown:
        points = [(index, topics) for index, _, topics in liveness.bins.get(addr, ()) if topics is not None]
        if points:
            plotted += 1
            indexes, topics = zip(*points, strict=True)
            axes.step(_days(liveness.time_bins.middle(np.array(indexes))), topics, where="post", label=addr)
    axes.xaxis_date()
    axes.set_xlabel("time (UTC)")
    axes.set_ylabel("topics in the registration")
    if plotted <= LEGEND_BROKERS:
        axes.legend(fontsize=7)
    return _png(figure)


def request_mix(codes: list[CodeStats]) -> bytes:
    rows = sorted(codes, key=lambda row: row.requests, reverse=True)[:TOP_CODES][::-1]  # the most frequent on top
    figure, axes = _figure(height=max(2.5, 0.3 * len(rows) + 1), y_labels=[row.code_name for row in rows])
    axes.barh([row.code_name for row in rows], [row.requests for row in rows])
    _log_x(axes)
    axes.set_xlabel("requests")
    axes.tick_params(axis="y", labelsize=7)
    return _png(figure)


def latency_percentiles(codes: list[CodeStats]) -> bytes:
    answered = [row for row in codes if row.answered]
    rows = sorted(answered, key=lambda row: row.answered, reverse=True)[:TOP_CODES][::-1]
    figure, axes = _figure(height=max(2.5, 0.45 * len(rows) + 1), y_labels=[row.code_name for row in rows])
    height = 0.8 / len(PERCENTILES)
    for index, percentile in enumerate(PERCENTILES):
        axes.barh([r + index * height for r in range(len(rows))], [max(row.p[index], 1e-3) for row in rows],
                  height=height, label=f"p{percentile * 100:g}")
    axes.set_yticks([r + 0.4 - height / 2 for r in range(len(rows))], [row.code_name for row in rows], fontsize=7)
    _log_x(axes)
    axes.set_xlabel("latency, ms (request to answer, as captured)")
    axes.legend()
    return _png(figure)


_EPOCH_DAYS = date2num(datetime(1970, 1, 1, tzinfo=timezone.utc))  # matplotlib's date.epoch may differ


def _days(seconds: Iterable[float] | np.ndarray) -> np.ndarray:
    """Unix times as matplotlib's date numbers, at once (a datetime per point is most of a plot's time)."""
    return np.asarray(seconds, dtype=float) / 86400 + _EPOCH_DAYS


def _log_x(axes) -> None:
    """A log x axis labelled with plain numbers (matplotlib's default typesets each one as TeX:
    a third of a bar plot's time); the ticks between powers of ten labelled as by default, where
    the axis spans under two decades."""
    axes.set_xscale("log")
    axes.xaxis.set_major_formatter(_PlainLogFormatter())
    axes.xaxis.set_minor_formatter(_PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


class _PlainLogFormatter(LogFormatter):
    def _num_to_string(self, x: float, vmin: float, vmax: float) -> str:
        return f"{x:,.0f}" if x >= 1 else f"{x:g}"


_WIDTH = 11  # inches
_LABEL_CHAR = 0.065  # inches a character of a 7-point tick label takes, at most


def _figure(height: float = 3.5, y_labels: Iterable[str] = ()) -> tuple[Figure, object]:
    """A figure with margins in inches, wide enough on the left for ``y_labels`` (matplotlib's
    layout engines measure every label by drawing the figure once more: a third of a plot's time)."""
    left = 0.3 + _LABEL_CHAR * max(map(len, y_labels), default=8)
    figure = Figure(figsize=(_WIDTH, height))
    figure.subplots_adjust(left=left / _WIDTH, right=1 - 0.45 / _WIDTH, bottom=0.6 / height, top=1 - 0.15 / height)
    return figure, figure.add_subplot()


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, pil_kwargs={"compress_level": 1})  # 3x faster, 25% bigger
    return buffer.getvalue()


def _page(brokers: list[dict], counts: Counter, plots: list[tuple[str, bytes]]) -> str:
    summary = "".join(f"<tr><th>{html.escape(label)}</th><td>{counts[key]:,}</td></tr>" for key, label in _SUMMARY)
    head = "".join(f"<th>{column}</th>" for column in BROKER_COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(column, b[column]))}</td>" for column in BROKER_COLUMNS)
                   + "</tr>" for b in brokers)
    figures = "".join(f"<h2>{html.escape(title)}</h2><img alt='{html.escape(title)}' "
                      f"src='data:image/png;base64,{base64.b64encode(png).decode()}'>" for title, png in plots)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>NameServer capture report</title>"
            f"<style>{_STYLE}</style></head><body><h1>NameServer capture report</h1>"
            f"<table>{summary}</table>{figures}<h2>Brokers</h2><table><tr>{head}</tr>{body}</table></body></html>")


def _cell(column: str, value: object) -> str:
    if value is None:
        return ""
    if column in ("first_seen", "last_seen"):
        return iso_time(value)
    return f"{value:.1f}" if isinstance(value, float) else str(value)


_STYLE = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:13px}"
          "td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}img{max-width:100%}")
