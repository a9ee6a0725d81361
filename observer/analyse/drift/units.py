"""The drift tests' independent units: a user's conversation where samples carry a conversation key, a contiguous
time slice where they do not.

A user's turns in one conversation are alike (one topic, one register, often quoting each other), so a window of
2,000 chat samples holds a few hundred independent draws, not 2,000. A permutation test that moves single
samples between the window and the baseline takes the within-conversation likeness for a difference between
them: on identical populations it flags most windows once conversations have a few turns
(bench/drift_sessions.py). Here whole units change sides: each test's statistic is still computed on samples
(each conversation weighs by its turns, as users see the traffic), and its null distribution comes from
relabelling units, exact when units of one size are exchangeable between the baseline and the window,
whatever the dependence inside them.

Units change sides only for units of their own size class (size_class): a window cuts the conversations at its
edges short and a quiet hour has small slices, and such units are not exchangeable with whole ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

UnitKind = Literal["conversations", "slices", "mixed"]
Matrix = npt.NDArray[np.float32]
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Units:
    """Each sample's unit (0 … count − 1), and which samples carried a conversation key."""

    index: IntArray
    count: int
    keyed: BoolArray

    @property
    def kind(self) -> UnitKind:
        """Conversations, time slices, or both (some samples keyed, some not)."""
        n, k = len(self.keyed), int(self.keyed.sum())
        return "conversations" if k == n and n else ("slices" if k == 0 else "mixed")

    def describe(self) -> str:
        """How the units were formed, for a result's detail."""
        if self.kind == "conversations":
            return f"{self.count} conversations"
        if self.kind == "slices":
            return f"{self.count} time slices (no conversation keys)"
        return (f"{self.count} units: conversations for {int(self.keyed.sum())} of {len(self.keyed)} samples, "
                "time slices for the rest")

    def subset(self, mask: BoolArray) -> Units:
        """These units restricted to the samples of `mask`, renumbered."""
        kept, index = np.unique(self.index[mask], return_inverse=True)
        return Units(index=index.astype(np.int64), count=len(kept), keyed=self.keyed[mask])

    def sizes(self) -> FloatArray:
        """Samples per unit."""
        return np.bincount(self.index, minlength=self.count).astype(np.float64)


def assign(keys: Sequence[str | None], ts: Sequence[float], *, slice_seconds: float) -> Units:
    """Units of one sample set: a conversation per distinct key; samples without a key by the time slice
    (floor(ts / slice_seconds)) they fall in. Keyed and unkeyed samples never share a unit."""
    if slice_seconds <= 0:
        raise ValueError("slice_seconds must be > 0")
    labels = [f"c{k}" if k else f"s{math.floor(t / slice_seconds)}" for k, t in zip(keys, ts, strict=True)]
    ids: dict[str, int] = {}
    index = np.fromiter((ids.setdefault(lab, len(ids)) for lab in labels), dtype=np.int64, count=len(labels))
    return Units(index=index, count=len(ids), keyed=np.array([bool(k) for k in keys], dtype=bool))


MAX_UNITS = 1500
"""Units a side a test uses at most (a seeded subset beyond): the relabellings' work grows with the square of
the units, and 1,500 conversations hold far more evidence than a window needs."""


def cap(units: Units, most: int, seed: int) -> BoolArray:
    """Which samples to keep so that at most `most` whole units remain (all, when there are no more)."""
    if units.count <= most:
        return np.ones(len(units.index), dtype=bool)
    keep = np.zeros(units.count, dtype=bool)
    keep[np.random.default_rng(seed).choice(units.count, most, replace=False)] = True
    out: BoolArray = keep[units.index]
    return out


def size_class(size: npt.ArrayLike) -> IntArray:
    """Units of one class may change sides: the same size up to 8 samples, then within about 9% (eight classes
    an octave), so a relabelling keeps each side's sample count (nearly) and swaps a unit only for one like it."""
    s = np.maximum(np.asarray(size, dtype=np.float64), 1.0)
    out: IntArray = np.where(s <= 8, s, 8 + np.round(8 * np.log2(s / 8))).astype(np.int64)
    return out


BATCH = 100
"""Relabellings drawn at a time: a test stops once enough of them reach the observed statistic."""


def stop_after(alpha: float, permutations: int) -> int:
    """Relabellings reaching the observed statistic after which a test stops (its p is well above alpha)."""
    return max(10, math.ceil(2.0 * alpha * (permutations + 1)))


@dataclass(frozen=True)
class Relabelled:
    """A relabelling test's outcome: the observed statistic and its p-value."""

    statistic: float
    p_value: float
    permutations: int
    movable: int
    """Units that share a size class with a unit of the other side (the others never change sides)."""


def relabel(statistic: Callable[[Matrix], FloatArray], n_reference: int, sizes: FloatArray, *, permutations: int,
            alpha: float, seed: int) -> Relabelled:
    """The p-value of `statistic` (of a units × labellings 0/1 matrix, 1: reference; larger is more shifted)
    under relabellings of units within their size class, the first `n_reference` units being the reference.

    Relabellings are drawn BATCH at a time and the test stops at the relabelling that makes stop_after(alpha,
    permutations) of them reach the observed statistic, with Besag and Clifford's sequential p-value h / l:
    most windows are unremarkable and stop within a hundred. Otherwise p = (1 + #reached) / (1 + drawn). Both
    are valid p-values; a window with p < alpha always draws every relabelling."""
    base = np.zeros(len(sizes), dtype=np.float32)
    base[:n_reference] = 1.0
    observed = float(statistic(base[:, None])[0])
    floor = observed - 1e-12 * max(1.0, abs(observed))
    cls = size_class(sizes)
    members = [idx for c in np.unique(cls) if 0 < base[idx := np.flatnonzero(cls == c)].sum() < idx.size]
    rng = np.random.default_rng(seed)
    enough = stop_after(alpha, permutations)
    drawn = reached = 0
    while members and drawn < permutations and reached < enough:
        b = min(BATCH, permutations - drawn)
        cols = np.repeat(base[None, :], b, axis=0)
        for idx in members:
            cols[:, idx] = rng.permuted(np.broadcast_to(base[idx], (b, idx.size)), axis=1)
        stats = statistic(np.ascontiguousarray(cols.T))
        # A relabelling that is the observed one reaches it exactly; recomputed in another batch shape, float32
        # sums can put it a hair below. With few units to move (a window of three slices) that is a good share
        # of the draws, and missing it made p-values of 0.001 out of a dozen distinct labellings.
        stats = np.where((cols == base).all(axis=1), observed, stats)
        stats = stats[np.isfinite(stats)]
        if not stats.size:
            break
        hits = np.cumsum(stats >= floor)
        if reached + int(hits[-1]) >= enough:  # stop at the relabelling that reached it, as the rule says
            drawn += int(np.searchsorted(hits, enough - reached)) + 1
            reached = enough
            break
        drawn += int(stats.size)
        reached += int(hits[-1])
    p = 1.0 if not drawn else (reached / drawn if reached >= enough else (1.0 + reached) / (1.0 + drawn))
    return Relabelled(statistic=observed, p_value=min(1.0, p), permutations=drawn,
                      movable=int(sum(idx.size for idx in members)))


def kernel_sums(a: Matrix, a_units: IntArray, n_a: int, b: Matrix, b_units: IntArray, n_b: int, *, gamma: float,
                block_rows: int = 1024) -> FloatArray:
    """(n_a, n_b) unit-pair sums of k(x, y) = exp(−γ‖x − y‖²) over the rows of `a` and `b` (a sample's kernel
    with itself, 1, included where `a` is `b`)."""
    out = np.zeros((n_a, n_b), dtype=np.float64)
    # Rows and columns of one unit together: each block's sums are two running sums, never a product.
    order = np.argsort(a_units, kind="stable")
    a, a_units = a[order], a_units[order]
    order = np.argsort(b_units, kind="stable")
    b, b_units = b[order], b_units[order]
    cols = np.flatnonzero(np.r_[True, b_units[1:] != b_units[:-1]]) if len(b) else np.zeros(0, dtype=np.int64)
    sq_b = (b * b).sum(axis=1)
    for i0 in range(0, len(a), block_rows):
        i1 = min(len(a), i0 + block_rows)
        kb = a[i0:i1] @ b.T
        kb *= np.float32(2.0 * gamma)
        kb -= (np.float32(gamma) * (a[i0:i1] * a[i0:i1]).sum(axis=1))[:, None]
        kb -= (np.float32(gamma) * sq_b)[None, :]
        np.minimum(kb, 0.0, out=kb)
        np.exp(kb, out=kb)
        units = a_units[i0:i1]
        starts = np.flatnonzero(np.r_[True, units[1:] != units[:-1]])
        by_col = np.add.reduceat(kb, cols, axis=1, dtype=np.float64)
        out[np.ix_(units[starts], b_units[cols])] += np.add.reduceat(by_col, starts, axis=0)
    return out


def mmd_statistic(k: FloatArray, sizes: FloatArray) -> Callable[[Matrix], FloatArray]:
    """Unbiased sample-level MMD² of each labelling, from the unit-pair kernel sums `k` (all units)."""
    kf = k.astype(np.float32)
    size = sizes.astype(np.float32)
    rowsum = k.sum(axis=1)
    total, n_all = float(rowsum.sum()), float(sizes.sum())

    def stat(a: Matrix) -> FloatArray:
        m = (size @ a).astype(np.float64)
        n = n_all - m
        s_xx = np.einsum("ij,ij->j", a, kf @ a, dtype=np.float64)
        ar = a.T.astype(np.float64) @ rowsum
        s_xy, s_yy = ar - s_xx, total - 2.0 * ar + s_xx
        with np.errstate(divide="ignore", invalid="ignore"):
            out = (s_xx - m) / (m * (m - 1)) + (s_yy - n) / (n * (n - 1)) - 2.0 * s_xy / (m * n)
        result: FloatArray = np.where((m >= 2) & (n >= 2), out, np.nan)
        return result

    return stat


def rank_statistic(ranks: FloatArray, units: IntArray, count: int) -> Callable[[Matrix], FloatArray]:
    """|mean rank of the reference − mean rank of the rest| of each labelling (Mann-Whitney, two-sided), from
    each sample's mid-rank in the pooled sample."""
    rank_sum = np.bincount(units, weights=ranks, minlength=count)
    size = np.bincount(units, minlength=count).astype(np.float64)
    total_r, total_n = float(rank_sum.sum()), float(size.sum())

    def stat(a: Matrix) -> FloatArray:
        af = a.astype(np.float64)
        m, r = size @ af, rank_sum @ af
        with np.errstate(divide="ignore", invalid="ignore"):
            out: FloatArray = np.abs(r / m - (total_r - r) / (total_n - m))
        return out

    return stat


def chi2_statistic(codes: IntArray, units: IntArray, count: int, categories: int) -> Callable[[Matrix], FloatArray]:
    """Pearson's chi-square of each labelling's 2 × categories table, from each sample's category code."""
    counts = np.zeros((count, categories))
    np.add.at(counts, (units, codes), 1.0)
    col = counts.sum(axis=0)
    total = float(col.sum())

    def stat(a: Matrix) -> FloatArray:
        ref = a.T.astype(np.float64) @ counts  # labellings × categories
        m = ref.sum(axis=1, keepdims=True)
        exp_r, exp_c = m * col / total, (total - m) * col / total
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.nansum((ref - exp_r) ** 2 / exp_r + (col - ref - exp_c) ** 2 / exp_c, axis=1)
        return np.asarray(out, dtype=np.float64)

    return stat


MIN_UNITS = 2
"""Units a side below which no test runs."""


def mmd_test(reference: npt.ArrayLike, ref_units: Units, current: npt.ArrayLike, cur_units: Units, *,
             sq_bandwidth: float, permutations: int, alpha: float, seed: int, k_rr: FloatArray | None = None
             ) -> Relabelled:
    """The RBF-MMD² test of `reference` against `current` relabelling whole units. `k_rr`: the reference's own
    unit-pair kernel sums when already known (a pinned baseline's never change)."""
    ref = np.ascontiguousarray(reference, dtype=np.float32)
    cur = np.ascontiguousarray(current, dtype=np.float32)
    if ref.ndim != 2 or cur.ndim != 2 or ref.shape[1] != cur.shape[1]:
        raise ValueError("both samples must be (n, d) embeddings of one dimension")
    if len(ref) != len(ref_units.index) or len(cur) != len(cur_units.index):
        raise ValueError("one unit per sample")
    if ref_units.count < MIN_UNITS or cur_units.count < MIN_UNITS:
        raise ValueError(f"need at least {MIN_UNITS} units a side, got {ref_units.count} and {cur_units.count}")
    gamma = 1.0 / (2.0 * sq_bandwidth)
    if k_rr is None:
        k_rr = kernel_sums(ref, ref_units.index, ref_units.count, ref, ref_units.index, ref_units.count, gamma=gamma)
    k_rc = kernel_sums(ref, ref_units.index, ref_units.count, cur, cur_units.index, cur_units.count, gamma=gamma)
    k_cc = kernel_sums(cur, cur_units.index, cur_units.count, cur, cur_units.index, cur_units.count, gamma=gamma)
    k = np.block([[k_rr, k_rc], [k_rc.T, k_cc]])
    sizes = np.concatenate([ref_units.sizes(), cur_units.sizes()])
    return relabel(mmd_statistic(k, sizes), ref_units.count, sizes, permutations=permutations, alpha=alpha,
                   seed=seed)


def column_test(reference: npt.ArrayLike, ref_units: Units, current: npt.ArrayLike, cur_units: Units, *,
                categorical: bool, permutations: int, alpha: float, seed: int) -> Relabelled:
    """A scalar feature's test relabelling whole units: the mean-rank difference of a continuous column (NaN
    samples left out), or the chi-square of a categorical one."""
    ref, cur = np.asarray(reference), np.asarray(current)
    if not categorical:
        ok_r, ok_c = np.isfinite(ref.astype(np.float64)), np.isfinite(cur.astype(np.float64))
        ref_units, cur_units = ref_units.subset(ok_r), cur_units.subset(ok_c)
        ref, cur = ref[ok_r].astype(np.float64), cur[ok_c].astype(np.float64)
    units = np.concatenate([ref_units.index, cur_units.index + ref_units.count])
    count = ref_units.count + cur_units.count
    sizes = np.concatenate([ref_units.sizes(), cur_units.sizes()])
    if categorical:
        cats, codes = np.unique(np.concatenate([ref, cur]), return_inverse=True)
        stat = chi2_statistic(codes.astype(np.int64), units, count, len(cats))
    else:
        from scipy.stats import rankdata  # lazy: ~60 MB of RSS, only needed when a check runs
        stat = rank_statistic(np.asarray(rankdata(np.concatenate([ref, cur])), dtype=np.float64), units, count)
    return relabel(stat, ref_units.count, sizes, permutations=permutations, alpha=alpha, seed=seed)
