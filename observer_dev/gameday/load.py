"""The real tier's load: bursts of completions against real generators, and the probe that times the engine.

`drive` sends a round's bursts (bounded, loopback, unanswered requests named); `measure_speed` times the engine as
the rounds will use it, for observer_dev.gameday.pace to size them.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Mapping

import httpx

from observer_dev.gameday import GamedayError
from observer_dev.gameday.pace import PROBE_REQUESTS, PROBE_TRIES, SLACK, EngineSpeed, stretch_of

LONG_PROMPT_WORDS = 60  # ~180 tokens ("word42" is three): over SHORT_CONTEXT, far under the stable server's 2048


def drive(urls: Mapping[str, str], *, requests: int, concurrency: int, max_tokens: int = 8,
          prompt_words: int = 12, long_every: int = 0, timeout: float = 120.0) -> dict[str, Counter[int]]:
    """`requests` completions to each URL at once, `concurrency` in flight per URL (bounded, loopback); with
    `long_every`, every such request carries a LONG_PROMPT_WORDS prompt. Returns each URL's HTTP statuses:
    an answer the server refused (4xx, 5xx) is counted, not raised; a broken connection raises, and so do
    requests left unanswered for `timeout` seconds, as one GamedayError naming each."""
    statuses: dict[str, Counter[int]] = {name: Counter() for name in urls}
    unanswered: list[str] = []

    async def main() -> None:
        async with httpx.AsyncClient(timeout=timeout) as client:
            async def arm(name: str, url: str) -> None:
                sem = asyncio.Semaphore(concurrency)

                async def go(i: int) -> None:
                    async with sem:
                        words = LONG_PROMPT_WORDS if long_every and i % long_every == long_every - 1 else prompt_words
                        prompt = " ".join(f"word{(i + k) % 97}" for k in range(words))
                        t0 = time.monotonic()
                        try:
                            r = await client.post(url + "/v1/completions", json={
                                "model": "llm", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                                "ignore_eos": True, "user": f"{name}-{i}"})  # a user of its own: a unit of drift
                        except httpx.TimeoutException as e:
                            unanswered.append(f"{name} request {i} ({words} words) to {url}: {type(e).__name__} "
                                              f"after {time.monotonic() - t0:.0f} s")
                            return
                        statuses[name][r.status_code] += 1

                await asyncio.gather(*(go(i) for i in range(requests)))

            await asyncio.gather(*(arm(n, u) for n, u in urls.items()))

    asyncio.run(main())
    if unanswered:
        raise GamedayError("no answer: " + "; ".join(unanswered))
    return statuses


def _completion(client: httpx.Client, url: str, max_tokens: int) -> float:
    t0 = time.monotonic()
    r = client.post(url + "/v1/completions", json={"model": "llm", "prompt": "word1 word2 word3 word4",
                                                   "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True})
    r.raise_for_status()
    return time.monotonic() - t0


def _burst(generators: Mapping[str, str], timeout_s: float) -> float:
    t0 = time.monotonic()
    drive(generators, requests=PROBE_REQUESTS, concurrency=6, timeout=timeout_s)
    return time.monotonic() - t0


def measure_speed(generators: Mapping[str, str], embedder: str | None, *, timeout_s: float = 600.0) -> EngineSpeed:
    """Time the engine as the rounds will use it: a small warm-up burst, then the probe's burst on every
    generator at once (again, up to PROBE_TRIES, while it reads slow; the fastest counts, and then one generator
    alone says whether the servers slow each other), one request's decode rate on the first generator, one
    embedding batch."""
    drive(generators, requests=6, concurrency=6, timeout=timeout_s)  # warm: the first compilations
    probes = [_burst(generators, timeout_s)]
    while len(probes) < PROBE_TRIES and stretch_of(min(probes)) > SLACK:
        probes.append(_burst(generators, timeout_s))
    name, first = next(iter(generators.items()))
    alone_s = _burst({name: first}, timeout_s) if len(probes) > 1 else None
    with httpx.Client(timeout=timeout_s) as client:
        short = min(_completion(client, first, 1) for _ in range(2))
        long = min(_completion(client, first, 33) for _ in range(2))
        embed_s = 0.0
        if embedder is not None:
            texts = [f"sample text number {i} about topic {i % 5}" for i in range(32)]
            t0 = time.monotonic()
            client.post(embedder + "/v1/embeddings", json={"model": "minilm", "input": texts}).raise_for_status()
            embed_s = time.monotonic() - t0
    return EngineSpeed(probe_s=min(probes), decode_tokens_s=32 / max(long - short, 1e-3), embed_batch_s=embed_s,
                       probes=tuple(probes), alone_s=alone_s)
