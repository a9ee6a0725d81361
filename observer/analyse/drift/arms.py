"""The drift gate's test: the canary's texts against the baseline's in the same window, with time slices as the
independent units (a user's session, a pod's busy minutes: samples within a slice are alike).

A two-sample test that permutes single samples treats a canary of a few dozen sessions as hundreds of
independent draws: on session-dependent traffic it flags about half of identical-arm windows (bench/drift_gate.py).
Here each slice both arms served gives one difference, canary minus baseline, of two statistics:

- the mean embedding (any shift of the texts' centre, a new template or tone);
- the mean *novelty*: a text's cosine distance to its k nearest baseline texts outside its own slice (a
  session's own turns are never its neighbours), which rises for texts unlike anything the baseline says
  (another language or domain) whatever topic a session is on.

Under H0 each slice's difference is symmetric around zero and the slices are independent, so the p-value comes
from flipping their signs at random; the two statistics are combined by Bonferroni (each at alpha / 2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

NEIGHBOURS = 5
MIN_SLICES = 8
"""Slices served by both arms below which no test runs (a sign-flip p-value cannot go below 2^-slices)."""


@dataclass(frozen=True)
class ArmsResult:
    """The gate's outcome for one field: the combined p-value and what it was computed from."""

    p_value: float
    statistic: float  # the weighted mean novelty difference (canary − baseline), the readable one
    slices: int
    n_canary: int
    n_baseline: int


def novelty(points: npt.NDArray[np.float32], slices: npt.NDArray[np.int64], ref: npt.NDArray[np.float32],
            ref_slices: npt.NDArray[np.int64], k: int = NEIGHBOURS) -> npt.NDArray[np.float64]:
    """Each point's mean cosine distance to its k nearest reference points outside its own slice (or group: a
    conversation; rows are L2-normalised, so the dot product is the cosine similarity)."""
    sim = (points @ ref.T).astype(np.float64)
    sim[slices[:, None] == ref_slices[None, :]] = -np.inf
    k = max(1, min(k, int(np.isfinite(sim).sum(axis=1).min(initial=k))))
    top = np.partition(sim, -k, axis=1)[:, -k:]
    out: npt.NDArray[np.float64] = 1.0 - top.mean(axis=1)
    return out


def arms_test(baseline: npt.ArrayLike, baseline_slices: npt.ArrayLike, canary: npt.ArrayLike,
              canary_slices: npt.ArrayLike, *, flips: int = 999, seed: int = 0,
              baseline_groups: npt.ArrayLike | None = None, canary_groups: npt.ArrayLike | None = None
              ) -> ArmsResult | None:
    """Test "the canary's texts come from the baseline's distribution" slice by slice; None with fewer than
    MIN_SLICES slices served by both arms. `*_groups`: what a text's nearest baseline texts must be outside of
    for its novelty (default its slice; a conversation where samples carry one: numbered apart from the slices,
    so a group never equals a slice id)."""
    ref = np.ascontiguousarray(baseline, dtype=np.float32)
    cur = np.ascontiguousarray(canary, dtype=np.float32)
    rs, cs = np.asarray(baseline_slices, dtype=np.int64), np.asarray(canary_slices, dtype=np.int64)
    if ref.ndim != 2 or cur.ndim != 2 or ref.shape[1] != cur.shape[1] or len(rs) != len(ref) or len(cs) != len(cur):
        raise ValueError("the arms need (n, d) embeddings of one dimension and one slice id per row")
    common = sorted(set(rs.tolist()) & set(cs.tolist()))
    if len(common) < MIN_SLICES:
        return None
    gr = rs if baseline_groups is None else np.asarray(baseline_groups, dtype=np.int64)
    gc = cs if canary_groups is None else np.asarray(canary_groups, dtype=np.int64)
    n_ref, n_cur = novelty(ref, gr, ref, gr), novelty(cur, gc, ref, gr)
    centre = np.stack([cur[cs == s].mean(0) - ref[rs == s].mean(0) for s in common]).astype(np.float64)
    novel = np.array([n_cur[cs == s].mean() - n_ref[rs == s].mean() for s in common])
    w = np.array([(cs == s).sum() for s in common], dtype=np.float64)
    w /= w.sum()
    signs = np.random.default_rng(seed).choice((-1.0, 1.0), size=(flips, len(common)))
    observed_centre = float(np.sum((w @ centre) ** 2))
    flipped_centre = np.sum(((signs * w) @ centre) ** 2, axis=1)
    observed_novel = float(w @ novel)
    flipped_novel = (signs * w) @ novel  # one-sided: only a canary *more* unlike the baseline is drift
    p_centre = (1 + np.count_nonzero(flipped_centre >= observed_centre * (1 - 1e-12))) / (1 + flips)
    p_novel = (1 + np.count_nonzero(flipped_novel >= observed_novel - 1e-12)) / (1 + flips)
    return ArmsResult(p_value=float(min(1.0, 2.0 * min(p_centre, p_novel))), statistic=observed_novel,
                      slices=len(common), n_canary=len(cur), n_baseline=len(ref))
