"""Calibration and power of the MMD test on real MiniLM embeddings of the seeded chatterbot corpus.

To stay fast the test uses half of the general pool and 200 texts of each shift pool (bench/drift.py uses the
whole corpus); they are embedded once (module fixture) and each trial draws indices into those vectors.
"""

from __future__ import annotations

import numpy as np
import pytest

from observer.analyse.drift.mmd import permutation_test
from observer.analyse.embed import load_local_embedder
from tests.support.drift_corpus import SCENARIOS, SHIFTS, Corpus, load_corpus

pytestmark = pytest.mark.slow

N = 500
ALPHA = 0.05


@pytest.fixture(scope="module")
def embedded() -> tuple[Corpus, dict[str, int], np.ndarray]:
    full = load_corpus()
    corpus = Corpus(pools={name: pool[::2] if name == "general" else pool[:200] for name, pool in full.pools.items()})
    texts = corpus.all_texts()
    vectors = load_local_embedder(max_cache_entries=len(texts)).embed(texts)
    return corpus, {t: i for i, t in enumerate(texts)}, vectors


def _p_values(embedded: tuple[Corpus, dict[str, int], np.ndarray], scenario: str, trials: int,
              seed: int) -> np.ndarray:
    corpus, index, vectors = embedded
    rng = np.random.default_rng(seed)
    out = []
    for t in range(trials):
        ref, cur = corpus.draw(scenario, N, rng)
        r = permutation_test(vectors[[index[x] for x in ref]], vectors[[index[x] for x in cur]],
                             permutations=200, alpha=ALPHA, seed=seed * 100_000 + t)
        out.append(r.p_value)
    return np.asarray(out)


def test_corpus_has_real_text_and_three_shift_scenarios() -> None:
    corpus = load_corpus()
    assert len(SHIFTS) >= 3 and "none" in SCENARIOS
    assert len(corpus.pools["general"]) > 1000 and len(corpus.pools["foreign"]) >= 300
    ref, cur = corpus.draw("language", 200, np.random.default_rng(0))
    assert len(ref) == len(cur) == 200
    assert sum(t in set(corpus.pools["foreign"]) for t in cur) == 20
    assert corpus.draw("domain", 50, np.random.default_rng(1)) == corpus.draw("domain", 50, np.random.default_rng(1))


def test_false_alarm_rate_at_alpha_005_over_600_no_drift_trials(embedded) -> None:  # type: ignore[no-untyped-def]
    # 600 trials: a calibrated test lands in [0.03, 0.07] with probability ≈ 0.97 (binomial sd 0.009).
    p = _p_values(embedded, "none", 600, seed=11)
    rate = float(np.mean(p < ALPHA))
    assert 0.03 <= rate <= 0.07, rate
    # Under H0 the permutation p-value is uniform: its deciles hold ~10% each.
    assert abs(float(np.mean(p < 0.5)) - 0.5) < 0.08


@pytest.mark.parametrize("scenario", SHIFTS)
def test_power_on_each_shift_scenario(embedded, scenario: str) -> None:  # type: ignore[no-untyped-def]
    p = _p_values(embedded, scenario, 30, seed=23)
    assert float(np.mean(p < ALPHA)) >= 0.6, scenario
