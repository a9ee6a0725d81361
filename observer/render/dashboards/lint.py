"""Checks on rendered dashboard JSON: structure, variables, datasources, and queries ready for Prometheus.

Used by the golden and integration tests and usable on any Grafana dashboard JSON: `problems(d)` lists
what is wrong in words; `queries(d)` lists every panel query; `substitute` replaces Grafana variables the
way Grafana does before the query reaches Prometheus.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# $name, ${name}, ${name:format}, [[name]] — Grafana's variable syntaxes.
_VAR = re.compile(r"\$\{(\w+)(?::(\w+))?\}|\$(\w+)|\[\[(\w+)\]\]")
BUILTIN_VARIABLES = frozenset({"__rate_interval", "__interval", "__interval_ms", "__range", "__range_s",
                               "__range_ms", "__from", "__to", "__all", "__name", "__dashboard", "__org",
                               "__user", "__timeFilter"})
# Panels that show latency or errors must split by version (the point of these dashboards).
_NEEDS_VERSION = re.compile(r"latency|time to first token|queue time|error|abort|burn|ttft", re.I)


@dataclass(frozen=True)
class PanelQuery:
    """One target of one panel."""

    dashboard: str
    panel_id: int
    title: str
    ref_id: str
    expr: str
    legend: str
    instant: bool


def panels(d: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """Every panel, rows included, with the panels of collapsed rows."""
    for p in d.get("panels", []):
        yield p
        yield from p.get("panels", []) or []


def queries(d: Mapping[str, Any]) -> list[PanelQuery]:
    """Every Prometheus query of the dashboard's panels."""
    out = []
    for p in panels(d):
        for t in p.get("targets", []) or []:
            if "expr" in t:
                out.append(PanelQuery(dashboard=str(d.get("uid", "")), panel_id=int(p.get("id", -1)),
                                      title=str(p.get("title", "")), ref_id=str(t.get("refId", "")),
                                      expr=str(t["expr"]), legend=str(t.get("legendFormat", "")),
                                      instant=bool(t.get("instant", False))))
    return out


def variables(d: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The dashboard's template variables by name."""
    return {str(v["name"]): v for v in d.get("templating", {}).get("list", [])}


def referenced(text: str) -> set[str]:
    """Variable names used in `text` (built-ins excluded)."""
    found = set()
    for m in _VAR.finditer(text):
        name = m.group(1) or m.group(3) or m.group(4)
        if name not in BUILTIN_VARIABLES:
            found.add(name)
    return found


def substitute(expr: str, values: Mapping[str, str], *, rate_interval: str = "1m", interval: str = "15s",
               range_: str = "1h") -> str:
    """`expr` with variables replaced as Grafana would (multi-value regex values given ready-made)."""
    builtins = {"__rate_interval": rate_interval, "__interval": interval, "__range": range_}

    def replace(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3) or m.group(4)
        if name in builtins:
            return builtins[name]
        if name not in values:
            raise KeyError(f"no value for variable ${name} in {expr!r}")
        return values[name]

    return _VAR.sub(replace, expr)


def _overlap(a: Mapping[str, int], b: Mapping[str, int]) -> bool:
    return (a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"]
            and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"])


def _datasource_problems(where: str, ds: Any, defined: Mapping[str, Mapping[str, Any]],
                         fixed_uids: frozenset[str]) -> list[str]:
    if ds is None:
        return [f"{where}: no datasource"]
    uid = str(ds.get("uid", "")) if isinstance(ds, Mapping) else str(ds)
    names = referenced(uid)
    if names:
        if any(defined.get(n, {}).get("type") != "datasource" for n in names):
            return [f"{where}: datasource {uid!r} is not a datasource variable"]
        return []
    if uid not in fixed_uids:
        return [f"{where}: datasource uid {uid!r} is neither a variable nor a known datasource"]
    return []


def problems(d: Mapping[str, Any], *, datasource_uids: frozenset[str] = frozenset()) -> list[str]:
    """Everything structurally wrong with dashboard `d`, one sentence each (empty: fine)."""
    out: list[str] = []
    defined = variables(d)
    all_panels = list(panels(d))
    ids = [p.get("id") for p in all_panels]
    dupes = sorted({i for i in ids if ids.count(i) > 1}, key=str)
    if dupes:
        out.append(f"duplicate panel ids: {dupes}")
    placed = [p for p in all_panels if "gridPos" in p]
    for p in all_panels:
        g = p.get("gridPos")
        if g is None:
            out.append(f"panel {p.get('id')} {p.get('title')!r}: no gridPos")
        elif g["x"] < 0 or g["w"] <= 0 or g["h"] <= 0 or g["x"] + g["w"] > 24:
            out.append(f"panel {p.get('id')} {p.get('title')!r}: gridPos {g} outside the 24-column grid")
    for i, a in enumerate(placed):
        for b in placed[i + 1:]:
            if _overlap(a["gridPos"], b["gridPos"]):
                out.append(f"panels {a.get('id')} and {b.get('id')} overlap: {a['gridPos']} / {b['gridPos']}")
    for name, v in defined.items():
        if v.get("type") == "query":
            out += _datasource_problems(f"variable {name}", v.get("datasource"), defined, datasource_uids)
            used = referenced(str(v.get("query", "")))
            out += [f"variable {name} uses undefined variable ${u}" for u in sorted(used - defined.keys())]
    for p in all_panels:
        if p.get("type") == "row":
            continue
        where = f"panel {p.get('id')} {p.get('title')!r}"
        out += _datasource_problems(where, p.get("datasource"), defined, datasource_uids)
        if not p.get("description"):
            out.append(f"{where}: no description")
        if not p.get("fieldConfig", {}).get("defaults", {}).get("unit"):
            out.append(f"{where}: no unit")
        targets = p.get("targets") or []
        if not targets:
            out.append(f"{where}: no queries")
        for t in targets:
            out += _datasource_problems(f"{where} {t.get('refId')}", t.get("datasource", p.get("datasource")),
                                        defined, datasource_uids)
            for text in (str(t.get("expr", "")), str(t.get("legendFormat", ""))):
                out += [f"{where}: uses undefined variable ${u}" for u in sorted(referenced(text) - defined.keys())]
        if _NEEDS_VERSION.search(str(p.get("title", ""))) and not all(
                "{{version}}" in str(t.get("legendFormat", "")) for t in targets):
            out.append(f"{where}: a latency/error panel must split by version ({{{{version}}}} in every legend)")
        for link in p.get("links", []) or []:
            if not link.get("url"):
                out.append(f"{where}: link {link.get('title')!r} has no url")
    return out
