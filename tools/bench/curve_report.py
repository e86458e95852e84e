"""The scale curve's report (``scale.py --curve --markdown FILE --svg FILE``): the per-step table
with every server beside ours and the per-round ratio, how each cost grows along each axis, and
a plot, all read from the summary ``curve.py`` writes (its ``rows`` and ``steps``).

How a cost grows: along an axis (topics, brokers or client connections, the others held at the
base step's), the exponent k of cost ∝ size^k between the axis's smallest and largest step,
from the medians: k < 0.2 constant, < 0.75 sub-linear, ≤ 1.3 linear, above that worse than
linear. The plot is plain SVG (no plotting library): one panel per figure and axis, log-log,
each server's median with its min–max.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

AXES = ("topics", "brokers", "clients")
AXIS_TITLE = {"topics": "topics", "brokers": "brokers", "clients": "connections"}
PHASES = (("first_registration", "first registration"), ("repeated_registration", "repeated registration"),
          ("heartbeat_storm", "heartbeat storm"), ("mass_disconnect", "mass disconnect"))
#: what the growth table and the plot show: (summary key, label, unit)
CURVES = (
    ("first_registration_s", "first registration", "s"),
    ("repeated_registration_s", "repeated registration", "s"),
    ("heartbeat_storm_s", "heartbeat storm", "s"),
    ("mass_disconnect_s", "mass disconnect", "s"),
    ("first_registration_probe_max_ms", "longest wait, first registration", "ms"),
    ("heartbeat_storm_probe_max_ms", "longest wait, storm", "ms"),
    ("mass_disconnect_probe_max_ms", "longest wait, mass disconnect", "ms"),
    ("rss_mib_registered", "RSS registered", "MiB"),
)


def short(n: int) -> str:
    for size, suffix in ((1_000_000, "M"), (1_000, "k")):
        if n >= size and n % (size // 10) == 0:
            return f"{n / size:g}{suffix}"
    return str(n)


def step_label(step: dict[str, Any]) -> str:
    label = f"{short(step['topics'])} topics, {short(step['brokers'])} brokers, {short(step['clients'])} conns"
    return label + (f" ({step['compat']})" if step.get("compat", "4.9.8") != "4.9.8" else "")


def number(v: float, unit: str) -> str:
    if unit == "s" and v < 1:
        return f"{v * 1e3:.3g} ms"
    if unit == "ms" and v >= 1000:
        return f"{v / 1e3:.3g} s"
    return f"{v:,.0f} {unit}" if v >= 1000 else f"{v:.3g} {unit}"


def cell(v: dict[str, Any] | None, unit: str) -> str:
    if not v:
        return "–"
    if v.get("n", 2) == 1 or v["min"] == v["max"]:
        return number(v["median"], unit)
    return f"{number(v['median'], unit)} ({number(v['min'], unit)}–{number(v['max'], unit)})"


def ratio_cell(v: dict[str, Any] | None) -> str:
    if not v:
        return "–"
    if v.get("n", 2) == 1:
        return f"{v['median']:.2f}"
    return f"{v['median']:.2f} ({v['min']:.2f}–{v['max']:.2f})"


def rows_by(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["step"], r["figure"]): r for r in doc["rows"]}


def step_table(doc: dict[str, Any]) -> str:
    """Per step, one line per phase: its time, the server's CPU and the probe's longest wait in it
    (each server's median with min–max, ours/other per round: median with min–max) and the
    probe's lookup p50 / p99 (medians); and one line for RSS with the client connections open."""
    servers = list(doc["servers"])
    ours, others = servers[0], servers[1:]
    rows = rows_by(doc)

    def group(title: str) -> list[str]:
        return [f"{title}: {s}" for s in servers] + [f"{title}: {ours} / {o}" for o in others]

    head = ["step", "phase", *group("time"), *group("server CPU"), *group("longest wait"),
            *(f"lookup p50 / p99: {s}" for s in servers)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def cells(key: str, unit: str) -> list[str]:
        r = rows.get(key, {})
        return [cell(r.get(s), unit) for s in servers] + [ratio_cell(r.get(f"ratio_to_{o}")) for o in others]

    def lookups(name: str, phase: str) -> list[str]:
        out = []
        for s in servers:
            p50 = (rows.get((name, f"{phase}_lookup_p50_ms"), {}).get(s) or {}).get("median")
            p99 = (rows.get((name, f"{phase}_lookup_p99_ms"), {}).get(s) or {}).get("median")
            out.append("–" if p50 is None or p99 is None else f"{number(p50, 'ms')} / {number(p99, 'ms')}")
        return out

    blank = ["–"] * (len(servers) + len(others))
    for step in doc["steps"]:
        name, label = step["name"], step_label(step)
        if not any(k[0] == name for k in rows):
            continue
        for key, phase in PHASES:
            if (name, f"{key}_s") not in rows:
                continue
            line = [label, phase, *cells((name, f"{key}_s"), "s"), *cells((name, f"{key}_cpu_s"), "s"),
                    *cells((name, f"{key}_probe_max_ms"), "ms"), *lookups(name, key)]
            lines.append("| " + " | ".join(line) + " |")
        if (name, "rss_mib_registered") in rows:
            line = [label, "RSS, registered, connections open", *cells((name, "rss_mib_registered"), "MiB"), *blank,
                    *blank, *(["–"] * len(servers))]
            lines.append("| " + " | ".join(line) + " |")
    return "\n".join(lines)


def axis_series(doc: dict[str, Any], axis: str) -> list[dict[str, Any]]:
    """The measured steps along ``axis`` (the other two sizes as the base step's), smallest
    first; one step per size, in the generation of the largest where both were run."""
    measured = {r["step"] for r in doc["rows"]}
    steps = [s for s in doc["steps"] if s["name"] in measured]
    base = next((s for s in steps if s["name"].split("@")[0] == "base"), None)
    if base is None:
        return []
    fixed = [a for a in AXES if a != axis]
    on_axis = [s for s in steps if all(s[a] == base[a] for a in fixed)]
    if not on_axis:
        return []
    top_compat = max(on_axis, key=lambda s: s[axis]).get("compat", "4.9.8")
    by_size: dict[int, dict[str, Any]] = {}
    for s in sorted(on_axis, key=lambda s: (s[axis], s.get("compat", "4.9.8") == top_compat)):
        by_size[s[axis]] = s
    return [by_size[k] for k in sorted(by_size)]


def exponent(x0: float, y0: float, x1: float, y1: float) -> float | None:
    if min(x0, y0, x1, y1) <= 0 or x0 == x1:
        return None
    return math.log(y1 / y0) / math.log(x1 / x0)


def grows(k: float | None) -> str:
    if k is None:
        return "?"
    return "constant" if k < 0.2 else "sub-linear" if k < 0.75 else "linear" if k <= 1.3 else "worse than linear"


def growth_table(doc: dict[str, Any]) -> str:
    """Per figure and axis, for each server: the factor from the smallest to each larger step,
    and k with its reading."""
    servers = list(doc["servers"])
    rows = rows_by(doc)
    head = ["figure", *(f"{AXIS_TITLE[a]}: {s}" for a in AXES for s in servers)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    series = {a: axis_series(doc, a) for a in AXES}
    for key, label, _ in CURVES:
        cells = []
        for axis in AXES:
            steps = series[axis]
            for server in servers:
                points = [(s[axis], rows.get((s["name"], key), {}).get(server, {}).get("median")) for s in steps]
                points = [(x, y) for x, y in points if y]
                if len(points) < 2:
                    cells.append("–")
                    continue
                (x0, y0), (x1, y1) = points[0], points[-1]
                k = exponent(x0, y0, x1, y1)
                factors = ", ".join(f"×{y / y0:.3g} at ×{x / x0:.3g}" for x, y in points[1:])
                cells.append(f"{factors}: k={k:.2f}, {grows(k)}" if k is not None else factors)
        lines.append("| " + " | ".join([label, *cells]) + " |")
    mixed = [a for a in AXES if len({s.get("compat", "4.9.8") for s in series[a]}) > 1]
    if mixed:
        lines.append("")
        lines.append(f"(Along {', '.join(AXIS_TITLE[a] for a in mixed)} the steps are not all of one generation: "
                     + "; ".join(f"{step_label(s)}" for a in mixed for s in series[a]) + ".)")
    return "\n".join(lines)


# ---- the plot -------------------------------------------------------------------------------------

COLOURS = ("#1f5fa8", "#d9661f", "#3a8a3a", "#8a3a8a")
PANEL_W, PANEL_H, MARGIN_L, MARGIN_B, MARGIN_T = 230, 150, 52, 30, 22


def _log_ticks(lo: float, hi: float) -> list[float]:
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    ticks = [10.0 ** e for e in range(first, last + 1)]
    if len(ticks) <= 2:
        ticks = sorted({t * m for t in ticks for m in (1, 2, 5)})
    return [t for t in ticks if lo / 1.01 <= t <= hi * 1.01] or [lo, hi]


def _fmt(v: float) -> str:
    return f"{v:g}" if 0.01 <= v < 10_000 else short(int(v)) if v >= 10_000 else f"{v:.0e}"


@dataclass(frozen=True)
class Frame:
    """A panel's place and its log-log ranges."""
    ox: float
    oy: float
    x_lo: float
    x_hi: float
    lo: float
    hi: float

    def px(self, x: float) -> float:
        return self.ox + PANEL_W * math.log(x / self.x_lo) / math.log(self.x_hi / self.x_lo)

    def py(self, y: float) -> float:
        return self.oy + PANEL_H - PANEL_H * math.log(y / self.lo) / math.log(self.hi / self.lo)


def panel(ox: float, oy: float, curve: tuple[str, str, str], axis: str, steps: list[dict[str, Any]],
          servers: list[str], rows: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    key, label, unit = curve
    title = f"{label} ({unit}) vs {AXIS_TITLE[axis]}"
    out = [f'<text x="{ox}" y="{oy - 6}" font-size="11" font-weight="bold">{title}</text>',
           f'<rect x="{ox}" y="{oy}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="#999"/>']
    xs = [s[axis] for s in steps]
    values = [v[part] for s in steps for srv in servers if (v := rows.get((s["name"], key), {}).get(srv))
              for part in ("median", "min", "max") if v[part] > 0]
    if not values:
        return out
    f = Frame(ox, oy, min(xs) / 1.5, max(xs) * 1.5, min(values) / 1.3, max(values) * 1.3)
    for t in _log_ticks(f.lo, f.hi):
        out.append(f'<line x1="{ox}" y1="{f.py(t):.1f}" x2="{ox + PANEL_W}" y2="{f.py(t):.1f}" stroke="#eee"/>'
                   f'<text x="{ox - 4}" y="{f.py(t) + 3:.1f}" text-anchor="end">{_fmt(t)}</text>')
    for x, s in zip(xs, steps, strict=True):
        tag = short(x) + ("*" if s.get("compat", "4.9.8") != "4.9.8" else "")
        out.append(f'<text x="{f.px(x):.1f}" y="{oy + PANEL_H + 13}" text-anchor="middle">{tag}</text>')
    for i, server in enumerate(servers):
        colour = COLOURS[i % 4]
        points = []
        for x, s in zip(xs, steps, strict=True):
            v = rows.get((s["name"], key), {}).get(server)
            if not v or v["median"] <= 0:
                continue
            points.append((f.px(x), f.py(v["median"])))
            if v["min"] > 0 and v["max"] > v["min"]:
                out.append(f'<line x1="{f.px(x):.1f}" y1="{f.py(v["min"]):.1f}" x2="{f.px(x):.1f}" '
                           f'y2="{f.py(v["max"]):.1f}" stroke="{colour}" stroke-width="1"/>')
            out.append(f'<circle cx="{f.px(x):.1f}" cy="{f.py(v["median"]):.1f}" r="2.5" fill="{colour}"/>')
        if len(points) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
            dash = ' stroke-dasharray="5,3"' if i else ""
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.5"{dash}/>')
    return out


def svg(doc: dict[str, Any]) -> str:
    """Rows: the CURVES figures; columns: the three axes; in each panel every server's median
    (line and dots) and min–max (whisker), log-log."""
    servers = list(doc["servers"])
    rows = rows_by(doc)
    series = {a: axis_series(doc, a) for a in AXES}
    axes = [a for a in AXES if len(series[a]) >= 2]
    width = 20 + len(axes) * (PANEL_W + MARGIN_L + 20)
    height = 50 + len(CURVES) * (PANEL_H + MARGIN_B + MARGIN_T + 10)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="10">',
           f'<rect width="{width}" height="{height}" fill="white"/>']
    for i, server in enumerate(servers):
        x = 20 + i * 120
        dash = ' stroke-dasharray="5,3"' if i else ""
        out.append(f'<line x1="{x}" y1="20" x2="{x + 24}" y2="20" stroke="{COLOURS[i % 4]}" stroke-width="2"{dash}/>'
                   f'<text x="{x + 30}" y="24" font-size="12">{server}</text>')
    out.append(f'<text x="{20 + len(servers) * 120}" y="24" font-size="11" fill="#555">median per step, '
               'whisker min–max over rounds; log–log</text>')
    for row, curve in enumerate(CURVES):
        for col, axis in enumerate(axes):
            ox = 20 + col * (PANEL_W + MARGIN_L + 20) + MARGIN_L
            oy = 50 + row * (PANEL_H + MARGIN_B + MARGIN_T + 10) + MARGIN_T
            out += panel(ox, oy, curve, axis, series[axis], servers, rows)
    out.append(f'<text x="20" y="{height - 8}" fill="#555">* a step in 5.3.3 mode (split registrations), '
               'both servers</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_report(doc: dict[str, Any], markdown: Path | None, plot: Path | None) -> None:
    if markdown:
        markdown.write_text(f"{step_table(doc)}\n\nHow each cost grows:\n\n{growth_table(doc)}\n")
    if plot:
        plot.write_text(svg(doc))
