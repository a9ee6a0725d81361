"""An HTML drift report for humans: Evidently's data-drift view of the scalar features, headed by our
embedding tests, the BH-adjusted feature tests and the most shifted example texts.

Evidently (the `report` extra) is imported only here, only when a report is written. Its own embedding-drift
methods are not used: on sentence embeddings their defaults are badly calibrated (see docs/drift.md).
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from observer.analyse.drift.features import FEATURES
from observer.analyse.drift.state import DriftReport
from observer.errors import MissingDependencyError


def _frame(columns: Mapping[str, npt.NDArray[Any]]) -> Any:
    import pandas as pd  # type: ignore[import-untyped]

    return pd.DataFrame({k: np.asarray(v) for k, v in columns.items()})


def _usable(baseline: Mapping[str, npt.NDArray[Any]], current: Mapping[str, npt.NDArray[Any]]) -> list[str]:
    """Features present on both sides with at least two non-missing values each."""
    out = []
    for name in sorted(set(baseline) & set(current)):
        ref, cur = np.asarray(baseline[name]), np.asarray(current[name])
        if FEATURES.get(name) == "continuous":
            ref, cur = ref[np.isfinite(ref.astype(float))], cur[np.isfinite(cur.astype(float))]
        if len(ref) >= 2 and len(cur) >= 2:
            out.append(name)
    return out


def summary_html(report: DriftReport) -> str:
    """Our section: embedding tests, feature tests and most shifted examples, escaped."""
    e = html.escape
    rows = []
    for name, r in sorted(report.results.items()):
        p_adj = "" if r.p_adjusted is None else f"{r.p_adjusted:.4g}"
        eff = "" if r.effect_size is None else f"{r.effect_size:.3f} ({e(r.effect)})"
        rows.append(f"<tr><td>{e(name)}</td><td>{e(r.method)}</td><td>{e(r.status)}</td>"
                    f"<td>{r.statistic:.4g}</td><td>{r.p_value:.4g}</td><td>{p_adj}</td><td>{eff}</td>"
                    f"<td>{'yes' if r.shifted else 'no'}</td><td>{r.n_current}</td><td>{r.n_baseline}</td></tr>")
    examples = []
    for name, items in sorted(report.examples.items()):
        lis = "".join(f"<li><code>{x.score:.3f}</code> {e(x.text)}</li>" for x in items)
        examples.append(f"<h3>Most shifted {e(name)}</h3><ol>{lis}</ol>")
    base = report.baseline
    meta = (f"baseline <code>{e(report.baseline_hash or 'none')}</code>"
            + (f" of model {e(base.model)} from version {e(base.source_version)}, n={base.n}, "
               f"embedder {e(base.embedder_model)} {e(base.embedder_revision)}" if base else ""))
    return (
        '<section style="font-family: sans-serif; margin: 1em 2em">'
        f"<h1>Drift of version {e(report.version)}</h1>"
        f"<p>Status <b>{e(report.status)}</b>: {e(report.message)}<br>{meta}<br>"
        f"window {report.since} – {report.until} (unix s); checked at {report.checked_at}</p>"
        "<table border=1 cellpadding=4 style='border-collapse: collapse'><tr><th>field</th><th>method</th>"
        "<th>status</th><th>statistic</th><th>p-value</th><th>BH p</th><th>effect size</th><th>shifted</th>"
        "<th>n current</th><th>n baseline</th></tr>" + "".join(rows) + "</table>"
        + "".join(examples)
        + "<p>Below: Evidently's data-drift view of the scalar features (its own per-column tests).</p>"
        "</section>"
    )


def write_report(report: DriftReport, *, baseline_features: Mapping[str, npt.NDArray[Any]],
                 current_features: Mapping[str, npt.NDArray[Any]], out: Path) -> Path:
    """Write the HTML report to `out` and return it."""
    try:
        from evidently import DataDefinition, Dataset, Report
        from evidently.presets import DataDriftPreset
    except ImportError as e:
        raise MissingDependencyError("evidently", "report") from e
    names = _usable(baseline_features, current_features)
    body = ""
    if names:
        numerical = [n for n in names if FEATURES.get(n) == "continuous"]
        categorical = [n for n in names if n not in numerical]
        definition = DataDefinition(numerical_columns=numerical, categorical_columns=categorical)
        ref = Dataset.from_pandas(_frame({n: baseline_features[n] for n in names}), data_definition=definition)
        cur = Dataset.from_pandas(_frame({n: current_features[n] for n in names}), data_definition=definition)
        snapshot = Report([DataDriftPreset()]).run(current_data=cur, reference_data=ref)
        body = snapshot.get_html_str(as_iframe=False)
    section = summary_html(report)
    if "<body>" in body:
        page = body.replace("<body>", "<body>" + section, 1)
    else:
        page = f"<!doctype html><html><head><meta charset='utf-8'><title>drift</title></head><body>{section}" \
               f"{body}</body></html>"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out
