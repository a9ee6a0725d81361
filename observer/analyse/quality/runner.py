"""Golden replay: send each item to a version's OpenAI endpoint (streaming, so client-side TTFT is
measured), then score the answers."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import httpx

from observer.analyse.quality.golden import GoldenItem, GoldenSet
from observer.analyse.quality.model import Answer, GoldenRunResult, ItemResult
from observer.analyse.quality.scorer import Scorer
from observer.config.fleet import VersionSpec
from observer.config.quality import QualitySpec

MAX_ANSWER_CHARS = 1_000_000  # a runaway stream is cut here and reported as an error

Progress = Callable[[GoldenItem, Answer], None]


async def resolve_model(http: httpx.AsyncClient, base_url: str, *, timeout: float) -> str:
    """The first model id served at `base_url` (GET /models); ValueError naming the endpoint if none."""
    url = base_url.rstrip("/") + "/models"
    try:
        resp = await http.get(url, timeout=timeout)
        resp.raise_for_status()
        return str(resp.json()["data"][0]["id"])
    except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as e:
        raise ValueError(f"could not read the served model from {url}: {e}") from e


def _delta_text(chunk: dict[str, Any]) -> tuple[str, str | None]:
    choice = (chunk.get("choices") or [{}])[0]
    delta = choice.get("delta") or {}
    text = delta.get("content") if isinstance(delta, dict) else None
    if text is None:  # /v1/completions-style stream
        text = choice.get("text")
    return (text if isinstance(text, str) else ""), choice.get("finish_reason")


async def ask(http: httpx.AsyncClient, *, base_url: str, model: str, messages: list[dict[str, str]],
              max_tokens: int, temperature: float, timeout: float,
              clock: Callable[[], float] = time.perf_counter, headers: dict[str, str] | None = None) -> Answer:
    """Stream one chat completion; never raises: failures come back as `Answer.error`."""
    payload = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": temperature,
               "stream": True, "stream_options": {"include_usage": True}}
    url = base_url.rstrip("/") + "/chat/completions"
    start = clock()
    ttft: float | None = None
    parts: list[str] = []
    size = 0
    finish: str | None = None
    usage: dict[str, Any] = {}
    try:
        async with asyncio.timeout(timeout), http.stream("POST", url, json=payload, timeout=timeout,
                                                           headers=headers) as resp:
            if resp.status_code != 200:
                body = (await resp.aread())[:200].decode("utf-8", "replace")
                return Answer("", None, None, clock() - start, error=f"HTTP {resp.status_code}: {body}")
            if "text/event-stream" not in resp.headers.get("content-type", ""):
                # A server that ignores `stream: true` answers one JSON body: no TTFT to measure.
                whole = json.loads(await resp.aread())
                choice = whole["choices"][0]
                text = choice["message"]["content"] or ""
                u = whole.get("usage") or {}
                return Answer(text, choice.get("finish_reason"), None, clock() - start,
                              prompt_tokens=u.get("prompt_tokens"), completion_tokens=u.get("completion_tokens"))
            done = False
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    return Answer("".join(parts), finish, ttft, clock() - start,
                                  error=f"stream error: {str(chunk['error'])[:200]}")
                usage = chunk.get("usage") or usage
                text, fr = _delta_text(chunk)
                if text:
                    if ttft is None:
                        ttft = clock() - start
                    parts.append(text)
                    size += len(text)
                    if size > MAX_ANSWER_CHARS:
                        return Answer("".join(parts), finish, ttft, clock() - start,
                                      error=f"answer longer than {MAX_ANSWER_CHARS} chars")
                finish = fr or finish
            if not done and finish is None:
                return Answer("".join(parts), None, ttft, clock() - start, error="stream ended before [DONE]")
    except TimeoutError:
        return Answer("".join(parts), finish, ttft, clock() - start, error=f"timed out after {timeout}s")
    except httpx.HTTPError as e:
        return Answer("".join(parts), finish, ttft, clock() - start, error=f"{type(e).__name__}: {e}")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError, TypeError, KeyError, IndexError) as e:
        return Answer("".join(parts), finish, ttft, clock() - start, error=f"malformed reply: {e!r}")
    return Answer("".join(parts), finish, ttft, clock() - start,
                  prompt_tokens=usage.get("prompt_tokens"), completion_tokens=usage.get("completion_tokens"))


class ServedModels:
    """The model name to request at an endpoint: the version's configured one, else the first model the
    endpoint serves (asked once per URL, then cached)."""

    def __init__(self, http: httpx.AsyncClient, *, timeout: float) -> None:
        self.http = http
        self.timeout = timeout
        self._models: dict[str, str] = {}

    async def model(self, version: VersionSpec, base_url: str) -> str:
        if version.model:
            return version.model
        if base_url not in self._models:
            self._models[base_url] = await resolve_model(self.http, base_url, timeout=self.timeout)
        return self._models[base_url]


class GoldenRunner:
    """Replays golden sets against versions with bounded concurrency and scores the answers."""

    def __init__(self, http: httpx.AsyncClient, *, spec: QualitySpec, scorer: Scorer,
                 clock: Callable[[], float] = time.time) -> None:
        self.http = http
        self.spec = spec
        self.scorer = scorer
        self.clock = clock
        self.models = ServedModels(http, timeout=spec.request_timeout_seconds)

    async def model_for(self, version: VersionSpec) -> str:
        """The model name to request: configured, else the endpoint's first served model (cached)."""
        assert version.openai is not None
        return await self.models.model(version, version.openai)

    async def run(self, version: VersionSpec, golden: GoldenSet, *, progress: Progress | None = None
                  ) -> GoldenRunResult:
        """Replay `golden` against `version` and score it (request failures leave items unscored)."""
        if version.openai is None:
            raise ValueError(f"version {version.name!r} has no openai URL to replay golden sets against")
        started = self.clock()
        try:
            model = await self.model_for(version)
        except ValueError as e:
            answers = [Answer("", None, None, 0.0, error=str(e)) for _ in golden.items]
        else:
            slots = asyncio.Semaphore(self.spec.concurrency)
            base = version.openai

            async def one(item: GoldenItem) -> Answer:
                async with slots:
                    answer = await ask(self.http, base_url=base, model=model, messages=item.chat(),
                                       max_tokens=item.max_tokens or self.spec.max_tokens,
                                       temperature=self.spec.temperature,
                                       timeout=self.spec.request_timeout_seconds)
                if progress is not None:
                    progress(item, answer)
                return answer

            answers = list(await asyncio.gather(*(one(i) for i in golden.items)))
        outcomes = await self.scorer.score(golden.items, answers)
        items = tuple(ItemResult(i.id, i.category, a, o) for i, a, o in zip(golden.items, answers, outcomes,
                                                                             strict=True))
        judge = self.scorer.judge
        return GoldenRunResult(version=version.name, golden_set=golden.name, set_version=golden.version,
                               started=started, finished=self.clock(), items=items,
                               judge_model=judge.model if judge else None,
                               judge_prompt_version=judge.prompt.version if judge else None)
