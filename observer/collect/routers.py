"""Router expositions (llm-d's endpoint picker, Dynamo's frontend) normalised per routed model.

Each model the router names becomes a ModelMetrics under the router keys of observer.conventions.routers (its TTFT
histogram, requests by outcome, requests held at the router), so the store folds them into running totals like a
vLLM target's. A family written under today's name and its deprecated twin is read once, from today's name. Pool
gauges (llm-d's flow-control saturation and stale endpoints) describe the whole router and apply to every model it
routes.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

from observer.collect.model import ModelMetrics, RouterScrape
from observer.collect.promtext import Family, Sample, parse
from observer.collect.vllm import histogram_from_buckets
from observer.conventions import routers as r
from observer.errors import SampleLimitError


def _base(name: str) -> str:
    return name[: -len("_total")] if name.endswith("_total") else name


def _pick(by_name: dict[str, Family], names: Sequence[str]) -> tuple[Family | None, int]:
    """The first of `names` that is exposed (today's name before the deprecated one), and how many twins were
    exposed beside it and skipped."""
    present = [by_name[_base(n)] for n in names if _base(n) in by_name]
    return (present[0] if present else None), max(0, len(present) - 1)


def _label(s: Sample, name: str) -> str | None:
    return next((v for k, v in s.labels if k == name), None)


def _model(s: Sample, labels: Sequence[str]) -> str | None:
    return next((v for name in labels if (v := _label(s, name))), None)


class _Acc:
    def __init__(self, max_models: int | None) -> None:
        self.max_models = max_models
        self.buckets: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.sums: dict[str, float] = defaultdict(float)
        self.counts: dict[str, float] = defaultdict(float)
        self.outcomes: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.queued: dict[str, float] = defaultdict(float)

    def check(self, model: str) -> None:
        known = set(self.buckets) | set(self.outcomes) | set(self.queued)
        if self.max_models is not None and model not in known and len(known) >= self.max_models:
            raise SampleLimitError(f"more than {self.max_models} routed models (scrape.max_models_per_target)")

    def histogram(self, fam: Family, labels: Sequence[str]) -> None:
        for s in fam.samples:
            model = _model(s, labels)
            if model is None or not math.isfinite(s.value):
                continue
            self.check(model)
            if s.name.endswith("_bucket"):
                le = _label(s, "le")
                if le is not None:
                    self.buckets[model][le] += s.value
            elif s.name.endswith("_sum"):
                self.sums[model] += s.value
            elif s.name.endswith("_count"):
                self.counts[model] += s.value

    def counter(self, fam: Family, labels: Sequence[str], outcome: str | None, *, status: str | None = None) -> None:
        for s in fam.samples:
            model = _model(s, labels)
            if model is None or s.name.endswith("_created") or not math.isfinite(s.value):
                continue
            self.check(model)
            key = outcome or ("ok" if (_label(s, status or "") or "") in ("success", "ok", "200") else "error")
            self.outcomes[model][key] += s.value

    def gauge(self, fam: Family, labels: Sequence[str]) -> None:
        for s in fam.samples:
            model = _model(s, labels)
            if model is not None and math.isfinite(s.value):
                self.check(model)
                self.queued[model] += s.value

    def models(self) -> dict[str, ModelMetrics]:
        out = {}
        for model in set(self.buckets) | set(self.outcomes) | set(self.queued):
            hists = {}
            h = histogram_from_buckets(self.buckets.get(model, {}), self.sums.get(model, 0.0),
                                       self.counts.get(model, 0.0))
            if h is not None:
                hists[r.TTFT] = h
            outcomes = self.outcomes.get(model)
            if outcomes is not None and "ok" in outcomes and "error" in outcomes:
                outcomes = {"ok": outcomes["ok"] - outcomes["error"], "error": outcomes["error"]}  # EPP: total ⊇ errors
            out[model] = ModelMetrics(model=model, histograms=hists,
                                      gauges={r.QUEUED: self.queued[model]} if model in self.queued else {},
                                      labelled_counters={r.REQUESTS: dict(outcomes)} if outcomes else {})
        return out


def normalise_router(families: list[Family], kind: r.RouterKind, *, max_models: int | None = None) -> RouterScrape:
    """Per routed model: TTFT, requests by outcome, requests held; pool saturation and stale endpoints (llm-d)."""
    by_name = {_base(f.name): f for f in families}
    acc = _Acc(max_models)
    twins = 0
    saturation = stale = None
    labels: tuple[str, ...]
    if kind is r.RouterKind.LLMD_EPP:
        labels = r.LLMD_MODEL_LABELS
        ttft, _ = _pick(by_name, (r.LLMD_TTFT,))
        if ttft is not None:
            acc.histogram(ttft, labels)
        requests, n = _pick(by_name, r.LLMD_REQUESTS)
        errors, m = _pick(by_name, r.LLMD_ERRORS)
        queue, q = _pick(by_name, r.LLMD_QUEUE)
        twins += n + m + q
        if requests is not None:
            acc.counter(requests, labels, "ok")
        if errors is not None:
            acc.counter(errors, labels, "error")
        if queue is not None:
            acc.gauge(queue, labels)
        sat, s = _pick(by_name, r.LLMD_SATURATION)
        twins += s
        if sat is not None:
            values = [x.value for x in sat.samples if _label(x, "stage") in (None, "effective")
                      and math.isfinite(x.value)]
            saturation = max(values) if values else None
        st, _ = _pick(by_name, r.LLMD_STALE)
        if st is not None:
            values = [x.value for x in st.samples if math.isfinite(x.value)]
            stale = max(values) if values else None
    else:
        labels = (r.DYNAMO_MODEL_LABEL,)
        ttft, _ = _pick(by_name, (r.DYNAMO_TTFT,))
        if ttft is not None:
            acc.histogram(ttft, labels)
        requests, _ = _pick(by_name, (r.DYNAMO_REQUESTS,))
        if requests is not None:
            acc.counter(requests, labels, None, status="status")
        queued, _ = _pick(by_name, (r.DYNAMO_QUEUED,))
        if queued is not None:
            acc.gauge(queued, labels)
    return RouterScrape(kind=str(kind), models=acc.models(), saturation=saturation, stale_endpoints=stale,
                        families_seen=len(families), twins_skipped=twins)


def parse_router(text: str, kind: r.RouterKind, *, max_samples: int | None = None,
                 max_models: int | None = None) -> RouterScrape:
    """Parse and normalise one router /metrics body within the per-target limits."""
    return normalise_router(parse(text, max_samples=max_samples), kind, max_models=max_models)
