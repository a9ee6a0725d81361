"""Benchmark of the quality area, against what a user would otherwise write, in the same run.

1. Golden replay throughput against the simulator (stable, healthy profile, real sleeps for TTFT and
   decode): the runner with `--concurrency` requests in flight vs. a sequential loop (concurrency 1)
   — the obvious hand-written replay script. Items/s include streaming, TTFT measurement and rule
   scoring.
2. Embedding-similarity scoring throughput with the bundled all-MiniLM-L6-v2 (CPU): the scorer's
   batched path (one embedding batch for all outputs + references) vs. embedding each
   (output, reference) pair with its own call, as a per-item loop does. The embedder's cache is off.

Usage: .venv/bin/python -m bench.eval [--concurrency 16] [--rounds 2] [--similarity-items 256]
The last output line is a JSON object (golden_items_per_s, similarity_items_per_s, and the baselines).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx

from observer.analyse.quality.golden import GoldenSet, discover
from observer.analyse.quality.runner import GoldenRunner
from observer.analyse.quality.scorer import Scorer
from observer.analyse.quality.similarity import cosine_scores
from observer.config import parse_config
from observer.config.quality import QualitySpec
from observer_dev.sim.fleet import run_fleet

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def replay(sets: list[GoldenSet], url: str, concurrency: int, rounds: int) -> tuple[float, int, float]:
    """(items/s, items, pass ratio) of `rounds` replays of the rule-checked golden sets."""
    from observer.config.fleet import VersionSpec

    version = VersionSpec(name="stable", openai=url)
    items = passed = scored = 0
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=max(10, concurrency))) as http:
        runner = GoldenRunner(http, spec=QualitySpec(concurrency=concurrency), scorer=Scorer())
        await runner.model_for(version)
        t = time.perf_counter()
        for _ in range(rounds):
            for gs in sets:
                r = await runner.run(version, gs)
                items += len(r.items)
                passed += r.passed
                scored += r.scored
        elapsed = time.perf_counter() - t
    return items / elapsed, items, passed / max(1, scored)


def bench_golden(concurrency: int, rounds: int) -> dict[str, float]:
    port = free_port()
    cfg = parse_config(f"fleet: {{versions: [{{name: stable, vllm: ['http://127.0.0.1:{port}/metrics'], "
                       f"openai: 'http://127.0.0.1:{port}/v1'}}]}}\n", environ={})
    # Summaries need the judge/embedder; replay throughput is measured on the rule-checked sets.
    sets = [g for g in discover([ROOT / "golden_sets"]) if not g.uses("judge") and not g.uses("similarity")]
    with run_fleet(cfg, {"stable": {"preset": "healthy", "load_rps": 0.0}}, seed=5,
                   answer_dir=ROOT / "golden_sets"):
        url = f"http://127.0.0.1:{port}/v1"
        seq_rate, seq_items, _ = asyncio.run(replay(sets, url, 1, 1))
        con_rate, con_items, ratio = asyncio.run(replay(sets, url, concurrency, rounds))
    print(f"golden replay, {len(sets)} sets: sequential {seq_rate:.1f} items/s ({seq_items} items); "
          f"concurrency {concurrency}: {con_rate:.1f} items/s ({con_items} items, pass ratio {ratio:.2f}); "
          f"speed-up ×{con_rate / seq_rate:.1f}")
    return {"golden_items_per_s": round(con_rate, 2), "golden_sequential_items_per_s": round(seq_rate, 2),
            "golden_speedup": round(con_rate / seq_rate, 2), "golden_concurrency": concurrency}


def bench_similarity(n: int) -> dict[str, float]:
    from observer.analyse.embed import load_local_embedder

    t = time.perf_counter()
    emb = load_local_embedder(max_cache_entries=0)
    emb.embed(["warm up"])
    load_s = time.perf_counter() - t
    sets = discover([ROOT / "golden_sets"])
    refs = [i.reference or "" for g in sets for i in g.items]
    # Distinct outputs (no cache hits): each reference paraphrased by a numbered prefix.
    outputs = [f"Answer {k}: {refs[k % len(refs)]}" for k in range(n)]
    references = [refs[k % len(refs)] + f" (ref {k})" for k in range(n)]
    t = time.perf_counter()
    batched = cosine_scores(emb, outputs, references)
    batch_s = time.perf_counter() - t
    naive_n = max(16, n // 4)
    t = time.perf_counter()
    naive = [cosine_scores(emb, [o], [r])[0] for o, r in zip(outputs[:naive_n], references[:naive_n], strict=True)]
    naive_s = time.perf_counter() - t
    assert max(abs(a - b) for a, b in zip(batched[:naive_n], naive, strict=True)) < 1e-3
    rate, naive_rate = n / batch_s, naive_n / naive_s
    print(f"similarity (MiniLM, CPU, model load {load_s:.1f}s): batched {rate:.1f} items/s ({n} items); "
          f"per-item calls {naive_rate:.1f} items/s ({naive_n} items); speed-up ×{rate / naive_rate:.1f}")
    return {"similarity_items_per_s": round(rate, 2), "similarity_per_item_items_per_s": round(naive_rate, 2),
            "similarity_speedup": round(rate / naive_rate, 2), "embedder_load_s": round(load_s, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--similarity-items", type=int, default=128)
    args = ap.parse_args()
    out: dict[str, float] = {}
    out.update(bench_golden(args.concurrency, args.rounds))
    out.update(bench_similarity(args.similarity_items))
    out["load_average_1m"] = round(os.getloadavg()[0], 2)  # a shared 2-core machine: say how busy it was
    print(json.dumps(out, allow_nan=False))


if __name__ == "__main__":
    main()
