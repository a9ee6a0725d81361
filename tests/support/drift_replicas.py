"""Drift replicas on one shared store, for the shared-drift tests (SQLite in tests/unit, PostgreSQL in
tests/integration): the config, a replica (a drift component with its own context), a pinned baseline, and
one round of offer → work → read back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from observer.analyse.drift import baseline as bl
from observer.analyse.embed import HashingEmbedder
from observer.config import parse_config
from observer.store.base import ManagedStore, SampleRecord
from observer.wiring.drift import DriftComponent, build
from observer.wiring.runtime import Context
from tests.support.drift_corpus import SCENARIOS, load_corpus

NOW = 1_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def config(tmp_path: Path, store_url: str | None = None) -> Any:
    """Two versions of one model, drift checked every 600 s, flagged after two shifted windows; the store is
    a SQLite file in `tmp_path` unless `store_url` names a PostgreSQL database."""
    store = f"{{url: '{store_url}'}}" if store_url else f"{{path: {tmp_path / 'samples.db'}}}"
    return parse_config(f"""
fleet:
  versions:
    - {{name: stable, role: stable, model: llama}}
    - {{name: canary, role: canary, model: llama}}
sampling:
  store: {store}
drift:
  baseline_dir: {tmp_path / 'baselines'}
  min_samples: 100
  permutations: 199
  feature_alpha: 0.05
  alpha: 0.01
  consecutive: 2
  interval_seconds: 600
  embedder: {{cache_dir: null}}
""", environ={})


def records(version: str, texts: list[str], t0: float) -> list[SampleRecord]:
    """Independent draws: each sample a conversation of its own."""
    return [SampleRecord(version=version, prompt=t, output=f"Reply: {t}", ts=t0 + i * 0.01, model="llama",
                         finish_reason="stop", output_tokens=len(t.split()), latency_s=1.0,
                         conversation=f"{version}-{t0:.0f}-{i}")
            for i, t in enumerate(texts)]


def replica(cfg: Any, store: ManagedStore, clock: Clock, embedder: Callable[[], Any]) -> DriftComponent:
    ctx = Context(config=cfg, http=httpx.AsyncClient(), clock=clock)
    component = build(ctx, store=store)
    assert isinstance(component, DriftComponent) and component.shared is not None
    component.runner.embedder_factory = embedder
    return component


def seed_baseline(cfg: Any, store: ManagedStore, emb: HashingEmbedder) -> Any:
    corpus = load_corpus()
    rng = np.random.default_rng(0)
    ref, _ = corpus.draw("none", 600, rng)
    store.add(records("stable", ref, NOW - 30 * 86400))
    repo = bl.BaselineRepo(cfg.drift.baseline_dir)
    b = bl.build(store.samples("stable", until=NOW - 86400), emb, model="llama", source_version="stable",
                 since=None, until=NOW - 86400, created_by="test", created_at=NOW, max_samples=5000,
                 slice_seconds=600.0)
    repo.save(b)
    repo.promote(b.hash, by="test", at=NOW)
    return corpus, rng


def states(*replicas: DriftComponent) -> list[dict[str, tuple[str, dict[str, tuple[bool, int]]]]]:
    out = []
    for r in replicas:
        view = {}
        for v in r.state.versions():
            rep = r.state.report(v)
            assert rep is not None
            view[v] = (rep.status, {k: (x.drift, x.streak) for k, x in rep.results.items()})
        out.append(view)
    return out


async def one_round(leader: DriftComponent, workers: list[DriftComponent], everyone: list[DriftComponent]) -> None:
    assert leader.shared is not None
    await leader.shared.enqueue()
    for w in workers:
        assert w.worker is not None
        while await w.worker.run_once():
            pass
    for r in everyone:
        assert r.sync is not None
        await r.sync.run_once()


async def drifted_windows(leader: DriftComponent, worker: DriftComponent, store: ManagedStore, clock: Clock,
                          corpus: Any, rng: Any, windows: int = 2) -> None:
    """`windows` check rounds 600 s apart: stable as its baseline, 30% of canary prompts in another
    language; `leader` offers, `worker` checks, both read back."""
    drifted = replace(SCENARIOS["language"], fraction=0.3)
    for window in range(windows):
        clock.now = NOW + window * 600
        _, stable_now = corpus.draw("none", 300, rng)
        _, canary_now = corpus.draw(drifted, 300, rng)
        store.add(records("stable", stable_now, clock.now - 300))
        store.add(records("canary", canary_now, clock.now - 300))
        await one_round(leader, [worker], [leader, worker])
