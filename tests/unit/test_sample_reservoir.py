"""Per-window reservoir sampling: uniform inclusion, bursts confined to their window, seeded."""

from __future__ import annotations

from collections import Counter

import pytest
from scipy import stats

from observer.sample.reservoir import WindowReservoir


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_every_candidate_of_a_window_has_the_same_inclusion_probability() -> None:
    clock = Clock()
    res: WindowReservoir[int] = WindowReservoir(capacity=10, window_seconds=1.0, seed=7, clock=clock)
    hits: Counter[int] = Counter()
    trials = 2000
    for t in range(trials):
        clock.now = t + 0.1
        for i in range(50):
            res.offer("v", i)
        clock.now = t + 1.5
        for items in res.flush().values():
            hits.update(items)
    counts = [hits[i] for i in range(50)]
    assert sum(counts) == trials * 10
    # Uniform: each of the 50 positions kept with probability 10/50; early positions are not favoured.
    assert stats.chisquare(counts).pvalue > 0.01
    assert abs(sum(counts[:25]) - sum(counts[25:])) < 0.05 * sum(counts)


def test_a_burst_cannot_crowd_out_other_windows() -> None:
    clock = Clock()
    res: WindowReservoir[str] = WindowReservoir(capacity=5, window_seconds=10.0, seed=1, clock=clock)
    clock.now = 1.0
    for i in range(10_000):
        res.offer("v", f"burst{i}")
    clock.now = 12.0
    offer, closed = res.offer("v", "quiet0")
    assert len(closed) == 5 and all(c.startswith("burst") for c in closed)
    assert offer.kept
    for i in range(1, 3):
        res.offer("v", f"quiet{i}")
    clock.now = 25.0
    assert res.flush() == {"v": ["quiet0", "quiet1", "quiet2"]}
    assert res.pending() == 0


def test_versions_have_separate_reservoirs_and_force_flush() -> None:
    clock = Clock()
    res: WindowReservoir[int] = WindowReservoir(capacity=2, window_seconds=60.0, seed=0, clock=clock)
    for i in range(100):
        res.offer("stable", i)
    res.offer("canary", 1)
    assert res.flush() == {}  # windows still open
    flushed = res.flush(force=True)
    assert len(flushed["stable"]) == 2 and flushed["canary"] == [1]


def test_offer_reports_evictions_and_rejections() -> None:
    clock = Clock()
    res: WindowReservoir[int] = WindowReservoir(capacity=1, window_seconds=60.0, seed=3, clock=clock)
    outcomes = [res.offer("v", i)[0] for i in range(200)]
    assert outcomes[0].kept and outcomes[0].evicted == 0
    later = outcomes[1:]
    assert all((o.kept and o.evicted == 1) or (not o.kept and o.evicted == 0) for o in later)
    assert 0 < sum(o.kept for o in later) < 20  # about H(200) - 1 ≈ 4.9 replacements


@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.5, 1.0])
def test_gate_rate_matches_the_fraction_and_is_seeded(fraction: float) -> None:
    a: WindowReservoir[int] = WindowReservoir(capacity=1, window_seconds=1.0, seed=42, clock=Clock())
    b: WindowReservoir[int] = WindowReservoir(capacity=1, window_seconds=1.0, seed=42, clock=Clock())
    draws_a = [a.gate(fraction) for _ in range(20_000)]
    draws_b = [b.gate(fraction) for _ in range(20_000)]
    assert draws_a == draws_b
    rate = sum(draws_a) / len(draws_a)
    assert abs(rate - fraction) < 0.015


def test_bad_parameters() -> None:
    with pytest.raises(ValueError, match="capacity"):
        WindowReservoir(capacity=0, window_seconds=1.0, clock=Clock())
    with pytest.raises(ValueError, match="window_seconds"):
        WindowReservoir(capacity=1, window_seconds=0.0, clock=Clock())
