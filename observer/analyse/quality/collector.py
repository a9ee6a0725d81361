"""Prometheus export of quality results, built from a state snapshot at scrape time.

Never NaN: a ratio or mean with no data is absent, and the matching count is exported as zero.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from observer import conventions as names
from observer.analyse.quality.golden import GoldenSet
from observer.analyse.quality.judge import JudgeStats
from observer.analyse.quality.state import QualityState

UNSCORED_REASONS = ("request_error", "judge_error", "scorer_error", "undecided")
JUDGE_OUTCOMES = ("ok", "length", "refusal", "unparseable", "schema", "budget_exhausted", "budget_unavailable",
                  "timeout", "transport", "rate_limited", "server_error", "client_error")


class QualityCollector(Collector):
    """Exports golden-set, live-check and judge metrics per version."""

    def __init__(self, state: QualityState, *, golden_sets: Sequence[GoldenSet], judge_stats: JudgeStats | None,
                 judge_model: str | None, judge_prompt_version: str | None, live_window_s: float,
                 clock: Callable[[], float]) -> None:
        self.state = state
        self.golden_sets = list(golden_sets)
        self.judge_stats = judge_stats
        self.judge_model = judge_model or ""
        self.judge_prompt_version = judge_prompt_version or ""
        self.live_window_s = live_window_s
        self.clock = clock

    def describe(self) -> Iterator[Metric]:
        return iter(())  # families vary with data; nothing to pre-register

    def collect(self) -> Iterator[Metric]:
        snap = self.state.snapshot(live_since=self.clock() - self.live_window_s)
        vg = [names.VERSION, names.GOLDEN_SET]
        ratio = GaugeMetricFamily(names.GOLDEN_PASS_RATIO, "Pass rate of the last completed golden run.", labels=vg)
        mean = GaugeMetricFamily(names.GOLDEN_MEAN_SCORE, "Mean item score (0-1) of the last completed run.",
                                 labels=vg)
        scored = GaugeMetricFamily(names.GOLDEN_SCORED, "Items scored in the last completed run (0: none).",
                                   labels=vg)
        last = GaugeMetricFamily(names.GOLDEN_LAST_RUN, "Unix time the last completed golden run finished.",
                                 labels=vg)
        # Summaries: quantiles of the last completed run, _count/_sum running totals (rate() works on them).
        ttft = SummaryMetricFamily(names.GOLDEN_TTFT, "Client-side TTFT of golden requests (quantiles: last run).",
                                   labels=vg)
        latency = SummaryMetricFamily(names.GOLDEN_LATENCY,
                                      "Client-side latency of golden requests (quantiles: last run).", labels=vg)
        items = CounterMetricFamily(names.GOLDEN_ITEMS, "Golden items scored (SLO total).", labels=vg)
        passed = CounterMetricFamily(names.GOLDEN_ITEMS_PASSED, "Golden items passed (SLO good).", labels=vg)
        jerr = CounterMetricFamily(names.GOLDEN_JUDGE_ERRORS, "Golden items whose judge call failed.", labels=vg)
        unscored = CounterMetricFamily(names.GOLDEN_UNSCORED, "Golden items not scored, by reason.",
                                       labels=[*vg, names.REASON])
        for (version, gs), t in sorted(snap.golden_totals.items()):
            items.add_metric([version, gs], t.items)
            passed.add_metric([version, gs], t.passed)
            jerr.add_metric([version, gs], t.judge_errors)
            for reason in UNSCORED_REASONS:
                unscored.add_metric([version, gs, reason], t.unscored.get(reason, 0))
            labels = {names.VERSION: version, names.GOLDEN_SET: gs}
            ttft.samples.append(Sample(names.GOLDEN_TTFT + "_count", labels, t.ttft_count))
            ttft.samples.append(Sample(names.GOLDEN_TTFT + "_sum", labels, t.ttft_sum))
            latency.samples.append(Sample(names.GOLDEN_LATENCY + "_count", labels, t.latency_count))
            latency.samples.append(Sample(names.GOLDEN_LATENCY + "_sum", labels, t.latency_sum))
            run = snap.golden_latest.get((version, gs))
            scored.add_metric([version, gs], run.scored if run else 0)
            if run is None:
                continue
            if (r := run.pass_ratio) is not None:
                ratio.add_metric([version, gs], r)
            if (m := run.mean_score) is not None:
                mean.add_metric([version, gs], m)
            last.add_metric([version, gs], run.finished)
            for family, kind in ((ttft, "ttft"), (latency, "latency")):
                values = run.latencies(kind)
                if values:
                    for q in names.QUANTILES:
                        family.samples.append(Sample(family.name, {**labels, names.QUANTILE: str(q)},
                                                     float(np.quantile(values, q))))
        yield from (ratio, mean, scored, last, ttft, latency, items, passed, jerr, unscored)
        yield self._info()
        yield from self._live(snap.live)
        yield from self._judge()

    def _info(self) -> Metric:
        info = GaugeMetricFamily(names.GOLDEN_SET_INFO, "Golden set content version and the judge scoring it.",
                                 labels=[names.GOLDEN_SET, names.SET_VERSION, names.JUDGE_MODEL,
                                         names.JUDGE_PROMPT_VERSION])
        for gs in self.golden_sets:
            info.add_metric([gs.name, gs.version, self.judge_model, self.judge_prompt_version], 1)
        return info

    def _live(self, live: dict[tuple[str, str], tuple[int, int, int, int]]) -> Iterator[Metric]:
        vc = [names.VERSION, names.CHECK]
        total = CounterMetricFamily(names.LIVE_CHECKS, "Live samples checked.", labels=vc)
        fails = CounterMetricFamily(names.LIVE_CHECK_FAILURES, "Live samples failing the check.", labels=vc)
        ratio = GaugeMetricFamily(names.LIVE_CHECK_FAILURE_RATIO,
                                  f"Failure ratio of live samples over the last {self.live_window_s:g}s.",
                                  labels=vc)
        for (version, check), (n, f, wn, wf) in sorted(live.items()):
            total.add_metric([version, check], n)
            fails.add_metric([version, check], f)
            if wn:
                ratio.add_metric([version, check], wf / wn)
        yield from (total, fails, ratio)

    def _judge(self) -> Iterator[Metric]:
        if self.judge_stats is None:
            return
        calls = CounterMetricFamily(names.JUDGE_CALLS, "Judge HTTP attempts and verdict outcomes.",
                                    labels=[names.OUTCOME])
        for outcome in JUDGE_OUTCOMES:
            calls.add_metric([outcome], self.judge_stats.calls.get(outcome, 0))
        yield calls
        if self.judge_stats.last_success is not None:
            yield GaugeMetricFamily(names.JUDGE_LAST_SUCCESS, "Unix time of the last usable judge verdict.",
                                    value=self.judge_stats.last_success)
