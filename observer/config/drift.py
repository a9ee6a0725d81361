"""Embedding drift against pinned baselines. Owned by that area; the root config includes it."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from observer.config.base import Spec

DRIFT_FIELDS: tuple[str, ...] = ("prompts", "outputs")
SCALAR_FEATURES: tuple[str, ...] = ("prompt_tokens", "output_tokens", "output_chars", "latency_s", "ttft_s",
                                    "finish_reason", "refusal")
"""Names of the scalar features (observer.analyse.drift.features implements exactly these)."""


DriftField = Literal["prompts", "outputs"]


def _all_fields() -> list[DriftField]:
    return ["prompts", "outputs"]


def _live_sources() -> list[Literal["proxy", "ingest", "otel", "golden"]]:
    return ["proxy", "ingest", "otel"]


class EmbedderSpec(Spec):
    """Which embedding model turns texts into vectors, and its cache."""

    kind: Literal["local", "remote"] = Field(
        "local", description="local: bundled all-MiniLM-L6-v2 on CPU; remote: an OpenAI-compatible /v1/embeddings."
    )
    url: str | None = Field(None, description="Base URL (…/v1) of the remote embeddings endpoint.")
    model: str | None = Field(None, description="Model name sent to the remote endpoint.")
    api_key_env: str | None = Field(None, description="Name of the environment variable holding its API key.")
    dim: int | None = Field(None, ge=1, description="Remote embedding dimension (default: probed once).")
    timeout_seconds: float = Field(30.0, gt=0, le=600, description="Remote request timeout.")
    truncate_tokens: int | None = Field(
        None, ge=-1, description="Remote: send vLLM's `truncate_prompt_tokens`, so a text longer than the embedding "
                                 "model's context is cut (-1: at the served model's limit) instead of failing its "
                                 "whole batch with HTTP 400, as the local model cuts at 256 word pieces. Unset for "
                                 "endpoints that reject parameters they do not know.")
    batch_size: int = Field(64, ge=1, le=4096, description="Texts per model batch or remote request.")
    cache_dir: str | None = Field(
        "observer-embed-cache", description="Directory of the on-disk embedding cache (null: memory only)."
    )
    max_cache_entries: int = Field(
        200_000, ge=0, le=50_000_000, description="Most cached vectors (least recently used evicted first)."
    )

    @model_validator(mode="after")
    def _remote(self) -> EmbedderSpec:
        if self.kind == "remote" and (not self.url or not self.model):
            raise ValueError("embedder.kind remote needs embedder.url and embedder.model")
        return self


class DriftSpec(Spec):
    """Embedding drift against pinned baselines."""

    enabled: bool = Field(True, description="Turn this area on or off.")
    interval_seconds: float = Field(900.0, ge=10, description="Seconds between drift checks of every version.")
    window_seconds: float = Field(3600.0, gt=0, description="A check compares the samples of this last window.")
    min_samples: int = Field(
        200, ge=10, description="Fewer current samples than this: status insufficient_data, no verdict."
    )
    max_window_samples: int = Field(
        2000, ge=10, le=20_000, description="At most this many newest samples of a window are tested."
    )
    max_baseline_samples: int = Field(
        5000, ge=10, le=50_000, description="A pinned baseline keeps at most this many samples (seeded subsample)."
    )
    permutations: int = Field(1000, ge=99, le=100_000, description="Permutations of the MMD test.")
    alpha: float = Field(0.01, gt=0, lt=1, description="A window is 'shifted' when its p-value is below this.")
    consecutive: int | None = Field(
        None, ge=1, le=1000, description="Drift is flagged after this many consecutive shifted windows "
                                         "(persistence). null: sized to false_alarms_per_30_days from the "
                                         "windows' overlap and the baseline's own false-alarm rate (docs/drift.md).")
    false_alarms_per_30_days: float = Field(
        1.0, gt=0, le=100, description="The false ObserverDriftDetected a version may raise in 30 days, all fields "
                                       "together: what the persistence rule is sized to (consecutive: null).")
    min_effect: float = Field(
        1.0, ge=0, description="A field is flagged only when its effect size reaches this: its statistic ÷ the 95th "
                               "percentile of the baseline's own windows against the rest (1: as far as the "
                               "baseline's own hours wander). A smaller shift, however significant, stays `shifted`.")
    min_baseline_units: int = Field(
        50, ge=2, le=100_000, description="Independent units (conversations, time slices) a pinned baseline needs; "
                                          "a pin over fewer is refused, naming how much more traffic it needs.")
    slice_seconds: float = Field(
        600.0, ge=10, le=86_400, description="Samples without a conversation key are grouped into time slices this "
                                             "long: the drift tests' independent units where no key says which "
                                             "conversation a sample belongs to.")
    feature_alpha: float = Field(0.01, gt=0, lt=1, description="BH-adjusted level of the scalar feature tests.")
    fields: list[DriftField] = Field(default_factory=_all_fields, description="Embedding fields tested.")
    sources: list[Literal["proxy", "ingest", "otel", "golden"]] = Field(
        default_factory=_live_sources,
        description="Sample sources in windows and default pins (golden-set replays are not live traffic).",
    )
    features: list[str] | None = Field(None, description="Scalar features tested (default: all).")
    explain_examples: int = Field(5, ge=0, le=50, description="Most shifted example texts kept per field.")
    baseline_dir: str = Field("observer-baselines", description="Directory of pinned baselines.")
    models: dict[str, str] = Field(
        default_factory=dict,
        description="Version → baseline model key (default: the version's model, else its samples' model).",
    )
    seed: int = Field(0, description="Seed of permutations and subsampling.")
    compare_arms: bool = Field(
        False, description="Also test each canary's texts against its baseline's in the same window, slice by "
                           "slice (results `prompts:baseline`, `outputs:baseline`): a canary metric of kind drift "
                           "on such a field gates on drift (docs/drift.md, the drift gate).")
    embedder: EmbedderSpec = Field(default_factory=EmbedderSpec, description="The embedding model.")

    @model_validator(mode="after")
    def _features(self) -> DriftSpec:
        if self.min_samples > self.max_window_samples:
            raise ValueError(f"min_samples ({self.min_samples}) exceeds max_window_samples "
                             f"({self.max_window_samples}): no window could ever be tested")
        if self.features is not None:
            unknown = sorted(set(self.features) - set(SCALAR_FEATURES))
            if unknown:
                raise ValueError(f"unknown drift feature(s) {unknown}; known: {list(SCALAR_FEATURES)}")
        # A relabelling p-value is at least 1 / (permutations + 1); BH across the features needs the smallest
        # below feature_alpha / features for one moved feature to be flagged at all.
        features = len(self.features if self.features is not None else SCALAR_FEATURES)
        for what, level, k in (("alpha", self.alpha, 1), ("feature_alpha", self.feature_alpha, features)):
            if (self.permutations + 1) * level < k:
                raise ValueError(f"permutations ({self.permutations}) cannot reach {what} {level:g}"
                                 + (f" across {k} features (Benjamini-Hochberg)" if k > 1 else "")
                                 + f": a p-value is at least 1/(permutations + 1); set permutations to at least "
                                   f"{math.ceil(k / level) - 1}")
        return self
