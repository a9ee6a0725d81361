"""Two data sources, one judge: the observer's own SignalStore, or the Prometheus HTTP API (fleet mode).

Both return ArmData for one version over [since, now]: finished requests by reason, histogram increases,
golden-set and live-check totals, and the drift area's latest results. Missing data is None/absent
(the judge turns it into Nodata), never zero, so "no traffic" and "no source" stay distinguishable.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, assert_never

import httpx

from observer import conventions as names
from observer.analyse.canary.judge import ArmData, DriftObservation, PairCounts
from observer.analyse.drift.state import DriftResult
from observer.analyse.signals import SliceTotals, VersionSignals
from observer.collect.model import Histogram
from observer.collect.promql import PromQLClient, PromQLError
from observer.collect.vllm import ENGINE_ARGS, MAX_ENGINE_ARGS_CHARS
from observer.config.canary import CanaryMetricSpec, MetricKind
from observer.config.prometheus import PrometheusClientSpec
from observer.conventions import vllm
from observer.conventions.latency import LATENCY
from observer.conventions.promql import selector
from observer.conventions.vllm import LatencyId
from observer.errors import ObserverError


class SignalsReader(Protocol):
    """What the canary reads from the scrape area's per-version signals (observer.analyse.signals.SignalStore)."""

    def histogram_delta(self, version: str, family: str, *, since: float) -> Histogram | None: ...

    def labelled_counter_delta(self, version: str, family: str, *, since: float) -> dict[str, float] | None: ...

    def served_models(self, version: str) -> dict[str, dict[str, str]]: ...

    def slices(self, version: str, *, since: float, until: float, step: float, histograms: Sequence[str],
               labelled: Sequence[str]) -> Sequence[SliceTotals] | None: ...

    def latest(self, version: str) -> VersionSignals | None: ...


class QualityReader(Protocol):
    """What the canary reads from the quality area (observer.analyse.quality.state.QualityState)."""

    def golden_totals(self, version: str, *, since: float, golden_set: str | None = None) -> tuple[int, int]: ...

    def golden_judge_errors(self, version: str, *, since: float, golden_set: str | None = None) -> int: ...

    def live_check_totals(self, version: str, check: str, *, since: float) -> tuple[int, int]: ...

    def live_check_slices(self, version: str, check: str, *, edges: Sequence[float]) -> list[tuple[int, int]]: ...


class PairsReader(Protocol):
    """What the canary reads from shadow replay (observer.analyse.quality.shadow.ShadowReplayer)."""

    def paired_outcomes(self, canary: str, *, since: float) -> tuple[list[Mapping[str, str]], str,
                                                                      dict[str, str]]: ...


def paired_counts(outcomes: Sequence[Mapping[str, str]], checks: set[str]) -> dict[str, PairCounts]:
    """Tally per-pair outcomes (win, loss, tie, inconsistent, error) into counts per paired check."""
    tally: dict[str, Counter[str]] = {c: Counter() for c in checks}
    for row in outcomes:
        for check in checks:
            if check in row:
                tally[check][row[check]] += 1
    return {c: PairCounts(wins=t["win"], losses=t["loss"], ties=t["tie"], inconsistent=t["inconsistent"],
                          errors=t["error"]) for c, t in tally.items()}


class DriftReader(Protocol):
    """What the canary reads from the drift area (observer.analyse.drift.state.DriftState)."""

    def latest(self, version: str) -> dict[str, DriftResult]: ...


class CostReader(Protocol):
    """Cost per generated token of a version over a window (the scrape area's cost meter)."""

    def cost_per_million_tokens(self, version: str, *, since: float) -> float | None: ...


class SourceError(ObserverError):
    """A data source could not answer; the verdict becomes nodata with this reason (never an HTTP error)."""


class CanarySource(Protocol):
    """Where the judge reads one version's window."""

    name: str

    async def arm(self, version: str, metrics: Sequence[CanaryMetricSpec], *, since: float, now: float,
                  with_drift: bool) -> ArmData: ...


def _needs(metrics: Sequence[CanaryMetricSpec]) -> tuple[set[LatencyId], set[str], set[str], set[str]]:
    """What the metrics read: latency families, golden sets ("" for all), live checks and drift fields."""
    families: set[LatencyId] = set()
    golden: set[str] = set()
    checks: set[str] = set()
    fields: set[str] = set()
    for m in metrics:
        match m.kind:
            case MetricKind.LATENCY:
                families.update([m.family] if m.family is not None else [])
            case MetricKind.QUALITY:
                golden.add(m.golden_set or "")
            case MetricKind.RATIO:
                checks.update([m.live_check] if m.live_check is not None else [])
            case MetricKind.DRIFT:
                fields.update([m.field] if m.field is not None else [])
            case MetricKind.COST | MetricKind.PAIRED:  # read by the cost and pair readers, asked for apart
                pass
            case _:
                assert_never(m.kind)
    return families, golden, checks, fields


class OwnSource:
    """The observer's own scrapes (contract 2), quality (5) and drift (6) services; any may be absent."""

    name = "own"

    def __init__(self, *, signals: SignalsReader | None, quality: QualityReader | None = None,
                 drift: DriftReader | None = None, slice_seconds: float = 60.0, cost: CostReader | None = None,
                 pairs: PairsReader | None = None) -> None:
        self.signals = signals
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
                                            vllm.SPEC_DECODE, vllm.CORRUPTION])
        raw = raw or ()
        edges = [st.start for st in raw] + [raw[-1].end] if raw else []  # consecutive slices
        per_check = {} if self.quality is None else {
            c: self.quality.live_check_slices(version, c, edges=edges) for c in sorted(checks)}
        out = []
        for i, st in enumerate(raw):
            req, http = st.labelled.get(vllm.REQUEST_SUCCESS), st.labelled.get(vllm.HTTP_STATUS)
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
        families, golden_sets, checks, fields = _needs(metrics)
        if self.signals is None:
            return ArmData(note="no scrape signals in this observer (collect area disabled)")
        raw = self.signals.labelled_counter_delta(version, vllm.REQUEST_SUCCESS, since=since)
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
        return ArmData(requests=requests, histograms=hists, golden=golden, live_checks=live, drift=drift,
                       golden_judge_errors=golden_errors,
                       http_status=None if http is None else {str(k): float(v) for k, v in http.items()},
                       slices=slices, replicas=None if latest is None else latest.replicas_up,
                       prefix_cache_hit_ratio=None if latest is None else latest.prefix_cache_hit_ratio,
                       environment=environment(self.signals, version), cost_per_million_tokens=cost, paired=paired,
                       paired_note=note, judge_identity=identity,
                       admission_rejections=None if rejected is None else max(0.0, float(sum(rejected.values()))),
                       spec_decode=None if spec is None else {str(k): max(0.0, float(x)) for k, x in spec.items()},
                       corrupted=None if corrupted is None else max(0.0, float(sum(corrupted.values()))),
                       replicas_unhealthy=0 if latest is None else latest.replicas_unhealthy,
                       replicas_asleep=0 if latest is None else latest.replicas_asleep,
                       replicas_hung=0 if latest is None else latest.replicas_hung,
                       router_trouble=latest.router_trouble if latest is not None and latest.router_trouble_at
                       is not None and latest.router_trouble_at >= since else "")


ENVIRONMENT_KEYS = (names.GPU_MODEL, names.GPU_DRIVER, names.ENGINE_ARGS)


def environment(signals: SignalsReader, version: str) -> dict[str, str]:
    """The fairness facts the scrapes give: GPU model(s) and driver(s) from DCGM labels, and the engine's cache
    settings from vLLM's cache_config_info. The own source judges with them and the exporter publishes them
    (VERSION_ENVIRONMENT), so fleet mode judges with the same facts."""
    out = {}
    latest = signals.latest(version)
    gpu = None if latest is None else latest.gpu
    if gpu is not None and gpu.models:
        out[names.GPU_MODEL] = ",".join(gpu.models)
    if gpu is not None and gpu.drivers:
        out[names.GPU_DRIVER] = ",".join(gpu.drivers)
    args = sorted({info[ENGINE_ARGS] for info in signals.served_models(version).values() if ENGINE_ARGS in info})
    if args:
        out[names.ENGINE_ARGS] = " | ".join(args)[:MAX_ENGINE_ARGS_CHARS]
    return out


def _num(x: object) -> float | None:
    if isinstance(x, int | float) and math.isfinite(float(x)):
        return float(x)
    return None


class PrometheusSource:
    """Fleet mode: per-pod observers export accumulated counters/histograms; one judge queries Prometheus."""

    name = "prometheus"

    def __init__(self, *, url: str, http: httpx.AsyncClient, timeout: float = 10.0,
                 slice_seconds: float = 60.0, client: PromQLClient | None = None,
                 pairs: PairsReader | None = None) -> None:
        self.url = url.rstrip("/")
        self.pairs = pairs  # paired outcomes come from the shared sample store, as in the own source
        self.slice_seconds = slice_seconds
        self.client = client or PromQLClient(self.url, PrometheusClientSpec(timeout_seconds=timeout), http=http)
        self.replica_labels = tuple(self.client.spec.replica_labels)

    def _delta(self, series: str, offset: str) -> str:
        """The change of counter `series` over the last `offset` (exact, not extrapolated; 0 over a reset);
        with observer replicas, one replica's."""
        d = f"clamp_min({series} - {series} offset {offset}, 0)"
        return f"max without ({', '.join(self.replica_labels)}) ({d})" if self.replica_labels else d

    def _inc(self, series: str, rng: str) -> str:
        """increase() of `series` over `rng`; with observer replicas, one replica's (the largest) per series."""
        inc = f"increase({series}{rng})"
        return f"max without ({', '.join(self.replica_labels)}) ({inc})" if self.replica_labels else inc

    async def query_range(self, promql: str, *, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """Range query; SourceError naming the query on any failure."""
        try:
            return await self.client.query_range(promql, start=start, end=end, step=step)
        except PromQLError as e:
            raise SourceError(str(e)) from e

    async def _slices(self, v: str, families: set[LatencyId], since: float, now: float, *, http: bool = False,
                      checks: set[str] | None = None, speculative: bool = False, corrupted: bool = False
                      ) -> tuple[ArmData, ...]:
        """One-slice increases ending at since+Δ, since+2Δ, … ≤ now; with `http`, also vLLM's generation
        responses by status class; with `checks`, the live checks' failures and totals. Each slice is the
        counter's last value at its end minus the one at its start (`x - x offset Δ`): consecutive slices
        then add up to the window exactly. `increase(x[Δ])` would not: it extrapolates from the two or three
        samples inside each Δ and drops what falls between them, noise that makes the sliced tests read
        dependence where there is none (a TTFT ×1.5 canary stayed inconclusive). A counter reset in a slice
        gives 0 for that series there, not a negative count."""
        step = self.slice_seconds
        first = since + step
        if first > now:
            return ()
        rng = f"{round(step)}s"
        ends = [first + i * step for i in range(int((now - first) // step) + 1)]

        async def by_label(counter: str, label: str) -> dict[int, dict[str, float]]:
            """slice index → label value → the counter's increase over that slice."""
            res = await self.query_range(f"sum by ({label}) ({self._delta(f'{counter}_total{v}', rng)})",
                                         start=first, end=ends[-1], step=step)
            out: dict[int, dict[str, float]] = {}
            for series in res:
                key = str(series["metric"].get(label, ""))
                for ts, value in series.get("values", []):
                    out.setdefault(round((float(ts) - first) / step), {})[key] = _finite(value)
            return out

        requests = await by_label(names.REQUESTS, names.FINISHED_REASON)
        statuses = await by_label(names.HTTP_RESPONSES, names.HTTP_STATUS_CLASS) if http else {}
        rejected = await by_label(names.ADMISSION_REJECTIONS, names.REASON) if http else {}
        spec = await by_label(names.SPEC_DECODE_TOKENS, names.OUTCOME) if speculative else {}
        nans = await by_label(names.CORRUPTED_REQUESTS, names.VERSION) if corrupted else {}
        hists: dict[int, dict[str, Histogram]] = {}
        for fam in sorted(families):
            res = await self.query_range(f"sum by (le) ({self._delta(f'{LATENCY[fam].exported}_bucket{v}', rng)})",
                                         start=first, end=ends[-1], step=step)
            by_slice: dict[int, list[dict[str, Any]]] = {}
            for series in res:
                for ts, value in series.get("values", []):
                    by_slice.setdefault(round((float(ts) - first) / step), []).append(
                        {"metric": series["metric"], "value": [ts, value]})
            for i, vector in by_slice.items():
                h = histogram_from_vector(vector)
                if h is not None:
                    hists.setdefault(i, {})[fam] = h
        live: dict[int, dict[str, tuple[int, int]]] = {}
        if checks:
            failures = await by_label(names.LIVE_CHECK_FAILURES, names.CHECK)
            for i, by_check in (await by_label(names.LIVE_CHECKS, names.CHECK)).items():
                live[i] = {c: (min(round(failures.get(i, {}).get(c, 0.0)), round(n)), round(n))
                           for c, n in by_check.items() if c in checks}
        return tuple(ArmData(requests=requests.get(i), histograms=hists.get(i, {}), http_status=statuses.get(i),
                             live_checks=live.get(i, {}),
                             admission_rejections=sum(rejected[i].values()) if i in rejected else None,
                             spec_decode=spec.get(i) if speculative else None,
                             corrupted=sum(nans[i].values()) if i in nans else None)
                     for i in range(len(ends)))

    async def query(self, promql: str, *, at: float) -> list[dict[str, Any]]:
        """Instant query at `at`; SourceError naming the query on any failure."""
        try:
            return await self.client.query(promql, at=at)
        except PromQLError as e:
            raise SourceError(str(e)) from e

    async def _scalar(self, promql: str, at: float) -> float | None:
        res = await self.query(promql, at=at)
        if not res:
            return None
        v = float(res[0]["value"][1])
        return v if math.isfinite(v) else None

    async def arm(self, version: str, metrics: Sequence[CanaryMetricSpec], *, since: float, now: float,
                  with_drift: bool) -> ArmData:
        """Read `version`'s window from Prometheus; an unreachable Prometheus gives ArmData with a note."""
        try:
            return await self._arm(version, metrics, since=since, now=now, with_drift=with_drift)
        except SourceError as e:
            return ArmData(note=str(e))

    async def _arm(self, version: str, metrics: Sequence[CanaryMetricSpec], *, since: float, now: float,
                   with_drift: bool) -> ArmData:
        families, golden_sets, checks, fields = _needs(metrics)
        rng = f"[{max(1, round(now - since))}s]"
        v = selector("", {names.VERSION: version})
        res = await self.query(f"sum by ({names.FINISHED_REASON}) ({self._inc(f'{names.REQUESTS}_total{v}', rng)})",
                               at=now)
        requests = {str(s["metric"].get(names.FINISHED_REASON, "")): _finite(s["value"][1]) for s in res} \
            if res else None
        http = any(m.http_5xx or m.http_4xx for m in metrics)
        statuses: dict[str, float] | None = None
        if http:
            res = await self.query(f"sum by ({names.HTTP_STATUS_CLASS}) "
                                   f"({self._inc(f'{names.HTTP_RESPONSES}_total{v}', rng)})", at=now)
            statuses = {str(s["metric"].get(names.HTTP_STATUS_CLASS, "")): _finite(s["value"][1]) for s in res} \
                if res else None
        rejected = None
        if http:
            rejected = await self._scalar(f"sum({self._inc(f'{names.ADMISSION_REJECTIONS}_total{v}', rng)})", now)
        hists: dict[str, Histogram] = {}
        for fam in sorted(families):
            res = await self.query(f"sum by (le) ({self._inc(f'{LATENCY[fam].exported}_bucket{v}', rng)})", at=now)
            h = histogram_from_vector(res)
            if h is not None:
                hists[fam] = h
        golden: dict[str, tuple[int, int]] = {}
        golden_errors: dict[str, int] = {}
        for gs in sorted(golden_sets):
            sel = selector("", {names.VERSION: version, **({names.GOLDEN_SET: gs} if gs else {})})
            passed = await self._scalar(f"sum({self._inc(f'{names.GOLDEN_ITEMS_PASSED}_total{sel}', rng)})", now)
            scored = await self._scalar(f"sum({self._inc(f'{names.GOLDEN_ITEMS}_total{sel}', rng)})", now)
            if passed is not None and scored is not None:
                golden[gs] = (round(passed), round(scored))
                errors = await self._scalar(f"sum({self._inc(f'{names.GOLDEN_JUDGE_ERRORS}_total{sel}', rng)})", now)
                golden_errors[gs] = round(errors or 0.0)
        live: dict[str, tuple[int, int]] = {}
        for check in sorted(checks):
            sel = selector("", {names.VERSION: version, names.CHECK: check})
            failures = await self._scalar(f"sum({self._inc(f'{names.LIVE_CHECK_FAILURES}_total{sel}', rng)})", now)
            total = await self._scalar(f"sum({self._inc(f'{names.LIVE_CHECKS}_total{sel}', rng)})", now)
            if failures is not None and total is not None:
                live[check] = (round(failures), round(total))
        drift: dict[str, DriftObservation] = {}
        if with_drift:
            for f in sorted(fields):
                sel = selector("", {names.VERSION: version, names.FIELD: f})
                detected = await self._scalar(f"max({names.DRIFT_DETECTED}{sel})", now)
                if detected is None:
                    continue
                p = await self._scalar(f"min({names.DRIFT_P_VALUE}{sel})", now)
                drift[f] = DriftObservation(drift=detected >= 1, status="ok", p_value=p)
        speculative = any(m.spec_decode for m in metrics)
        spec: dict[str, float] | None = None
        if speculative:
            res = await self.query(f"sum by ({names.OUTCOME}) "
                                   f"({self._inc(f'{names.SPEC_DECODE_TOKENS}_total{v}', rng)})", at=now)
            spec = {str(s["metric"].get(names.OUTCOME, "")): _finite(s["value"][1]) for s in res} if res else None
        checked = any(m.corrupted for m in metrics)
        corrupted: float | None = None
        if checked:
            res = await self.query(f"sum({self._inc(f'{names.CORRUPTED_REQUESTS}_total{v}', rng)})", at=now)
            corrupted = max(0.0, _finite(res[0]["value"][1])) if res else None
        slices = await self._slices(v, families, since, now, http=http, checks=checks, speculative=speculative,
                                    corrupted=checked)
        cost = None
        if any(m.kind == "cost" for m in metrics):
            unpriced = await self._scalar(f"sum({self._inc(f'{names.UNPRICED_GPU_SECONDS}_total{v}', rng)})", now)
            if not unpriced:  # a GPU without a price makes the cost incomplete: no figure, not a low one
                tokens = self._inc(f"{names.GENERATION_TOKENS}_total{v}", rng)
                cost = await self._scalar(f"sum({self._inc(f'{names.COST}_total{v}', rng)}) / "
                                          f"(sum({tokens}) > 0) * 1e6", now)
        paired: dict[str, PairCounts] = {}
        note, identity = "", dict[str, str]()
        paired_checks = {m.paired_check for m in metrics if m.kind == "paired"}
        if paired_checks and self.pairs is None:
            note = "shadow replay is off (quality.shadow.enabled, sampling store)"
        elif paired_checks and self.pairs is not None:  # the pairs live in the shared store, not in Prometheus
            outcomes, note, identity = await asyncio.to_thread(self.pairs.paired_outcomes, version, since=since)
            paired = paired_counts(outcomes, paired_checks)
        replicas = await self._scalar(f"max({names.REPLICAS}{v})", now)
        saturated = await self._scalar(f"max(max_over_time({names.ROUTER_SATURATED}{v}{rng}))", now)
        states = await self.query(f"max by ({names.STATE}) ({names.REPLICAS_IN_STATE}{v})", at=now)
        in_state = {str(s["metric"].get(names.STATE, "")): round(_finite(s["value"][1])) for s in states}
        prefix = await self._scalar(f"max({names.WIN_PREFIX_CACHE_HIT_RATIO}{v})", now)
        return ArmData(requests=requests, histograms=hists, golden=golden, live_checks=live, drift=drift,
                       golden_judge_errors=golden_errors,
                       slices=slices, cost_per_million_tokens=cost, paired=paired, paired_note=note,
                       judge_identity=identity, http_status=statuses,
                       replicas=None if replicas is None else round(replicas), prefix_cache_hit_ratio=prefix,
                       environment=await self._environment(v, now), admission_rejections=rejected, spec_decode=spec,
                       corrupted=corrupted,
                       replicas_unhealthy=in_state.get("unhealthy", 0), replicas_asleep=in_state.get("asleep", 0),
                       replicas_hung=in_state.get("hung", 0),
                       router_trouble="the router's pool was saturated or had stale endpoints in the window"
                       if saturated else "")

    async def _environment(self, v: str, now: float) -> dict[str, str]:
        """The same-environment facts the observer exported for the version (VERSION_ENVIRONMENT); with two
        observer replicas both series carry the same labels."""
        res = await self.query(f"max by ({', '.join(ENVIRONMENT_KEYS)}) ({names.VERSION_ENVIRONMENT}{v})", at=now)
        if not res:
            return {}
        labels = min((s["metric"] for s in res), key=lambda m: sorted(m.items()))
        return {k: str(labels[k]) for k in ENVIRONMENT_KEYS if labels.get(k)}


def _finite(raw: object) -> float:
    v = float(str(raw))
    return v if math.isfinite(v) and v > 0 else 0.0


def histogram_from_vector(result: Sequence[Mapping[str, Any]]) -> Histogram | None:
    """Build a Histogram from a `sum by (le)` instant vector (None when empty or without +Inf)."""
    points: list[tuple[float, str, float]] = []
    inf: float | None = None
    for s in result:
        le = str(s["metric"].get("le", ""))
        value = _finite(s["value"][1])
        if le == "+Inf":
            inf = value
            continue
        try:
            points.append((float(le), le, value))
        except ValueError:
            continue
    if inf is None:
        return None
    points.sort()
    # increase() extrapolates each bucket separately: restore monotonicity as histogram_quantile does.
    cum: list[float] = []
    for _, _, value in points:
        cum.append(max(value, cum[-1] if cum else 0.0))
    inf = max(inf, cum[-1] if cum else 0.0)
    return Histogram(bounds=tuple(p[0] for p in points), cumulative=(*cum, inf), sum=0.0, count=inf,
                     le_labels=tuple(p[1] for p in points))
