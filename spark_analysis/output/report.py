"""report.html: what needs attention first, then what the cluster did, as one self-contained page.

The findings, inputs and tables come from summary.json's content (findings.py); the pictures
from the per-broker liveness (analysis/liveness.py: time bins of the plotted brokers over the capture
periods, interval buckets, gaps) and the calls and latency buckets per code that the decoding
tasks counted (latency.py). The driver holds a few thousand numbers however large the capture.

The pictures are Plotly figures: zoom and hover for the values, with plotly.js inlined once in the
page (no CDN: the report opens offline, from a ticket or a mail). The timeline and the topics have
one panel per capture period, so that time nothing was captured takes no room. The figures are
plain dicts, data and layout, handed to Plotly unchecked: its figure objects check and copy every
value, which was most of the driver's time after the last Spark job (a test runs each figure in
the page through those checks instead).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import html
import importlib.util
import json
import math
import os
import pkgutil
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timezone
from typing import NamedTuple

import numpy as np
import plotly.io as pio
from plotly.colors import get_colorscale

from spark_analysis.analysis.clients import CLIENT_COLUMNS
from spark_analysis.analysis.findings import StayNamer, at_nameserver, broker_label, clipped_label
from spark_analysis.analysis.latency import PERCENTILES, CodeStats
from spark_analysis.analysis.liveness import Liveness, plot_order
from spark_analysis.capture.inputs import PAGE_FILE
from spark_analysis.decode.schema import BROKERS_CSV_COLUMNS
from spark_analysis.model.periods import (
    EXPIRY_SECONDS,
    INTERVAL_BUCKET_S,
    INTERVAL_RANGE_S,
    NEAR_EXPIRY_S,
    PLOTTED_BROKERS,
    TimeBins,
)
from twisted_namesrv.escapes import SHOWN_MAX, clipped_name, clipped_text, escaped

TOP_CODES = 25
#: evidence listed under a finding in the page (summary.json has it all)
SHOWN_EVIDENCE = 500
#: clients shown on the page (the others are in summary.json and clients.csv)
_CLIENTS_SHOWN = 200
RED, AMBER, GREY = "#d62728", "#ff9f1a", "#7f7f7f"
#: a capture period's panel is at least this share of a time plot's width; TICKS labels fill a whole one
MIN_PANEL_SHARE, TICKS = 0.25, 14
_COUNTS = (("records", "pcap records"), ("segments", "TCP segments on the port"), ("connection", "connections"),
           ("frame", "frames"), ("request", "requests"), ("response", "responses"), ("unanswered", "unanswered"),
           ("registration", "REGISTER_BROKER requests"), ("crc_failures", "CRC failures"),
           ("gaps", "capture gaps in connections"), ("lost_bytes", "bytes lost to capture gaps"),
           ("undecodable", "connections with undecodable bytes"), ("controller", "calls to a controller"),
           ("cut_frames", "frames cut by a snap length (read as far as captured)"),
           ("uncaptured_bytes", "bytes sent but cut by a snap length (no loss)"),
           ("mid_frame_bytes", "bytes of frames begun before the capture (no loss)"),
           ("unseen_bytes", "bytes received before the capture began, out of order (no gap, no loss)"))


def page_text(value: object) -> str:
    """Text a capture's peer chose (a broker's or cluster's name, an address, a remark, a file's
    name), for the page's HTML: every control character shown as its escape (escapes.py, as the
    console and the server's log show them: a raw U+202E turned the rest of a table cell, or a
    picture's label, around) and HTML's specials as entities."""
    return html.escape(escaped(value))


def plot_text(value: object) -> str:
    """The same for a string Plotly draws (an axis's tick, a category, a legend entry, a hover).
    Plotly reads its text as a markup of its own: ``<a href="https://…">`` in a broker's name was
    a live link on the page, ``<br>``, ``<b>`` and ``<span style=…>`` laid it out as the peer
    chose, and ``%{…}`` inside a hover template took a value; escaped, each shows as itself
    (Plotly decodes ``&lt;``, ``&gt;``, ``&amp;`` and numeric entities, not ``&quot;``)."""
    return html.escape(escaped(value), quote=False).replace("%", "&#37;")


def write_report(out: str, summary: dict, liveness: Liveness, codes: list[CodeStats],
                 write_bytes: Callable[[str, bytes], None]) -> None:
    """report.html in ``out``, written by ``write_bytes`` (local or through Hadoop: the Spark layer's)."""
    write_bytes(f"{out}/{PAGE_FILE}", b"".join(page(summary, liveness, codes)))


def page(summary: dict, liveness: Liveness, codes: list[CodeStats]) -> list[bytes]:
    """The page in parts, each text encoded on its own; plotly.js, inlined before the first plot
    (the findings above it show while the browser reads it), as the bytes of Plotly's file: it is
    most of the page, and as text (not all Latin-1) it was decoded, copied and encoded again.
    Its head holds the Content-Security-Policy that lets only these scripts run (``policy``)."""
    shown = plotted_brokers(liveness.brokers)
    named = at_nameserver(liveness.brokers)  # as the findings name them
    figures = [("timeline", "Heartbeats per broker", heartbeat_timeline(shown, liveness.time_bins, named)),
               ("intervals", "Intervals between heartbeats, per broker", interval_distributions(shown, named)),
               ("topics", "Topics per broker", topic_counts(shown, liveness.time_bins, named)),
               ("requests", "Requests by code", request_mix(codes)),
               ("latency", "Latency by code and NameServer", latency_percentiles(_per_server(summary, codes)))]
    plots = [(key, title, pio.to_html(figure, validate=False, full_html=False, include_plotlyjs=False,
                                      div_id=f"plot-{key}", config={"displaylogo": False}))
             for key, title, figure in figures]
    plotly_js = _plotly_js()
    scripts = [_hash(_PLOTLY_CONFIG.encode()), plotly_js.script,
               *(_hash(script.encode()) for _, _, plot in plots for script in inline_scripts(plot))]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'>"
             f"<meta http-equiv='Content-Security-Policy' content=\"{policy(scripts, plotly_js.styles)}\">"
             f"<title>NameServer capture report</title>"
             f"<style>{_STYLE}</style></head><body><h1>NameServer capture report</h1>"
             f"<p class='status'>{page_text(summary['attention'])}</p>"
             f"{_findings(summary['findings'])}{_inputs(summary['inputs'])}".encode(),
             f"<script>{_PLOTLY_CONFIG}</script><script charset='utf-8'>".encode(), plotly_js.code, b"</script>"]
    parts.extend(f"<section id='{key}'><h2>{html.escape(title)}</h2>{plot}</section>".encode()
                 for key, title, plot in plots)
    parts.append(f"{_response_codes(summary['response_codes'], _judged_calls(summary))}"
                 f"{_controller(summary.get('controller'))}"
                 f"{_brokers(summary['brokers'])}"
                 f"{_clients(summary['clients'])}{_counts(summary['counts'])}</body></html>".encode())
    return parts


_PLOTLY_CONFIG = "window.PlotlyConfig = {MathJaxConfig: 'local'};"


def inline_scripts(markup: str) -> Iterator[str]:
    """The text of each ``<script ...>...</script>`` in ``markup``, in order (the HTML Plotly writes
    for a figure: its div, then the script that draws it with the figure's data). What the regular
    expression ``<script[^>]*>(.*?)</script>`` (DOTALL) finds, found by ``str.find``: the
    expression's lazy ``.*?`` tried ``</script>`` at every character of the figures' 1.3 MB of
    data, 11.5 ms of the page's 40 (a quarter), on the driver after the last Spark job while every
    core waits; three searches a script take 0.1 ms."""
    at = 0
    while (start := markup.find("<script", at)) >= 0 and (opened := markup.find(">", start + 7)) >= 0:
        end = markup.find("</script>", opened + 1)
        if end < 0:
            return  # no script closes after this one opens, nor after any later one
        yield markup[opened + 1:end]
        at = end + 9


def policy(scripts: Iterable[str], styles: Iterable[str]) -> str:
    """The page's Content-Security-Policy: names in the page are a capture's peer's choice, and
    escaping them (page_text, plot_text) was all that stood between a name and a script. With it,
    a script or event handler that an escaping bug let through is not run: scripts run only when
    their text has one of ``scripts``' hashes (the page's own, hashed as it is written), nothing is
    fetched (``default-src 'none'``: the page is whole), no form is sent, no base URL set.
    ``<style>`` elements: the page's own, an empty one (Plotly adds an empty ``<style>`` and fills
    it through the CSSOM, which no policy checks) and ``styles`` (those plotly.js writes). Plotly
    sets ``style`` attributes everywhere (sizes, colours, positions), so those are allowed, as is
    every style in a browser that knows neither style-src-elem nor style-src-attr: a style runs no
    script, and with nothing fetched it sends nothing anywhere. Images: ``data:`` and ``blob:``
    only, for Plotly's "download plot as png" (it draws the figure's SVG from a blob)."""
    elements = " ".join([_hash(_STYLE.encode()), _hash(b""), *styles])
    return (f"default-src 'none'; script-src {' '.join(scripts)}; style-src-elem {elements}; "
            f"style-src-attr 'unsafe-inline'; style-src 'unsafe-inline'; img-src data: blob:; base-uri 'none'; "
            f"form-action 'none'")


class _PlotlyJs(NamedTuple):
    code: bytes
    #: the policy's sources for it, and for the stylesheets it writes into ``<style>`` elements
    script: str
    styles: tuple[str, ...]


#: a stylesheet plotly.js writes as it loads (maplibre's, for map traces): ``createElement("style")``, its
#: id, then its text as one string literal
_PLOTLY_STYLE = re.compile(r"""createElement\("style"\);[^;']{0,200}[;,]\s*\w+\.textContent='([^'\\]*)'""")


#: plotly.js in Plotly's package
PLOTLY_JS = "package_data/plotly.min.js"
#: the last plotly.js read, by the (size, modification time, inode) its file had when read
_plotly_read: list[tuple[tuple[int, int, int] | None, _PlotlyJs]] = []


def _plotly_js() -> _PlotlyJs:
    """plotly.js as Plotly's package holds it, with its hash and what it writes as styles (a
    stylesheet refused is harmless, the report draws no map, but said on the console each time):
    read, scanned and hashed (4.6 MB, 18 ms of CPU) once a process while its file stays as it
    was (the same size, modification time and inode), and again once it changes (Plotly upgraded
    under a long-lived driver): the policy's hash is always that of the code the page inlines,
    both from one reading. A file whose change kept all three would keep its earlier copy, whole
    and matching its hash; so would one in a zip (no stat to read), as all did before."""
    kept = _plotly_read[0] if _plotly_read else None
    now = _file_stat("plotly", PLOTLY_JS)
    if kept is not None and kept[0] == now:
        return kept[1]
    code = pkgutil.get_data("plotly", PLOTLY_JS)
    assert code is not None
    styles = tuple(_hash(text.encode()) for text in _PLOTLY_STYLE.findall(code.decode()))
    read = _PlotlyJs(code, _hash(code), styles)
    _plotly_read[:] = [(now, read)]
    return read


def ready() -> None:
    """What every page holds or needs whatever the capture, made ready ahead (job.report_ready):
    plotly.js read and hashed; Plotly's template, and the modules its first figure and colour
    scale import (its figure classes, validators and their dataframe layer: 100 ms of CPU the
    first page of a process spent importing, against 30 ms for the page itself)."""
    _plotly_js()
    pio.to_html({"data": [{"type": "heatmap", "z": [[0]], "colorscale": get_colorscale("Viridis")}],
                 "layout": {"template": _template()}}, validate=False, full_html=False, include_plotlyjs=False)


def _file_stat(package: str, resource: str) -> tuple[int, int, int] | None:
    """The size, modification time (ns) and inode of a package's data file; None where the
    package is not in files (a zip)."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return None
    try:
        found = os.stat(os.path.join(os.path.dirname(spec.origin), resource))
    except OSError:
        return None
    return found.st_size, found.st_mtime_ns, found.st_ino


def _hash(text: bytes) -> str:
    """A CSP source matching an inline script or style of exactly this text (UTF-8, as the browser
    hashes it)."""
    return f"'sha256-{base64.b64encode(hashlib.sha256(text).digest()).decode()}'"


def _per_server(summary: dict, codes: list[CodeStats]) -> list[CodeStats]:
    """The latency of each NameServer apart when the captures show several, else of all calls."""
    rows = summary["calls_by_server"]
    if len({row["server"] for row in rows}) < 2:
        return codes
    keys = [f"p{round(p * 100)}_ms" for p in PERCENTILES]
    return [CodeStats(row["code_name"], row["requests"], row["answered"],
                      tuple(row[key] for key in keys) if row["answered"] else None, row["server"], row.get("cut", 0))
            for row in rows]


def plotted_brokers(brokers: list[dict]) -> list[dict]:
    """The brokers that registered Liveness has bins of (those with gaps first), shown by cluster,
    name and id, and one broker's stays in time order (they tied, and kept the order of the choice:
    a stay that ended by the server's stop after the later ones, so that a NameServer restarted twice
    showed a broker's stays 05:08, 05:09, 05:05)."""
    chosen = [b for b in sorted(brokers, key=plot_order)[:PLOTTED_BROKERS] if b["registrations"]]
    return sorted(chosen, key=lambda b: (*plot_order(b)[2:], b.get("first_seen") or 0.0))


def heartbeat_timeline(shown: list[dict], time_bins: TimeBins, named: StayNamer) -> dict:
    """A tick per broker and time bin with heartbeats (hover: how many), one panel per capture
    period; gaps over the expiry as red bars, near it as amber ones, the capture's (bytes it missed in
    them: silence_not_captured) as grey ones (hover: when and how long); a
    red cross where a broker's connection closed without UNREGISTER_BROKER (a crash or kill).
    A row per broker stay and role it held (timeline_rows: a slave made master within its stay
    has a row as slave, then one as master), numbered: its label is on the axis and in its traces'
    hover, not at every point (where it was most of the figure's data)."""
    rows = timeline_rows(shown, named)
    labels = [plot_text(row.label) for row in rows]
    layout = _period_panels(time_bins, len(rows))
    for period in range(len(time_bins.starts)):
        layout[f"yaxis{_suffix(period)}"].update(tickmode="array", tickvals=list(range(len(labels))),
                                                 ticktext=labels, range=[len(labels) - 0.5, -0.5], zeroline=False)
    middles = _middles(time_bins)
    traces = []
    for number, row in enumerate(rows):
        bins = row.broker.get("bins") or {"bin": [], "heartbeats": []}
        index, counts = np.asarray(bins["bin"], np.int64), np.asarray(bins["heartbeats"], np.int64)
        held = (counts > 0) & row.holds(middles[index] if len(index) else np.zeros(0))
        for period in range(len(time_bins.starts)):
            inside = (index >= time_bins.first_bin[period]) & (index < time_bins.first_bin[period + 1]) & held
            if not inside.any():
                continue
            traces.append(_on_panel(period, {
                "type": "scatter", "x": _dates(middles[index[inside]]),
                "y": _numbers([number] * int(inside.sum()), "i2"),
                "customdata": _numbers(counts[inside], "i4"), "mode": "markers",
                "marker": {"symbol": "line-ns-open", "size": 14, "color": "#1f77b4", "line": {"width": 2}},
                "name": "heartbeats", "legendgroup": "heartbeats", "showlegend": not traces,
                "hovertemplate": f"{labels[number]}<br>%{{x}}<br>%{{customdata}} heartbeat(s)<extra></extra>"}))
    for number, row in enumerate(rows):
        for gap in row.broker["gaps"]:
            if not row.holds(gap["from"]):
                continue
            color = RED if gap["expired"] else GREY if gap.get("missed") else AMBER
            silent = (f"{gap['seconds']:,.1f} s without a captured sign of life ({gap['missed']:,} bytes the "
                      f"capture missed)" if gap.get("missed") else f"silent {gap['seconds']:,.1f} s")
            text = (f"{labels[number]}<br>{silent}<br>{_time(gap['from'])} to {_time(gap['to'])}"
                    + (" (capture end)" if gap["open"] else ""))
            traces.append(_on_panel(time_bins.period_of(gap["from"]), {
                "type": "scatter", "x": _dates([gap["from"], gap["to"]]), "y": [number, number],
                "mode": "lines+markers", "line": {"color": color, "width": 6}, "marker": {"color": color, "size": 8},
                "hovertext": text, "hoverinfo": "text", "showlegend": False}))
    closed = [(number, labels[number], close) for number, row in enumerate(rows)
              for close in row.broker["closes"] if row.holds(close["t"])]
    for number, label, close in closed:  # a crash or kill: the NameServer forgot the broker there and then
        traces.append(_on_panel(time_bins.period_of(close["t"]), {
            "type": "scatter", "x": _dates([close["t"]]), "y": [number], "mode": "markers",
            "marker": {"symbol": "x", "size": 12, "color": RED, "line": {"width": 2}}, "showlegend": False,
            "hovertext": f"{label}<br>connection closed without UNREGISTER_BROKER at {_time(close['t'])} "
                         f"({close['how']}): the NameServer removed it at once", "hoverinfo": "text"}))
    for name, color in ((f"gap over {EXPIRY_SECONDS} s (expired)", RED), (f"gap of {NEAR_EXPIRY_S}-{EXPIRY_SECONDS} s",
                                                                           AMBER)):
        traces.append({"type": "scatter", "x": [None], "y": [None], "mode": "lines",
                       "line": {"color": color, "width": 6}, "name": name})
    if closed:
        traces.append({"type": "scatter", "x": [None], "y": [None], "mode": "markers", "name":
                       "connection closed without unregistering (crash or kill)",
                       "marker": {"symbol": "x", "size": 12, "color": RED, "line": {"width": 2}}})
    return _figure(layout, traces)


class TimelineRow(NamedTuple):
    """A part of a broker stay on the heartbeat timeline: the role (brokerId) it held from
    ``start`` until ``end``, labelled with it."""

    label: str
    broker: dict
    start: float
    end: float

    def holds(self, t: float | np.ndarray) -> bool | np.ndarray:
        """Whether times fall in this part (the first part takes all before, the last all after)."""
        return (t >= self.start) & (t < self.end)


#: how long a part of a broker's label (its cluster, its name) may be in the pictures: their axes make
#: room for the longest label, and a broker named in 3,000 characters left the plots no width at all
PICTURE_PART_MAX = 80


def picture_label(broker: dict) -> str:
    """A stay's label (findings.broker_label) as the pictures show it: each part clipped by itself
    (findings.clipped_label), its id, role and address kept whole."""
    return clipped_label(broker_label(broker), PICTURE_PART_MAX)


def timeline_rows(shown: list[dict], named: StayNamer) -> list[TimelineRow]:
    """Each stay's parts by the brokerId it held (a brokerId that changed within the stay, as a
    slave made master in a fail-over, starts a part there), each labelled with the role it had
    then and ``named`` by its NameServer (findings.at_nameserver), a later part with when it began;
    a label that repeats (an address with several stays shown) is told apart by when its part began."""
    parts = []
    for broker in shown:
        ids = broker.get("ids") or [{"broker_id": broker["broker_id"], "role": broker["role"], "from": None}]
        for n, held in enumerate(ids):
            start = -math.inf if n == 0 else held["from"]
            end = ids[n + 1]["from"] if n + 1 < len(ids) else math.inf
            began = broker["first_seen"] if n == 0 else held["from"]
            parts.append((named(picture_label({**broker, "broker_id": held["broker_id"], "role": held["role"]}),
                                broker), broker, start, end, began, n > 0))
    labels = [label for label, *_ in parts]
    return [TimelineRow(f"{label} from {_time(began)}" if labels.count(label) > 1 else
                        f"{label} from {_time(began)[:19]}" if later else label, broker, start, end)
            for label, broker, start, end, began, later in parts]


def stay_labels(shown: list[dict], named: StayNamer) -> list[str]:
    """Each stay's label with the role it had then (a stay whose brokerId changed: each, in order,
    "2 (SLAVE) then 0 (MASTER)"), ``named`` by its NameServer (findings.at_nameserver), and stays
    still alike by when each registered."""
    labels = [named(picture_label(b) if len(b.get("ids") or ()) < 2 else picture_label({**b, "broker_id": "".join(
        f"{i['broker_id']} ({i['role']}) then " for i in b["ids"][:-1]) + str(b["ids"][-1]["broker_id"]),
        "role": b["ids"][-1]["role"]}), b) for b in shown]
    repeated = {label for label in labels if labels.count(label) > 1}
    return [f"{label} from {_time(b['first_seen'])}" if label in repeated else label
            for label, b in zip(labels, shown, strict=True)]


def interval_distributions(shown: list[dict], named: StayNamer) -> dict:
    """Each broker's intervals between heartbeats, counted per second (colour on a log scale)."""
    labels = [plot_text(label) for label in stay_labels(shown, named)]
    widest = max((index for b in shown for index, n in enumerate(b["interval_buckets"]) if n), default=0)
    x = [index * INTERVAL_BUCKET_S for index in range(widest + 1)]
    counts = [[n or None for n in b["interval_buckets"][:widest + 1]] for b in shown]
    shade = [[None if n is None else math.log10(n) for n in row] for row in counts]
    last = f" (last column: {INTERVAL_RANGE_S} s and more)" if widest * INTERVAL_BUCKET_S >= INTERVAL_RANGE_S else ""
    right = max(widest * INTERVAL_BUCKET_S, EXPIRY_SECONDS) + 5 * INTERVAL_BUCKET_S  # both dashed lines show
    layout = _layout(len(shown), shapes=[_vline(NEAR_EXPIRY_S, AMBER), _vline(EXPIRY_SECONDS, RED)],
                     xaxis={"range": [-INTERVAL_BUCKET_S / 2, right],
                            "title": {"text": f"seconds between heartbeats{last}; dashed: {NEAR_EXPIRY_S} s and "
                                              f"the {EXPIRY_SECONDS} s expiry"}},
                     yaxis={"autorange": "reversed", "type": "category", "categoryorder": "array",
                            "categoryarray": labels})
    return _figure(layout, [{
        "type": "heatmap", "x": x, "y": labels, "z": shade, "customdata": counts,
        "colorscale": get_colorscale("Viridis"),
        "colorbar": {"title": {"text": "intervals<br>(log10)"}},
        "hovertemplate": f"%{{y}}<br>%{{x}} s to <+{INTERVAL_BUCKET_S} s: %{{customdata}} intervals<extra></extra>"}])


#: what the topic panel says when no registration's body was read
NO_TOPIC_COUNT = ("no topic count: no registration's body was read (a snap length cut them all, or the capture "
                  "holds none)")


def topic_counts(shown: list[dict], time_bins: TimeBins, named: StayNamer) -> dict:
    """Each broker's registered topic count over time, on a log scale (3 and 3,000 both show)."""
    layout = _period_panels(time_bins, 12)
    layout["yaxis"].update(type="log", title={"text": "topics (log scale)"})  # the other panels' match it
    middles = _middles(time_bins)
    traces = []
    for broker, label in zip(shown, map(plot_text, stay_labels(shown, named)), strict=True):
        bins = broker.get("bins") or {"bin": [], "topics": []}
        points = [(index, n) for index, n in zip(bins["bin"], bins["topics"], strict=True) if n is not None]
        for period in range(len(time_bins.starts)):
            inside = [(index, n) for index, n in points
                      if time_bins.first_bin[period] <= index < time_bins.first_bin[period + 1]]
            if inside:
                traces.append(_on_panel(period, {
                    "type": "scatter", "x": _dates(middles[[index for index, _ in inside]]),
                    "y": _numbers([n for _, n in inside], "i4"),
                    "mode": "lines+markers", "name": label, "legendgroup": label, "showlegend": period == 0 or not any(
                        time_bins.first_bin[0] <= index < time_bins.first_bin[1] for index, _ in points),
                    "hovertemplate": f"{label}<br>%{{x}}<br>%{{y:,}} topics<extra></extra>"}))
    if shown and not traces:  # brokers, but not one count: an empty panel would read as brokers of no topics
        layout.setdefault("annotations", []).append({
            "text": NO_TOPIC_COUNT, "x": 0.5, "xref": "paper", "xanchor": "center", "y": 0.5, "yref": "paper",
            "showarrow": False, "font": {"size": 16}})
    return _figure(layout, traces)


def request_mix(codes: list[CodeStats]) -> dict:
    rows = sorted(codes, key=lambda row: row.requests, reverse=True)[:TOP_CODES][::-1]
    layout = _layout(len(rows), xaxis={"type": "log",
                                       "title": {"text": f"requests (log scale; top {TOP_CODES} codes)"}})
    return _figure(layout, [{
        "type": "bar", "x": [row.requests for row in rows], "y": [plot_text(row.code_name) for row in rows],
        "orientation": "h",
        "text": [f"{row.requests:,} ({_answered(row)})" for row in rows], "textposition": "auto",
        "hovertemplate": "%{y}: %{x:,} requests<extra></extra>"}])


def _answered(row: CodeStats) -> str:
    """'3 answered', and how many no one can tell of: a snap length cut the opaque that pairs them
    (it said "0 answered" of 40 calls whose every answer was captured, cut)."""
    return f"{row.answered:,} answered" + (f", {row.cut:,} cut: answer not known" if row.cut else "")


def latency_percentiles(codes: list[CodeStats]) -> dict:
    """p50/p90/p99 per code, and per NameServer where CodeStats name one (a row each): each server
    answers at its own speed."""
    rows = sorted((row for row in codes if row.answered), key=lambda row: row.answered, reverse=True)[:TOP_CODES]
    rows = rows[::-1]
    names = [plot_text(row.code_name if row.server is None else f"{row.code_name} @ {row.server}") for row in rows]
    layout = _layout(len(rows) * 2, barmode="group", xaxis={
        "type": "log", "title": {"text": "latency, ms (request to answer, as captured; log scale)"}})
    traces = []
    for index, percentile in enumerate(PERCENTILES):
        name = f"p{percentile * 100:g}"
        traces.append({
            "type": "bar", "x": [max(row.p[index], 1e-3) for row in rows], "y": names,
            "orientation": "h", "name": name, "customdata": [row.answered for row in rows],
            "text": [f"{row.p[index]:,.2f}" for row in rows], "textposition": "auto",
            "hovertemplate": f"%{{y}} {name}: %{{x:,.3f}} ms of %{{customdata:,}} answered<extra></extra>"})
    return _figure(layout, traces)


def _period_panels(time_bins: TimeBins, rows: int) -> dict:
    """One panel per capture period, as wide as its share of the captured time but at least a
    quarter of the page (a 1 s period beside an hour one stays readable), titled with its start
    and length, spanning the whole period; ticks in proportion to the width, so that their labels
    never overlap; the y axis shared, labelled on the first. The layout only, laid out as Plotly's
    make_subplots would: the traces go on the panels' axes (_on_panel)."""
    lengths = [max(end - start, 1.0) for start, end in zip(time_bins.starts, time_bins.ends, strict=True)]
    count = len(lengths)
    least = min(MIN_PANEL_SHARE, 1 / count)
    short = [length / sum(lengths) < least for length in lengths]
    rest = (1 - least * sum(short)) / (sum(length for length, s in zip(lengths, short, strict=True) if not s) or 1)
    widths = [least if s else length * rest for length, s in zip(lengths, short, strict=True)]
    spacing = min(0.03, 0.5 / count)
    scale = (1 - spacing * (count - 1)) / sum(widths)
    layout = _layout(rows, legend={"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom"})
    left = 0.0
    for period, (start, length, width) in enumerate(zip(time_bins.starts, lengths, widths, strict=True)):
        right = left + width * scale
        suffix = _suffix(period)
        layout[f"xaxis{suffix}"] = {"anchor": f"y{suffix}", "domain": [left, right], "type": "date", "tickangle": 0,
                                    "nticks": max(2, round(TICKS * width)),
                                    "range": [_time(start), _time(start + length)]}
        layout[f"yaxis{suffix}"] = {"anchor": f"x{suffix}", "domain": [0.0, 1.0]}
        if period:
            layout[f"yaxis{suffix}"].update(matches="y", showticklabels=False)
        if count > 1:
            layout.setdefault("annotations", []).append({
                "text": f"period {period + 1}: {_time(start)[11:19]} UTC, {_duration(time_bins.ends[period] - start)}",
                "x": (left + right) / 2, "xref": "paper", "xanchor": "center", "y": 1.0, "yref": "paper",
                "yanchor": "bottom", "showarrow": False, "font": {"size": 16}})
        left = right + spacing
    if count == 1:
        layout["xaxis"]["title"] = {"text": "time (UTC)"}
    return layout


def _layout(rows: int, **more: object) -> dict:
    """A figure's layout: the look of Plotly's default template, the page's margins, a height for
    ``rows`` rows."""
    return {"template": _template(), "height": _height(rows), "margin": _MARGIN, **more}


@functools.cache
def _template() -> dict:
    """Plotly's default template, as its figure objects put it in every layout: read from where
    pio.templates loads it, without the template object it would check the whole of first."""
    return json.loads(pkgutil.get_data("plotly", f"package_data/templates/{pio.templates.default}.json"))


def _vline(x: float, color: str) -> dict:
    """A dashed vertical line at ``x`` across the plot."""
    return {"type": "line", "x0": x, "x1": x, "xref": "x", "y0": 0, "y1": 1, "yref": "y domain",
            "line": {"color": color, "dash": "dash"}}


def _middles(time_bins: TimeBins) -> np.ndarray:
    """The middle time of every bin, by bin index."""
    return np.array([time_bins.middle(index) for index in range(time_bins.first_bin[-1])])


def _dates(seconds: list[float]) -> dict:
    """Times on a date axis, as the milliseconds since the epoch that Plotly reads them as (formatting
    each as a date string was a third of the report's time on a long capture)."""
    return _numbers(np.multiply(seconds, 1000.0), "f8")


def _numbers(values: Iterable[float], dtype: str) -> dict:
    """Numbers as a typed array, base64 in the page (as Plotly writes a numpy array): short, and read
    by plotly.js without parsing."""
    return {"dtype": dtype, "bdata": base64.b64encode(np.asarray(values, f"<{dtype}").tobytes()).decode()}


def _on_panel(period: int, trace: dict) -> dict:
    """A trace on the panel of a capture period (_period_panels)."""
    suffix = _suffix(period)
    return {**trace, "xaxis": f"x{suffix}", "yaxis": f"y{suffix}"}


def _suffix(period: int) -> str:
    """What the axes of a capture period's panel are named with: x and y, then x2 and y2, ..."""
    return "" if period == 0 else str(period + 1)


def _figure(layout: dict, traces: list[dict]) -> dict:
    return {"data": traces, "layout": layout}


def _duration(seconds: float) -> str:
    """'1.5 s', '7 min 14 s', '2 h 5 min': a capture period's length, for its title."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


_MARGIN = {"l": 10, "r": 10, "t": 40, "b": 40}


def _height(rows: int) -> int:
    return 160 + 24 * max(rows, 4)


def _time(seconds: float) -> str:
    """UTC as Plotly reads dates (it ignores time-zone suffixes)."""
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")


def _findings(found: list[dict]) -> str:
    """One row per problem; its evidence (one line per broker, client, topic or connection) a
    click away."""
    rows = "".join(f"<tr class='{f['severity']}'><td>{f['severity']}</td><td>{page_text(f['kind'])}</td>"
                   f"<td>{_evidence(f)}</td></tr>" for f in found)
    body = (f"<table><tr><th>severity</th><th>kind</th><th>what, where, when</th></tr>{rows}</table>"
            if found else "<p>No findings.</p>")
    return f"<section id='findings'><h2>Findings</h2>{body}</section>"


def _evidence(finding: dict) -> str:
    items = finding["evidence"]
    if len(items) == 1:
        return page_text(finding["message"])
    listed = "".join(f"<li>{page_text(item['message'])}</li>" for item in items[:SHOWN_EVIDENCE])
    more = f"<li>{len(items) - SHOWN_EVIDENCE:,} more in summary.json</li>" if len(items) > SHOWN_EVIDENCE else ""
    return (f"<details><summary>{page_text(finding['message'])} <span class='count'>({len(items):,} items)</span>"
            f"</summary><ul>{listed}{more}</ul></details>")


#: input files the page lists open; more (a day of ``tcpdump -G 60`` is 1,440) are counted there, those
#: with a problem listed first, and every one a click away: listed open, they put the pictures 20,000
#: pixels down the page
FILES_SHOWN = 20
_FILE_COLUMNS = ("path", "size", "link_type", "records", "first", "last", "problem")


def _inputs(inputs: dict) -> str:
    rows = inputs["files"]
    files = _table(_FILE_COLUMNS, rows, _problem_row)
    if len(rows) > FILES_SHOWN:
        problems = [row for row in rows if row["problem"]]
        shown = _table(_FILE_COLUMNS, problems[:FILES_SHOWN], _problem_row) if problems else ""
        more = f"<p>and {len(problems) - FILES_SHOWN:,} more with a problem</p>" if len(problems) > FILES_SHOWN else ""
        files = (f"<p>{len(rows):,} files, {sum(row['records'] or 0 for row in rows):,} records, "
                 f"{len(problems):,} with a problem{':' if problems else ''}</p>{shown}{more}"
                 f"<details><summary>every file ({len(rows):,})</summary>{files}</details>")
    periods = _table(("start", "end", "seconds"), inputs["periods"])
    gaps = _table(("start", "end", "seconds", "cause"), inputs["gaps"]) if inputs["gaps"] else "<p>none</p>"
    return (f"<section id='inputs'><h2>Inputs</h2>{files}<h3>Capture periods</h3>{periods}"
            f"<h3>Gaps between periods</h3>{gaps}</section>")


def _problem_row(row: dict) -> str:
    return "problem" if row["problem"] else ""


def _response_codes(rows: list[dict], codes: Sequence[dict] = ()) -> str:
    """The table of non-zero answers; under it, where a snap length cut the opaques that pair answers
    with requests (calls_by_code's ``cut``), how many answers that table cannot hold: "none" alone
    read as "no error" where a -s 96 capture had TOPIC_NOT_EXIST answers it could not pair."""
    shown = [{**row, "requesters": ", ".join(f"{client} ({n})" for client, n in sorted(row["requesters"].items()))}
             for row in rows]
    table = _table(("code_name", "response_code", "response_name", "remark", "count", "requesters"), shown)
    unknown = sum(code["cut"] for code in codes)
    beside = "" if not unknown else (
        f"<p>{'none known' if not rows else 'besides these'}: the answers to {unknown:,} request(s) are unknown, "
        f"answered or not (a snap length cut the opaque that pairs an answer with its request), so their codes are "
        f"not counted here: {_listed_cut(codes)}</p>")
    return f"<section id='response-codes'><h2>Answers with a non-zero code</h2>" \
           f"{table if rows else '' if unknown else '<p>none</p>'}{beside}</section>"


def _listed_cut(codes: Sequence[dict]) -> str:
    return ", ".join(f"{page_text(code['code_name'])} {code['cut']:,}" for code in codes if code["cut"])


def _judged_calls(summary: dict) -> list[dict]:
    """calls_by_server's rows of the endpoints whose answers the response-code table holds (the
    NameServers and controllers, as findings.calls_at keeps them): a broker's port captured too
    (no port filter) has its own answers, not judged here. One row per code, in the table's order."""
    judged = {row["endpoint"] for row in summary["endpoints"] if row["kind"] in ("nameserver", "controller")}
    cut: dict[str, int] = {}
    for row in summary["calls_by_server"]:
        if row["server"] in judged:
            cut[row["code_name"]] = cut.get(row["code_name"], 0) + row["cut"]
    return [{"code_name": name, "cut": cut[name]} for name in sorted(cut)]


def _controller(controller: dict | None) -> str:
    """What the controllers' traffic tells, per broker group: elections, syncStateSet changes and
    the brokers it heard (only when a capture holds a controller's calls)."""
    groups = (controller or {}).get("groups", [])
    if not groups:
        return ""
    parts = []
    for g in groups:
        title = (f"{clipped_name(g['cluster'] or '?')} / {clipped_name(g['broker_name'] or '?')} at controller "
                 f"{g['controller']}")
        members = ", ".join(f"{m['broker_id']}: {clipped_name(m['broker_addr'])}" for m in g["members"]) or "none known"
        parts.append(f"<h3>{page_text(title)}</h3><p>brokerIds: {page_text(members)}</p>"
                     + _table(("master_epoch", "master_broker_id", "master_addr", "at", "after", "by",
                               "sync_state_set", "sync_state_set_epoch", "how"), g["elections"])
                     + _table(("sync_state_set_epoch", "sync_state_set", "at", "after", "by", "how"),
                              g["sync_state_sets"])
                     + _table(("broker_id", "broker_addr", "heartbeats", "first", "last", "max_silence_s", "closed_at",
                               "closed", "alive_at_end"), g["heartbeats"]))
    undecodable = (controller or {}).get("undecodable", [])
    if undecodable:
        parts.append("<h3>Calls that say nothing</h3>" + _table(("controller", "code_name", "why", "count", "first",
                                                                 "last"), undecodable))
    return f"<section id='controller'><h2>Controller: elections and syncStateSets</h2>{''.join(parts)}</section>"


def _brokers(brokers: list[dict]) -> str:
    return f"<section id='brokers'><h2>Brokers</h2>{_table(BROKERS_CSV_COLUMNS, brokers)}</section>"


def _clients(rows: list[dict]) -> str:
    """Who talked to the NameServers: the clients with most requests first (all in summary.json
    and clients.csv)."""
    shown = sorted(rows, key=lambda row: -row["requests"])[:_CLIENTS_SHOWN]
    more = f"<p>and {len(rows) - len(shown):,} more (clients.csv)</p>" if len(rows) > len(shown) else ""
    table = _table(CLIENT_COLUMNS, shown) if rows else "<p>none</p>"
    return f"<section id='clients'><h2>Clients</h2>{table}{more}</section>"


def _counts(counts: dict) -> str:
    rows = "".join(f"<tr><th>{html.escape(label)}</th><td>{counts.get(key, 0):,}</td></tr>" for key, label in _COUNTS)
    return f"<section id='counts'><h2>Counts</h2><table>{rows}</table></section>"


def _table(columns: Iterable[str], rows: list[dict], row_class: Callable[[dict], str] = lambda row: "") -> str:
    columns = list(columns)
    head = "".join(f"<th>{html.escape(column)}</th>" for column in columns)
    body = "".join(f"<tr class='{row_class(row)}'>" + "".join(_td(_cell(row[c])) for c in columns) + "</tr>"
                   for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _td(text: str) -> str:
    """A table's cell: text past escapes.SHOWN_MAX characters (a name a peer chose, a stay's list of
    input files) clipped as the findings' lines clip a name (clipped_text), the whole in its
    ``title`` (shown on hover; page_text escapes both quote marks, so it stays one attribute). A
    20,000-character broker name or remark was a cell of 20,000 characters."""
    if len(text) <= SHOWN_MAX:
        return f"<td>{page_text(text)}</td>"
    return f"<td title=\"{page_text(text)}\">{page_text(clipped_text(text))}</td>"


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:,.3f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


_STYLE = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:13px;margin-bottom:1em;"
          "display:block;max-width:100%;overflow-x:auto}"
          "td,th{border:1px solid #ccc;padding:2px 8px;text-align:left;vertical-align:top}"
          f"tr.critical td:first-child{{background:{RED};color:#fff}}tr.warning td:first-child{{background:{AMBER}}}"
          "tr.problem{background:#fde0e0}.status{font-size:18px;font-weight:bold}"
          "summary{cursor:pointer}.count{color:#666}details ul{margin:4px 0;padding-left:1.5em}")
