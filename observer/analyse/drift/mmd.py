"""Two-sample tests on embeddings: RBF-kernel MMD² with a permutation p-value, and a centroid test.

The kernel matrix of the pooled sample is computed once, in row blocks (memory ≈ block_rows × N float32),
and every permutation is a column of a 0/1 membership matrix A, so all permutation statistics come out
of one float32 GEMM per block: aᵀKa for each column gives the within-reference kernel sum, and with the
row sums r = K·1 the other two sums follow (aᵀr − aᵀKa, 1ᵀK1 − 2aᵀr + aᵀKa). The unbiased estimator
drops the diagonal (k(x, x) = 1). The p-value is (1 + #{perm ≥ observed}) / (1 + B), exact under H0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float32]
Method = Literal["mmd_rbf", "centroid"]
METHODS: tuple[Method, ...] = ("mmd_rbf", "centroid")
BANDWIDTH_POINTS = 1000
"""The median heuristic looks at pairwise distances among at most this many baseline points."""


@dataclass(frozen=True)
class TwoSampleResult:
    """The outcome of one two-sample test."""

    statistic: float
    p_value: float
    drift: bool
    n_reference: int
    n_current: int
    method: Method
    permutations: int
    alpha: float
    bandwidth: float | None = None

    def as_json(self) -> dict[str, object]:
        """The fields `observer drift test --json` prints."""
        return {"statistic": self.statistic, "p_value": self.p_value, "drift": self.drift,
                "n_reference": self.n_reference, "n_current": self.n_current, "method": self.method}


def _as_matrix(x: npt.ArrayLike, name: str) -> Matrix:
    m = np.ascontiguousarray(x, dtype=np.float32)
    if m.ndim != 2:
        raise ValueError(f"{name} must be a 2-D (n, d) matrix, got shape {m.shape}")
    if not np.isfinite(m).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return m


def median_sq_distance(reference: npt.ArrayLike, *, seed: int = 0, max_points: int = BANDWIDTH_POINTS) -> float:
    """Median squared Euclidean distance between distinct baseline points (subsampled, seeded)."""
    ref = _as_matrix(reference, "reference")
    if len(ref) > max_points:
        ref = ref[np.random.default_rng(seed).choice(len(ref), max_points, replace=False)]
    sq = (ref * ref).sum(1)
    d2 = sq[:, None] + sq[None, :] - 2.0 * (ref @ ref.T)  # float32 is plenty for a median
    upper = np.clip(d2[np.triu_indices(len(ref), k=1)], 0.0, None)
    positive = upper[upper > 1e-12]
    if positive.size == 0:
        return 1.0  # all baseline points identical: any positive width gives the same ordering
    return float(np.median(positive))


def membership(n_reference: int, n_current: int, permutations: int, rng: np.random.Generator) -> Matrix:
    """An (N, 1 + B) 0/1 matrix: column 0 is the observed split, each other column a random relabelling."""
    n = n_reference + n_current
    base = np.zeros(n, dtype=np.float32)
    base[:n_reference] = 1.0
    cols = np.empty((permutations + 1, n), dtype=np.float32)
    cols[0] = base
    if permutations:
        cols[1:] = rng.permuted(np.broadcast_to(base, (permutations, n)), axis=1)
    return np.ascontiguousarray(cols.T)


def mmd2_unbiased_many(z: Matrix, a: Matrix, *, gamma: float, block_rows: int = 1024) -> npt.NDArray[np.float64]:
    """Unbiased MMD² of k(x, y) = exp(−γ‖x − y‖²) for every split column of `a` over the rows of `z`."""
    n = len(z)
    m = a.sum(axis=0, dtype=np.float64)
    k = n - m
    if np.any(m < 2) or np.any(k < 2):
        raise ValueError("each sample needs at least 2 points for the unbiased MMD²")
    sq = (z * z).sum(axis=1)
    rowsum = np.empty(n, dtype=np.float64)
    aka = np.zeros(a.shape[1], dtype=np.float64)
    for i0 in range(0, n, block_rows):
        i1 = min(n, i0 + block_rows)
        kb = z[i0:i1] @ z.T  # Gram block, then turned into kernel values in place
        kb *= np.float32(2.0 * gamma)
        kb -= (np.float32(gamma) * sq[i0:i1])[:, None]
        kb -= (np.float32(gamma) * sq)[None, :]
        np.minimum(kb, 0.0, out=kb)
        np.exp(kb, out=kb)
        kb[np.arange(i1 - i0), np.arange(i0, i1)] = 1.0
        rowsum[i0:i1] = kb.sum(axis=1, dtype=np.float64)
        aka += np.einsum("ij,ij->j", a[i0:i1], kb @ a, dtype=np.float64)
    total = rowsum.sum()
    ar = a.T.astype(np.float64) @ rowsum
    s_xx = aka
    s_xy = ar - aka
    s_yy = total - 2.0 * ar + aka
    result: npt.NDArray[np.float64] = (s_xx - m) / (m * (m - 1)) + (s_yy - k) / (k * (k - 1)) - 2.0 * s_xy / (m * k)
    return result


def centroid_many(z: Matrix, a: Matrix) -> npt.NDArray[np.float64]:
    """Squared distance between the two sample means (linear-kernel MMD²) for every split column of `a`."""
    m = a.sum(axis=0, dtype=np.float64)
    total = z.sum(axis=0, dtype=np.float64)
    sums = a.T.astype(np.float64) @ z.astype(np.float64)  # (1 + B, d) reference sums
    diff = sums / m[:, None] - (total[None, :] - sums) / (len(z) - m)[:, None]
    out: npt.NDArray[np.float64] = (diff * diff).sum(axis=1)
    return out


def permutation_test(reference: npt.ArrayLike, current: npt.ArrayLike, *, method: Method = "mmd_rbf",
                     permutations: int = 1000, alpha: float = 0.05, seed: int = 0,
                     sq_bandwidth: float | None = None, block_rows: int = 1024) -> TwoSampleResult:
    """Test H0 "same distribution" for two embedding samples; p-value (1 + #perm ≥ obs) / (1 + B)."""
    ref = _as_matrix(reference, "reference")
    cur = _as_matrix(current, "current")
    if ref.shape[1] != cur.shape[1]:
        raise ValueError(f"dimension mismatch: reference has d={ref.shape[1]}, current has d={cur.shape[1]}")
    if len(ref) < 2 or len(cur) < 2:
        raise ValueError(f"need at least 2 points per sample, got {len(ref)} reference and {len(cur)} current")
    if permutations < 1:
        raise ValueError("permutations must be >= 1")
    if not 0 < alpha < 1:
        raise ValueError("alpha must be in (0, 1)")
    rng = np.random.default_rng(seed)
    z = np.ascontiguousarray(np.vstack([ref, cur]))
    a = membership(len(ref), len(cur), permutations, rng)
    bandwidth: float | None = None
    if method == "mmd_rbf":
        bandwidth = sq_bandwidth if sq_bandwidth is not None else median_sq_distance(ref, seed=seed)
        if not bandwidth > 0:
            raise ValueError("sq_bandwidth must be > 0")
        # Gretton's median heuristic: σ = median distance, k = exp(−d² / 2σ²).
        stats = mmd2_unbiased_many(z, a, gamma=1.0 / (2.0 * bandwidth), block_rows=block_rows)
    elif method == "centroid":
        stats = centroid_many(z, a)
    else:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    observed = float(stats[0])
    # A tiny tolerance keeps float ties (e.g. identical samples) counted as "at least as extreme".
    exceed = int(np.count_nonzero(stats[1:] >= observed - 1e-12 * max(1.0, abs(observed))))
    p_value = (1.0 + exceed) / (1.0 + permutations)
    return TwoSampleResult(statistic=observed, p_value=p_value, drift=p_value < alpha, n_reference=len(ref),
                           n_current=len(cur), method=method, permutations=permutations, alpha=alpha,
                           bandwidth=bandwidth)
