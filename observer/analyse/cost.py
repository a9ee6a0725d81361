"""Cost and energy per version, integrated one scrape cycle at a time.

Per version and cycle (Δt since the previous cycle, capped at `max_gap_seconds` so an observer that was
down does not bill the gap at the last known size):

- **GPU-seconds**: every DCGM GPU attributed to the version's pods (one GPU serving two versions counts
  for each, as DCGM attribution does everywhere else) × Δt, by GPU model. Without DCGM GPUs: replicas up ×
  `gpus_per_replica` × Δt, of the configured `gpu_model`.
- **Cost**: GPU-seconds × the model's price per GPU-second; without DCGM, replica-seconds × the
  replica price. A GPU of a model with no price adds unpriced GPU-seconds (counted, warned once per model),
  never a guessed cost. Idle GPUs cost what busy ones do: that is what the bill says.
- **Energy**: per GPU, the increase of DCGM's total-energy counter (mJ) when the GPU reports it (a counter
  that went down — a GPU reset — uses power × Δt for that cycle), else its power reading × Δt. A version
  with no power reading has no energy at all (absent, never 0).

Everything is a running total (monotonic while the observer runs); ratios over a window (cost per million
tokens, per thousand requests, joules per token) are differences of these totals over differences of the
version's token and request counters, absent when the denominator did not grow.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import assert_never

from observer.analyse.window import History
from observer.collect.model import GpuMetrics
from observer.config.cost import CostSpec
from observer.conventions.labels import TokenKind

log = logging.getLogger("observer.cost")

UNKNOWN_MODEL = "unknown"  # a GPU whose DCGM series carry no modelName
OTHER_MODELS = "other"  # GPU models beyond the label bound


@dataclass(frozen=True)
class CostTotals:
    """Running totals of one version (seconds, currency, joules)."""

    replica_seconds: float = 0.0
    gpu_seconds: tuple[tuple[str, float], ...] = ()  # (GPU model, seconds), sorted
    unpriced_gpu_seconds: tuple[tuple[str, float], ...] = ()
    cost: float = 0.0
    energy_joules: float | None = None
    # The version's own running counters at the same cycle, so window ratios use one pair of points.
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    requests: float | None = None
    computed_prompt_tokens: float | None = None
    """Prompt tokens the engines prefilled (None unless every replica reports it)."""


@dataclass(frozen=True)
class CostWindow:
    """Increases of one version's cost totals (and its counters) over a window."""

    seconds: float
    cost: float
    energy_joules: float | None
    unpriced_gpu_seconds: float
    prompt_tokens: float | None
    generation_tokens: float | None
    requests: float | None
    computed_prompt_tokens: float | None = None

    def per_million_tokens(self, kind: TokenKind) -> float | None:
        """Cost per million `kind` tokens (prompt | generation | total | computed): the whole cost over those
        tokens. `computed` counts the work done: the prompt tokens prefilled (not served from a cache or
        transferred) plus the generated ones."""
        n = self._tokens(kind)
        return self.cost / n * 1e6 if n else None

    def per_thousand_requests(self) -> float | None:
        return self.cost / self.requests * 1e3 if self.requests else None

    def joules_per_token(self, kind: TokenKind) -> float | None:
        n = self._tokens(kind)
        return self.energy_joules / n if n and self.energy_joules is not None else None

    def _tokens(self, kind: TokenKind) -> float | None:
        n: float | None
        match kind:
            case TokenKind.TOTAL:
                parts = [t for t in (self.prompt_tokens, self.generation_tokens) if t is not None]
                n = sum(parts) if parts else None
            case TokenKind.COMPUTED:
                n = None if self.computed_prompt_tokens is None or self.generation_tokens is None else \
                    self.computed_prompt_tokens + self.generation_tokens
            case TokenKind.PROMPT:
                n = self.prompt_tokens
            case TokenKind.GENERATION:
                n = self.generation_tokens
            case _:
                assert_never(kind)
        return n if n is not None and n > 0 else None


@dataclass
class _Acc:
    history: History[CostTotals]
    last_ts: float | None = None
    replica_seconds: float = 0.0
    gpu_seconds: dict[str, float] = field(default_factory=dict)
    unpriced: dict[str, float] = field(default_factory=dict)
    cost: float = 0.0
    energy: float | None = None
    energy_mj: dict[str, float] = field(default_factory=dict)  # GPU key → last total-energy reading


class CostMeter:
    """Integrates GPU-seconds, cost and energy per version; bounded by versions × GPU models."""

    def __init__(self, spec: CostSpec, *, max_gap_seconds: float) -> None:
        self.spec = spec
        self.max_gap_seconds = max_gap_seconds
        self._acc: dict[str, _Acc] = {}
        self._models: set[str] = set()
        self._warned: set[str] = set()

    def retain(self, versions: Sequence[str]) -> None:
        """Forget versions that left the fleet (their series end)."""
        for gone in self._acc.keys() - set(versions):
            del self._acc[gone]

    def _model(self, name: str | None) -> str:
        model = (name or UNKNOWN_MODEL)[:64]
        if model not in self._models and len(self._models) >= self.spec.max_gpu_models:
            return OTHER_MODELS
        self._models.add(model)
        return model

    def observe(self, version: str, *, ts: float, replicas_up: int, gpus: Sequence[GpuMetrics],
                prompt_tokens: float | None = None, generation_tokens: float | None = None,
                requests: float | None = None, computed_prompt_tokens: float | None = None) -> CostTotals:
        """Add one cycle of `version` (its replicas up and attributed GPUs at `ts`, and its running token and
        request counters then); return its totals."""
        acc = self._acc.get(version)
        if acc is None:
            keep = 1.5 * self.spec.window_seconds
            acc = self._acc[version] = _Acc(history=History(fine_seconds=keep, retention_seconds=keep))
        dt = 0.0 if acc.last_ts is None else min(max(0.0, ts - acc.last_ts), self.max_gap_seconds)
        acc.last_ts = ts
        acc.replica_seconds += replicas_up * dt
        if gpus:
            for g in gpus:
                model = self._model(g.model_name)
                acc.gpu_seconds[model] = acc.gpu_seconds.get(model, 0.0) + dt
                price = self.spec.price_per_gpu_second(g.model_name)
                if price is None:
                    acc.unpriced[model] = acc.unpriced.get(model, 0.0) + dt
                    if model not in self._warned:
                        self._warned.add(model)
                        log.warning("cost: GPU model %r (version %s) has no price in cost.gpu_hour_prices; its "
                                    "GPU-hours are counted as unpriced", model, version)
                else:
                    acc.cost += price * dt
                joules = self._joules(acc, g, dt)
                if joules is not None:
                    acc.energy = (acc.energy or 0.0) + joules
        elif replicas_up and self.spec.gpus_per_replica:
            model = self._model(self.spec.gpu_model) if self.spec.gpu_model else UNKNOWN_MODEL
            acc.gpu_seconds[model] = acc.gpu_seconds.get(model, 0.0) + replicas_up * self.spec.gpus_per_replica * dt
        if not gpus:
            price = self.spec.price_per_replica_second()
            if price is not None:
                acc.cost += price * replicas_up * dt
        totals = CostTotals(replica_seconds=acc.replica_seconds, gpu_seconds=tuple(sorted(acc.gpu_seconds.items())),
                            unpriced_gpu_seconds=tuple(sorted(acc.unpriced.items())), cost=acc.cost,
                            energy_joules=acc.energy, prompt_tokens=prompt_tokens,
                            generation_tokens=generation_tokens, requests=requests,
                            computed_prompt_tokens=computed_prompt_tokens)
        acc.history.append(ts, totals)
        return totals

    @staticmethod
    def _joules(acc: _Acc, g: GpuMetrics, dt: float) -> float | None:
        """This cycle's energy of one GPU: its total-energy counter's increase, else power × Δt."""
        if g.energy_mj is not None and math.isfinite(g.energy_mj):
            key = g.uuid or g.gpu
            before = acc.energy_mj.get(key)
            acc.energy_mj[key] = g.energy_mj
            if before is not None and g.energy_mj >= before:
                return (g.energy_mj - before) / 1000.0
        if g.power_w is not None and math.isfinite(g.power_w):  # no counter, its first reading, or a reset
            return g.power_w * dt
        return None

    def window(self, version: str, *, since: float) -> CostWindow | None:
        """Increases since the newest point at or before `since` (the oldest one when younger)."""
        acc = self._acc.get(version)
        latest = None if acc is None else acc.history.latest()
        base = None if acc is None else acc.history.at(since)
        if latest is None or base is None:
            return None
        (t1, new), (t0, old) = latest, base
        energy = None
        if new.energy_joules is not None:
            energy = new.energy_joules - (old.energy_joules or 0.0)
        unpriced = sum(s for _, s in new.unpriced_gpu_seconds) - sum(s for _, s in old.unpriced_gpu_seconds)

        def delta(a: float | None, b: float | None) -> float | None:
            return None if a is None else a - (b or 0.0)

        return CostWindow(seconds=t1 - t0, cost=new.cost - old.cost, energy_joules=energy,
                          unpriced_gpu_seconds=unpriced, prompt_tokens=delta(new.prompt_tokens, old.prompt_tokens),
                          generation_tokens=delta(new.generation_tokens, old.generation_tokens),
                          requests=delta(new.requests, old.requests),
                          # a window that began before every replica reported it has no base: absent
                          computed_prompt_tokens=None if old.computed_prompt_tokens is None else
                          delta(new.computed_prompt_tokens, old.computed_prompt_tokens))

    def totals(self, version: str) -> CostTotals | None:
        """The running totals after the last cycle."""
        acc = self._acc.get(version)
        latest = None if acc is None else acc.history.latest()
        return None if latest is None else latest[1]
