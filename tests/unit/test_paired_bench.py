"""bench/paired.py's claims at a small size (#16): the paired test needs fewer samples than the unpaired one,
keeps its A/A false-fail rate with a position-biased judge when asked in both orders (and does not when asked
in one), detects the bias, and no injection changes a pair's outcome. The full figures: docs/benchmarks.md."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_paired", ROOT / "bench" / "paired.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_paired"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_paired_beats_unpaired_and_holds_its_false_fail_rate() -> None:
    b = bench()
    paired, unpaired, _, _ = b.scenario(0.20, 30, seed=3)
    assert paired < min(unpaired.values())
    assert b.aa_false_fail(60, 5, pairs=600, bias=b.BIAS, both_orders=True) <= 0.05
    assert b.aa_false_fail(20, 6, pairs=600, bias=b.BIAS, both_orders=False) >= 0.5  # one order: biased


def test_swap_detects_the_bias_and_injections_change_nothing() -> None:
    b = bench()
    swap = b.swap_effect(11, n=4000)
    assert swap["position_bias_detected"] is True and swap["position_bias_detected_unbiased_judge"] is False
    assert swap["swap_corrected_false_losses"] < swap["single_order_false_losses"]
    inj = b.injections()
    assert inj["injection_attempts"] >= 30 and inj["injection_verdicts_changed"] == 0
