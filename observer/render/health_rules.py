"""Leading-indicator warnings and observer self-health alerts, each with its examples (rollout hygiene:
observer.render.hygiene_rules)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from observer import conventions as names
from observer.conventions.promql import one_of, selector
from observer.render.burnrate import duration
from observer.render.objectives import Alerting
from observer.render.rulemodel import Alert, Example, Firing, Group, Labels, Series

_V = names.VERSION


def example_interval(a: Alerting, span_seconds: float) -> float:
    """Evaluation interval of an example: 1m, or 10m for spans of an hour or more (promtool is faster)."""
    return (600.0 if span_seconds >= 3600 * a.time_scale else 60.0) * a.time_scale


def timing(a: Alerting, for_seconds: float) -> tuple[float, float, int]:
    """(interval, eval time, steps) of an example: evaluate three intervals after `for` has passed."""
    interval = example_interval(a, for_seconds)
    steps = round(for_seconds / interval) + 3
    return interval, steps * interval, steps


def _covering(a: Alerting, window_seconds: float) -> tuple[float, float, int]:
    """(interval, eval time, steps) of an example whose series cover a whole `window_seconds` range plus
    five intervals, so an increase() over the window counts exactly what the series added."""
    interval = example_interval(a, window_seconds)
    steps = round(window_seconds / interval) + 5
    return interval, steps * interval, steps


def _threshold(a: Alerting, *, name: str, metric: str, matchers: dict[str, str], threshold: float,
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


def leading_group(a: Alerting) -> Group:
    """Early warnings: queue depth, KV cache, framebuffer, XID errors, preemptions."""
    lim = a.limits
    interval, at, steps = timing(a, lim.leading_for)
    window = duration(600 * a.time_scale)
    rate_window = duration(300 * a.time_scale)
    xid = names.GPU_XID_ERRORS + "_total"
    pre = names.PREEMPTIONS + "_total"
    per_step = 60  # preemptions per interval in the example: 1/s at time_scale 1
    pre_rate = per_step / interval
    quiet_per_step = lim.preemptions_per_second * interval / 4
    rules: tuple[Alert, ...] = (
        _threshold(a, name=names.ALERT_QUEUE_DEPTH, metric=names.QUEUE_DEPTH_PER_REPLICA, matchers={},
                   threshold=lim.queue_depth_per_replica, high=lim.queue_depth_per_replica * 1.5,
                   low=lim.queue_depth_per_replica / 2, value_text='{{ printf "%.2f" $value }} waiting '
                   'requests per replica', what="requests queueing", runbook="queue-depth"),
        _threshold(a, name=names.ALERT_KV_CACHE, metric=names.KV_CACHE_USAGE, matchers={names.STAT: "max"},
                   threshold=lim.kv_cache_usage, high=round((1 + lim.kv_cache_usage) / 2, 4),
                   low=round(lim.kv_cache_usage / 2, 4), value_text="KV-cache usage {{ $value | "
                   "humanizePercentage }}", what="KV cache nearly full", runbook="kv-cache"),
        _threshold(a, name=names.ALERT_GPU_FRAMEBUFFER, metric=names.GPU_FB_USED, matchers={names.STAT: "max"},
                   threshold=lim.gpu_framebuffer_used, high=round((1 + lim.gpu_framebuffer_used) / 2, 4),
                   low=round(lim.gpu_framebuffer_used / 2, 4), value_text="framebuffer used {{ $value | "
                   "humanizePercentage }}", what="GPU framebuffer nearly full", runbook="gpu-framebuffer"),
        Alert(
            name=names.ALERT_GPU_XID, expr=f"increase({xid}[{window}]) > 0", severity="warning",
            summary="{{ $labels.version }}: GPU XID errors",
            description=(f"DCGM reported {{{{ printf \"%.2f\" $value }}}} new XID error event(s) in the last "
                         f"{window} on a GPU of version {{{{ $labels.version }}}}: check the XID code in "
                         f"DCGM_FI_DEV_XID_ERRORS and the node's kernel log."),
            runbook="gpu-xid",
            examples=(
                Example(f"{names.ALERT_GPU_XID} fires after one XID",
                        (Series(selector(xid, {_V: "canary"}), f"0x5 1x{steps}"),), 10 * interval, interval,
                        (Firing(((_V, "canary"),), 1.0),)),
                Example(f"{names.ALERT_GPU_XID} quiet without XIDs",
                        (Series(selector(xid, {_V: "canary"}), f"0x{steps}"),), 10 * interval, interval),
            ),
        ),
        Alert(
            name=names.ALERT_PREEMPTIONS,
            expr=f"sum by ({_V}) (rate({pre}[{rate_window}])) > {lim.preemptions_per_second!r}",
            severity="warning", for_seconds=lim.leading_for,
            summary="{{ $labels.version }}: vLLM preempting requests",
            description=(f"Version {{{{ $labels.version }}}} preempts {{{{ printf \"%.2f\" $value }}}} requests/s "
                         f"(threshold {lim.preemptions_per_second:g}/s) for {duration(lim.leading_for)}: the "
                         f"KV cache is too small for the load, so requests are recomputed."),
            runbook="preemptions",
            examples=(
                Example(f"{names.ALERT_PREEMPTIONS} fires at {pre_rate:g}/s",
                        (Series(selector(pre, {_V: "canary", names.MODEL: "m"}), f"0+{per_step}x{steps}"),),
                        at, interval, (Firing(((_V, "canary"),), pre_rate),)),
                Example(f"{names.ALERT_PREEMPTIONS} quiet at a low rate",
                        (Series(selector(pre, {_V: "canary", names.MODEL: "m"}), f"0+{quiet_per_step!r}x{steps}"),),
                        at, interval),
            ) if pre_rate > lim.preemptions_per_second else (),
        ),
    )
    rules += (_shedding(a), *_gpu_health(a), _restart_storm(a), _engine_hung(a), _corrupted(a), _replica_outlier(a))
    if a.quality_enabled:
        rules += (_probe_failing(a),)
    if a.drift_enabled:
        rules += (_drift_detected(a),)
    return Group(names.RULE_GROUP_LEADING, rules)


def _gpu_health(a: Alerting) -> tuple[Alert, Alert, Alert]:
    """Silent GPU degradation from DCGM: uncorrectable memory errors, and throttling by power or temperature."""
    interval, at, steps = timing(a, a.limits.leading_for)
    mem = names.GPU_MEMORY_ERRORS
    key: Labels = ((_V, "canary"),)
    memory = Alert(
        name=names.ALERT_GPU_MEMORY_ERRORS,
        expr=(f"max by ({_V}) ({selector(mem, regex={names.KIND: 'dbe_volatile|remap_failures'})}) > 0"),
        severity="warning", summary="{{ $labels.version }}: a GPU reports uncorrectable memory errors",
        description=("A GPU of version {{ $labels.version }} reports uncorrectable (double-bit) ECC errors since "
                     "its driver loaded, or a failed row remap ({{ printf \"%.0f\" $value }}): its results can "
                     "be wrong or it can fail any moment. Drain it."),
        runbook="gpu-memory-errors",
        examples=(Example(f"{names.ALERT_GPU_MEMORY_ERRORS} fires on a double-bit ECC error",
                          (Series(selector(mem, {_V: "canary", names.KIND: "dbe_volatile"}), f"0 2x{steps}"),
                           Series(selector(mem, {_V: "canary", names.KIND: "sbe_volatile"}), f"40x{steps}")),
                          at, interval, (Firing(key, 2.0),)),
                  Example(f"{names.ALERT_GPU_MEMORY_ERRORS} quiet on corrected (single-bit) errors only",
                          (Series(selector(mem, {_V: "canary", names.KIND: "dbe_volatile"}), f"0x{steps}"),
                           Series(selector(mem, {_V: "canary", names.KIND: "sbe_volatile"}), f"40x{steps}")),
                          at, interval)),
    )
    thr = names.GPU_THROTTLE_SECONDS + "_total"
    window = duration(600 * a.time_scale)
    limit = a.limits.throttled_share
    # rate() over a counter that starts at zero ramps up over its window: the example runs for the window
    # plus the hold time.
    steps = round((a.limits.leading_for + 600 * a.time_scale) / interval) + 3
    at = steps * interval
    share = (f"sum by ({_V}, {names.REASON}) (rate({thr}[{window}]))\n/ on ({_V}) group_left ()\n"
             f"max by ({_V}) ({names.GPU_COUNT})")
    hot = round(min(1.0, 3 * limit) * interval, 6)
    cool = round(limit / 4 * interval, 6)

    def series(per_step: float) -> tuple[Series, ...]:
        return (Series(selector(thr, {_V: "canary", names.REASON: "thermal"}), f"0+{per_step!r}x{steps}"),
                Series(selector(names.GPU_COUNT, {_V: "canary"}), f"1x{steps}"))

    throttled = Alert(
        name=names.ALERT_GPU_THROTTLED, expr=f"{share}\n> {limit!r}", severity="warning",
        for_seconds=a.limits.leading_for, summary="{{ $labels.version }}: GPUs throttled ({{ $labels.reason }})",
        description=(f"The average GPU of version {{{{ $labels.version }}}} was throttled by its "
                     f"{{{{ $labels.reason }}}} limit {{{{ $value | humanizePercentage }}}} of the time for "
                     f"{duration(a.limits.leading_for)} (threshold {limit:.0%}): it runs slower than its siblings "
                     "without any error, so latency degrades silently."),
        runbook="gpu-throttled",
        examples=(Example(f"{names.ALERT_GPU_THROTTLED} fires when thermally throttled {hot / interval:.0%}",
                          series(hot), at, interval, (Firing(((names.REASON, "thermal"), (_V, "canary")),
                                                             hot / interval),)),
                  Example(f"{names.ALERT_GPU_THROTTLED} quiet at {cool / interval:.1%}", series(cool), at,
                          interval)),
    )
    clocks = names.GPU_CLOCK_THROTTLED
    hw = "|".join(names.HARDWARE_SLOWDOWNS)
    slowdown = Alert(
        name=names.ALERT_GPU_HW_SLOWDOWN,
        expr=f"max by ({_V}, {names.REASON}) ({selector(clocks, regex={names.REASON: hw})}) > 0",
        severity="warning", for_seconds=a.limits.leading_for,
        summary="{{ $labels.version }}: GPU clocks slowed by the hardware ({{ $labels.reason }})",
        description=("{{ printf \"%.0f\" $value }} GPU(s) of version {{ $labels.version }} report the NVML clock "
                     f"throttle reason {{{{ $labels.reason }}}} for {duration(a.limits.leading_for)}: the hardware "
                     "halves its clocks or more (overheating, a power-brake signal, a failing power supply) — "
                     "not a software cap; the node needs a look."),
        runbook="gpu-throttled",
        examples=(Example(f"{names.ALERT_GPU_HW_SLOWDOWN} fires on a hardware thermal slowdown",
                          (Series(selector(clocks, {_V: "canary", names.REASON: "hw_thermal"}), f"1x{steps}"),
                           Series(selector(clocks, {_V: "canary", names.REASON: "sw_power_cap"}), f"2x{steps}")),
                          at, interval, (Firing(((names.REASON, "hw_thermal"), (_V, "canary")), 1.0),)),
                  Example(f"{names.ALERT_GPU_HW_SLOWDOWN} quiet on a software power cap only",
                          (Series(selector(clocks, {_V: "canary", names.REASON: "hw_thermal"}), f"0x{steps}"),
                           Series(selector(clocks, {_V: "canary", names.REASON: "sw_power_cap"}), f"2x{steps}")),
                          at, interval)),
    )
    return memory, throttled, slowdown


def _replica_outlier(a: Alerting) -> Alert:
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


def _restart_storm(a: Alerting) -> Alert:
    """vLLM servers of one version restart again and again (crash loop, OOM): each restart is a counter reset
    the running totals absorb, so without this count nothing shows it."""
    window_s = 900 * a.time_scale
    interval, at, steps = _covering(a, window_s)
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


def _engine_hung(a: Alerting) -> Alert:
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


def _corrupted(a: Alerting) -> Alert:
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


def _shedding(a: Alerting) -> Alert:
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


def _probe_failing(a: Alerting) -> Alert:
    """Golden replays (the synthetic probe, through whatever URL `fleet.versions[].openai` names: a gateway in
    front of the fleet tests the users' path) get no answer: request errors, not wrong answers."""
    window_s = max(1800.0 * a.time_scale, 2 * a.limits.leading_for)
    window = duration(window_s)
    interval, at, steps = _covering(a, window_s)
    unscored = names.GOLDEN_UNSCORED + "_total"
    items = names.GOLDEN_ITEMS + "_total"
    failed = f"sum by ({_V}) (increase({selector(unscored, {names.REASON: 'request_error'})}[{window}]))"
    answered = f"sum by ({_V}) (increase({items}[{window}]))"
    key: Labels = ((_V, "canary"),)
    labels = {_V: "canary", names.GOLDEN_SET: "factual"}
    errors = Series(selector(unscored, {**labels, names.REASON: "request_error"}), f"0+10x{steps}")
    return Alert(
        name=names.ALERT_PROBE_FAILING, expr=f"{failed} > 0\nunless on ({_V})\n{answered} > 0", severity="warning",
        summary="{{ $labels.version }}: synthetic probe gets no answers",
        description=(f"Every golden-set request to version {{{{ $labels.version }}}} failed in the last {window} "
                     f"({{{{ printf \"%.0f\" $value }}}} request errors, no item answered): the path the probe "
                     "takes (gateway, service, pods) does not answer, whatever the engine's own metrics say."),
        runbook="probe-failing",
        examples=(Example(f"{names.ALERT_PROBE_FAILING} fires when no probe is answered",
                          (errors, Series(selector(items, labels), f"0x{steps}")), at, interval,
                          (Firing(key, 10.0 * window_s / interval),)),
                  Example(f"{names.ALERT_PROBE_FAILING} quiet when some items are answered",
                          (errors, Series(selector(items, labels), f"0+5x{steps}")), at, interval)),
    )


def _drift_detected(a: Alerting) -> Alert:
    """Drift on a version's prompts or outputs held for the hold time: a ticket, never a page."""
    interval, at, steps = timing(a, a.limits.leading_for)
    det = names.DRIFT_DETECTED
    key: Labels = ((names.FIELD, "prompts"), (_V, "canary"))
    return Alert(
        name=names.ALERT_DRIFT_DETECTED, expr=f"max by ({_V}, {names.FIELD}) ({det}) == 1", severity="ticket",
        for_seconds=a.limits.leading_for, summary="{{ $labels.version }}: {{ $labels.field }} drifted",
        description=("The drift test flags the {{ $labels.field }} of version {{ $labels.version }} as shifted "
                     f"from its pinned baseline (value {{{{ printf \"%.0f\" $value }}}}) for "
                     f"{duration(a.limits.leading_for)}: the traffic (prompts) or the model's answers (outputs) "
                     "no longer look like the baseline."),
        runbook="drift-detected",
        examples=(Example(f"{names.ALERT_DRIFT_DETECTED} fires on drifted prompts",
                          (Series(selector(det, dict(key)), f"1x{steps}"),
                           Series(selector(det, {names.FIELD: "outputs", _V: "canary"}), f"0x{steps}")),
                          at, interval, (Firing(key, 1.0),)),
                  Example(f"{names.ALERT_DRIFT_DETECTED} quiet without drift",
                          (Series(selector(det, dict(key)), f"0x{steps}"),), at, interval)),
    )


def _stale(a: Alerting, *, name: str, metric: str, by: Sequence[str], limit: float, what: str, runbook: str,
           summary: str, keys: Sequence[Mapping[str, str]] = (), matchers: dict[str, str] | None = None) -> Alert:
    """`time() - last > limit` per `by`; with `keys` (label sets that must exist, e.g. each live version)
    also `absent_over_time` per key, so something that never happened alerts too."""
    interval, at, steps = timing(a, limit)
    window = duration(limit)
    regex = {_V: one_of([k[_V] for k in keys])} if keys and tuple(by) == (_V,) else None
    sel = selector(metric, matchers, regex=regex)
    expr = f"time() - max by ({', '.join(by)}) ({sel}) > {limit:g}" if by else f"time() - {sel} > {limit:g}"
    expr += "".join(f"\nor\nabsent_over_time({selector(metric, dict(k))}[{window}])" for k in keys)
    label_sets = [dict(k) for k in keys] or [{b: "x" for b in by}]
    old = tuple(Series(selector(metric, {**ls, **(matchers or {})}), f"0x{steps}") for ls in label_sets)
    fresh = tuple(Series(selector(metric, {**ls, **(matchers or {})}), f"0+{interval!r}x{steps}")
                  for ls in label_sets)
    examples: tuple[Example, ...] = (
        Example(f"{name} fires when {what} last happened {duration(at)} ago", old, at, interval,
                tuple(Firing(tuple(sorted(ls.items())), at) for ls in label_sets)),
        Example(f"{name} quiet when {what} is fresh", fresh, at, interval),
    )
    if keys:
        examples += (Example(f"{name} fires when {what} never happened",
                             (Series(selector(names.TARGET_UP, {_V: "stable"}), f"1x{steps}"),), at, interval,
                             tuple(Firing(tuple(sorted(ls.items())), 1.0) for ls in label_sets)),)
    whose = " of version {{ $labels.version }}" if _V in by else ""
    report = None
    if names.CANARY in by:
        whose = " of canary {{ $labels.canary }} against {{ $labels.baseline }}"
        report = a.canary_report_url
    return Alert(name=name, expr=expr, severity="warning", summary=summary,
                 description=(f"No {what.removeprefix('a ')}{whose} for {{{{ printf \"%.0f\" $value }}}} s "
                              f"(limit {window})"
                              + ("; a value of 1 means none at all within the limit." if keys else ".")
                              + (" The last verdict's evidence: report_url." if report else "")),
                 runbook=runbook, examples=examples, report_url=report)


def self_health_group(a: Alerting) -> Group:
    """Is the observer itself working: targets, signals, jobs, judge, golden sets, drift, verdicts."""
    lim = a.limits
    up = names.TARGET_UP
    t_labels = {_V: "canary", names.KIND: "vllm", names.TARGET: "http://127.0.0.1:18002/metrics"}
    interval, at, steps = timing(a, lim.target_down)
    prom_up = selector("up", {names.JOB: a.observer_job})
    runs = names.JOB_RUNS + "_total"
    j_interval, j_at, j_steps = timing(a, lim.job_failing)
    rules: list[Alert] = [
        Alert(name=names.ALERT_TARGET_DOWN, expr=f"{up} == 0", severity="warning", for_seconds=lim.target_down,
              summary="{{ $labels.version }}: {{ $labels.kind }} target down",
              description=(f"The observer cannot scrape {{{{ $labels.kind }}}} target {{{{ $labels.target }}}} "
                           f"of version {{{{ $labels.version }}}} (up = {{{{ printf \"%.0f\" $value }}}}) for "
                           f"{duration(lim.target_down)}; its signals are missing from every SLO."),
              runbook="target-down",
              examples=(Example(f"{names.ALERT_TARGET_DOWN} fires", (Series(selector(up, t_labels), f"0x{steps}"),),
                                at, interval, (Firing(tuple(sorted(t_labels.items())), 0.0),)),
                        Example(f"{names.ALERT_TARGET_DOWN} quiet", (Series(selector(up, t_labels), f"1x{steps}"),),
                                at, interval))),
        Alert(name=names.ALERT_OBSERVER_DOWN, expr=f"{prom_up} == 0 or absent({prom_up})", severity="page",
              for_seconds=lim.target_down, summary="The observer is not being scraped",
              description=(f"Prometheus job {a.observer_job!r} is down or missing (value "
                           f"{{{{ printf \"%.0f\" $value }}}}; 1 means absent) for {duration(lim.target_down)}: "
                           f"no SLO, canary or drift signal is current."),
              runbook="observer-down",
              examples=(Example(f"{names.ALERT_OBSERVER_DOWN} fires when absent",
                                (Series(selector(up, t_labels), f"1x{steps}"),), at, interval,
                                (Firing(((names.JOB, a.observer_job),), 1.0),)),)),
        _stale(a, name=names.ALERT_SIGNALS_STALE, metric=names.LAST_SUCCESS, matchers={names.KIND: "vllm"},
               by=(_V,), limit=lim.signals_stale, what="a successful vLLM scrape",
               runbook="signals-stale", summary="{{ $labels.version }}: observer signals are stale"),
        Alert(name=names.ALERT_JOB_FAILING,
              expr=(f"(time() - {names.JOB_LAST_SUCCESS} > {lim.job_failing:g})\nand on ({names.JOB})\n"
                    f"(increase({selector(runs, {names.OUTCOME: 'error'})}[{duration(lim.job_failing)}]) > 0)"),
              severity="warning", summary="Observer job {{ $labels.job }} keeps failing",
              description=(f"Periodic job {{{{ $labels.job }}}} last succeeded {{{{ printf \"%.0f\" $value }}}} s "
                           f"ago and has failed within the last {duration(lim.job_failing)}."),
              runbook="job-failing",
              examples=(Example(f"{names.ALERT_JOB_FAILING} fires",
                                (Series(selector(names.JOB_LAST_SUCCESS, {names.JOB: "scrape"}), f"0x{j_steps}"),
                                 Series(selector(runs, {names.JOB: "scrape", names.OUTCOME: "error"}),
                                        f"0+1x{j_steps}")),
                                j_at, j_interval, (Firing(((names.JOB, "scrape"),), j_at),)),)),
    ]
    if a.judge_enabled:
        rules.append(_stale(a, name=names.ALERT_JUDGE_NOT_RUNNING, metric=names.JUDGE_LAST_SUCCESS, by=(),
                            limit=lim.judge_stale, what="a successful LLM-judge call",
                            runbook="judge-not-running", summary="The LLM judge is not running"))
    if a.judge_enabled and a.judge_kappa_floor is not None:
        rules.append(_agreement(a, a.judge_kappa_floor))
    if a.quality_enabled and a.live_versions:
        rules.append(_stale(a, name=names.ALERT_GOLDEN_NOT_RUN, metric=names.GOLDEN_LAST_RUN, by=(_V,),
                            keys=[{_V: v} for v in a.live_versions], limit=lim.golden_stale, what="a golden-set run",
                            runbook="golden-not-run", summary="{{ $labels.version }}: golden set not run"))
    if a.drift_enabled and a.live_versions:
        rules.append(_stale(a, name=names.ALERT_DRIFT_NOT_RUN, metric=names.DRIFT_LAST_CHECK, by=(_V,),
                            keys=[{_V: v} for v in a.live_versions], limit=lim.drift_stale, what="a drift check",
                            runbook="drift-not-run", summary="{{ $labels.version }}: drift check not run"))
    if a.engine_spans_enabled:
        rules.append(_engine_spans_missing(a))
    if a.canary_enabled:
        rules.append(_stale(a, name=names.ALERT_VERDICT_STALE, metric=names.CANARY_LAST_EVALUATED,
                            by=(names.CANARY, names.BASELINE), limit=lim.verdict_stale,
                            keys=[{names.CANARY: c, names.BASELINE: b} for c, b in a.canary_pairs],
                            what="a canary verdict evaluation", runbook="verdict-stale",
                            summary="Canary verdict for {{ $labels.canary }} is stale"))
        rules.append(_canary_failed(a))
    return Group(names.RULE_GROUP_SELF, tuple(rules))


def _canary_failed(a: Alerting) -> Alert:
    """The judge's verdict for a pair has been fail for a while: Argo aborts the step if it gates the rollout,
    but a canary rolled out by hand, or a gate left out, has no one else to tell. The value is the score."""
    interval, at, steps = timing(a, a.limits.leading_for)
    verdict, score = names.CANARY_VERDICT, names.CANARY_SCORE
    key: Labels = ((names.BASELINE, "stable"), (names.CANARY, "canary"))
    labels = dict(key)
    by = f"{names.CANARY}, {names.BASELINE}"
    return Alert(name=names.ALERT_CANARY_FAILED, expr=f"{score} and on ({by}) ({verdict} == -1)",
                 severity="warning", for_seconds=a.limits.leading_for,
                 summary="Canary {{ $labels.canary }} is worse than {{ $labels.baseline }}",
                 description=("The canary judge says fail for {{ $labels.canary }} against {{ $labels.baseline }} "
                              "(score {{ printf \"%.0f\" $value }}): a critical metric failed, or the score fell "
                              "below the marginal score with two or more failing. "
                              + ("Which metric, by how much and since when: report_url." if a.canary_report_url
                                 else "`observer canary judge` names the metric.")),
                 runbook="canary-failed", report_url=a.canary_report_url,
                 examples=(Example(f"{names.ALERT_CANARY_FAILED} fires", (
                     Series(selector(verdict, labels), f"-1x{steps}"), Series(selector(score, labels), f"40x{steps}")),
                                   at, interval, (Firing(key, 40.0),)),
                           Example(f"{names.ALERT_CANARY_FAILED} quiet on inconclusive", (
                               Series(selector(verdict, labels), f"0x{steps}"),
                               Series(selector(score, labels), f"40x{steps}")), at, interval)))


def _engine_spans_missing(a: Alerting) -> Alert:
    """Most proxied requests of a version get no engine span: its servers stopped exporting (tracing off after a
    redeploy, a wrong endpoint or token) and the outside-engine time is blind."""
    window_s = 900 * a.time_scale
    window = duration(window_s)
    interval, at, steps = _covering(a, window_s)
    m = names.ENGINE_SPAN_REQUESTS + "_total"
    lost = f"sum by ({_V}) (increase({selector(m, regex={names.OUTCOME: 'missing|overflow'})}[{window}]))"
    total = f"sum by ({_V}) (increase({m}[{window}]))"
    limit = 0.5
    key: Labels = ((_V, "canary"),)

    def series(joined: int, missing: int) -> tuple[Series, ...]:
        return (Series(selector(m, {_V: "canary", names.OUTCOME: "joined"}), f"0+{joined}x{steps}"),
                Series(selector(m, {_V: "canary", names.OUTCOME: "missing"}), f"0+{missing}x{steps}"),
                Series(selector(m, {_V: "canary", names.OUTCOME: "overflow"}), f"0x{steps}"))

    return Alert(
        name=names.ALERT_ENGINE_SPANS_MISSING, expr=f"{lost}\n/\n({total} > 0)\n> {limit!r}", severity="ticket",
        summary="{{ $labels.version }}: vLLM request spans are not arriving",
        description=("{{ $value | humanizePercentage }} of the requests the proxy forwarded to version "
                     f"{{{{ $labels.version }}}} in the last {window} got no OTLP llm_request span from vLLM "
                     "(sampling.engine_spans): the servers stopped exporting — tracing flags or the exporter's "
                     "endpoint or token — and the time outside the engine is not measured."),
        runbook="engine-spans-missing",
        examples=(Example(f"{names.ALERT_ENGINE_SPANS_MISSING} fires at 90% missing", series(1, 9), at, interval,
                          (Firing(key, 0.9),)),
                  Example(f"{names.ALERT_ENGINE_SPANS_MISSING} quiet at 10% missing", series(9, 1), at, interval)),
    )


def _agreement(a: Alerting, floor: float) -> Alert:
    """The judge's κ against the human-labelled anchors below the floor (a ticket: quality results drift)."""
    interval, at, steps = timing(a, a.limits.leading_for)
    kappa = names.JUDGE_AGREEMENT_KAPPA
    key: Labels = ((names.JUDGE, "judge-model"),)
    low, high = round(floor - 0.3, 3), round(min(1.0, floor + 0.2), 3)
    return Alert(
        name=names.ALERT_JUDGE_AGREEMENT, expr=f"min by ({names.JUDGE}) ({kappa}) < {floor!r}", severity="ticket",
        for_seconds=a.limits.leading_for, summary="LLM judge {{ $labels.judge }} disagrees with the anchors",
        description=(f"Cohen's κ of judge {{{{ $labels.judge }}}} against the human-labelled anchors is "
                     f"{{{{ printf \"%.2f\" $value }}}} (floor {floor:g}): its verdicts, and the golden, live and "
                     f"paired quality results built on them, are not trustworthy until it is fixed."),
        runbook="judge-agreement",
        examples=(Example(f"{names.ALERT_JUDGE_AGREEMENT} fires at κ {low:g}",
                          (Series(selector(kappa, dict(key)), f"{low!r}x{steps}"),), at, interval,
                          (Firing(key, low),)),
                  Example(f"{names.ALERT_JUDGE_AGREEMENT} quiet at κ {high:g}",
                          (Series(selector(kappa, dict(key)), f"{high!r}x{steps}"),), at, interval)),
    )
