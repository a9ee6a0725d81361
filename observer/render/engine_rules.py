"""vLLM engine health: load shedding, restarts, hung and corrupting engines, a replica slower than its siblings."""

from __future__ import annotations

from observer import conventions as names
from observer.conventions.promql import selector
from observer.render.burnrate import duration
from observer.render.objectives import Alerting
from observer.render.rule_timing import covering, timing
from observer.render.rulemodel import Alert, Example, Firing, Labels, Series

_V = names.VERSION


def replica_outlier(a: Alerting) -> Alert:
    """One replica much slower than its siblings (one bad GPU or node) for the hold time."""
    interval, at, steps = timing(a, a.limits.leading_for)
    out, score = names.REPLICA_OUTLIER, names.REPLICA_OUTLIER_SCORE
    key: Labels = ((names.REPLICA, "llm-canary-0"), (_V, "canary"))
    other = {_V: "canary", names.REPLICA: "llm-canary-1"}
    return Alert(
        name=names.ALERT_REPLICA_OUTLIER,
        expr=f"max by ({_V}, {names.REPLICA}) ({out}) == 1",
        severity="warning", for_seconds=a.limits.leading_for,
        summary="{{ $labels.version }}: replica {{ $labels.replica }} much slower than its siblings",
        description=("Replica {{ $labels.replica }} of version {{ $labels.version }} has a median TTFT far above its "
                     f"siblings' for {duration(a.limits.leading_for)}: the version's latency averages it away, "
                     "its users wait. One GPU or node is degraded: check its DCGM panel (throttling, ECC) "
                     "(outlier flag {{ printf \"%.0f\" $value }})."),
        runbook="replica-slow",
        examples=(Example(f"{names.ALERT_REPLICA_OUTLIER} fires on one slow replica",
                          (Series(selector(out, dict(key)), f"1x{steps}"),
                           Series(selector(score, dict(key)), f"8x{steps}"),
                           Series(selector(out, other), f"0x{steps}"),
                           Series(selector(score, other), f"-0.5x{steps}")),
                          at, interval, (Firing(key, 1.0),)),
                  Example(f"{names.ALERT_REPLICA_OUTLIER} quiet when replicas agree",
                          (Series(selector(out, dict(key)), f"0x{steps}"),
                           Series(selector(score, dict(key)), f"0.4x{steps}")), at, interval)),
    )


def restart_storm(a: Alerting) -> Alert:
    """vLLM servers of one version restart again and again (crash loop, OOM): each restart is a counter reset
    the running totals absorb, so without this count nothing shows it."""
    window_s = 900 * a.time_scale
    interval, at, steps = covering(a, window_s)
    rst = names.ENGINE_RESTARTS + "_total"
    n = a.limits.restarts_per_15m
    window = duration(window_s)
    key: Labels = ((_V, "canary"),)
    per_window = window_s / interval  # one restart per evaluation interval: that many in a window, > n
    return Alert(
        name=names.ALERT_RESTART_STORM, expr=f"increase({rst}[{window}]) > {n}", severity="warning",
        summary="{{ $labels.version }}: vLLM restarting repeatedly",
        description=(f"The vLLM servers of version {{{{ $labels.version }}}} restarted "
                     f"{{{{ printf \"%.0f\" $value }}}} times in {window} (more than {n}): a crash loop, OOM kills "
                     "or a failing probe. Each restart fails its in-flight requests and resets the engine's "
                     "counters (the observer's totals absorb the resets)."),
        runbook="restart-storm",
        examples=(Example(f"{names.ALERT_RESTART_STORM} fires in a crash loop",
                          (Series(selector(rst, {_V: "canary"}), f"0+1x{steps}"),), at, interval,
                          (Firing(key, per_window),)),
                  Example(f"{names.ALERT_RESTART_STORM} quiet after one restart",
                          (Series(selector(rst, {_V: "canary"}), f"0 1x{steps}"),), at, interval))
        if per_window > n else (),
    )


def engine_hung(a: Alerting) -> Alert:
    """A replica takes requests and finishes none (a deadlocked engine, a stopped process behind a live socket):
    /health can stay green and the latency and error ratios go missing instead of burning, so no SLO alert fires."""
    hold = 120 * a.time_scale
    interval, at, steps = timing(a, hold)
    state = names.REPLICAS_IN_STATE
    expr = f"max by ({_V}, {names.STATE}) ({selector(state, regex={names.STATE: 'hung|unhealthy'})}) > 0"
    key_hung: Labels = ((names.STATE, "hung"), (_V, "canary"))
    return Alert(
        name=names.ALERT_ENGINE_HUNG, expr=expr, severity="page", for_seconds=hold,
        summary="{{ $labels.version }}: vLLM engine {{ $labels.state }}",
        description=("{{ printf \"%.0f\" $value }} replica(s) of version {{ $labels.version }} are "
                     "{{ $labels.state }} for "
                     f"{duration(hold)}: hung = requests running and none finished for scrape.hung_after_seconds "
                     "(the process answers /health and /metrics but serves nothing); unhealthy = vLLM's own "
                     "engine_healthy is 0. Latency and error SLOs cannot burn on requests that never finish. "
                     "The canary verdict is never pass while this holds."),
        runbook="engine-hung",
        examples=(Example(f"{names.ALERT_ENGINE_HUNG} fires on a hung replica",
                          (Series(selector(state, {_V: "canary", names.STATE: "hung"}), f"0 0 1x{steps}"),
                           Series(selector(state, {_V: "canary", names.STATE: "asleep"}), f"1x{steps + 2}")),
                          at + 2 * interval, interval, (Firing(key_hung, 1.0),)),
                  Example(f"{names.ALERT_ENGINE_HUNG} quiet on an asleep replica",
                          (Series(selector(state, {_V: "canary", names.STATE: "hung"}), f"0x{steps}"),
                           Series(selector(state, {_V: "canary", names.STATE: "asleep"}), f"1x{steps}")),
                          at, interval)),
    )


def corrupted(a: Alerting) -> Alert:
    """A version answers garbage: vLLM found NaNs in the logits of its finished requests (counted only with
    VLLM_COMPUTE_NANS_IN_LOGITS=1). Those requests finish `stop` like any other, so no error ratio or latency SLO
    burns: only this counter sees them."""
    hold = 300 * a.time_scale
    interval, at, steps = timing(a, hold)
    corrupted, finished = names.CORRUPTED_REQUESTS + "_total", names.REQUESTS + "_total"
    window = duration(300 * a.time_scale)
    limit = a.limits.corrupted_ratio
    expr = (f"sum by ({_V}) (rate({corrupted}[{window}]))\n/\n"
            f"(sum by ({_V}) (rate({finished}[{window}])) > 0)\n> {limit!r}")
    per_step = 10_000
    high, low = round(limit * 10 * per_step), max(1, round(limit / 5 * per_step))
    key: Labels = ((_V, "canary"),)

    def series(bad_per_step: int) -> tuple[Series, ...]:
        return (Series(selector(finished, {_V: "canary", names.FINISHED_REASON: "stop"}), f"0+{per_step}x{steps}"),
                Series(selector(corrupted, {_V: "canary", names.MODEL: "m"}), f"0+{bad_per_step}x{steps}"))

    return Alert(
        name=names.ALERT_CORRUPTED_OUTPUTS, expr=expr, severity="page", for_seconds=hold,
        summary="{{ $labels.version }}: answers computed from NaN logits",
        description=(f"{{{{ $value | humanizePercentage }}}} of the requests version {{{{ $labels.version }}}} "
                     f"finished in the last {window} had NaNs in their logits (threshold {limit:.2%}), for "
                     f"{duration(hold)}: users get garbage that finishes like a good answer, so no error ratio or "
                     "latency SLO burns. A broken quantisation, kernel or GPU. The canary verdict fails on it where "
                     "the `corrupted: true` metric is configured."),
        runbook="corrupted-outputs",
        examples=(Example(f"{names.ALERT_CORRUPTED_OUTPUTS} fires at {high / per_step:.1%}", series(high), at,
                          interval, (Firing(key, high / per_step),)),
                  Example(f"{names.ALERT_CORRUPTED_OUTPUTS} quiet at {low / per_step:.2%}", series(low), at,
                          interval)),
    )


def shedding(a: Alerting) -> Alert:
    """Users are turned away before the engine: the sampling proxy sees 429/503 answers, or vLLM refuses requests
    at admission (its queue limits; a 503 in no finished-request count). Either is a leading sign of a capacity
    shortage, seen before latency or availability SLOs burn."""
    interval, at, steps = timing(a, a.limits.leading_for)
    proxied = names.PROXY_REQUESTS + "_total"
    rejected = names.ADMISSION_REJECTIONS + "_total"
    finished = names.REQUESTS + "_total"
    window = duration(300 * a.time_scale)
    shed = f"sum by ({_V}) (rate({selector(proxied, regex={names.CODE: '429|503'})}[{window}]))"
    total = f"sum by ({_V}) (rate({proxied}[{window}]))"
    refused = f"sum by ({_V}) (rate({rejected}[{window}]))"
    admitted = f"sum by ({_V}) (rate({finished}[{window}]))"
    limit = a.limits.shed_ratio
    per_step = 1000
    high, low = round(min(0.5, limit * 5) * per_step), round(limit / 4 * per_step)
    key: Labels = ((_V, "stable"),)

    def series(shed_per_step: int) -> tuple[Series, ...]:
        return (Series(selector(proxied, {_V: "stable", names.CODE: "200"}), f"0+{per_step - shed_per_step}x{steps}"),
                Series(selector(proxied, {_V: "stable", names.CODE: "429"}), f"0+{shed_per_step}x{steps}"))

    def engine(refused_per_step: int) -> tuple[Series, ...]:
        return (Series(selector(finished, {_V: "stable", names.FINISHED_REASON: "stop"}),
                       f"0+{per_step - refused_per_step}x{steps}"),
                Series(selector(rejected, {_V: "stable", names.REASON: "max_num_queued_reqs"}),
                       f"0+{refused_per_step}x{steps}"))

    expr = (f"(\n  {shed}\n  /\n  ({total} > 0)\n)\n> {limit!r}\nor\n"
            f"(\n  {refused}\n  /\n  ({admitted} + {refused} > 0)\n)\n> {limit!r}")
    return Alert(
        name=names.ALERT_LOAD_SHEDDING, expr=expr, severity="warning",
        for_seconds=a.limits.leading_for, summary="{{ $labels.version }}: requests shed (429/503)",
        description=(f"{{{{ $value | humanizePercentage }}}} of the requests to version {{{{ $labels.version }}}} "
                     f"were turned away for {duration(a.limits.leading_for)} (threshold {limit:.2%}): answered 429 "
                     "or 503 as the sampling proxy saw them, or refused at admission by vLLM's queue limits "
                     "(observer_admission_rejections_total). The fleet turns users away — a leading sign of a "
                     "capacity shortage, seen before latency or availability SLOs burn."),
        runbook="load-shedding",
        examples=(Example(f"{names.ALERT_LOAD_SHEDDING} fires at {high / per_step:.1%} shed", series(high), at,
                          interval, (Firing(key, high / per_step),)),
                  Example(f"{names.ALERT_LOAD_SHEDDING} quiet at {low / per_step:.2%}", series(low), at, interval),
                  Example(f"{names.ALERT_LOAD_SHEDDING} fires on vLLM admission rejections at {high / per_step:.1%}",
                          engine(high), at, interval, (Firing(key, high / per_step),)),
                  Example(f"{names.ALERT_LOAD_SHEDDING} quiet on rare admission rejections", engine(low), at,
                          interval)),
    )
