"""report.html: what the cluster did, as PNG plots embedded in one self-contained page.

Every plot is drawn from an aggregate computed in Spark (time bins, histogram buckets, percentiles),
so the driver holds a few thousand numbers however large the capture. Broker plots come from the
job's cached broker events; request mix and latencies read just the columns they need of frames/
and calls/ (cheaper than the cached rows, whose every column comes along).
"""

from __future__ import annotations

import base64
import html
import io
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import datetime, timezone

from matplotlib.figure import Figure
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_analysis.brokers import EXPIRY_SECONDS, iso_time
from spark_analysis.schema import BROKER_COLUMNS

TIME_BINS = 800
MAX_BROKERS = 60  # plotted; brokers.csv has them all
LEGEND_BROKERS = 12
INTERVAL_BUCKET_S = 5
INTERVAL_RANGE_S = 300
TOP_CODES = 25
PERCENTILES = (0.5, 0.9, 0.99)
_SUMMARY = (("records", "pcap records"), ("segments", "TCP segments on the port"), ("connection", "connections"),
            ("frame", "frames"), ("request", "requests"), ("response", "responses"), ("unanswered", "unanswered"),
            ("registration", "REGISTER_BROKER requests"), ("crc_failures", "CRC failures"),
            ("gaps", "capture gaps"), ("lost_bytes", "bytes lost to gaps"), ("brokers", "brokers"))


def write_report(spark: SparkSession, out: str, brokers: list[dict], counts: Counter,
                 write_bytes: Callable[[SparkSession, str, bytes], None], events: DataFrame) -> None:
    """``events``: brokers.broker_events, to be used several times (cached)."""
    frames, calls = (spark.read.parquet(f"{out}/{name}") for name in ("frames", "calls"))
    shown = _brokers_shown(brokers)
    start, width = _time_bins(brokers, shown)
    bins = per_broker_bins(events, shown, start, width)
    buckets, gaps = interval_buckets(events, shown)
    plots = [
        ("Heartbeat timeline per broker", heartbeat_timeline(shown, bins, gaps, start, width)),
        ("Intervals between heartbeats", interval_histogram(buckets)),
        ("Topics per broker over time", topic_counts(shown, bins, start, width)),
        ("Request mix by code", request_mix(frames)),
        ("Latency percentiles by code", latency_percentiles(calls)),
    ]
    write_bytes(spark, f"{out}/report.html", _page(brokers, counts, plots).encode())


def _brokers_shown(brokers: list[dict]) -> list[str]:
    """Brokers with expiring gaps first, then by address."""
    ordered = sorted(brokers, key=lambda b: (not b["would_expire"], b["broker_addr"]))
    return [b["broker_addr"] for b in ordered[:MAX_BROKERS]]


def per_broker_bins(events: DataFrame, shown: list[str], start: float, width: float) -> list:
    """Per shown broker and time bin: ``heartbeats`` (alive events) and ``topics`` (the most any
    registration in the bin carried, None without one)."""
    return (events.where(F.col("broker_addr").isin(shown)).groupBy("broker_addr", _bin(start, width))
            .agg(F.count(F.when(F.col("alive"), 1)).alias("heartbeats"), F.max("topic_count").alias("topics"))
            .collect())


def interval_buckets(events: DataFrame, shown: list[str]) -> tuple[dict[int, int], list]:
    """Intervals counted per INTERVAL_BUCKET_S bucket (the last: INTERVAL_RANGE_S and more), and
    the gaps over the expiry of shown brokers (broker_addr, t, interval), in one query."""
    bucket = F.least(F.floor(F.col("interval") / INTERVAL_BUCKET_S), F.lit(INTERVAL_RANGE_S // INTERVAL_BUCKET_S))
    is_gap = (F.col("interval") > EXPIRY_SECONDS) & F.col("broker_addr").isin(shown)
    rows = (events.where(F.col("interval").isNotNull()).groupBy(bucket.alias("bucket"))
            .agg(F.count(F.lit(1)).alias("n"),
                 F.collect_list(F.when(is_gap, F.struct("broker_addr", "t", "interval"))).alias("gaps"))
            .collect())
    return {row.bucket: row.n for row in rows}, [gap for row in rows for gap in row.gaps]


def heartbeat_timeline(shown: list[str], bins: list, gaps: list, start: float, width: float) -> bytes:
    marks = [b for b in bins if b.heartbeats]
    figure, axes = _figure(height=max(2.5, 0.28 * len(shown) + 1.2))
    row_of = {addr: index for index, addr in enumerate(reversed(shown))}
    axes.scatter([_time(start + (m.bin + 0.5) * width) for m in marks], [row_of[m.broker_addr] for m in marks],
                 marker="|", s=60, linewidths=1, color="tab:blue", label="heartbeat")
    for gap in gaps:
        axes.hlines(row_of[gap.broker_addr], _time(gap.t - gap.interval), _time(gap.t), color="tab:red",
                    linewidth=4, label=f"gap > {EXPIRY_SECONDS} s")
    axes.set_yticks(range(len(shown)), list(reversed(shown)), fontsize=7)
    axes.set_xlabel("time (UTC)")
    _dedupe_legend(axes)
    return _png(figure)


def interval_histogram(counts: dict[int, int]) -> bytes:
    figure, axes = _figure()
    axes.bar([b * INTERVAL_BUCKET_S for b in counts], list(counts.values()), width=INTERVAL_BUCKET_S, align="edge")
    axes.axvline(EXPIRY_SECONDS, color="tab:red", linestyle="--", label=f"expiry ({EXPIRY_SECONDS} s)")
    axes.set_xlabel(f"seconds between heartbeats of a broker (last bar: {INTERVAL_RANGE_S} s and more)")
    axes.set_ylabel("intervals")
    axes.legend()
    return _png(figure)


def topic_counts(shown: list[str], bins: list, start: float, width: float) -> bytes:
    series: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for row in bins:
        if row.topics is not None:
            series[row.broker_addr].append((row.bin, row.topics))
    figure, axes = _figure()
    for addr in shown:
        points = sorted(series.get(addr, ()))
        if points:
            axes.step([_time(start + (b + 0.5) * width) for b, _ in points], [t for _, t in points], where="post",
                      label=addr)
    axes.set_xlabel("time (UTC)")
    axes.set_ylabel("topics in the registration")
    if len(series) <= LEGEND_BROKERS:
        axes.legend(fontsize=7)
    return _png(figure)


def request_mix(frames: DataFrame) -> bytes:
    rows = (frames.where(F.col("direction") == "request").groupBy("code_name").count()
            .orderBy(F.desc("count")).limit(TOP_CODES).collect())
    figure, axes = _figure(height=max(2.5, 0.3 * len(rows) + 1))
    names = [row.code_name for row in reversed(rows)]
    axes.barh(names, [row["count"] for row in reversed(rows)])
    axes.set_xscale("log")
    axes.set_xlabel("requests")
    axes.tick_params(axis="y", labelsize=7)
    return _png(figure)


def latency_percentiles(calls: DataFrame) -> bytes:
    answered = calls.where(F.col("latency_ms").isNotNull())
    rows = (answered.groupBy("code_name").agg(F.percentile_approx("latency_ms", list(PERCENTILES)).alias("p"),
                                              F.count(F.lit(1)).alias("n"))
            .orderBy(F.desc("n")).limit(TOP_CODES).collect())[::-1]  # the most frequent on top
    figure, axes = _figure(height=max(2.5, 0.45 * len(rows) + 1))
    height = 0.8 / len(PERCENTILES)
    for index, percentile in enumerate(PERCENTILES):
        axes.barh([r + index * height for r in range(len(rows))], [max(row.p[index], 1e-3) for row in rows],
                  height=height, label=f"p{percentile * 100:g}")
    axes.set_yticks([r + 0.4 - height / 2 for r in range(len(rows))], [row.code_name for row in rows], fontsize=7)
    axes.set_xscale("log")
    axes.set_xlabel("latency, ms (request to answer, as captured)")
    axes.legend()
    return _png(figure)


def _time_bins(brokers: list[dict], shown: list[str]) -> tuple[float, float]:
    """Start and width of TIME_BINS equal bins from the first to the last sight of a shown broker."""
    shown_addrs = set(shown)
    seen = [b for b in brokers if b["broker_addr"] in shown_addrs]
    if not seen:
        return 0.0, 1.0
    low, high = min(b["first_seen"] for b in seen), max(b["last_seen"] for b in seen)
    return low, max(high - low, 1.0) / TIME_BINS


def _bin(start: float, width: float):
    return F.floor((F.col("t") - F.lit(start)) / F.lit(width)).alias("bin")


def _time(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, timezone.utc)


def _figure(height: float = 3.5) -> tuple[Figure, object]:
    figure = Figure(figsize=(11, height), layout="constrained")
    return figure, figure.add_subplot()


def _dedupe_legend(axes) -> None:
    handles, labels = axes.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    axes.legend(unique.values(), unique.keys(), fontsize=7, loc="upper right")


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90)
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
