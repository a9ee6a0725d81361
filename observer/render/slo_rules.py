"""SLO rules: SLI error-ratio recordings, multi-window multi-burn-rate alerts and absent-data guards.

Rules read only the observer's normalised, accumulated series (monotonic across pod restarts), so
`vllm:` vs `vllm_` spelling and counter resets are handled upstream by the observer's parser.
"""

from __future__ import annotations

from observer import conventions as names
from observer.conventions.promql import one_of, selector
from observer.render.burnrate import PAGE, RECORDED_WINDOWS, TIERS, Tier, duration
from observer.render.objectives import Alerting, Objective, SliKind
from observer.render.rule_timing import example_interval
from observer.render.rulemodel import Alert, Example, Firing, Group, Recording, Rule, Series

EVENTS = 10_000  # events per test interval in the generated promtool scenarios
PROMTOOL_MINUTES = 60  # "for an hour"

_HIST_TITLE = {names.HIST_TTFT: "TTFT", names.HIST_ITL: "inter-token latency", names.HIST_E2E: "e2e latency",
               names.HIST_QUEUE: "queue time"}


def record_name(window_seconds: float) -> str:
    """The recording-rule name of the SLI error ratio over a nominal (unscaled) window."""
    return f"{names.RULE_SLI_ERROR_RATIO}{duration(window_seconds)}"


def error_ratio(o: Objective, window: str) -> str:
    """PromQL of the SLI error ratio (bad / total events) per version over `window`.

    The denominator is filtered with `> 0`: a window without events has no ratio (absent), never NaN.
    A NaN sample would poison every later `avg_over_time` over the period (the error-budget panel) and
    can never burn a budget anyway."""
    by = f"sum by ({names.VERSION})"
    versions = {names.VERSION: one_of(o.versions)}
    if o.kind is SliKind.LATENCY:
        total = f"{by} (rate({selector(o.histogram + '_count', regex=versions)}[{window}]))"
        good = f"{by} (rate({selector(o.histogram + '_bucket', {names.LE: o.le}, regex=versions)}[{window}]))"
        return f"(\n  {total}\n  -\n  {good}\n)\n/\n({total} > 0)"
    if o.kind is SliKind.AVAILABILITY:
        requests = names.REQUESTS + "_total"
        total = f"{by} (rate({selector(requests, regex=versions)}[{window}]))"
        bad = f"{by} (rate({selector(requests, regex={**versions, names.FINISHED_REASON: one_of(o.error_reasons)})}" \
              f"[{window}]))"
        http5xx = selector(names.HTTP_RESPONSES + "_total", {names.HTTP_STATUS_CLASS: "5xx"}, regex=versions)
        http5 = f"{by} (rate({http5xx}[{window}]))"
        # No error series at all means no errors: `or total * 0` keeps the ratio at 0, not absent. Generation
        # 5xx beyond the error finishes are failed requests the engine never finished (vLLM < 0.13 has no
        # `error` reason): clamp_min(5xx − errors, 0) goes into both sides, so one failure seen twice counts once.
        errors = f"({bad}\n  or\n  {total} * 0)"
        failed = f"{by} (rate({selector(requests, {names.FINISHED_REASON: 'error'}, regex=versions)}[{window}]))"
        extra = f"(clamp_min({http5} - ({failed} or {total} * 0), 0)\n  or\n  {total} * 0)"
        return f"(\n  {errors}\n  +\n  {extra}\n)\n/\n(({total} + {extra}) > 0)"
    if o.kind is SliKind.GOODPUT:
        return goodput_bad_ratio(o, window)
    if o.kind is SliKind.CLIENT:
        proxied = o.counter + "_total"
        total = f"{by} (rate({selector(proxied, regex=versions, exclude={names.CODE: '499'})}[{window}]))"
        bad = f"{by} (rate({selector(proxied, regex={**versions, names.CODE: '|'.join(o.error_codes)})}[{window}]))"
        return _bad_share(bad, total)
    if o.kind is SliKind.LIVE:
        eq = {names.CHECK: o.check}
        total = f"{by} (rate({selector(names.LIVE_CHECKS + '_total', eq, regex=versions)}[{window}]))"
        return _bad_share(f"{by} (rate({selector(names.LIVE_CHECK_FAILURES + '_total', eq, regex=versions)}"
                          f"[{window}]))", total)
    eq = {names.GOLDEN_SET: o.golden_set} if o.golden_set else {}
    total = f"{by} (rate({selector(names.GOLDEN_ITEMS + '_total', eq, regex=versions)}[{window}]))"
    passed = f"{by} (rate({selector(names.GOLDEN_ITEMS_PASSED + '_total', eq, regex=versions)}[{window}]))"
    return f"(\n  {total}\n  -\n  (\n    {passed}\n    or\n    {total} * 0\n  )\n)\n/\n({total} > 0)"


def _bad_share(bad: str, total: str) -> str:
    """bad ÷ total, 0 (not absent) when no bad series exists, absent when there were no events."""
    return f"(\n  {bad}\n  or\n  {total} * 0\n)\n/\n({total} > 0)"


def _latency_bad(histogram: str, le: str, versions: dict[str, str], window: str) -> str:
    by = f"sum by ({names.VERSION})"
    total = f"{by} (rate({selector(histogram + '_count', regex=versions)}[{window}]))"
    good = f"{by} (rate({selector(histogram + '_bucket', {names.LE: le}, regex=versions)}[{window}]))"
    return f"(({total} - {good}) / ({total} > 0))"


def goodput_bad_ratio(o: Objective, window: str) -> str:
    """PromQL of the goodput SLI's bad ratio: the union bound TTFT-bad + TPOT-bad + failed, capped at 1.

    TPOT is vLLM's per-request histogram (≥ 0.11; older releases have only per-step inter-token latency,
    which says nothing per request): without it the SLI is absent and its absent guard names the TPOT
    bucket. Absent too when there were no requests."""
    versions = {names.VERSION: one_of(o.versions)}
    by = f"sum by ({names.VERSION})"
    requests = names.REQUESTS + "_total"
    total = f"{by} (rate({selector(requests, regex=versions)}[{window}]))"
    failed = f"{by} (rate({selector(requests, regex={**versions, names.FINISHED_REASON: one_of(o.error_reasons)})}"
    failed_ratio = f"((\n    {failed}[{window}]))\n    or\n    {total} * 0\n  )\n  /\n  ({total} > 0))"
    tpot = _latency_bad(names.HIST_TPOT, o.tpot_le, versions, window)
    return (f"clamp_max(\n  {_latency_bad(o.histogram, o.le, versions, window)}\n  +\n  {tpot}\n  +\n  "
            f"{failed_ratio},\n  1\n)")


def _what(o: Objective) -> tuple[str, str]:
    """(what the SLO promises, what a bad event is) in words."""
    pct = f"{o.objective * 100:g}%"
    if o.kind is SliKind.LATENCY:
        title = _HIST_TITLE.get(o.histogram, o.histogram)
        return (f"{pct} of requests with {title} ≤ {o.threshold_seconds:g}s",
                f"of requests had {title} over {o.threshold_seconds:g}s")
    if o.kind is SliKind.AVAILABILITY:
        reasons = "/".join(o.error_reasons)
        return f"{pct} of requests finish without {reasons}", f"of requests finished with {reasons}"
    if o.kind is SliKind.GOODPUT:
        return (f"{pct} of requests with TTFT ≤ {o.threshold_seconds:g}s, time per output token ≤ "
                f"{o.tpot_threshold_seconds:g}s and no {'/'.join(o.error_reasons)}",
                "of requests missed a goodput target (union bound over TTFT, TPOT and failures)")
    if o.kind is SliKind.CLIENT:
        what = "probe requests" if o.counter == names.PROBE_REQUESTS else "proxied requests"
        return (f"{pct} of {what} answered without HTTP {'/'.join(o.error_codes)} (client side)",
                f"of {what} answered HTTP {'/'.join(o.error_codes)}")
    if o.kind is SliKind.LIVE:
        return (f"{pct} of sampled live outputs pass the {o.check} check",
                f"of sampled live outputs failed the {o.check} check")
    return f"{pct} of golden-set items pass", "of golden-set items failed"


def _burn_alert(a: Alerting, o: Objective, tier: Tier) -> Alert:
    slo_match = f'{{{names.SLO}="{o.name}"}}'
    budget = f"(1 - {o.objective!r})"
    clauses = []
    words = []
    for pair in tier.pairs:
        factor = pair.factor(a.period_seconds)
        long_rec, short_rec = record_name(pair.long_seconds), record_name(pair.short_seconds)
        clauses.append(f"(\n  {long_rec}{slo_match} > ({factor:g} * {budget})\n  and\n"
                       f"  {short_rec}{slo_match} > ({factor:g} * {budget})\n)")
        words.append(f"{factor:g}× over {duration(pair.long_seconds * a.time_scale)} and "
                     f"{duration(pair.short_seconds * a.time_scale)}")
    promise, bad = _what(o)
    speed = "fast" if tier is PAGE else "slowly"
    name = names.ALERT_BURN_PAGE if tier is PAGE else names.ALERT_BURN_TICKET
    return Alert(
        name=name, expr="\nor\n".join(clauses), severity=o.page_severity if tier is PAGE else tier.severity,
        owner=o.owner,
        labels=((names.SLI, o.kind.value), (names.SLO, o.name)),
        keep_firing_seconds=tier.keep_firing_seconds * a.time_scale if a.keep_firing else 0.0,
        summary=f"{{{{ $labels.version }}}}: SLO {{{{ $labels.slo }}}} is burning its error budget {speed}",
        description=(f"Version {{{{ $labels.version }}}} burns the error budget of SLO {{{{ $labels.slo }}}} "
                     f"({promise}, over {a.period_seconds / 86400:g}d): {{{{ $value | humanizePercentage }}}} "
                     f"{bad} over the alert's long window. Fires at {', or '.join(words)} the budget "
                     f"rate (error budget {o.budget * 100:.4g}%)."),
        runbook=f"slo-{o.kind.value}", examples=_burn_examples(a, o, tier),
    )


def _scenario_series(o: Objective, version: str, bad: int, steps: int) -> tuple[Series, ...]:
    good = EVENTS - bad
    base = {names.VERSION: version, names.MODEL: "m"}
    if o.kind is SliKind.LATENCY:
        return (Series(selector(o.histogram + "_bucket", {**base, names.LE: o.le}), f"0+{good}x{steps}"),
                Series(selector(o.histogram + "_bucket", {**base, names.LE: "+Inf"}), f"0+{EVENTS}x{steps}"),
                Series(selector(o.histogram + "_count", base), f"0+{EVENTS}x{steps}"))
    if o.kind is SliKind.GOODPUT:  # the bad requests stream slowly (TPOT); TTFT and failures are fine
        return (Series(selector(o.histogram + "_bucket", {**base, names.LE: o.le}), f"0+{EVENTS}x{steps}"),
                Series(selector(o.histogram + "_count", base), f"0+{EVENTS}x{steps}"),
                Series(selector(names.HIST_TPOT + "_bucket", {**base, names.LE: o.tpot_le}), f"0+{good}x{steps}"),
                Series(selector(names.HIST_TPOT + "_count", base), f"0+{EVENTS}x{steps}"),
                Series(selector(names.REQUESTS + "_total", {**base, names.FINISHED_REASON: "stop"}),
                       f"0+{EVENTS}x{steps}"))
    if o.kind is SliKind.CLIENT:
        proxied = o.counter + "_total"
        return (Series(selector(proxied, {names.VERSION: version, names.CODE: "200"}), f"0+{good}x{steps}"),
                Series(selector(proxied, {names.VERSION: version, names.CODE: "504"}), f"0+{bad}x{steps}"),
                Series(selector(proxied, {names.VERSION: version, names.CODE: "499"}), f"0+{EVENTS}x{steps}"))
    if o.kind is SliKind.LIVE:
        lbase = {names.VERSION: version, names.CHECK: o.check}
        return (Series(selector(names.LIVE_CHECKS + "_total", lbase), f"0+{EVENTS}x{steps}"),
                Series(selector(names.LIVE_CHECK_FAILURES + "_total", lbase), f"0+{bad}x{steps}"))
    if o.kind is SliKind.AVAILABILITY:
        req, http = names.REQUESTS + "_total", names.HTTP_RESPONSES + "_total"
        # Half the failures finish with an error reason and answer 5xx (counted once), half are 5xx only
        # (vLLM < 0.13, or refused before the engine).
        finished_bad = bad // 2
        out = [Series(selector(req, {**base, names.FINISHED_REASON: "stop"}), f"0+{good}x{steps}"),
               Series(selector(req, {**base, names.FINISHED_REASON: o.error_reasons[0]}), f"0+{finished_bad}x{steps}"),
               Series(selector(http, {**base, names.HTTP_STATUS_CLASS: "2xx"}), f"0+{good}x{steps}"),
               Series(selector(http, {**base, names.HTTP_STATUS_CLASS: "5xx"}),
                      f"0+{bad if o.error_reasons[0] == 'error' else bad - finished_bad}x{steps}")]
        out += [Series(selector(req, {**base, names.FINISHED_REASON: r}), f"0+0x{steps}")
                for r in o.error_reasons[1:]]
        return tuple(out)
    gbase = {names.VERSION: version, names.GOLDEN_SET: o.golden_set or "default"}
    return (Series(selector(names.GOLDEN_ITEMS + "_total", gbase), f"0+{EVENTS}x{steps}"),
            Series(selector(names.GOLDEN_ITEMS_PASSED + "_total", gbase), f"0+{good}x{steps}"))


def scenario_ratios(o: Objective, period_seconds: float) -> dict[str, float]:
    """Bad-event ratios of the generated tests: 'high' pages, 'mid' tickets only, 'low' is quiet."""
    b = o.budget
    page_min = min(p.factor(period_seconds) for p in PAGE.pairs)
    page_max = max(p.factor(period_seconds) for p in PAGE.pairs)
    out: dict[str, float] = {"low": 0.5 * b}
    if page_min * b < 1:
        out["high"] = min(50 * b, (1 + page_max * b) / 2) if page_max * b < 1 else (1 + page_min * b) / 2
    if 5 * b < 1:
        out["mid"] = 5 * b
    return out


def _burn_examples(a: Alerting, o: Objective, tier: Tier) -> tuple[Example, ...]:
    version = o.versions[0]
    interval = 60.0 * a.time_scale
    labels = ((names.SLI, o.kind.value), (names.SLO, o.name), (names.VERSION, version))
    out = []
    for scenario, ratio in sorted(scenario_ratios(o, a.period_seconds).items()):
        bad = round(ratio * EVENTS)
        fires = (tier is PAGE and scenario == "high") or (tier is not PAGE and scenario in ("high", "mid"))
        out.append(Example(
            name=f"{o.name} {version}: {bad / EVENTS:.4%} bad for {PROMTOOL_MINUTES}m ({scenario})",
            series=_scenario_series(o, version, bad, PROMTOOL_MINUTES),
            eval_seconds=PROMTOOL_MINUTES * interval, interval_seconds=interval,
            fires=(Firing(labels, bad / EVENTS),) if fires else ()))
    return tuple(out)


def _absent_target(a: Alerting, o: Objective, version: str) -> tuple[str, dict[str, str], str, float]:
    """(metric, equality matchers, words, for) of the absent guard of `o` for `version`."""
    if o.kind is SliKind.LATENCY:
        # Selecting the threshold bucket catches both a removed histogram and a changed bucket edge.
        return (o.histogram + "_bucket", {names.VERSION: version, names.LE: o.le},
                f'bucket le="{o.le}" of {o.histogram}', a.limits.absent_for)
    if o.kind is SliKind.GOODPUT:  # TPOT: per request, vLLM ≥ 0.11 (the TTFT bucket has its latency guard)
        return (names.HIST_TPOT + "_bucket", {names.VERSION: version, names.LE: o.tpot_le},
                f'bucket le="{o.tpot_le}" of {names.HIST_TPOT} (vLLM ≥ 0.11)', a.limits.absent_for)
    if o.kind is SliKind.AVAILABILITY:
        metric = names.REQUESTS + "_total"
        return metric, {names.VERSION: version}, metric, a.limits.absent_for
    if o.kind is SliKind.CLIENT:
        metric = o.counter + "_total"
        source = "the synthetic probe" if o.counter == names.PROBE_REQUESTS else "the sampling proxy"
        return metric, {names.VERSION: version}, f"{metric} ({source})", a.limits.absent_for
    if o.kind is SliKind.LIVE:  # live counters appear at the first scoring pass after a restart
        metric = names.LIVE_CHECKS + "_total"
        return (metric, {names.VERSION: version, names.CHECK: o.check}, f'{metric}{{check="{o.check}"}}',
                max(a.limits.absent_for, 3600.0 * a.time_scale))
    metric = names.GOLDEN_ITEMS + "_total"
    matchers = {names.VERSION: version, **({names.GOLDEN_SET: o.golden_set} if o.golden_set else {})}
    # Golden counters reappear only at the first golden run after an observer restart.
    return metric, matchers, metric, max(a.limits.absent_for, a.limits.golden_stale)


def _present_series(o: Objective, version: str, steps: int) -> tuple[Series, ...]:
    """Series that keep the absent guard of `o` for `version` quiet."""
    base = {names.VERSION: version, names.MODEL: "m"}
    if o.kind is SliKind.GOODPUT:
        return (Series(selector(names.HIST_TPOT + "_bucket", {**base, names.LE: o.tpot_le}), f"0+9x{steps}"),
                Series(selector(names.HIST_TPOT + "_count", base), f"0+10x{steps}"))
    if o.kind is SliKind.LATENCY:
        return (Series(selector(o.histogram + "_bucket", {**base, names.LE: o.le}), f"0+9x{steps}"),
                Series(selector(o.histogram + "_count", base), f"0+10x{steps}"))
    if o.kind is SliKind.AVAILABILITY:
        return (Series(selector(names.REQUESTS + "_total", {**base, names.FINISHED_REASON: "stop"}),
                       f"0+10x{steps}"),)
    if o.kind is SliKind.CLIENT:
        return (Series(selector(o.counter + "_total", {names.VERSION: version, names.CODE: "200"}),
                       f"0+10x{steps}"),)
    if o.kind is SliKind.LIVE:
        return (Series(selector(names.LIVE_CHECKS + "_total", {names.VERSION: version, names.CHECK: o.check}),
                       f"0+10x{steps}"),)
    return (Series(selector(names.GOLDEN_ITEMS + "_total",
                            {names.VERSION: version, names.GOLDEN_SET: o.golden_set or "default"}),
                   f"0+10x{steps}"),)


def absent_group(a: Alerting) -> Group:
    """One absent-data guard per SLO and version, so a missing or renamed SLI series pages."""
    guards = [(o, v, *_absent_target(a, o, v)) for o in a.objectives for v in o.versions]
    if not guards:
        return Group(names.RULE_GROUP_ABSENT, ())
    interval = example_interval(a, max(g[5] for g in guards))
    steps = round(max(g[5] for g in guards) / interval) + 3
    at = steps * interval

    def firing(o: Objective, matchers: dict[str, str]) -> Firing:
        static = ((names.SLI, o.kind.value), (names.SLO, o.name), (names.VERSION, matchers[names.VERSION]))
        return Firing(tuple(sorted(matchers.items())), 1.0, static)

    # Examples hold for the whole alert name: every guard that fires in a scenario must be listed.
    decoy = Series(selector("up", {names.JOB: a.observer_job, "instance": "observer:9464"}), f"1x{steps}")
    examples = [Example("every SLI series missing", (decoy,), at, interval,
                        tuple(firing(g[0], g[3]) for g in guards))]
    for o in a.objectives:
        v = o.versions[0]
        _, matchers, words, _ = _absent_target(a, o, v)
        series = tuple(s for (o2, v2, *_rest) in guards if (o2, v2) != (o, v)
                       for s in _present_series(o2, v2, steps))
        if o.kind in (SliKind.LATENCY, SliKind.GOODPUT):  # the histogram stays, only the threshold bucket goes
            series += (_present_series(o, v, steps)[1],)
        examples.append(Example(f"{o.name} {v}: {words} removed", series, at, interval, (firing(o, matchers),)))
    rules = []
    for i, (o, v, metric, matchers, words, for_s) in enumerate(guards):
        rules.append(Alert(
            # Routed as the SLO's fast burn is: a page, but a ticket for quality and live-check SLOs, whose
            # series come hours apart and whose absence is not worth waking someone for.
            name=names.ALERT_SLI_ABSENT, expr=f"absent({selector(metric, matchers)})", severity=o.page_severity,
            for_seconds=for_s, labels=((names.SLI, o.kind.value), (names.SLO, o.name), (names.VERSION, v)),
            summary=f"{{{{ $labels.version }}}}: SLI series of SLO {o.name} missing",
            description=(f"No series {words} for version {{{{ $labels.version }}}} for {duration(for_s)} "
                         f"(absent = {{{{ printf \"%.0f\" $value }}}}): "
                         f"SLO {o.name} cannot be computed and its burn-rate alerts cannot fire. A metric was "
                         f"renamed or removed, the bucket edge changed, or the observer stopped exporting it."),
            runbook="sli-absent", examples=tuple(examples) if i == 0 else (), owner=o.owner))
    return Group(names.RULE_GROUP_ABSENT, tuple(rules))


def slo_group(a: Alerting, o: Objective) -> Group:
    """The group of one SLO: error-ratio recordings, objective, then both burn-rate tiers."""
    rules: list[Rule] = []
    labels = ((names.SLI, o.kind.value), (names.SLO, o.name))
    for window in RECORDED_WINDOWS:
        rules.append(Recording(record_name(window), error_ratio(o, duration(window * a.time_scale)), labels))
    rules.append(Recording(names.RULE_SLO_OBJECTIVE, f"vector({o.objective!r})", labels))
    rules.extend(_burn_alert(a, o, tier) for tier in TIERS)
    return Group(names.RULE_GROUP_SLO + o.name, tuple(rules))


def slo_groups(a: Alerting) -> list[Group]:
    """One group per SLO, then the absent-data guards of every SLO."""
    return [*(slo_group(a, o) for o in a.objectives), absent_group(a)]
