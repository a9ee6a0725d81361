"""SignalStore: per-version window signals and running totals, fed one scrape cycle at a time (the GPUs
of each version: observer.analyse.signals.gpus)."""

from __future__ import annotations

import copy
import logging
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace

from observer.analyse import histogram as hmath
from observer.analyse.cost import CostMeter
from observer.analyse.replicas import ReplicaTracker
from observer.analyse.signals.engines import EngineProgress, count_states, replica_states
from observer.analyse.signals.gpus import XidCounter, gpu_signals, owners
from observer.analyse.signals.inventory import ServedInfo
from observer.analyse.signals.model import (
    MAX_DEPARTED,
    MAX_SLICES,
    MULTIPLE_MODELS,
    OTHER_REASON,
    GaugePoint,
    Quantiles,
    SliceTotals,
    Snapshot,
    VersionExport,
    VersionSignals,
    VersionState,
    histogram_between,
    labelled_between,
    mean,
    quantiles,
    replica_name,
)
from observer.analyse.window import History, ModelTotals, TargetTotals, Totals, sum_totals
from observer.collect.model import GpuMetrics, Histogram, ModelMetrics, VllmScrape
from observer.collect.scraper import ScrapeResult, Target, TargetKind
from observer.config.fleet import VersionSpec
from observer.conventions import FINISHED_REASONS, routers
from observer.conventions.labels import TokenKind
from observer.conventions.vllm import (
    COMPUTED_SOURCE,
    E2E,
    GENERATION_TOKENS,
    ITL,
    KV_CACHE,
    PREEMPTIONS,
    PREFIX_HITS,
    PREFIX_QUERIES,
    PROMPT_TOKENS,
    PROMPT_TOKENS_BY_SOURCE,
    QUEUE,
    REQUEST_SUCCESS,
    RUNNING,
    TTFT,
    WAITING,
)

log = logging.getLogger("observer.signals")


class SignalStore:
    """Per-version window signals and running totals, fed one scrape cycle at a time.

    Running-total snapshots are kept at full resolution for `fine_seconds` (at least 1.5 windows),
    then one per `coarse_step_seconds` up to `retention_seconds`: a `since` older than the fine part
    is answered from the newest coarse snapshot at or before it (up to one step earlier).
    """

    def __init__(self, versions: Sequence[VersionSpec], *, window_seconds: float, stale_after_seconds: float,
                 retention_seconds: float = 6 * 3600.0, fine_seconds: float = 900.0,
                 coarse_step_seconds: float = 60.0, max_models_per_target: int = 8,
                 cost: CostMeter | None = None, hung_after_seconds: float = 300.0) -> None:
        self.window_seconds = window_seconds
        self.cost = cost
        self.stale_after_seconds = stale_after_seconds
        self._lock = threading.RLock()
        self._history = (max(window_seconds * 1.5, fine_seconds), retention_seconds, coarse_step_seconds)
        self._max_models = max_models_per_target
        self._versions: dict[str, VersionState] = {}
        self._target_totals: dict[Target, TargetTotals] = {}
        self._last_ok: dict[Target, ScrapeResult] = {}
        self._engines = EngineProgress(hung_after_seconds)
        self._xids = XidCounter()
        self._cycles = 0
        self._last_cycle_ts: float | None = None
        self._first_cycle_ts: float | None = None
        self._served_info = ServedInfo()
        self.snapshot = Snapshot(ts=None, cycles=0, window_seconds=window_seconds)
        self.set_versions(versions)

    # --- the fleet -------------------------------------------------------------------------------

    def set_versions(self, versions: Sequence[VersionSpec]) -> None:
        """Watch exactly `versions` from the next cycle on (discovery calls this as pods come and go).

        A version that stays keeps its history, whatever its role or targets become (a promoted canary
        keeps its windows). A pod that leaves a version leaves its counts behind, frozen, so the version's
        totals never go down; one that joins starts from a baseline. A version that is gone is dropped:
        its series end with the next snapshot."""
        with self._lock:
            fine, retention, coarse = self._history
            kept: dict[str, VersionState] = {}
            for spec in versions:
                vllm = tuple(dict.fromkeys(Target(TargetKind.VLLM, u) for u in spec.vllm))
                dcgm = tuple(dict.fromkeys(Target(TargetKind.DCGM, u) for u in spec.dcgm))
                routers = () if spec.router is None else tuple(
                    dict.fromkeys(Target(TargetKind(spec.router.kind), u) for u in spec.router.urls))
                v = self._versions.get(spec.name)
                if v is None:
                    v = VersionState(spec=spec, vllm=vllm, dcgm=dcgm,
                                 totals=History(fine_seconds=fine, retention_seconds=retention,
                                                coarse_step_seconds=coarse),
                                 gauges=History(fine_seconds=self.window_seconds,
                                                retention_seconds=self.window_seconds))
                else:
                    for t in v.vllm:
                        if t not in vllm and t in self._target_totals:
                            v.departed.extend(copy.deepcopy(m) for name, m in self._target_totals[t].models.items()
                                              if v.spec.model is None or name == v.spec.model)
                    if len(v.departed) > MAX_DEPARTED:
                        v.departed = [ModelTotals(*sum_totals(v.departed))]
                    v.spec, v.vllm, v.dcgm = spec, vllm, dcgm
                v.routers = routers
                kept[spec.name] = v
            self._versions = kept
            if self.cost is not None:
                self.cost.retain(list(kept))
            used = {t for v in kept.values() for t in (*v.vllm, *v.routers)}
            for t in used - self._target_totals.keys():
                self._target_totals[t] = TargetTotals(max_models=self._max_models)
            for t in self._target_totals.keys() - used:
                del self._target_totals[t]
            bound = used | {t for v in kept.values() for t in v.dcgm}
            for t in self._last_ok.keys() - bound:
                del self._last_ok[t]
            self._engines.forget(used)
            self._served_info.retain(kept)

    # --- feeding ---------------------------------------------------------------------------------

    def bindings(self) -> list[tuple[str, Target]]:
        """Every (version, target) pair in config order."""
        return [(name, t) for name, v in self._versions.items() for t in (*v.vllm, *v.dcgm, *v.routers)]

    def record(self, results: Mapping[Target, ScrapeResult], *, ts: float) -> None:
        """Fold one cycle (results of every target, scraped at about `ts`) into the store."""
        with self._lock:
            if self._first_cycle_ts is None:
                self._first_cycle_ts = ts
            for target, result in results.items():
                if not result.ok:
                    continue
                if target not in self._last_ok and result.vllm is not None and result.vllm.models:
                    self._cold_start(target, ts)
                self._last_ok[target] = result
                if result.vllm is not None:
                    self._engines.track(target, result, ts)
                if result.router is not None and target in self._target_totals:
                    # Per routed model, folded like a vLLM target's models (resets and new buckets absorbed).
                    self._target_totals[target].observe(VllmScrape(models=result.router.models))
                if result.vllm is not None and target in self._target_totals:
                    tt = self._target_totals[target]
                    before = tt.resets
                    tt.observe(result.vllm)
                    if tt.resets > before:
                        for v in self._versions.values():
                            if target in v.vllm:
                                v.restarts += tt.resets - before
            gpu_owners = owners(self._versions, lambda target: self._fresh(target, ts))
            self._xids.count(gpu_owners, self._versions)
            exports: dict[str, VersionExport] = {}
            for name, v in self._versions.items():
                exports[name] = self._update_version(name, v, results, ts, gpu_owners)
            self._cycles += 1
            self._last_cycle_ts = ts
            self.snapshot = Snapshot(ts=ts, cycles=self._cycles, window_seconds=self.window_seconds,
                                     versions=exports)

    def _cold_start(self, target: Target, ts: float) -> None:
        """A target's first good scrape: the cold start of its pod, when the pod started while we watched
        (a pod that was already up when the observer started is not a cold start we saw)."""
        for v in self._versions.values():
            if target in v.vllm and len(v.spec.pods) == len(v.vllm):
                started = v.spec.pods[v.vllm.index(target)].started_at
                first = self._first_cycle_ts
                if started is not None and first is not None and started >= first - self.stale_after_seconds:
                    v.cold_starts.observe(ts - started)

    def _router_state(self, v: VersionState, results: Mapping[Target, ScrapeResult], ts: float
                      ) -> tuple[bool, float | None]:
        """(saturated or stale now, requests of the version held at the router) from this cycle's router scrapes;
        remembers when and why the pool was last in trouble."""
        troubles: list[str] = []
        queued: float | None = None
        for t in v.routers:
            res = results.get(t)
            scrape = None if res is None or not res.ok else res.router
            if scrape is None:
                continue
            if scrape.saturation is not None and scrape.saturation >= routers.SATURATED_AT:
                troubles.append(f"{scrape.kind} pool saturated ({scrape.saturation:.2f} ≥ {routers.SATURATED_AT:g})")
            if scrape.stale_endpoints:
                troubles.append(f"{scrape.kind}: {scrape.stale_endpoints:.0f} endpoint(s) with stale metrics")
            m = scrape.models.get(v.spec.router_model or "")
            if m is not None and routers.QUEUED in m.gauges:
                queued = (queued or 0.0) + m.gauges[routers.QUEUED]
        if troubles:
            v.router_trouble_at, v.router_trouble = ts, "; ".join(troubles)
        return bool(troubles), queued

    def _fresh(self, target: Target, ts: float) -> ScrapeResult | None:
        r = self._last_ok.get(target)
        return r if r is not None and ts - r.started <= self.stale_after_seconds else None

    def _models(self, v: VersionState, metrics: Mapping[str, ModelMetrics]) -> list[ModelMetrics]:
        wanted = v.spec.model
        return [m for name, m in metrics.items() if wanted is None or name == wanted]

    def _update_version(self, name: str, v: VersionState, results: Mapping[Target, ScrapeResult], ts: float,
                        gpu_owners: Mapping[str, tuple[GpuMetrics, set[str]]]) -> VersionExport:
        up = [results[t] for t in v.vllm if t in results and results[t].ok]
        model_totals = list(v.departed)
        for t in v.vllm:
            tt = self._target_totals[t]
            for model, mt in tt.models.items():
                if v.spec.model is None or model == v.spec.model:
                    model_totals.append(mt)
                    v.models_seen.add(model)
                elif (t, model) not in v.ignored:
                    v.ignored.add((t, model))
                    log.warning("version %s: %s serves model %r, not the configured %r; it is not counted",
                                name, t.url, model, v.spec.model)
        routed = v.spec.router_model
        for t in v.routers:
            model_totals.extend(mt for model, mt in self._target_totals[t].models.items() if model == routed)
        router = self._router_state(v, results, ts)
        previous = v.totals.latest()
        hists, counters, labelled = sum_totals(model_totals)
        totals = None
        if model_totals:
            totals = Totals.pack(hists, counters, labelled, previous=None if previous is None else previous[1])
            v.totals.append(ts, totals)
        waiting = running = 0.0
        kv_means: list[float] = []
        kv_maxes: list[float] = []
        states = []
        for t in v.vllm:  # the replicas up (`up`), with their targets for the hung check
            r = results.get(t)
            if r is None or not r.ok:
                continue
            assert r.vllm is not None
            ms = self._models(v, r.vllm.models)
            states.append(replica_states(ms, hung=self._engines.hung(t, ts)))
            for m in ms:
                waiting += m.gauges.get(WAITING, 0.0)
                running += m.gauges.get(RUNNING, 0.0)
                if KV_CACHE in m.gauges:
                    kv_means.append(m.gauges[KV_CACHE])
                    kv_maxes.append(m.gauges_max.get(KV_CACHE, m.gauges[KV_CACHE]))
        v.gauges.append(ts, GaugePoint(len(up), waiting, running, mean(kv_means),
                                        max(kv_maxes) if kv_maxes else None))
        gpus = [g for g, owners in gpu_owners.values() if name in owners]
        v.signals = replace(self._signals(name, v, ts, len(up), gpus), replicas_in_state=count_states(states),
                            router_saturated=router[0],
                            router_queued=router[1], router_trouble_at=v.router_trouble_at,
                            router_trouble=v.router_trouble)
        if v.replicas is None:
            v.replicas = ReplicaTracker(window_seconds=self.window_seconds)
        def per_replica(family: str) -> dict[str, Histogram | None]:
            return {replica_name(v.spec, i, t.url): hmath.merge(
                mt.histograms[family] for model, mt in self._target_totals[t].models.items()
                if (v.spec.model is None or model == v.spec.model) and family in mt.histograms)
                for i, t in enumerate(v.vllm)}

        v.replicas.observe(per_replica(TTFT), ts, e2e=per_replica(E2E))
        computed = _computed_prompt_tokens(model_totals, totals)
        cost = window = None
        if self.cost is not None:
            finished = None if totals is None else totals.labelled(REQUEST_SUCCESS)
            cost = self.cost.observe(name, ts=ts, replicas_up=len(up), gpus=gpus,
                                     prompt_tokens=None if totals is None else totals.counter(PROMPT_TOKENS),
                                     generation_tokens=None if totals is None else totals.counter(GENERATION_TOKENS),
                                     requests=None if finished is None else sum(finished.values()),
                                     computed_prompt_tokens=computed)
            window = self.cost.window(name, since=ts - self.cost.spec.window_seconds)
        return VersionExport(signals=v.signals, totals=totals, xid_errors_seen=v.xid_seen, cost=cost,
                             prompt_tokens_computed=computed,
                             cost_window=window, engine_restarts=v.restarts,
                             replicas=tuple(v.replicas.window(ts)),
                             cold_starts=copy.deepcopy(v.cold_starts) if v.cold_starts.n else None)

    # --- window signals --------------------------------------------------------------------------

    def _signals(self, name: str, v: VersionState, ts: float, replicas_up: int,
                 gpus: Sequence[GpuMetrics]) -> VersionSignals:
        since = ts - self.window_seconds
        latest = v.totals.latest()
        base = v.totals.at(since)
        elapsed = (latest[0] - base[0]) if latest is not None and base is not None else 0.0

        def hist(fam: str) -> Quantiles | None:
            return quantiles(self._histogram_delta(v, fam, since))

        def rate(fam: str) -> float | None:
            d = self._counter_delta(v, fam, since)
            return d / elapsed if d is not None and elapsed > 0 else None

        finished = self._labelled_delta(v, REQUEST_SUCCESS, since)
        requests = sum(finished.values()) if finished is not None else None
        if requests is None:
            e2e = self._histogram_delta(v, E2E, since)
            requests = e2e.count if e2e is not None else None
        ratios: dict[str, float] = {}
        if finished and requests:
            for reason, n in finished.items():
                key = reason if reason in FINISHED_REASONS else OTHER_REASON
                ratios[key] = ratios.get(key, 0.0) + n / requests
        queries, hits = self._counter_delta(v, PREFIX_QUERIES, since), self._counter_delta(v, PREFIX_HITS, since)
        points = [p for _, p in v.gauges.since(since) if p.replicas_up > 0]
        kv_means = [p.kv_mean for p in points if p.kv_mean is not None]
        kv_maxes = [p.kv_max for p in points if p.kv_max is not None]
        return VersionSignals(
            version=name, model=self._model_label(v), models=tuple(sorted(v.models_seen)), ts=ts,
            window_seconds=max(elapsed, 0.0), replicas_up=replicas_up, replicas_total=len(v.vllm),
            ttft=hist(TTFT), itl=hist(ITL), e2e=hist(E2E), queue=hist(QUEUE), router_ttft=hist(routers.TTFT),
            requests=requests,
            request_rate=requests / elapsed if requests is not None and elapsed > 0 else None,
            prompt_token_rate=rate(PROMPT_TOKENS), generation_token_rate=rate(GENERATION_TOKENS),
            preemption_rate=rate(PREEMPTIONS), finished_ratio=ratios,
            prefix_cache_hit_ratio=(hits / queries if hits is not None and queries else None),
            queue_depth_per_replica=mean([p.waiting / p.replicas_up for p in points]),
            running_requests=mean([p.running for p in points]),
            kv_cache_mean=mean(kv_means), kv_cache_max=max(kv_maxes) if kv_maxes else None,
            gpu=gpu_signals(gpus, xid_seen=v.xid_seen),
        )

    def _model_label(self, v: VersionState) -> str | None:
        if v.spec.model is not None:
            return v.spec.model
        if not v.models_seen:
            return None
        return next(iter(v.models_seen)) if len(v.models_seen) == 1 else MULTIPLE_MODELS

    def _pair(self, v: VersionState, since: float) -> tuple[Totals, Totals] | None:
        latest = v.totals.latest()
        base = v.totals.at(since)
        if latest is None or base is None:
            return None
        return latest[1], base[1]

    def _histogram_delta(self, v: VersionState, family: str, since: float) -> Histogram | None:
        pair = self._pair(v, since)
        return None if pair is None else histogram_between(*pair, family)

    def _counter_delta(self, v: VersionState, family: str, since: float) -> float | None:
        pair = self._pair(v, since)
        if pair is None:
            return None
        new = pair[0].counter(family)
        if new is None:
            return None
        old = pair[1].counter(family)
        return new - (old or 0.0)

    def _labelled_delta(self, v: VersionState, family: str, since: float) -> dict[str, float] | None:
        pair = self._pair(v, since)
        return None if pair is None else labelled_between(*pair, family)

    # --- contract 2 ------------------------------------------------------------------------------

    def versions(self) -> list[str]:
        """Configured version names, in config order."""
        return list(self._versions)

    def latest(self, version: str) -> VersionSignals | None:
        """The window signals of `version` after the last cycle; None before the first or if unknown."""
        v = self._versions.get(version)
        return None if v is None else v.signals

    def histogram_delta(self, version: str, family: str, *, since: float) -> Histogram | None:
        """Bucket increase of `family` from unix time `since` to the latest scrape, summed over targets."""
        with self._lock:
            v = self._versions.get(version)
            return None if v is None else self._histogram_delta(v, family, since)

    def counter_delta(self, version: str, family: str, *, since: float) -> float | None:
        """Increase of counter `family` from `since` to the latest scrape, summed over targets."""
        with self._lock:
            v = self._versions.get(version)
            return None if v is None else self._counter_delta(v, family, since)

    def labelled_counter_delta(self, version: str, family: str, *, since: float) -> dict[str, float] | None:
        """Per-label increase of `family` (e.g. request_success by finished_reason) from `since`."""
        with self._lock:
            v = self._versions.get(version)
            return None if v is None else self._labelled_delta(v, family, since)

    def cost_per_million_tokens(self, version: str, *, since: float) -> float | None:
        """Cost per million generated tokens of `version` since `since` (None: no prices, no tokens, or a GPU
        without a price in the window)."""
        if self.cost is None or not self.cost.spec.priced:
            return None
        with self._lock:
            w = self.cost.window(version, since=since)
        if w is None or w.unpriced_gpu_seconds > 0:
            return None
        return w.per_million_tokens(TokenKind.GENERATION)

    def slices(self, version: str, *, since: float, until: float, step: float, histograms: Sequence[str],
               labelled: Sequence[str]) -> list[SliceTotals] | None:
        """Increases over consecutive `step`-second slices from `since` to `until` (the last one may be
        shorter), from the retained running-total snapshots; None for an unknown version or no scrapes.
        A slice before the first snapshot has zero increase (the judge skips it as empty)."""
        if step <= 0:
            raise ValueError(f"step must be > 0, got {step}")
        with self._lock:
            v = self._versions.get(version)
            oldest = None if v is None else next(iter(v.totals.points()), None)
            if v is None or oldest is None:
                return None
            if oldest[0] > since:  # nothing to cut before the first snapshot: start at the slice holding it
                since += math.floor((oldest[0] - since) / step) * step
            if (until - since) / step > MAX_SLICES:  # a long window: coarser slices, never a partial window
                step = (until - since) / MAX_SLICES
            bounds = [since]
            while bounds[-1] < until - 1e-9 and len(bounds) <= MAX_SLICES + 1:
                bounds.append(min(bounds[-1] + step, until))
            snaps = [t for _, t in v.totals.at_each(bounds)]
        out: list[SliceTotals] = []
        for a, b, old, new in zip(bounds, bounds[1:], snaps, snaps[1:], strict=False):
            hists = {fam: h for fam in histograms if (h := histogram_between(new, old, fam)) is not None}
            counters = {fam: {k: max(x, 0.0) for k, x in lab.items()} for fam in labelled
                        if (lab := labelled_between(new, old, fam)) is not None}
            out.append(SliceTotals(start=a, end=b, histograms=hists, labelled=counters))
        return out

    def served_models(self, version: str) -> dict[str, dict[str, str]]:
        """Model name → info (e.g. max_model_len) from the latest successful scrape of each target."""
        with self._lock:
            v = self._versions.get(version)
            out: dict[str, dict[str, str]] = {}
            if v is None:
                return out
            for t in v.vllm:
                r = self._last_ok.get(t)
                if r is None or r.vllm is None:
                    continue
                for m in self._models(v, r.vllm.models):
                    out.setdefault(m.model, {}).update(m.info)
            for model, info in self._served_info.of(version).items():
                if model in out:  # only models the scrapes see serving: the API cannot add label values
                    out[model].update(info)
            return out

    def record_served_info(self, version: str, info: dict[str, dict[str, str]]) -> None:
        """Facts a version's OpenAI endpoint reports per model (e.g. max_model_len from /v1/models)."""
        with self._lock:
            if version in self._versions:
                self._served_info.record(version, info)

    @property
    def last_cycle_ts(self) -> float | None:
        """Unix time of the last recorded cycle."""
        return self._last_cycle_ts


def _computed_prompt_tokens(models: Sequence[ModelTotals], totals: Totals | None) -> float | None:
    """The prompt tokens a version's engines prefilled (vLLM's prompt_tokens_by_source, local_compute); None
    unless every replica that counts prompt tokens also counts them by source: a fleet of mixed vLLM releases
    would undercount the work, and a cost per computed token would look better than it is."""
    if totals is None or not all(PROMPT_TOKENS_BY_SOURCE in m.labelled for m in models
                                 if PROMPT_TOKENS in m.counters):
        return None
    by_source = totals.labelled(PROMPT_TOKENS_BY_SOURCE)
    return None if by_source is None else by_source.get(COMPUTED_SOURCE, 0.0)
