"""Prometheus rule types and their plain-data form, with the examples promtool tests are built from.

Alert annotations use a deliberately tiny subset of Prometheus' template language (`$labels.NAME`,
`$value | humanizePercentage`, `printf "%.2f" $value`, `printf "%.0f" $value`) so the expected
annotations of the generated promtool tests can be computed here, exactly as Prometheus renders them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from observer import conventions as names
from observer.render.burnrate import duration

Labels = tuple[tuple[str, str], ...]

_TEMPLATE = re.compile(r"\{\{\s*(.*?)\s*\}\}")
_LABEL = re.compile(r"^\$labels\.([A-Za-z_][A-Za-z0-9_]*)$")


@dataclass(frozen=True)
class Series:
    """An input series of a promtool test, in promtool's expanding notation (`0+10x60`)."""

    selector: str
    values: str


@dataclass(frozen=True)
class Firing:
    """An alert instance a test expects: its labels from the expression, and `$value`."""

    labels: Labels
    value: float
    rule: Labels = ()  # static labels of the firing rule when several rules share the alert name


@dataclass(frozen=True)
class Example:
    """A promtool scenario for one alert: input series, when to evaluate, what must fire (or nothing)."""

    name: str
    series: tuple[Series, ...]
    eval_seconds: float
    interval_seconds: float
    fires: tuple[Firing, ...] = ()


@dataclass(frozen=True)
class Recording:
    """A recording rule."""

    record: str
    expr: str
    labels: Labels = ()


@dataclass(frozen=True)
class Alert:
    """An alerting rule; `runbook` is the page name in runbooks/ (without .md)."""

    name: str
    expr: str
    severity: str
    summary: str
    description: str
    runbook: str
    for_seconds: float = 0.0
    keep_firing_seconds: float = 0.0
    labels: Labels = ()
    examples: tuple[Example, ...] = field(default=(), compare=False)
    owner: Labels = ()
    """Routing labels from the config (team, owner): on the alert, but not part of what tells rules apart."""
    report_url: str | None = None
    """A page to open first (the canary report of the alert's pair), as an annotation template."""

    def all_labels(self) -> dict[str, str]:
        """The static labels the rule attaches, severity and owner labels included."""
        return {names.SEVERITY: self.severity, **dict(self.owner), **dict(self.labels)}


Rule = Recording | Alert


@dataclass(frozen=True)
class Group:
    """A rule group; rules run in order, so recordings precede the alerts that read them."""

    name: str
    rules: tuple[Rule, ...]


def expand(template: str, labels: Mapping[str, str], *, value: float) -> str:
    """Render an annotation template as Prometheus would for an alert with `labels` and `value`."""

    def one(match: re.Match[str]) -> str:
        body = match.group(1)
        label = _LABEL.match(body)
        if label:
            return labels.get(label.group(1), "")
        if body == "$value | humanizePercentage":
            return _go_g(value * 100) + "%"
        if body == 'printf "%.2f" $value':
            return f"{value:.2f}"
        if body == 'printf "%.0f" $value':
            return f"{value:.0f}"
        raise ValueError(f"unsupported template expression {{{{ {body} }}}} in {template!r}")

    return _TEMPLATE.sub(one, template)


def _go_g(value: float) -> str:
    # Go's %.4g: like Python's, but exponents have at least two digits in both.
    return f"{value:.4g}"


def alert_annotations(alert: Alert, base_url: str) -> dict[str, str]:
    """The annotations of an alert: summary, description and runbook_url (and report_url for a canary's)."""
    out = {"summary": alert.summary, "description": alert.description,
           "runbook_url": f"{base_url.rstrip('/')}/{alert.runbook}.md"}
    if alert.report_url:
        out["report_url"] = alert.report_url
    return out


def rule_data(rule: Rule, base_url: str) -> dict[str, Any]:
    """The plain-data form of one rule, as Prometheus and the PrometheusRule CR expect it."""
    if isinstance(rule, Recording):
        out: dict[str, Any] = {"record": rule.record, "expr": rule.expr}
        if rule.labels:
            out["labels"] = dict(rule.labels)
        return out
    data: dict[str, Any] = {"alert": rule.name, "expr": rule.expr}
    if rule.for_seconds > 0:
        data["for"] = duration(rule.for_seconds)
    if rule.keep_firing_seconds > 0:
        data["keep_firing_for"] = duration(rule.keep_firing_seconds)
    data["labels"] = rule.all_labels()
    data["annotations"] = alert_annotations(rule, base_url)
    return data


def groups_data(groups: Sequence[Group], base_url: str) -> list[dict[str, Any]]:
    """Plain data of rule groups (the `groups:` list of a rule file)."""
    return [{"name": g.name, "rules": [rule_data(r, base_url) for r in g.rules]} for g in groups if g.rules]
