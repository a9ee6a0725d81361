"""What every health rule shares: the timing of its promtool examples and the gauge-over-threshold warning."""

from __future__ import annotations

from observer import conventions as names
from observer.conventions.promql import selector
from observer.render.burnrate import duration
from observer.render.objectives import Alerting
from observer.render.rulemodel import Alert, Example, Firing, Labels, Series

_V = names.VERSION


def example_interval(a: Alerting, span_seconds: float) -> float:
    """Evaluation interval of an example: 1m, or 10m for spans of an hour or more (promtool is faster)."""
    return (600.0 if span_seconds >= 3600 * a.time_scale else 60.0) * a.time_scale


def timing(a: Alerting, for_seconds: float) -> tuple[float, float, int]:
    """(interval, eval time, steps) of an example: evaluate three intervals after `for` has passed."""
    interval = example_interval(a, for_seconds)
    steps = round(for_seconds / interval) + 3
    return interval, steps * interval, steps


def covering(a: Alerting, window_seconds: float) -> tuple[float, float, int]:
    """(interval, eval time, steps) of an example whose series cover a whole `window_seconds` range plus
    five intervals, so an increase() over the window counts exactly what the series added."""
    interval = example_interval(a, window_seconds)
    steps = round(window_seconds / interval) + 5
    return interval, steps * interval, steps


def threshold(a: Alerting, *, name: str, metric: str, matchers: dict[str, str], threshold: float,
               high: float, low: float, value_text: str, what: str, runbook: str) -> Alert:
    """A gauge-over-threshold warning held for `leading_for`, with a firing and a quiet example."""
    interval, at, steps = timing(a, a.limits.leading_for)
    labels = {_V: "canary", **matchers}
    key: Labels = tuple(sorted(labels.items()))
    sel = selector(metric, matchers)
    return Alert(
        name=name, expr=f"{sel} > {threshold!r}", severity="warning", for_seconds=a.limits.leading_for,
        summary=f"{{{{ $labels.version }}}}: {what}",
        description=(f"{what[0].upper() + what[1:]} on version {{{{ $labels.version }}}}: {value_text} (threshold "
                     f"{threshold:g}) for {duration(a.limits.leading_for)}."),
        runbook=runbook,
        examples=(
            Example(f"{name} fires at {high:g}", (Series(selector(metric, labels), f"{high!r}x{steps}"),), at,
                    interval, (Firing(key, high),)),
            Example(f"{name} quiet at {low:g}", (Series(selector(metric, labels), f"{low!r}x{steps}"),), at,
                    interval),
        ),
    )
