"""The own source: the observer's SignalStore, quality, pair, drift and cost services, in process."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

from observer import conventions as names
from observer.analyse.canary.judge import ArmData, DriftObservation, PairCounts
from observer.analyse.canary.sources.base import (
    CostReader,
    DriftReader,
    FeedbackReader,
    PairsReader,
    QualityReader,
    SignalsReader,
    as_finished,
    needs,
    paired_counts,
)
from observer.collect.model import Histogram
from observer.collect.vllm import ENGINE_ARGS, MAX_ENGINE_ARGS_CHARS
from observer.config.canary import CanaryMetricSpec
from observer.conventions import routers, vllm
from observer.conventions.latency import LATENCY
from observer.conventions.vllm import LatencyId


class OwnSource:
    """The observer's own scrapes (contract 2), quality (5) and drift (6) services; any may be absent."""

    name = "own"

    def __init__(self, *, signals: SignalsReader | None, quality: QualityReader | None = None,
                 drift: DriftReader | None = None, slice_seconds: float = 60.0, cost: CostReader | None = None,
                 pairs: PairsReader | None = None, feedback: FeedbackReader | None = None) -> None:
        self.signals = signals
        self.feedback = feedback
        self.pairs = pairs
        self.quality = quality
        self.drift = drift
        self.slice_seconds = slice_seconds
        self.cost = cost

    async def arm(self, version: str, metrics: Sequence[CanaryMetricSpec], *, since: float, now: float,
                  with_drift: bool) -> ArmData:
        """Read `version`'s window from the in-process services."""
        return await asyncio.to_thread(self._arm, version, metrics, since, with_drift, now)

    def _slices(self, version: str, families: set[LatencyId], checks: set[str], since: float, now: float
                ) -> tuple[ArmData, ...]:
        assert self.signals is not None
        raw = self.signals.slices(version, since=since, until=now, step=self.slice_seconds,
                                  histograms=[LATENCY[f].vllm for f in sorted(families)],
                                  labelled=[vllm.REQUEST_SUCCESS, vllm.HTTP_STATUS, vllm.ADMISSION_REJECTIONS,
                                            vllm.SPEC_DECODE, vllm.CORRUPTION, routers.REQUESTS])
        raw = raw or ()
        edges = [st.start for st in raw] + [raw[-1].end] if raw else []  # consecutive slices
        per_check = {} if self.quality is None else {
            c: self.quality.live_check_slices(version, c, edges=edges) for c in sorted(checks)}
        out = []
        for i, st in enumerate(raw):
            req, http = st.labelled.get(vllm.REQUEST_SUCCESS), st.labelled.get(vllm.HTTP_STATUS)
            if req is None:
                req = as_finished(st.labelled.get(routers.REQUESTS))
            live = {c: counts[i] for c, counts in per_check.items()}
            rejected = st.labelled.get(vllm.ADMISSION_REJECTIONS)
            spec = st.labelled.get(vllm.SPEC_DECODE)
            corrupted = st.labelled.get(vllm.CORRUPTION)
            out.append(ArmData(requests=None if req is None else {str(k): float(x) for k, x in req.items()},
                               http_status=None if http is None else {str(k): float(x) for k, x in http.items()},
                               admission_rejections=None if rejected is None else float(sum(rejected.values())),
                               spec_decode=None if spec is None else {str(k): float(x) for k, x in spec.items()},
                               corrupted=None if corrupted is None else float(sum(corrupted.values())),
                               histograms={f: st.histograms[LATENCY[f].vllm] for f in sorted(families)
                                           if LATENCY[f].vllm in st.histograms},
                               live_checks=live))
        return tuple(out)

    def _arm(self, version: str, metrics: Sequence[CanaryMetricSpec], since: float, with_drift: bool,
             now: float) -> ArmData:
        families, golden_sets, checks, fields = needs(metrics)
        if self.signals is None:
            return ArmData(note="no scrape signals in this observer (collect area disabled)")
        raw = self.signals.labelled_counter_delta(version, vllm.REQUEST_SUCCESS, since=since)
        routed = raw is None  # no vLLM series under this version's model name (an adapter): the router's counts
        if routed:
            raw = as_finished(self.signals.labelled_counter_delta(version, routers.REQUESTS, since=since))
        requests = None if raw is None else {str(k): float(v) for k, v in raw.items()}
        http = self.signals.labelled_counter_delta(version, vllm.HTTP_STATUS, since=since)
        rejected = self.signals.labelled_counter_delta(version, vllm.ADMISSION_REJECTIONS, since=since)
        spec = self.signals.labelled_counter_delta(version, vllm.SPEC_DECODE, since=since)
        corrupted = self.signals.labelled_counter_delta(version, vllm.CORRUPTION, since=since)
        hists: dict[str, Histogram] = {}
        for fam in sorted(families):
            h = self.signals.histogram_delta(version, LATENCY[fam].vllm, since=since)
            if h is not None:
                hists[fam] = h
        golden: dict[str, tuple[int, int]] = {}
        golden_errors: dict[str, int] = {}
        live: dict[str, tuple[int, int]] = {}
        if self.quality is not None:
            for gs in sorted(golden_sets):
                passed, scored = self.quality.golden_totals(version, since=since, golden_set=gs or None)
                golden[gs] = (int(passed), int(scored))
                golden_errors[gs] = int(self.quality.golden_judge_errors(version, since=since, golden_set=gs or None))
            for check in sorted(checks):
                failures, total = self.quality.live_check_totals(version, check, since=since)
                live[check] = (int(failures), int(total))
        drift: dict[str, DriftObservation] = {}
        if with_drift and self.drift is not None and fields:
            for key, r in (self.drift.latest(version) or {}).items():
                if key in fields:
                    drift[key] = DriftObservation(drift=bool(r.drift), status=str(r.status),
                                                  p_value=_num(r.p_value), statistic=_num(r.statistic),
                                                  n_current=int(r.n_current))
        latest = self.signals.latest(version)
        slices = self._slices(version, families, checks, since, now) if now > since else ()
        cost = None
        if self.cost is not None and any(m.kind == "cost" for m in metrics):
            cost = self.cost.cost_per_million_tokens(version, since=since)
        paired_checks = {m.paired_check for m in metrics if m.kind == "paired"}
        paired: dict[str, PairCounts] = {}
        note, identity = "", dict[str, str]()
        if paired_checks and self.pairs is None:
            note = "shadow replay is off (quality.shadow.enabled, sampling store)"
        elif paired_checks and self.pairs is not None:
            outcomes, note, identity = self.pairs.paired_outcomes(version, since=since)
            paired = paired_counts(outcomes, paired_checks)
        feedback = self.feedback.window(version, since=since, now=now, step=self.slice_seconds) \
            if self.feedback is not None and any(m.kind == "feedback" for m in metrics) and now > since else None
        return ArmData(requests=requests, histograms=hists, golden=golden, live_checks=live, drift=drift,
                       golden_judge_errors=golden_errors, feedback=feedback,
                       http_status=None if http is None else {str(k): float(v) for k, v in http.items()},
                       slices=slices, replicas=None if latest is None else latest.replicas_up,
                       prefix_cache_hit_ratio=None if latest is None else latest.prefix_cache_hit_ratio,
                       environment=environment(self.signals, version), cost_per_million_tokens=cost, paired=paired,
                       paired_note=note, judge_identity=identity,
                       admission_rejections=None if rejected is None else max(0.0, float(sum(rejected.values()))),
                       spec_decode=None if spec is None else {str(k): max(0.0, float(x)) for k, x in spec.items()},
                       corrupted=None if corrupted is None else max(0.0, float(sum(corrupted.values()))),
                       replicas_in_state={} if latest is None else dict(latest.replicas_in_state),
                       router_trouble=latest.router_trouble if latest is not None and latest.router_trouble_at
                       is not None and latest.router_trouble_at >= since else "",
                       routed_requests=routed and requests is not None)


MAX_FACT_CHARS = 160
"""Characters of an engine version or weights fact (a label value of VERSION_ENVIRONMENT)."""


def environment(signals: SignalsReader, version: str) -> dict[str, str]:
    """The fairness facts the scrapes give: GPU model(s) and driver(s) from DCGM labels, the engine's cache
    settings from vLLM's cache_config_info, its release from /version and its weights from /v1/models. The own
    source judges with them and the exporter publishes them (VERSION_ENVIRONMENT), so fleet mode judges with the
    same facts."""
    out = {}
    latest = signals.latest(version)
    gpu = None if latest is None else latest.gpu
    if gpu is not None and gpu.models:
        out[names.GPU_MODEL] = ",".join(gpu.models)
    if gpu is not None and gpu.drivers:
        out[names.GPU_DRIVER] = ",".join(gpu.drivers)
    served = signals.served_models(version).values()
    args = sorted({info[ENGINE_ARGS] for info in served if ENGINE_ARGS in info})
    if args:
        out[names.ENGINE_ARGS] = " | ".join(args)[:MAX_ENGINE_ARGS_CHARS]
    # The engine's release and the weights it loaded: shown beside the arms, and the release compared (a canary
    # that upgrades vLLM under the same weights is an engine rollout, judged as one only on purpose).
    for key, field in ((names.ENGINE_VERSION, names.ENGINE_VERSION), (names.WEIGHTS, "root")):
        values = sorted({str(info[field]) for info in served if info.get(field) and info[field] != "unknown"})
        if values:
            out[key] = ",".join(values)[:MAX_FACT_CHARS]
    return out


def _num(x: object) -> float | None:
    if isinstance(x, int | float) and math.isfinite(float(x)):
        return float(x)
    return None
