"""Pods as units: is the canary's pod slower than a typical stable pod, by the stable pods' own spread?

The pooled tests (`stats`, `sequential`) compare one arm's requests with the other's, slice by slice. With one
canary pod against many stable pods, the canary's pod-level luck (a stall, a queue behind a long document, a
restart) is not averaged away as the stable pool's is, and it sits in the canary's slices as if the version
caused it: a healthy canary then cannot be shown "not worse" within a step (docs/canary.md, "Pods as units").

Here each pod is one unit. Per pod p, its requests' ridits against the stable pods' requests of the same slice
(leaving p itself out of its own yardstick), minus ½, averaged over p's requests:

    v_p = Σ_j Σ_{r ∈ p, slice j} (ridit_j(r) − ½) / n_p

v_p is P(a request of pod p is slower than a stable request of the same minute) − ½: 0 for a pod like the
stable pods, positive when slower, bounded in (−½, ½). Its spread over the stable pods is the yardstick: it
holds what a pod's luck over the step does (bursts, stalls, queues), which the canary's pod has too. Time
effects shared by all pods (a ramp, a fleet-wide burst) cancel slice by slice.

The pass test: "the canary's pods are shifted by at least `margin` from a typical stable pod" rejected by a
one-sided t-test of the canary pods' mean v against the stable pods' mean, its standard error from the stable
pods' spread, s·√(1/m + 1/k) on k − 1 degrees of freedom (m canary, k stable pods). It assumes pods are
independent of each other given the slice (each has its own queue) and that a pod's luck is the same kind in
both versions. It is read once, at the step's planned end (planned.py): a fixed-horizon test.

Where sessions stick to pods, a pod's load wanders for minutes and its latency with it: on `occupancy` a
stable pod's inter-token v correlates 0.97 with the log of its requests. So v is compared at equal load: the
stable pods' v is regressed on x = log(requests the pod started), and the canary pods' v is read against that
line at their own x (prediction error s_r·√(1/m + 1/k + (x̄_c − x̄_s)²/S_xx), k − 2 degrees of freedom); the
spread left is a pod's luck at its load (0.076 → 0.017 for inter-token latency there). Requests started are
the router's doing, not the version's (tokens are not: a version that writes longer answers loads its pod
itself); a router that sends less to a slower pod lowers the canary's x, which reads it slower, not faster.

It is a pass test only. The fail side stays with the pooled tests: on a canary pod against 19 stable pods the
t-test's tail under heavy pod-level episodes (one stall in a step) ran above its α in simulation (2–3% at a
nominal 0.25% on `production` and `occupancy` at 5% weight), where the anytime and planned pooled tests hold
their promise. And it tests the shift only: a pod's share of requests above the SLO edge spreads 1.5–3× between
pods of one version over a 30-minute step (log-sd 0.4–1.1 on the simulated fleets), so one canary pod can never
be shown less than 2× worse on it; the share stays with the pooled tests, whose fail test still stands.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from observer.analyse.canary.results import ArmData
from observer.analyse.canary.sequential import ridits

MIN_STABLE_PODS = 5
"""Stable pods with enough requests before their spread is a yardstick (4 degrees of freedom)."""

MIN_POD_OBSERVATIONS = 30
"""Observations a pod needs over the slices to be a unit; fewer (a pod that joined late, or restarted under a
new name) leave it out, and the test says how many were left out."""


@dataclass(frozen=True)
class PodShift:
    """The pods-as-units pass test of one latency family."""

    canary_pods: int
    stable_pods: int
    shift: float
    """Canary pods' mean v − stable pods' mean v (see the module docstring)."""
    spread: float
    """The stable pods' standard deviation of v: one pod's luck over the slices."""
    p_value: float
    """Of "shifted by at least the margin"; a small one is a pass."""
    accept: bool
    """Shown shifted by less than the margin at the test's α."""
    left_out: int
    """Pods with under MIN_POD_OBSERVATIONS observations, not units."""
    load_slope: float | None = None
    """dv/dlog(requests) of the stable pods, where v was compared at equal load; None where it was not."""

    def describe(self, margin: float) -> str:
        at = "" if self.load_slope is None else f" at equal load (slope {self.load_slope:+.3f} per log request)"
        return (f"pods as units: {self.canary_pods} canary against {self.stable_pods} stable pods, shift "
                f"{self.shift:+.3f}{at} (one pod's spread {self.spread:.3f}); "
                + ("shown" if self.accept else "not shown") + f" under {margin:+g} (p={self.p_value:.2g})"
                + (f"; {self.left_out} pods with under {MIN_POD_OBSERVATIONS} observations left out"
                   if self.left_out else ""))


LOAD_FAMILY = "ttft"
"""The histogram whose observations count the requests a pod started: its load."""


def _bins(pods: Mapping[str, ArmData], family: str, bounds: tuple[float, ...], slices: int
          ) -> tuple[np.ndarray, np.ndarray, int]:
    """(pods × slices × buckets) non-cumulative counts of the pods with enough observations, their loads
    (requests started, 0 where unknown), and how many pods had too few. A slice a pod has no data for, or on
    another bucket layout, counts zero."""
    rows, loads, left = [], [], 0
    for data in pods.values():
        cut = np.zeros((slices, len(bounds) + 1))
        started = 0.0
        for j, s in enumerate(data.slices[:slices]):
            h = s.histograms.get(family)
            if h is not None and h.bounds == bounds and h.count > 0:
                cut[j] = np.clip(np.diff(np.asarray(h.cumulative, dtype=float), prepend=0.0), 0.0, None)
            load = s.histograms.get(LOAD_FAMILY)
            started += max(load.count, 0.0) if load is not None else 0.0
        if cut.sum() >= MIN_POD_OBSERVATIONS:
            rows.append(cut)
            loads.append(started)
        else:
            left += 1
    shape = (0, slices, len(bounds) + 1)
    return (np.array(rows) if rows else np.zeros(shape)), np.array(loads, dtype=float), left


def _values(units: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Each unit's mean (ridit − ½) against `reference` (same shape, or one slices × buckets for all)."""
    ref = np.broadcast_to(reference, units.shape)
    ridit = ridits(ref)
    used = ref.sum(axis=2, keepdims=True) > 0
    weighted = np.where(used, units * (ridit - 0.5), 0.0).sum(axis=(1, 2))
    n = np.where(used, units, 0.0).sum(axis=(1, 2))
    out: np.ndarray = np.divide(weighted, n, out=np.zeros_like(weighted), where=n > 0)
    return out


@dataclass(frozen=True)
class PodValues:
    """v per pod (the module docstring) and each pod's load, over the first slices of the step."""

    canary: np.ndarray
    stable: np.ndarray
    canary_load: np.ndarray
    """Requests each pod started (LOAD_FAMILY observations), 0 where unknown."""
    stable_load: np.ndarray
    left_out: int


def pod_values(canary: Mapping[str, ArmData], stable: Mapping[str, ArmData], family: str,
               bounds: tuple[float, ...], *, slices: int) -> PodValues:
    """Each pod's v over the first `slices` slices; a stable pod's v is against the other stable pods (its own
    requests are not its yardstick)."""
    c, load_c, left_c = _bins(canary, family, bounds, slices)
    s, load_s, left_s = _bins(stable, family, bounds, slices)
    total = s.sum(axis=0)
    return PodValues(canary=_values(c, total), stable=_values(s, total[None] - s), canary_load=load_c,
                     stable_load=load_s, left_out=left_c + left_s)


def pod_shift(canary: Mapping[str, ArmData], stable: Mapping[str, ArmData], family: str,
              bounds: tuple[float, ...], *, slices: int, margin: float, alpha: float
              ) -> tuple[PodShift | None, str]:
    """The pass test on the first `slices` slices, or None and why pods cannot be units here."""
    if not canary or not stable:
        return None, "no per-pod data"
    v = pod_values(canary, stable, family, bounds, slices=slices)
    if v.canary.size == 0:
        return None, f"no canary pod with {MIN_POD_OBSERVATIONS} {family} observations"
    if v.stable.size < MIN_STABLE_PODS:
        return None, (f"{v.stable.size} stable pods with {MIN_POD_OBSERVATIONS} {family} observations, under "
                      f"{MIN_STABLE_PODS}: no pod-to-pod spread to judge by")
    known = bool(np.all(v.canary_load > 0) and np.all(v.stable_load > 0))
    return shift_test(v.canary, v.stable, margin=margin, alpha=alpha, left_out=v.left_out,
                      loads=(np.log(v.canary_load), np.log(v.stable_load)) if known else None), ""


def shift_test(vc: Sequence[float] | np.ndarray, vs: Sequence[float] | np.ndarray, *, margin: float, alpha: float,
               left_out: int = 0, loads: tuple[np.ndarray, np.ndarray] | None = None) -> PodShift:
    """One-sided t-test of "the canary pods' shift ≥ margin" on the stable pods' spread: against their mean
    (k − 1 df), or, with `loads` (x of the canary and stable pods) and pods that differ in load, against their
    regression line on x at the canary's x (k − 2 df)."""
    from scipy import special  # lazy: scipy.stats costs ~60 MB of RSS in the sidecar
    c, s = np.asarray(vc, dtype=float), np.asarray(vs, dtype=float)
    m, k = c.size, s.size
    shift = float(c.mean() - s.mean())
    spread = float(s.std(ddof=1))
    se = spread * math.sqrt(1.0 / m + 1.0 / k)
    df, slope = k - 1, None
    if loads is not None and k > MIN_STABLE_PODS:
        xc, xs = (np.asarray(a, dtype=float) for a in loads)
        sxx = float(np.sum((xs - xs.mean()) ** 2))
        if sxx > 0:
            slope = float(np.sum((xs - xs.mean()) * (s - s.mean())) / sxx)
            gap = float(xc.mean() - xs.mean())
            shift -= slope * gap
            resid = s - s.mean() - slope * (xs - xs.mean())
            df = k - 2
            spread = math.sqrt(float(np.sum(resid * resid)) / df)
            se = spread * math.sqrt(1.0 / m + 1.0 / k + gap * gap / sxx)
    p = (0.0 if shift < margin else 1.0) if se <= 0 else float(special.stdtr(df, (shift - margin) / se))
    return PodShift(canary_pods=m, stable_pods=k, shift=shift, spread=spread, p_value=p, accept=p <= alpha,
                    left_out=left_out, load_slope=slope)
