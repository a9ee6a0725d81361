"""Scalar features of samples and their unit-relabelling tests (mean rank, chi-square) with Benjamini-Hochberg."""

from __future__ import annotations

import numpy as np
import pytest

from observer.analyse.drift.features import FEATURES, extract, is_refusal
from observer.analyse.drift.scalar import FeatureResult
from observer.analyse.drift.scalar import compare_features as compare_units
from observer.analyse.drift.units import Units, assign
from observer.config.drift import SCALAR_FEATURES
from observer.store.base import SampleRecord


def test_feature_names_match_the_config_list() -> None:
    assert tuple(FEATURES) == SCALAR_FEATURES


@pytest.mark.parametrize(
    ("text", "refusal"),
    [
        ("I'm sorry, but I can't help with that request.", True),
        ("I’m sorry, but I cannot provide that.", True),
        ("I cannot assist with creating malware.", True),
        ("As an AI language model, I cannot browse the internet.", True),
        ("Sure! Here's how to bake bread: mix flour and water.", False),
        ("The answer is 42. " * 40 + "I'm sorry, but I can't", False),  # a quote far down is not a refusal
    ],
    ids=["sorry-but", "curly-quote", "cannot-assist", "as-an-ai", "answer", "late-quote"],
)
def test_refusal_detection(text: str, refusal: bool) -> None:
    assert is_refusal(text) is refusal


def test_extract_columns_with_missing_values() -> None:
    samples = [
        SampleRecord(version="v", prompt="p", output="hello", ts=1.0, prompt_tokens=10, output_tokens=3,
                     finish_reason="stop", latency_s=0.5),
        SampleRecord(version="v", prompt="p", output="I'm sorry, but I can't do that.", ts=2.0,
                     finish_reason="weird"),
        SampleRecord(version="v", prompt="p", output="", ts=3.0, finish_reason=None),
    ]
    cols = extract(samples)
    assert set(cols) == set(FEATURES)
    np.testing.assert_array_equal(cols["prompt_tokens"][:1], [10.0])
    assert np.isnan(cols["prompt_tokens"][1])
    assert cols["finish_reason"].tolist() == ["stop", "other", "unknown"]  # bounded categories
    assert cols["refusal"].tolist() == ["no", "yes", "no"]
    assert cols["output_chars"].tolist() == [5.0, 31.0, 0.0]
    with pytest.raises(ValueError, match="unknown drift feature"):
        extract(samples, names=["colour"])


def _singles(n: int) -> Units:
    return assign([f"k{i}" for i in range(n)], [0.0] * n, slice_seconds=60.0)


def compare_features(base: dict, cur: dict, *, alpha: float, min_samples: int) -> list[FeatureResult]:
    """Every sample its own unit: the relabelling test is the plain permutation test."""
    nb, nc = len(next(iter(base.values()))), len(next(iter(cur.values())))
    return compare_units(base, _singles(nb), cur, _singles(nc), alpha=alpha, min_samples=min_samples,
                         permutations=999, seed=0)


def _cols(rng: np.random.Generator, n: int, *, shift: float = 0.0, length_rate: float = 0.05) -> dict:
    return {
        "output_tokens": rng.normal(200 + shift, 40, n),
        "latency_s": rng.gamma(2.0, 1.0, n),
        "finish_reason": rng.choice(["stop", "length"], n, p=[1 - length_rate, length_rate]).astype("<U16"),
    }


def test_only_the_moved_features_are_flagged_with_effect_sizes() -> None:
    rng = np.random.default_rng(0)
    base = _cols(rng, 2000)
    cur = _cols(rng, 800, shift=30, length_rate=0.15)
    results = {r.feature: r for r in compare_features(base, cur, alpha=0.01, min_samples=50)}
    assert results["output_tokens"].drift and results["output_tokens"].method == "units_rank"
    assert 0.2 < results["output_tokens"].effect_size < 0.5 and results["output_tokens"].effect == "ks_d"
    assert results["finish_reason"].drift and results["finish_reason"].method == "units_chi2"
    assert results["finish_reason"].effect == "cramers_v" and results["finish_reason"].effect_size > 0.1
    assert results["finish_reason"].current_summary["length"] == pytest.approx(0.15, abs=0.04)
    assert not results["latency_s"].drift
    for r in results.values():
        assert r.p_adjusted >= r.p_value  # BH never makes a p-value smaller


def test_benjamini_hochberg_adjustment_values() -> None:
    rng = np.random.default_rng(1)
    base = _cols(rng, 500)
    cur = _cols(rng, 500, shift=8)
    results = compare_features(base, cur, alpha=0.05, min_samples=50)
    p = np.array([r.p_value for r in results])
    order = np.argsort(p)
    m = len(p)
    expected = np.minimum.accumulate((p[order] * m / np.arange(1, m + 1))[::-1])[::-1]
    np.testing.assert_allclose(np.array([r.p_adjusted for r in results])[order], np.minimum(expected, 1))


def test_no_drift_features_stay_quiet_across_seeds() -> None:
    flagged = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        results = compare_features(_cols(rng, 400), _cols(rng, 400), alpha=0.05, min_samples=50)
        flagged += any(r.drift for r in results)
    assert flagged <= 6  # family-wise ≤ α-ish with BH under the global null (expect ~2 of 40)


def test_insufficient_data_and_single_category() -> None:
    rng = np.random.default_rng(2)
    base = {"ttft_s": np.full(100, np.nan), "refusal": np.array(["no"] * 100)}
    cur = {"ttft_s": rng.random(100), "refusal": np.array(["no"] * 100)}
    results = {r.feature: r for r in compare_features(base, cur, alpha=0.05, min_samples=20)}
    assert results["ttft_s"].status == "insufficient_data" and not results["ttft_s"].drift
    assert results["ttft_s"].n_baseline == 0
    assert results["refusal"].status == "ok" and results["refusal"].p_value == 1.0


def test_a_conversations_alike_turns_are_not_taken_for_drift() -> None:
    """Token counts alike within a conversation (five turns each): the same populations, tested with the
    conversations as units, stay quiet; tested sample by sample they are flagged most of the time."""
    flagged = {"units": 0, "samples": 0}
    for seed in range(30):
        rng = np.random.default_rng(seed)
        cols = [{"output_tokens": np.repeat(rng.normal(200, 60, n), 5) + rng.normal(0, 5, 5 * n)} for n in (80, 60)]
        units = [assign([f"c{i // 5}" for i in range(5 * n)], [0.0] * 5 * n, slice_seconds=60.0) for n in (80, 60)]
        r = compare_units(cols[0], units[0], cols[1], units[1], alpha=0.05, min_samples=50, permutations=499,
                          seed=seed)
        flagged["units"] += r[0].drift
        flagged["samples"] += compare_features(cols[0], cols[1], alpha=0.05, min_samples=50)[0].drift
    assert flagged["units"] <= 4 and flagged["samples"] >= 10, flagged
