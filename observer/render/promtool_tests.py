"""Generate `promtool test rules` unit tests from the examples every alert carries."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from observer.render.burnrate import duration
from observer.render.rulemodel import Alert, Example, Group, alert_annotations, expand


def _expected(alerts: Sequence[Alert], rule: Alert, ex: Example, base_url: str) -> list[dict[str, Any]]:
    out = []
    for firing in ex.fires:
        source = _source(alerts, rule, firing.rule)
        labels = {**dict(firing.labels), **source.all_labels()}
        templates = alert_annotations(source, base_url)
        out.append({
            "exp_labels": dict(sorted(labels.items())),
            # Templates see only the expression's labels, not the rule's static ones.
            "exp_annotations": {k: expand(v, dict(firing.labels), value=firing.value)
                                for k, v in templates.items()},
        })
    return out


def promtool_tests(groups: Sequence[Group], *, rule_file: str, base_url: str) -> dict[float, dict[str, Any]]:
    """promtool test files keyed by evaluation interval: one test case per scenario.

    promtool evaluates every rule at every evaluation interval of a file, so examples that span hours
    go to a file with a coarser interval. Examples of different alerts with the same input (the page
    and ticket tiers of one scenario) share a test case. Expected annotations are rendered exactly as
    Prometheus would.
    """
    alerts = [r for g in groups for r in g.rules if isinstance(r, Alert)]
    cases: dict[tuple[Any, ...], dict[str, Any]] = {}
    for group in groups:
        for rule in group.rules:
            if not isinstance(rule, Alert):
                continue
            for ex in rule.examples:
                key = (ex.interval_seconds, ex.series, ex.eval_seconds, ex.name)
                case = cases.setdefault(key, {
                    "name": f"{group.name}: {ex.name}",
                    "interval": duration(ex.interval_seconds),
                    "input_series": [{"series": s.selector, "values": s.values} for s in ex.series],
                    "alert_rule_test": [],
                })
                case["alert_rule_test"].append({"eval_time": duration(ex.eval_seconds), "alertname": rule.name,
                                                "exp_alerts": _expected(alerts, rule, ex, base_url)})
    files: dict[float, list[dict[str, Any]]] = {}
    for key, case in cases.items():
        files.setdefault(key[0], []).append(case)
    return {interval: {"rule_files": [rule_file], "evaluation_interval": duration(interval), "tests": tests}
            for interval, tests in sorted(files.items())}


def _source(alerts: Sequence[Alert], rule: Alert, static: tuple[tuple[str, str], ...]) -> Alert:
    """The rule that produces a firing: `rule` itself, or its namesake with these static labels."""
    if not static:
        return rule
    for candidate in alerts:
        if candidate.name == rule.name and candidate.labels == static:
            return candidate
    raise ValueError(f"no {rule.name} rule with labels {dict(static)}")
