"""The vectorised permutation MMD test against a naive implementation, and its behaviour on edge cases."""

from __future__ import annotations

import numpy as np
import pytest

from observer.analyse.drift.mmd import (
    centroid_many,
    median_sq_distance,
    membership,
    mmd2_unbiased_many,
    permutation_test,
)


def _naive_mmd2(x: np.ndarray, y: np.ndarray, gamma: float) -> float:
    def k(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.exp(-gamma * ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1))

    m, n = len(x), len(y)
    kxx, kyy, kxy = k(x, x), k(y, y), k(x, y)
    return float((kxx.sum() - np.trace(kxx)) / (m * (m - 1)) + (kyy.sum() - np.trace(kyy)) / (n * (n - 1))
                 - 2 * kxy.mean())


@pytest.mark.parametrize("block_rows", [1, 7, 1024], ids=lambda b: f"block{b}")
def test_every_permutation_matches_the_naive_estimator(block_rows: int) -> None:
    rng = np.random.default_rng(3)
    z = rng.standard_normal((25, 6)).astype(np.float32)
    a = membership(15, 10, 5, rng)
    got = mmd2_unbiased_many(z, a, gamma=0.1, block_rows=block_rows)
    for j in range(a.shape[1]):
        mask = a[:, j] == 1
        assert got[j] == pytest.approx(_naive_mmd2(z[mask].astype(np.float64), z[~mask].astype(np.float64), 0.1),
                                       abs=2e-6)


def test_membership_keeps_sizes_and_observed_split() -> None:
    a = membership(4, 6, 50, np.random.default_rng(0))
    assert a.shape == (10, 51)
    np.testing.assert_array_equal(a[:, 0], [1] * 4 + [0] * 6)
    np.testing.assert_array_equal(a.sum(axis=0), 4)
    assert len({tuple(col) for col in a.T}) > 40  # the relabellings actually differ


def test_centroid_statistic_is_squared_mean_distance() -> None:
    rng = np.random.default_rng(1)
    z = rng.standard_normal((12, 3)).astype(np.float32)
    a = membership(5, 7, 2, rng)
    got = centroid_many(z, a)
    for j in range(3):
        mask = a[:, j] == 1
        assert got[j] == pytest.approx(float(((z[mask].mean(0) - z[~mask].mean(0)) ** 2).sum()), rel=1e-5)


def test_p_value_formula_and_identical_samples() -> None:
    x = np.tile(np.eye(4, dtype=np.float32), (5, 1))
    r = permutation_test(x, x.copy(), permutations=99)
    assert r.p_value == 1.0 and not r.drift  # every relabelling ties with the observed statistic
    assert r.n_reference == 20 and r.n_current == 20 and r.method == "mmd_rbf"


def test_clear_shift_gets_the_smallest_p_value() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((200, 16)).astype(np.float32)
    y = (rng.standard_normal((150, 16)) + 0.5).astype(np.float32)
    for method in ("mmd_rbf", "centroid"):
        r = permutation_test(x, y, permutations=199, method=method)  # type: ignore[arg-type]
        assert r.p_value == pytest.approx(1 / 200) and r.drift and r.statistic > 0


def test_seeded_and_reproducible() -> None:
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal((2, 60, 8)).astype(np.float32)
    r1 = permutation_test(x, y + 0.1, permutations=300, seed=7)
    r2 = permutation_test(x, y + 0.1, permutations=300, seed=7)
    assert r1 == r2


def test_median_bandwidth_from_reference_only() -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((300, 10))
    # E‖x − x'‖² = 2d for standard normals; the median is close to it.
    assert median_sq_distance(x) == pytest.approx(20, rel=0.15)
    assert median_sq_distance(np.ones((5, 3))) == 1.0  # degenerate: a positive fallback


@pytest.mark.parametrize(
    ("ref", "cur", "message"),
    [
        (np.zeros((5, 3)), np.zeros((5, 4)), "dimension mismatch"),
        (np.zeros((1, 3)), np.zeros((5, 3)), "at least 2 points"),
        (np.zeros(5), np.zeros((5, 3)), "2-D"),
        (np.full((5, 3), np.nan), np.zeros((5, 3)), "NaN"),
    ],
    ids=["dim", "too-few", "not-2d", "nan"],
)
def test_bad_input_is_refused_with_a_reason(ref: np.ndarray, cur: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        permutation_test(ref, cur, permutations=10)


def test_unknown_method() -> None:
    with pytest.raises(ValueError, match="unknown method"):
        permutation_test(np.zeros((3, 2)), np.ones((3, 2)), method="ks")  # type: ignore[arg-type]


def test_json_fields_are_exactly_the_cli_contract() -> None:
    r = permutation_test(np.eye(3), np.eye(3)[::-1], permutations=10)
    assert set(r.as_json()) == {"statistic", "p_value", "drift", "n_reference", "n_current", "method"}
