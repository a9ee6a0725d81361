"""Leading-indicator warnings and observer self-health alerts, each with its examples (rollout hygiene:
observer.render.hygiene_rules)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from observer import conventions as names
from observer.conventions.promql import one_of, selector
from observer.render.burnrate import duration
from observer.render.engine_rules import corrupted, engine_hung, replica_outlier, restart_storm, shedding
from observer.render.gpu_rules import gpu_health
from observer.render.objectives import Alerting
from observer.render.path_rules import path_ttft
from observer.render.pressure_rules import pressure
from observer.render.rule_timing import covering, threshold, timing
from observer.render.rulemodel import Alert, Example, Firing, Group, Labels, Series
from observer.render.tenant_rules import noisy_neighbour

_V = names.VERSION


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
        threshold(a, name=names.ALERT_QUEUE_DEPTH, metric=names.QUEUE_DEPTH_PER_REPLICA, matchers={},
                   threshold=lim.queue_depth_per_replica, high=lim.queue_depth_per_replica * 1.5,
                   low=lim.queue_depth_per_replica / 2, value_text='{{ printf "%.2f" $value }} waiting '
                   'requests per replica', what="requests queueing", runbook="queue-depth"),
        threshold(a, name=names.ALERT_KV_CACHE, metric=names.KV_CACHE_USAGE, matchers={names.STAT: "max"},
                   threshold=lim.kv_cache_usage, high=round((1 + lim.kv_cache_usage) / 2, 4),
                   low=round(lim.kv_cache_usage / 2, 4), value_text="KV-cache usage {{ $value | "
                   "humanizePercentage }}", what="KV cache nearly full", runbook="kv-cache"),
        threshold(a, name=names.ALERT_GPU_FRAMEBUFFER, metric=names.GPU_FB_USED, matchers={names.STAT: "max"},
                   threshold=lim.gpu_framebuffer_used, high=round((1 + lim.gpu_framebuffer_used) / 2, 4),
                   low=round(lim.gpu_framebuffer_used / 2, 4), value_text="framebuffer used {{ $value | "
                   "humanizePercentage }}", what="GPU framebuffer nearly full", runbook="gpu-framebuffer"),
        Alert(
            # A page: an XID is a driver-reported GPU fault (a fallen-off bus, an ECC page retirement, a
            # reset); the pod's requests fail or return garbage until the GPU is drained.
            name=names.ALERT_GPU_XID, expr=f"increase({xid}[{window}]) > 0", severity="page",
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
    rules += (shedding(a), *gpu_health(a), restart_storm(a), engine_hung(a), corrupted(a), replica_outlier(a),
              path_ttft(a), *pressure(a), noisy_neighbour(a))
    if a.quality_enabled:
        rules += (_probe_failing(a),)
    if a.drift_enabled:
        rules += (_drift_detected(a),)
    return Group(names.RULE_GROUP_LEADING, rules)


def _probe_failing(a: Alerting) -> Alert:
    """Golden replays (the synthetic probe, through whatever URL `fleet.versions[].openai` names: a gateway in
    front of the fleet tests the users' path) get no answer: request errors, not wrong answers."""
    window_s = max(1800.0 * a.time_scale, 2 * a.limits.leading_for)
    window = duration(window_s)
    interval, at, steps = covering(a, window_s)
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
        # A page: a target down for minutes blinds every SLO of its version (their alerts cannot fire).
        Alert(name=names.ALERT_TARGET_DOWN, expr=f"{up} == 0", severity="page", for_seconds=lim.target_down,
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
        if a.canary_hold_after is not None:
            rules.append(_canary_undecided(a, a.canary_hold_after))
    return Group(names.RULE_GROUP_SELF, tuple(rules))


def _canary_undecided(a: Alerting, after: float) -> Alert:
    """A canary that never decides (canary.end.then: hold): its gates hold, so it keeps serving its share until
    a person ends it. The value is how long it has been undecided."""
    interval, at, steps = timing(a, 0.0)
    undecided = names.CANARY_UNDECIDED
    key: Labels = ((names.BASELINE, "stable"), (names.CANARY, "canary"))
    by = f"{names.CANARY}, {names.BASELINE}"
    return Alert(name=names.ALERT_CANARY_UNDECIDED, expr=f"max by ({by}) ({undecided}) > {after!r}",
                 severity="page",
                 summary="Canary {{ $labels.canary }} has not decided for {{ printf \"%.0f\" $value }} s",
                 description=(f"Every look at {{{{ $labels.canary }}}} against {{{{ $labels.baseline }}}} has been "
                              f"inconclusive, nodata or idle for {{{{ printf \"%.0f\" $value }}}} s, over "
                              f"canary.end.after_seconds ({duration(after)}): the gates hold, so the canary keeps "
                              f"its share of traffic until someone promotes or aborts it "
                              f"(canary.end.then: hold)."
                              + (" Why it cannot decide: report_url." if a.canary_report_url else "")),
                 runbook="canary-undecided", report_url=a.canary_report_url,
                 examples=(Example(f"{names.ALERT_CANARY_UNDECIDED} fires past the policy",
                                   (Series(selector(undecided, dict(key)), f"{after + 60:g}x{steps}"),), at,
                                   interval, (Firing(key, after + 60),)),
                           Example(f"{names.ALERT_CANARY_UNDECIDED} quiet while deciding",
                                   (Series(selector(undecided, dict(key)), f"{after / 2:g}x{steps}"),), at,
                                   interval)))


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
    interval, at, steps = covering(a, window_s)
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
