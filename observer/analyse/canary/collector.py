"""Exports the latest canary verdicts as gauges (never NaN) and the judge's own counters."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from observer import conventions as names
from observer.analyse.canary.judge import GAUGE_VALUE, Verdict


class CanaryCollector(Collector):
    """Builds the canary families from a snapshot of the latest verdicts at each scrape."""

    def __init__(self, *, verdicts: Callable[[], Sequence[Verdict]],
                 counters: Callable[[], Mapping[tuple[str, str, str], int]],
                 source_errors: Callable[[], Mapping[tuple[str, str], int]]) -> None:
        self._verdicts = verdicts
        self._counters = counters
        self._source_errors = source_errors

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        pair = [names.CANARY, names.BASELINE]
        verdict = GaugeMetricFamily(names.CANARY_VERDICT, "Canary verdict: 1 pass, 0 inconclusive or nodata, "
                                    "-1 fail.", labels=pair)
        score = GaugeMetricFamily(names.CANARY_SCORE, "Kayenta-style canary score 0-100.", labels=pair)
        metric = GaugeMetricFamily(names.CANARY_METRIC_RESULT, "Per-metric canary result: 1 pass, "
                                   "0 inconclusive or nodata, -1 fail.", labels=[*pair, names.METRIC])
        samples = GaugeMetricFamily(names.CANARY_SAMPLES, "Finished requests per arm in the judged window.",
                                    labels=[*pair, names.ARM])
        critical = GaugeMetricFamily(names.CANARY_CRITICAL_FAILED, "1 when a critical canary metric failed.",
                                     labels=pair)
        last = GaugeMetricFamily(names.CANARY_LAST_EVALUATED, "Unix time of the last canary judgement.",
                                 labels=pair)
        undecided = GaugeMetricFamily(names.CANARY_UNDECIDED, "Seconds the pair has been undecided "
                                      "(inconclusive, nodata, idle); 0 once decided (canary.end).", labels=pair)
        for v in self._verdicts():
            key = [v.canary, v.baseline]
            verdict.add_metric(key, GAUGE_VALUE[v.verdict])
            score.add_metric(key, v.score)
            for r in v.metrics:
                metric.add_metric([*key, r.name], GAUGE_VALUE[r.outcome])
            samples.add_metric([*key, "canary"], float(v.n_canary))
            samples.add_metric([*key, "baseline"], float(v.n_baseline))
            critical.add_metric(key, 1.0 if v.critical_failed else 0.0)
            last.add_metric(key, v.evaluated_at)
            undecided.add_metric(key, v.undecided_seconds)
        evaluations = CounterMetricFamily(names.CANARY_EVALUATIONS, "Canary judgements by outcome "
                                          "(pass, fail, inconclusive, nodata, error).",
                                          labels=[*pair, names.OUTCOME])
        for (c, b, outcome), n in sorted(self._counters().items()):
            evaluations.add_metric([c, b, outcome], float(n))
        errors = CounterMetricFamily(names.CANARY_SOURCE_ERRORS, "Judgements whose data source could not "
                                     "answer (the verdict was nodata).", labels=pair)
        for (c, b), n in sorted(self._source_errors().items()):
            errors.add_metric([c, b], float(n))
        yield from (verdict, score, metric, samples, critical, last, undecided, evaluations, errors)
