"""Export the drift state as Prometheus gauges, built from a snapshot on every scrape (no globals)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from observer import conventions as names
from observer.analyse.drift.calibrate import Calibration
from observer.analyse.drift.state import DriftState

STATUSES: tuple[str, ...] = ("ok", "insufficient_data", "no_baseline", "error")


class DriftCollector(Collector):
    """Gauges per version and field, the active baselines as an info metric, and check-error counters."""

    def __init__(self, state: DriftState, *, errors: Callable[[], dict[tuple[str, str], int]],
                 cache_entries: Callable[[], int | None]) -> None:
        self.state = state
        self.errors = errors
        self.cache_entries = cache_entries

    def describe(self) -> Iterator[Metric]:
        return iter(())  # families are known only after a check; nothing to pre-register

    def collect(self) -> Iterator[Metric]:
        vf = [names.VERSION, names.FIELD]
        stat = GaugeMetricFamily(names.DRIFT_STATISTIC, "Drift test statistic (MMD², KS D or chi-square).",
                                 labels=vf)
        pval = GaugeMetricFamily(names.DRIFT_P_VALUE, "Drift test p-value of the latest window.", labels=vf)
        detected = GaugeMetricFamily(names.DRIFT_DETECTED,
                                     "1 when drift persisted over the configured consecutive windows.", labels=vf)
        shifted = GaugeMetricFamily(names.DRIFT_SHIFTED, "1 when the latest window alone is below alpha.",
                                    labels=vf)
        streak = GaugeMetricFamily(names.DRIFT_STREAK, "Consecutive shifted windows against this baseline.",
                                   labels=vf)
        effect = GaugeMetricFamily(names.DRIFT_EFFECT_SIZE, "Effect size of a scalar feature (KS D, Cramér's V).",
                                   labels=vf)
        status = GaugeMetricFamily(names.DRIFT_STATUS, "1 for the field's current drift status.",
                                   labels=[*vf, names.STATUS])
        samples = GaugeMetricFamily(names.DRIFT_SAMPLES, "Samples in the tested window and the baseline.",
                                    labels=[*vf, names.ARM])
        relative = GaugeMetricFamily(names.DRIFT_RELATIVE_EFFECT, "The field's statistic ÷ the 95th percentile of "
                                     "the baseline's own windows against the rest (drift needs drift.min_effect).",
                                     labels=vf)
        needed = GaugeMetricFamily(names.DRIFT_NEEDED, "Shifted windows in a row that flag drift (sized to "
                                   "drift.false_alarms_per_30_days unless drift.consecutive is set).",
                                   labels=[names.VERSION])
        own = GaugeMetricFamily(names.DRIFT_BASELINE_FALSE_ALARM, "Share of the active baseline's own windows its "
                                "test flagged against the rest when it was pinned (field `features`: any scalar "
                                "feature); near alpha on steady traffic.", labels=vf)
        info = GaugeMetricFamily(names.DRIFT_BASELINE_INFO, "Active drift baseline compared against (1).",
                                 labels=[names.VERSION, names.MODEL, names.BASELINE_HASH, names.EMBEDDER])
        last = GaugeMetricFamily(names.DRIFT_LAST_CHECK, "Unix time of the version's last drift check.",
                                 labels=[names.VERSION])
        for version in self.state.versions():
            report = self.state.report(version)
            if report is None:
                continue
            if report.checked_at > 0:
                last.add_metric([version], report.checked_at)
            if report.baseline_hash:
                info.add_metric([version, report.model, report.baseline_hash, report.embedder], 1.0)
            calibration = Calibration.from_json(report.baseline.calibration) if report.baseline else None
            for name in sorted(calibration.flagged) if calibration is not None else ():
                rate = calibration.rate(name) if calibration is not None else None
                if rate is not None:
                    own.add_metric([version, name], rate)
            if report.results:
                needed.add_metric([version], max(r.needed for r in report.results.values()))
            for name, r in sorted(report.results.items()):
                key = [version, name]
                for s in STATUSES:
                    status.add_metric([*key, s], 1.0 if r.status == s else 0.0)
                samples.add_metric([*key, "current"], r.n_current)
                samples.add_metric([*key, "baseline"], r.n_baseline)
                if r.status != "ok":
                    continue  # no verdict: leave statistic/p-value absent rather than export NaN
                if math.isfinite(r.statistic):
                    stat.add_metric(key, r.statistic)
                pval.add_metric(key, r.p_value)
                detected.add_metric(key, 1.0 if r.drift else 0.0)
                shifted.add_metric(key, 1.0 if r.shifted else 0.0)
                streak.add_metric(key, r.streak)
                if r.effect_size is not None:
                    effect.add_metric(key, r.effect_size)
                if r.relative_effect is not None and math.isfinite(r.relative_effect):
                    relative.add_metric(key, r.relative_effect)
        errors = CounterMetricFamily(names.DRIFT_CHECK_ERRORS, "Drift checks that failed, by reason.",
                                     labels=[names.VERSION, names.REASON])
        for (version, reason), n in sorted(self.errors().items()):
            errors.add_metric([version, reason], n)
        yield from (stat, pval, detected, shifted, streak, effect, relative, needed, own, status, samples, info, last,
                    errors)
        entries = self.cache_entries()
        if entries is not None:
            yield GaugeMetricFamily(names.DRIFT_EMBED_CACHE_ENTRIES, "Vectors in the embedding cache.",
                                    value=entries)
