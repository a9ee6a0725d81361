"""The report's plots: pygal charts rendered server-side to SVG and inlined as `data:` images.

An SVG in an `<img>` runs no script and loads nothing, so a plot cannot carry markup into the page whatever
its labels hold, and the page's Content-Security-Policy can forbid scripts outright. A chart without data is
never drawn blank: the caller gets None and says why in words.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pygal
from pygal.style import Style

from observer.collect.model import Histogram

COLORS = ("#d62728", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
          "#7f7f7f", "#393b79", "#637939")  # canary red and baseline blue first
STYLE = Style(background="white", plot_background="white", colors=COLORS, font_family="sans-serif",
              label_font_size=11, major_label_font_size=11, legend_font_size=12, title_font_size=14)


@dataclass(frozen=True)
class Plot:
    """One rendered chart: its title, the SVG text and the `data:` URI an `<img>` shows."""

    title: str
    svg: str
    description: str

    @property
    def data_uri(self) -> str:
        return "data:image/svg+xml;base64," + base64.b64encode(self.svg.encode()).decode()


def _config(title: str, **kw: object) -> dict[str, object]:
    return {"title": title, "style": STYLE, "js": [], "width": 640, "height": 300, "disable_xml_declaration": True,
            "show_legend": True, "legend_at_bottom": True, "legend_at_bottom_columns": 4, "explicit_size": True,
            "print_values": False, "truncate_legend": 40,
            "no_prefix": True, **kw}  # each chart is its own document inside an <img>: no id prefix needed


_SCRIPTED = re.compile(r"<desc class=\"[^\"]*\">[^<]*</desc>|<script[^>]*>.*?</script>", re.S)
"""pygal's per-point tooltip payload and its config script, read only by its script, which an `<img>` never
runs: half the bytes."""


def _render(chart: pygal.graph.graph.Graph, title: str, description: str) -> Plot:
    return Plot(title=title, svg=_SCRIPTED.sub("", str(chart.render(is_unicode=True))), description=description)


def _edge(bound: float) -> str:
    return f"{bound * 1000:g} ms" if bound < 1 else f"{bound:g} s"


def histogram_overlay(family: str, canary: Histogram | None, baseline: Histogram | None) -> Plot | None:
    """Both arms' latency distributions over the same buckets, as shares of each arm's observations."""
    if canary is None or baseline is None or canary.count <= 0 or baseline.count <= 0 \
            or canary.bounds != baseline.bounds or not canary.bounds:
        return None
    labels = [f"≤ {_edge(b)}" for b in canary.bounds] + [f"> {_edge(canary.bounds[-1])}"]
    chart = pygal.Bar(**_config(f"{family}: share of requests per bucket", x_label_rotation=40,
                                value_formatter=lambda v: f"{v:.1%}"))
    chart.x_labels = labels
    for name, h in (("canary", canary), ("baseline", baseline)):
        per_bucket = np.diff(np.asarray(h.cumulative, dtype=float), prepend=0.0).clip(0.0) / h.count
        chart.add(f"{name} (n={h.count:.0f})", [round(float(v), 5) for v in per_bucket])
    return _render(chart, f"{family} histogram", f"{family}: canary and baseline bucket shares, "
                                                 f"{canary.count:.0f} and {baseline.count:.0f} observations")


@dataclass(frozen=True)
class SliceSeries:
    """One sliced metric's per-slice counts (bad canary, canary total, bad baseline, baseline total)."""

    metric: str
    rows: np.ndarray
    boundary: float
    worse_from: int | None = None


def _cumulative_ratio(rows: np.ndarray) -> list[float | None]:
    out: list[float | None] = []
    for bad_c, n_c, bad_b, n_b in rows.cumsum(axis=0):
        if n_c <= 0 or n_b <= 0:
            out.append(None)
            continue
        rate_c, rate_b = bad_c / n_c, bad_b / n_b
        # Both arms clean so far: equal. Only the canary bad: as if the baseline had half an event.
        out.append(1.0 if rate_c == rate_b == 0 else round(float(rate_c / max(rate_b, 0.5 / n_b)), 4))
    return out


def slice_evidence(series: Sequence[SliceSeries]) -> Plot | None:
    """Each sliced metric's canary bad-event rate over the baseline's, cumulated slice by slice, against the
    boundary a pass must stay under (the metric's effect ratio) and 1 (equal): where a line climbs through the
    boundary is where the canary got worse."""
    lines = [(s, _cumulative_ratio(s.rows)) for s in series if s.rows.size]
    lines = [(s, r) for s, r in lines if any(v is not None for v in r)]
    if not lines:
        return None
    length = max(len(r) for _, r in lines)
    chart = pygal.Line(**_config("canary ÷ baseline bad-event rate, cumulative over the window's slices",
                                 x_title="slice", dots_size=2,
                                 value_formatter=lambda v: f"{v:.3g}×"))
    chart.x_labels = [str(i) for i in range(length)]
    for s, ratios in lines:
        chart.add(s.metric, ratios)
    for boundary in sorted({s.boundary for s, _ in lines}):
        chart.add(f"boundary {boundary:g}×", [boundary] * length, show_dots=False,
                  stroke_style={"dasharray": "6,4", "width": 2})
    chart.add("equal", [1.0] * length, show_dots=False, stroke_style={"dasharray": "2,4"})
    worse = [f"{s.metric} worse from slice {s.worse_from}" for s, _ in lines if s.worse_from]
    return _render(chart, "slice evidence", f"cumulative canary ÷ baseline rate of {len(lines)} sliced metric(s) "
                                            f"over {length} slices" + (f"; {', '.join(worse)}" if worse else ""))


def ratio_series(title: str, series: Sequence[tuple[str, Sequence[float | None]]]) -> Plot | None:
    """Per-slice ratios (error share, 5xx share) of both arms; None when no slice has any."""
    if not series or all(v is None for _, values in series for v in values):
        return None
    length = max(len(values) for _, values in series)
    chart = pygal.Line(**_config(title, x_title="slice", dots_size=2, value_formatter=lambda v: f"{v:.2%}"))
    chart.x_labels = [str(i) for i in range(length)]
    for name, values in series:
        chart.add(name, list(values))
    return _render(chart, title, f"{title} per slice for {', '.join(n for n, _ in series)}")
