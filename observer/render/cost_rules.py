"""Cost rules: cost and energy per generated token as recordings, and two ticket alerts — a version
over the configured budget, and a canary costlier per token than its baseline by `cost.regression_ratio`.

The recordings divide increases of the observer's running totals over one window, so they read the same
figures `observer_cost_per_million_tokens` exports, cheaply, for dashboards and Argo; absent (not 0, not
NaN) when no token was generated in the window.
"""

from __future__ import annotations

from observer import conventions as names
from observer.conventions.promql import selector
from observer.render.burnrate import duration
from observer.render.objectives import Alerting
from observer.render.rule_timing import example_interval
from observer.render.rulemodel import Alert, Example, Firing, Group, Recording, Rule, Series

WINDOW = 3600.0  # nominal window of the recordings and the alerts' `for`


def per_token(a: Alerting, numerator: str, *, scale: float, version: str | None = None) -> str:
    """`numerator` increase per generated token over the window, by version (absent without tokens)."""
    w = duration(WINDOW * a.time_scale)
    m = {names.VERSION: version} if version else {}
    tokens = f"sum by ({names.VERSION}) (increase({selector(names.GENERATION_TOKENS + '_total', m)}[{w}]))"
    value = f"sum by ({names.VERSION}) (increase({selector(numerator, m)}[{w}]))"
    return f"{value}\n/\n({tokens} > 0)" + (f"\n* {scale:g}" if scale != 1 else "")


def cost_group(a: Alerting) -> Group:
    """The cost group: recordings of cost and energy per generated token, then the two cost tickets."""
    if not a.cost_enabled:
        return Group(names.RULE_GROUP_COST, ())
    w = duration(WINDOW)
    cost_rec = names.RULE_COST_PER_MTOK + f"rate{w}"
    rules: list[Rule] = [
        Recording(cost_rec, per_token(a, names.COST + "_total", scale=1e6)),
        Recording(names.RULE_ENERGY_PER_TOKEN + f"rate{w}", per_token(a, names.ENERGY + "_total", scale=1)),
    ]
    for_s = WINDOW * a.time_scale
    interval = example_interval(a, for_s)
    steps = round((WINDOW * a.time_scale + for_s) / interval) + 3
    at = steps * interval
    tokens_per_step = 100_000

    def series(version: str, cost_per_step: float) -> tuple[Series, ...]:
        base = {names.VERSION: version, names.MODEL: "m"}
        return (Series(selector(names.COST + "_total", {names.VERSION: version}), f"0+{cost_per_step!r}x{steps}"),
                Series(selector(names.GENERATION_TOKENS + "_total", base), f"0+{tokens_per_step}x{steps}"))

    def per_m(cost_per_step: float) -> float:
        return cost_per_step / tokens_per_step * 1e6

    if a.cost_budget_per_million is not None:
        budget = a.cost_budget_per_million
        v = a.live_versions[0] if a.live_versions else "stable"
        rules.append(Alert(
            name=names.ALERT_COST_OVER_BUDGET, expr=f"{cost_rec} > {budget!r}", severity="ticket",
            for_seconds=for_s,
            summary="{{ $labels.version }}: cost per million generated tokens over budget",
            description=(f"Version {{{{ $labels.version }}}} costs {{{{ printf \"%.2f\" $value }}}} per million "
                         f"generated tokens over the last {duration(WINDOW * a.time_scale)} (budget {budget:g}, "
                         "cost.budget_per_million_tokens): GPUs held per token served went up — lower "
                         "utilisation, a smaller batch, more replicas than the traffic needs, or a pricier GPU."),
            runbook="cost-per-token",
            examples=(Example(f"{names.ALERT_COST_OVER_BUDGET} fires at 1.5x the budget",
                              series(v, _per_step(budget * 1.5, tokens_per_step)), at, interval,
                              (Firing(((names.VERSION, v),), budget * 1.5),)),
                      Example(f"{names.ALERT_COST_OVER_BUDGET} quiet at half the budget",
                              series(v, _per_step(budget * 0.5, tokens_per_step)), at, interval))))
    ratio = a.cost_regression_ratio
    for i, (canary, baseline) in enumerate(a.canary_pairs):
        expr = (f"{selector(cost_rec, {names.VERSION: canary})}\n> ignoring ({names.VERSION}) group_left ()\n"
                f"({ratio!r} * {selector(cost_rec, {names.VERSION: baseline})})")
        c_high, c_low, b = 2.0 * ratio * 0.01, 0.9 * ratio * 0.01, 0.01  # cost per step of 100k tokens
        rules.append(Alert(
            name=names.ALERT_COST_REGRESSION, expr=expr, severity="ticket", for_seconds=for_s,
            labels=((names.BASELINE, baseline),),
            summary="{{ $labels.version }}: costs more per token than its baseline",
            description=(f"Canary {{{{ $labels.version }}}} costs {{{{ printf \"%.2f\" $value }}}} per million "
                         f"generated tokens, more than {ratio:g}× its baseline {baseline} over "
                         f"{duration(WINDOW * a.time_scale)} (cost.regression_ratio): a rollout that silently "
                         "raises the cost per token — a smaller batch, lower utilisation, longer answers served "
                         "as slowly."),
            runbook="cost-per-token",
            examples=(() if i else (
                Example(f"{names.ALERT_COST_REGRESSION} fires at {2 * ratio:g}x the baseline",
                        series(canary, c_high) + series(baseline, b), at, interval,
                        (Firing(((names.VERSION, canary),), per_m(c_high), ((names.BASELINE, baseline),)),)),
                Example(f"{names.ALERT_COST_REGRESSION} quiet at {0.9 * ratio:g}x",
                        series(canary, c_low) + series(baseline, b), at, interval)))))
    return Group(names.RULE_GROUP_COST, tuple(rules))


def _per_step(per_million: float, tokens_per_step: int) -> float:
    return per_million * tokens_per_step / 1e6
