"""Time to first token along the users' path, measured in front of the engine: at the router (llm-d's endpoint
picker, Dynamo's frontend), by the synthetic probe through the configured route and by golden replays. vLLM's
own TTFT starts when the engine has the request; these include the gateway, the router's queue and the network,
where a stall leaves the engine's series green."""

from __future__ import annotations

from observer import conventions as names
from observer.conventions.promql import selector
from observer.render.burnrate import duration
from observer.render.objectives import Alerting
from observer.render.rule_timing import timing
from observer.render.rulemodel import Alert, Example, Firing, Series

_V = names.VERSION
SOURCE = "source"


def path_ttft(a: Alerting) -> Alert:
    """p95 TTFT at the router, of the probe or of golden replays over `leading.path_ttft_seconds`."""
    interval, at, steps = timing(a, a.limits.leading_for)
    window = duration(600 * a.time_scale)
    limit = a.limits.path_ttft_seconds

    def p95(histogram: str, source: str) -> str:
        q = f"histogram_quantile(0.95, sum by ({_V}, {names.LE}) (rate({histogram}_bucket[{window}])))"
        return f'label_replace({q}, "{SOURCE}", "{source}", "", "") > {limit!r}'

    golden = f'max by ({_V}) ({selector(names.GOLDEN_TTFT, {names.QUANTILE: "0.95"})})'
    expr = "\nor\n".join([p95(names.HIST_ROUTER_TTFT, "router"), p95(names.PROBE_TTFT, "probe"),
                          f'label_replace({golden}, "{SOURCE}", "golden", "", "") > {limit!r}'])
    slow, fast = limit * 4, limit / 5

    def router(edge: float) -> tuple[Series, ...]:  # 95 in 100 requests in the bucket ending at `edge`: p95 = edge
        return tuple(Series(selector(names.HIST_ROUTER_TTFT + "_bucket", {_V: "canary", names.LE: le}),
                            f"0+{n}x{steps}")
                     for le, n in ((repr(limit / 10), 0), (repr(edge), 95), ("+Inf", 100)))

    def golden_series(value: float) -> tuple[Series, ...]:
        return (Series(selector(names.GOLDEN_TTFT, {_V: "canary", names.GOLDEN_SET: "support",
                                                    names.QUANTILE: "0.95"}), f"{value!r}x{steps}"),)

    return Alert(
        name=names.ALERT_PATH_TTFT, expr=expr, severity="warning", for_seconds=a.limits.leading_for,
        summary="{{ $labels.version }}: slow first tokens at the {{ $labels.source }}",
        description=(f"p95 time to first token of {{{{ $labels.version }}}} measured at the {{{{ $labels.source }}}} "
                     f"(router: llm-d / Dynamo; probe: the synthetic request through the configured route; golden: "
                     f"the last golden replay) is {{{{ printf \"%.2f\" $value }}}}s, over {limit:g}s, for "
                     f"{duration(a.limits.leading_for)}: users wait in front of the engine — compare with the "
                     f"engine's own TTFT to place the delay."),
        runbook="path-ttft",
        examples=(Example(f"{names.ALERT_PATH_TTFT} fires on the router's TTFT", router(slow), at, interval,
                          (Firing(((SOURCE, "router"), (_V, "canary")), slow),)),
                  Example(f"{names.ALERT_PATH_TTFT} quiet on a fast router", router(fast), at, interval),
                  Example(f"{names.ALERT_PATH_TTFT} fires on golden replays' TTFT", golden_series(slow), at, interval,
                          (Firing(((SOURCE, "golden"), (_V, "canary")), slow),)),
                  Example(f"{names.ALERT_PATH_TTFT} quiet on fast golden replays", golden_series(fast), at,
                          interval)),
    )
