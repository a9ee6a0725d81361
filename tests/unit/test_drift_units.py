"""Drift's independent units: conversations and time slices, the unit-relabelling tests, conversation keys, a
baseline's units and its own noise, and the persistence rule sized to a false-alarm budget."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from observer.analyse.drift import baseline as bl
from observer.analyse.drift.calibrate import FEATURES, Calibration, calibrate
from observer.analyse.drift.mmd import median_sq_distance, permutation_test
from observer.analyse.drift.state import DriftReport, DriftResult, DriftState, Persistence
from observer.analyse.drift.units import MIN_UNITS, assign, cap, mmd_test, size_class
from observer.analyse.embed import HashingEmbedder
from observer.config.sampling import ConversationSpec
from observer.errors import BaselineError
from observer.sample.conversation import Keyer
from observer.store.base import StoredSample


def _sessions(rng: np.random.Generator, n: int, turns: int, *, shift: float = 0.0, dim: int = 8
              ) -> tuple[np.ndarray, list[str]]:
    """`n` conversations of `turns` alike turns: each a centre drawn per conversation, turns close to it."""
    centres = rng.normal(size=(n, dim)) + shift
    x = np.repeat(centres, turns, axis=0) + 0.2 * rng.normal(size=(n * turns, dim))
    return x.astype(np.float32), [f"c{i // turns}" for i in range(n * turns)]


def test_units_are_conversations_or_time_slices_never_both() -> None:
    u = assign(["a", "a", None, "b", None, None], [0.0, 5.0, 10.0, 700.0, 650.0, 1300.0], slice_seconds=600.0)
    assert u.count == 5 and u.kind == "mixed"  # a, slice 0, b, slice 1, slice 2
    assert list(u.index) == [0, 0, 1, 2, 3, 4]
    assert "conversations for 3 of 6 samples" in u.describe()
    assert assign(["x", "y"], [0.0, 0.0], slice_seconds=60).kind == "conversations"
    assert assign([None, None], [0.0, 61.0], slice_seconds=60).describe() == "2 time slices (no conversation keys)"
    keep = cap(assign([f"k{i // 4}" for i in range(400)], [0.0] * 400, slice_seconds=60), 30, seed=1)
    assert keep.sum() == 120  # 30 whole conversations of 4 turns
    assert list(size_class([1, 2, 8, 9, 100, 108])) == [1, 2, 8, 9, 37, 38]


def test_with_singleton_units_the_test_is_the_sample_permutation_test() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(200, 8)).astype(np.float32), (rng.normal(size=(150, 8)) + 0.2).astype(np.float32)
    bw = median_sq_distance(a)
    t = mmd_test(a, assign([f"a{i}" for i in range(200)], [0.0] * 200, slice_seconds=60), b,
                 assign([f"b{i}" for i in range(150)], [0.0] * 150, slice_seconds=60), sq_bandwidth=bw,
                 permutations=499, alpha=0.01, seed=3)
    r = permutation_test(a, b, permutations=499, alpha=0.01, seed=3, sq_bandwidth=bw)
    assert t.statistic == pytest.approx(r.statistic, rel=1e-5) and t.p_value == r.p_value


def test_identical_conversation_traffic_is_not_flagged_by_units_and_is_by_single_samples() -> None:
    """The issue's measurement in miniature: 5-turn conversations, the same population in both samples."""
    flagged = Counter()
    for seed in range(40):
        rng = np.random.default_rng(seed)
        (ref, rk), (cur, ck) = _sessions(rng, 60, 5), _sessions(rng, 40, 5)
        bw = median_sq_distance(ref)
        t = mmd_test(ref, assign(rk, [0.0] * len(rk), slice_seconds=60), cur, assign(ck, [0.0] * len(ck),
                     slice_seconds=60), sq_bandwidth=bw, permutations=199, alpha=0.05, seed=seed)
        flagged["units"] += t.p_value < 0.05
        flagged["samples"] += permutation_test(ref, cur, permutations=199, alpha=0.05, seed=seed,
                                               sq_bandwidth=bw).drift
    assert flagged["units"] <= 5 and flagged["samples"] >= 30, flagged


def test_a_shifted_share_of_conversations_is_found() -> None:
    rng = np.random.default_rng(5)
    ref, rk = _sessions(rng, 80, 5)
    cur, ck = _sessions(rng, 40, 5)
    moved, _ = _sessions(rng, 8, 5, shift=3.0)  # a fifth of the window's conversations from elsewhere
    cur[:40] = moved
    t = mmd_test(ref, assign(rk, [0.0] * len(rk), slice_seconds=60), cur, assign(ck, [0.0] * len(ck),
                 slice_seconds=60), sq_bandwidth=median_sq_distance(ref), permutations=499, alpha=0.01, seed=1)
    assert t.p_value < 0.01 and t.permutations == 499  # a flagged window draws every relabelling


def test_an_unremarkable_window_stops_early() -> None:
    rng = np.random.default_rng(6)
    (ref, rk), (cur, ck) = _sessions(rng, 50, 3), _sessions(rng, 30, 3)
    t = mmd_test(ref, assign(rk, [0.0] * len(rk), slice_seconds=60), cur, assign(ck, [0.0] * len(ck),
                 slice_seconds=60), sq_bandwidth=median_sq_distance(ref), permutations=999, alpha=0.01, seed=2)
    assert t.p_value > 0.05 and t.permutations < 999


def test_conversation_keys_are_kept_only_as_keyed_hashes() -> None:
    counts: Counter[str] = Counter()
    keyer = Keyer.from_spec(ConversationSpec(), counts, environ={"OBSERVER_CONVERSATION_SECRET": "s3cret"})
    a, b = keyer.key("session-42"), keyer.key(" session-42 ")
    assert a == b and a is not None and len(a) == 32 and "42" not in a
    assert Keyer.from_spec(ConversationSpec(), Counter(), environ={"OBSERVER_CONVERSATION_SECRET": "other"}
                           ).key("session-42") != a  # another secret, another key: nothing to look up
    assert keyer.key("x" * 257) is None and keyer.key("") is None and keyer.key(None) is None
    assert counts == {"kept": 2, "too_long": 1}
    none: Counter[str] = Counter()
    assert Keyer.from_spec(ConversationSpec(), none, environ={}).key("session-42") is None
    assert none == {"no_secret": 1}  # no secret: no key kept, counted, and drift uses time slices


def _samples(n_conv: int, turns: int, *, t0: float = 0.0, gap: float = 30.0) -> list[StoredSample]:
    return [StoredSample(version="stable", prompt=f"topic {c % 9} turn {t}", output=f"answer {c % 5}",
                         ts=t0 + c * gap + t, conversation=f"{c:032x}", id=c * turns + t, finish_reason="stop",
                         output_tokens=10 + c % 7)
            for c in range(n_conv) for t in range(turns)]


def test_a_baseline_keeps_whole_conversations_and_refuses_too_few_units() -> None:
    emb = HashingEmbedder(dim=16)
    b = bl.build(_samples(300, 4), emb, model="m", source_version="stable", since=None, until=None,
                 created_by="t", created_at=0.0, max_samples=500, slice_seconds=600.0)
    units = b.units(600.0)
    assert b.meta.n <= 500 and b.meta.units == "conversations" and units.count == b.meta.unit_count == b.meta.n // 4
    assert set(np.bincount(units.index)) == {4}  # every conversation whole
    with pytest.raises(BaselineError, match=r"hold 20 conversations; a baseline needs 50 .*30 more conversations"):
        bl.build(_samples(20, 4), emb, model="m", source_version="stable", since=None, until=None,
                 created_by="t", created_at=0.0, max_samples=500, slice_seconds=600.0)
    keyless = [StoredSample(version="stable", prompt="p", output="o", ts=float(i), id=i) for i in range(300)]
    with pytest.raises(BaselineError, match=r"1 time slices.*about 8\.2 more hours"):
        bl.build(keyless, emb, model="m", source_version="stable", since=None, until=None, created_by="t",
                 created_at=0.0, max_samples=500, slice_seconds=600.0)


def test_a_baseline_pinned_before_units_is_refused_with_the_fix(tmp_path: Path) -> None:
    emb = HashingEmbedder(dim=16)
    b = bl.build(_samples(60, 2), emb, model="m", source_version="stable", since=None, until=None,
                 created_by="t", created_at=0.0, max_samples=500, slice_seconds=600.0)
    old = bl.seal(bl.Baseline(meta=b.meta, embeddings=b.embeddings, features=b.features))  # no keys, no times
    repo = bl.BaselineRepo(tmp_path)
    loaded = repo.load(repo.save(old))
    with pytest.raises(BaselineError, match=r"pinned before .* pin it again \(`observer baseline pin --version "
                                            r"stable --promote`\)"):
        loaded.units(600.0)
    again = repo.load(repo.save(b))
    assert again.units(600.0).count == 60 and again.hash == b.hash  # the units are covered by the hash


def test_a_baseline_measures_its_own_windows() -> None:
    emb = HashingEmbedder(dim=16)
    samples = _samples(1200, 2, gap=60.0)  # 20 hours of 2-turn conversations, one a minute
    b = bl.build(samples, emb, model="m", source_version="stable", since=None, until=None, created_by="t",
                 created_at=0.0, max_samples=5000, slice_seconds=600.0)
    c = calibrate(b, window_seconds=3600.0, slice_seconds=600.0, alpha=0.01, feature_alpha=0.01,
                  permutations=199, min_samples=20, seed=0)
    assert c.windows == 20 and set(c.flagged) == {"prompts", "outputs", FEATURES}
    assert all(v <= 2 for v in c.flagged.values()), c.flagged  # steady traffic: near alpha
    assert c.spread["output_tokens"] > 0 and "prompts" in c.spread
    assert Calibration.from_json(c.as_json()) == c
    short = calibrate(bl.build(_samples(100, 2, gap=60.0), emb, model="m", source_version="stable", since=None,
                               until=None, created_by="t", created_at=0.0, max_samples=5000, slice_seconds=600.0),
                      window_seconds=3600.0, slice_seconds=600.0, alpha=0.01, feature_alpha=0.01, permutations=99,
                      min_samples=20, seed=0)
    assert short.windows == 0 and "spans 1.7 h" in short.note and c.rate("prompts") is not None


def _report(shifted: bool, effect: float | None, calibration: dict | None = None) -> DriftReport:
    meta = bl.BaselineMeta(model="m", source_version="s", since=None, until=None, n=1, created_at=0, created_by="t",
                           embedder_model="e", embedder_revision="", dim=1, calibration=calibration or {})
    r = DriftResult(field="prompts", statistic=1.0, p_value=0.001 if shifted else 0.5, drift=shifted,
                    shifted=shifted, n_current=1, n_baseline=1, method="units_mmd_rbf", status="ok",
                    relative_effect=effect)
    return DriftReport(version="v", model="m", checked_at=0.0, status="ok", baseline_hash="h", baseline=meta,
                       results={"prompts": r, "outputs": r})


def test_persistence_is_sized_to_the_false_alarm_budget() -> None:
    rule = Persistence(interval_seconds=900, window_seconds=3600, alpha=0.01, feature_alpha=0.01, budget=1.0)
    # 2,880 checks in 30 days, windows 4 checks apart are disjoint, 2 fields: 2880·2·0.01 > 1 ≥ 2880·2·0.01².
    assert rule.needed(_report(True, None)) == 1 + 4 * 1
    noisy = {"windows": 24, "window_seconds": 3600, "flagged": {"prompts": 6, "outputs": 0}, "spread": {}}
    assert rule.needed(_report(True, None, noisy)) == 1 + 4 * 6  # its own hours differ (6 of 24): 0.25⁷ pays
    assert Persistence(interval_seconds=900, window_seconds=3600, alpha=0.01, feature_alpha=0.01,
                       fixed=2).needed(_report(True, None)) == 2


def test_drift_needs_the_run_and_the_effect() -> None:
    state = DriftState(persistence=Persistence(interval_seconds=900, window_seconds=3600, alpha=0.01,
                                               feature_alpha=0.01, fixed=3, min_effect=1.0))
    flags = [state.record(_report(True, effect)).results["prompts"] for effect in (5.0, 5.0, 0.4, 5.0)]
    assert [f.drift for f in flags] == [False, False, False, True]  # three in a row; a small shift never flags
    assert [f.streak for f in flags] == [1, 2, 3, 4] and flags[0].needed == 3


@pytest.mark.parametrize("units", [MIN_UNITS - 1])
def test_a_window_with_too_few_units_is_refused(units: int) -> None:
    x = np.zeros((3, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="at least 2 units"):
        mmd_test(x, assign(["a"] * 3, [0.0] * 3, slice_seconds=60), x,
                 assign(["b"] * 3, [0.0] * 3, slice_seconds=60), sq_bandwidth=1.0, permutations=9, alpha=0.1, seed=0)
    assert units == 1


def test_the_drift_gate_counts_a_conversation_whole_in_the_slice_it_started() -> None:
    from observer.analyse.drift.check import _arm_units

    samples = [StoredSample(version="c", prompt="p", output="o", ts=t, conversation=k, id=i)
               for i, (t, k) in enumerate([(10.0, "a"), (70.0, "a"), (130.0, None), (65.0, "b"), (125.0, "b")])]
    slices, groups = _arm_units(samples, since=0.0, slice_seconds=60.0)
    assert slices == [0, 0, 2, 1, 1]  # a's second turn stays in slice 0, b's in slice 1
    assert groups[0] == groups[1] < 0 and groups[3] == groups[4] < 0 and groups[0] != groups[3]
    assert groups[2] == 2  # no key: its slice is its group


def test_with_few_units_to_move_the_p_value_is_never_below_what_they_allow() -> None:
    """Three window slices against twelve baseline ones: C(15, 3) = 455 labellings, so p is about 1/455 at least;
    a relabelling equal to the observed one must count as reaching it however the float32 sums round (it did not,
    and such windows read p = 1/(B + 1))."""
    rng = np.random.default_rng(4)
    ref = rng.normal(size=(12 * 40, 6)).astype(np.float32)
    cur = (rng.normal(size=(3 * 40, 6)) + 3.0).astype(np.float32)  # as far from the baseline as it gets
    units = [assign([None] * n, [float(i // 40) * 600 for i in range(n)], slice_seconds=600) for n in (480, 120)]
    t = mmd_test(ref, units[0], cur, units[1], sq_bandwidth=median_sq_distance(ref), permutations=2000,
                 alpha=0.01, seed=0)
    assert t.p_value > 0.5 / 455 and t.p_value > 1 / 2001 and t.movable == 15
    small = [assign([None] * n, [float(i // 40) * 600 for i in range(n)], slice_seconds=600) for n in (120, 80)]
    assert mmd_test(ref[:120], small[0], cur[:80], small[1], sq_bandwidth=median_sq_distance(ref), permutations=999,
                    alpha=0.01, seed=0).p_value >= 0.05  # C(5, 2) = 10 labellings: p about 1/10, never 0.001
