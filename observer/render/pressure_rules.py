"""Pressure before refusals: prompts near the context limit, generation requests without max_tokens, and a TTFT
tail far above the typical request — each a warning before vLLM refuses requests or latency SLOs burn."""

from __future__ import annotations

from observer import conventions as names
from observer.conventions.promql import selector
from observer.render.burnrate import duration
from observer.render.objectives import Alerting
from observer.render.rule_timing import timing
from observer.render.rulemodel import Alert, Example, Firing, Labels, Series

_V = names.VERSION
KEY: Labels = ((_V, "canary"),)
TAIL_MIN_REQUESTS = 100
"""Requests in the tail ratio's window below which it is not judged: a p99 of a few requests is one request."""


def pressure(a: Alerting) -> list[Alert]:
    """The three pressure warnings, each held for the leading `for`."""
    return [_near_limit(a), _uncapped(a), _tail(a)]


def _near_limit(a: Alerting) -> Alert:
    interval, at, steps = timing(a, a.limits.leading_for)
    share, limit = names.WIN_PROMPT_NEAR_LIMIT, a.limits.near_limit_share
    high, low = min(0.9, limit * 4), limit / 4

    def series(value: float) -> tuple[Series, ...]:
        return (Series(selector(share, {_V: "canary"}), f"{value!r}x{steps}"),)

    return Alert(
        name=names.ALERT_PROMPTS_NEAR_LIMIT, expr=f"max by ({_V}) ({share}) > {limit!r}", severity="warning",
        for_seconds=a.limits.leading_for,
        summary="{{ $labels.version }}: prompts near the context limit",
        description=(f"{{{{ $value | humanizePercentage }}}} of the prompts of {{{{ $labels.version }}}} are longer "
                     f"than {names.PROMPT_NEAR_LIMIT_THRESHOLD} (close to its max_model_len) for "
                     f"{duration(a.limits.leading_for)} (threshold {limit:.0%}): longer ones are refused (400), "
                     f"and these leave little room for the answer."),
        runbook="prompts-near-limit",
        examples=(Example(f"{names.ALERT_PROMPTS_NEAR_LIMIT} fires", series(high), at, interval,
                          (Firing(KEY, high),)),
                  Example(f"{names.ALERT_PROMPTS_NEAR_LIMIT} quiet", series(low), at, interval)))


def _uncapped(a: Alerting) -> Alert:
    interval, at, steps = timing(a, a.limits.leading_for)
    window = duration(300 * a.time_scale)
    uncapped, proxied = names.PROXY_UNCAPPED + "_total", names.PROXY_REQUESTS + "_total"
    limit, per_step = a.limits.uncapped_share, 1000
    high, low = round(min(0.9, limit * 2.5) * per_step), round(limit / 4 * per_step)
    expr = (f"sum by ({_V}) (rate({uncapped}[{window}]))\n/\n(sum by ({_V}) (rate({proxied}[{window}])) > 0)\n"
            f"> {limit!r}")

    def series(n: int) -> tuple[Series, ...]:
        return (Series(selector(proxied, {_V: "canary", names.CODE: "200"}), f"0+{per_step}x{steps}"),
                Series(selector(uncapped, {_V: "canary"}), f"0+{n}x{steps}"))

    return Alert(
        name=names.ALERT_UNCAPPED, expr=expr, severity="warning", for_seconds=a.limits.leading_for,
        summary="{{ $labels.version }}: requests without max_tokens",
        description=(f"{{{{ $value | humanizePercentage }}}} of the requests proxied to {{{{ $labels.version }}}} "
                     f"set no max_tokens for {duration(a.limits.leading_for)} (threshold {limit:.0%}): vLLM lets "
                     f"each run to max_model_len, so one looping answer holds a slot and KV cache for minutes."),
        runbook="requests-without-max-tokens",
        examples=(Example(f"{names.ALERT_UNCAPPED} fires", series(high), at, interval,
                          (Firing(KEY, high / per_step),)),
                  Example(f"{names.ALERT_UNCAPPED} quiet", series(low), at, interval)))


def _tail(a: Alerting) -> Alert:
    interval, at, steps = timing(a, a.limits.leading_for)
    window = duration(600 * a.time_scale)
    hist, limit = names.HIST_TTFT, a.limits.ttft_tail_ratio

    def q(p: float) -> str:
        return f"histogram_quantile({p}, sum by ({_V}, {names.LE}) (rate({hist}_bucket[{window}])))"

    busy = f"sum by ({_V}) (increase({hist}_count[{window}])) >= {TAIL_MIN_REQUESTS}"
    expr = f"{q(0.99)}\n/\n{q(0.5)}\n> {limit!r}\nand on ({_V})\n{busy}"

    def series(counts: tuple[int, int, int, int]) -> tuple[Series, ...]:  # cumulative per step at 0.1/.25/2.5/5 s
        les = ("0.1", "0.25", "2.5", "5.0", "+Inf")
        out = [Series(selector(hist + "_bucket", {_V: "canary", names.MODEL: "m", names.LE: le}), f"0+{n}x{steps}")
               for le, n in zip(les, (*counts, 100), strict=True)]
        out.append(Series(selector(hist + "_count", {_V: "canary", names.MODEL: "m"}), f"0+100x{steps}"))
        return tuple(out)

    return Alert(
        name=names.ALERT_TAIL_RATIO, expr=expr, severity="warning", for_seconds=a.limits.leading_for,
        summary="{{ $labels.version }}: the TTFT tail is far above the typical request",
        description=(f"p99 TTFT of {{{{ $labels.version }}}} is {{{{ printf \"%.0f\" $value }}}}× its p50 for "
                     f"{duration(a.limits.leading_for)} (threshold {limit:g}×): most requests are fast while "
                     f"some wait — long prompts prefilling ahead of them, preemptions, one slow replica — "
                     f"before the mean or a p95 SLO shows it."),
        runbook="ttft-tail",
        # p50 0.1 s (half the requests under 0.1 s); p99 4.375 s (4 in 100 between 2.5 and 5 s): 43.75×
        examples=(Example(f"{names.ALERT_TAIL_RATIO} fires on a long tail", series((50, 96, 96, 100)), at, interval,
                          (Firing(KEY, 43.75),)),
                  Example(f"{names.ALERT_TAIL_RATIO} quiet on a short one", series((50, 100, 100, 100)), at,
                          interval)))
