"""One drift check of one version: window samples vs the active baseline of its model, every field.

Every test relabels whole units — conversations where samples carry a key, time slices where they do not
(observer.analyse.drift.units) — and every result names its units and its effect against the baseline's own
spread (observer.analyse.drift.calibrate). Synchronous and heavy (embedding, relabelling tests): the component
runs it in a worker thread; the CLI calls it directly. The report it returns is ungated (`drift` = this window
is shifted); DriftState gates.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from observer.analyse.drift import baseline as bl
from observer.analyse.drift.arms import arms_test
from observer.analyse.drift.calibrate import Calibration
from observer.analyse.drift.explain import ShiftedExample, most_shifted
from observer.analyse.drift.features import FEATURES, extract
from observer.analyse.drift.mmd import median_sq_distance
from observer.analyse.drift.scalar import compare_features
from observer.analyse.drift.state import DriftReport, DriftResult, Status
from observer.analyse.drift.units import MAX_UNITS, MIN_UNITS, Units, assign, cap, kernel_sums, mmd_test
from observer.analyse.embed import Embedder
from observer.config.drift import DriftSpec
from observer.config.spec import ObserverConfig
from observer.errors import BaselineError
from observer.store.base import SampleStore, StoredSample

log = logging.getLogger("observer.drift")
ARMS_METHOD = "slice_signflip"
ARMS_FLIPS = 1999
"""Sign flips of the gate at least (cheap: one small matrix product): its two p-values are doubled
(Bonferroni), so the smallest reachable p must sit well under any alpha."""


def model_key(config: ObserverConfig, version: str, samples: list[StoredSample]) -> str:
    """The baseline model a version is compared against: override, configured model, samples' model, name."""
    if version in config.drift.models:
        return config.drift.models[version]
    try:
        configured = config.fleet.version(version).model
    except KeyError:
        configured = None
    if configured:
        return configured
    seen = Counter(s.model for s in samples if s.model)
    return seen.most_common(1)[0][0] if seen else version


def select(store: SampleStore, version: str, *, since: float | None, until: float | None, limit: int | None,
           sources: Sequence[str]) -> list[StoredSample]:
    """A version's newest samples from `sources` in [since, until), at most `limit`, newest first."""
    rows = [s for src in dict.fromkeys(sources)
            for s in store.samples(version, since=since, until=until, limit=limit, source=src)]
    rows.sort(key=lambda s: (s.ts, s.id), reverse=True)
    return rows if limit is None else rows[:limit]


@dataclass
class Checker:
    """Runs drift checks; the embedder is created on first need (torch loads only then)."""

    config: ObserverConfig
    store: SampleStore
    repo: bl.BaselineRepo
    embedder_factory: Callable[[], Embedder]
    _embedder: Embedder | None = field(default=None, init=False)
    _references: dict[tuple[str, str], tuple[float, npt.NDArray[np.float64]]] = field(default_factory=dict,
                                                                                     init=False)

    @property
    def spec(self) -> DriftSpec:
        return self.config.drift

    def embedder(self) -> Embedder:
        """The embedder, created once."""
        if self._embedder is None:
            self._embedder = self.embedder_factory()
        return self._embedder

    def loaded_embedder(self) -> Embedder | None:
        """The embedder if a check has loaded it (None: not yet; reading this never loads the model)."""
        return self._embedder

    def window(self, version: str, *, now: float) -> list[StoredSample]:
        """The newest samples of the window (at most max_window_samples) from the configured sources."""
        return select(self.store, version, since=now - self.spec.window_seconds, until=now + 1e-6,
                      limit=self.spec.max_window_samples, sources=self.spec.sources)

    def run(self, version: str, *, now: float, model: str | None = None) -> DriftReport:
        """Check `version` now; never raises for missing data (the report's status says why)."""
        spec = self.spec
        samples = self.window(version, now=now)
        key = model or model_key(self.config, version, samples)
        since = now - spec.window_seconds
        base = DriftReport(version=version, model=key, checked_at=now, status="ok", since=since, until=now)
        baseline = self.repo.active(key)
        if baseline is None:
            return _all_status(base, "no_baseline", f"no active baseline for model {key!r}: run `observer "
                               f"baseline pin --version {version}` and `observer baseline promote`", spec, 0)
        base = DriftReport(version=version, model=key, checked_at=now, status="ok", since=since, until=now,
                           embedder=baseline.meta.embedder_model, baseline_hash=baseline.hash, baseline=baseline.meta)
        if len(samples) < spec.min_samples:
            # Before the embedder: loading the model (hundreds of MB) is only worth it with data to compare.
            return _all_status(base, "insufficient_data", f"{len(samples)} samples in the last "
                               f"{spec.window_seconds:g}s, need {spec.min_samples}", spec, baseline.meta.n,
                               n_current=len(samples))
        try:
            ref_all = baseline.units(spec.slice_seconds)
        except BaselineError as e:
            return _all_status(base, "no_baseline", str(e), spec, baseline.meta.n, n_current=len(samples))
        embedder = self.embedder()
        bl.check_compatible(baseline, embedder)
        base = replace(base, embedder=embedder.model_id)
        cur_all = assign([s.conversation for s in samples], [s.ts for s in samples], slice_seconds=spec.slice_seconds)
        keep_r, keep_c = cap(ref_all, MAX_UNITS, spec.seed), cap(cur_all, MAX_UNITS, spec.seed + int(now))
        ref_units, cur_units = ref_all.subset(keep_r), cur_all.subset(keep_c)
        calibration = Calibration.from_json(baseline.meta.calibration)
        seed = spec.seed + int(now) % 1_000_003
        results: dict[str, DriftResult] = {}
        examples: dict[str, tuple[ShiftedExample, ...]] = {}
        for name in spec.fields:
            texts = [s.prompt if name == "prompts" else s.output for s in samples]
            current = embedder.embed(texts)
            ref = baseline.embeddings[name]
            examples[name] = tuple(most_shifted(ref, current, texts, k=spec.explain_examples))
            if ref_units.count < MIN_UNITS or cur_units.count < MIN_UNITS:
                results[name] = _short(name, f"{cur_units.describe()} in the window, {ref_units.describe()} in the "
                                             f"baseline: a test needs {MIN_UNITS} a side", len(samples),
                                       baseline.meta.n)
                continue
            bandwidth, k_rr = self._reference(baseline, name, keep_r, ref_units)
            t = mmd_test(ref[keep_r], ref_units, current[keep_c], cur_units, sq_bandwidth=bandwidth,
                         permutations=spec.permutations, alpha=spec.alpha, seed=seed, k_rr=k_rr)
            shifted = t.p_value < spec.alpha
            results[name] = DriftResult(field=name, statistic=t.statistic, p_value=t.p_value, drift=shifted,
                                        shifted=shifted, n_current=int(keep_c.sum()), n_baseline=int(keep_r.sum()),
                                        method=UNIT_MMD, status="ok", units=_units(cur_units, ref_units),
                                        relative_effect=_relative(t.statistic, calibration, name))
        features = compare_features(baseline.features, ref_all, extract(samples, names=spec.features), cur_all,
                                    alpha=spec.feature_alpha, min_samples=spec.min_samples,
                                    permutations=spec.permutations, seed=seed)
        for f in features:
            results[f.feature] = DriftResult(
                field=f.feature, statistic=f.statistic, p_value=f.p_value, drift=f.drift, shifted=f.drift,
                n_current=f.n_current, n_baseline=f.n_baseline, method=f.method, status=f.status,
                p_adjusted=f.p_adjusted, effect_size=f.effect_size, effect=f.effect,
                units=_units(cur_all, ref_all),
                relative_effect=_relative(f.effect_size, calibration, f.feature) if f.status == "ok" else None)
        moved = sorted(k for k, r in results.items() if r.shifted)
        message = f"shifted this window: {', '.join(moved)}" if moved else "no field shifted this window"
        if cur_all.kind == "mixed":
            message += f"; units: {cur_all.describe()}"
        return DriftReport(version=version, model=key, checked_at=now, status="ok", message=message, since=since,
                           until=now, embedder=embedder.model_id, baseline_hash=baseline.hash,
                           baseline=baseline.meta, results=results, features=tuple(features), examples=examples)

    def _reference(self, baseline: bl.Baseline, name: str, keep: npt.NDArray[np.bool_], units: Units
                   ) -> tuple[float, npt.NDArray[np.float64]]:
        """The baseline's kernel bandwidth and its own unit-pair kernel sums for `name` (they never change: kept
        for the next check, a few baselines at most)."""
        got = self._references.get((baseline.hash, name))
        if got is None:
            ref = baseline.embeddings[name][keep]
            bandwidth = median_sq_distance(ref, seed=self.spec.seed)
            got = bandwidth, kernel_sums(ref, units.index, units.count, ref, units.index, units.count,
                                         gamma=1.0 / (2.0 * bandwidth))
            if len(self._references) >= 2 * len(bl.FIELDS) * 2:
                self._references.clear()
            self._references[(baseline.hash, name)] = got
        return got


UNIT_MMD = "units_mmd_rbf"


def _arm_units(samples: Sequence[StoredSample], since: float, slice_seconds: float) -> tuple[list[int], list[int]]:
    """(slice, group) of each of an arm's samples for the drift gate. A conversation counts whole in the slice of
    its first turn (its turns in two slices would tie their differences together) and is its own group, outside
    which a text's nearest baseline texts are sought; a sample without a key is in its time slice, its group."""
    first: dict[str, float] = {}
    for s in samples:
        if s.conversation:
            first[s.conversation] = min(first.get(s.conversation, s.ts), s.ts)
    groups = {key: -1 - i for i, key in enumerate(first)}  # negative: never a slice number
    slices = [int(((first[s.conversation] if s.conversation else s.ts) - since) // slice_seconds) for s in samples]
    return slices, [groups[s.conversation] if s.conversation else sl for s, sl in zip(samples, slices, strict=True)]


def _units(current: Units, baseline: Units) -> str:
    return f"window: {current.describe()}; baseline: {baseline.describe()}"


def _relative(statistic: float, calibration: Calibration | None, name: str) -> float | None:
    """`statistic` ÷ the baseline's own spread of it (None: the baseline did not measure it)."""
    spread = calibration.spread.get(name) if calibration is not None else None
    if spread is None or not spread > 0:
        return None
    return statistic / spread


def _short(name: str, why: str, n_current: int, n_baseline: int) -> DriftResult:
    nan = float("nan")
    return DriftResult(field=name, statistic=nan, p_value=nan, drift=False, n_current=n_current,
                       n_baseline=n_baseline, method=UNIT_MMD, status="insufficient_data", units=why)


def arms(checker: Checker, canary: str, baseline: str, *, now: float, slice_seconds: float) -> dict[str, DriftResult]:
    """The drift gate: `canary`'s window texts against `baseline`'s in the same window, per field, time slices
    as the independent units (observer.analyse.drift.arms); results keyed `<field>:baseline`."""
    spec = checker.spec
    since = now - spec.window_seconds
    c, b = checker.window(canary, now=now), checker.window(baseline, now=now)
    nan = float("nan")
    out: dict[str, DriftResult] = {}
    for name in spec.fields:
        key = f"{name}:baseline"
        result = None
        if len(c) >= spec.min_samples and len(b) >= spec.min_samples:
            emb = checker.embedder()
            texts = [[s.prompt if name == "prompts" else s.output for s in arm] for arm in (c, b)]
            (slices_c, groups_c), (slices_b, groups_b) = (_arm_units(arm, since, slice_seconds) for arm in (c, b))
            result = arms_test(emb.embed(texts[1]), slices_b, emb.embed(texts[0]), slices_c,
                               flips=max(spec.permutations, ARMS_FLIPS), seed=spec.seed + int(now) % 1_000_003,
                               baseline_groups=groups_b, canary_groups=groups_c)
        if result is None:  # too few samples, or too few slices both arms served
            out[key] = DriftResult(field=key, statistic=nan, p_value=nan, drift=False, n_current=len(c),
                                   n_baseline=len(b), method=ARMS_METHOD, status="insufficient_data")
            continue
        shifted = bool(result.p_value < spec.alpha)
        out[key] = DriftResult(field=key, statistic=result.statistic, p_value=result.p_value, drift=shifted,
                               shifted=shifted,
                               n_current=result.n_canary, n_baseline=result.n_baseline, method=ARMS_METHOD,
                               status="ok")
    return out


def _all_status(base: DriftReport, status: Status, message: str, spec: DriftSpec, n_baseline: int, *,
                n_current: int = 0) -> DriftReport:
    names = list(spec.fields) + list(spec.features if spec.features is not None else FEATURES)
    nan = float("nan")
    results = {n: DriftResult(field=n, statistic=nan, p_value=nan, drift=False, n_current=n_current,
                              n_baseline=n_baseline, method=UNIT_MMD if n in spec.fields else "",
                              status=status)
               for n in names}
    return replace(base, status=status, message=message, results=results)
