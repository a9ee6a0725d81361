"""LLM-as-judge client for any OpenAI-compatible endpoint (a vLLM server in production).

Verdicts are requested with `response_format: json_schema` (vLLM ≥ 0.12 silently ignores the old
`guided_json`) at temperature 0, and the reply is still validated: exactly one JSON object, no
prose around it, conforming to the schema. A truncated reply, a refusal or anything unparseable
raises JudgeError: a judge error is never a pass or a fail.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from observer.analyse.quality.prompts import VERDICT_SCHEMA, JudgePrompt, Rubric, render
from observer.analyse.quality.rules import parse_json
from observer.errors import JudgeError, StoreError

RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
MAX_RETRY_AFTER_S = 30.0
HOUR_S = 3600.0


@dataclass(frozen=True)
class Verdict:
    """One judge verdict, with everything needed to tell whether two verdicts are comparable."""

    passed: bool
    score: int  # 1..5 as the judge gave it
    reasoning: str
    judge_model: str
    rubric: str
    rubric_hash: str
    prompt_version: str
    attempts: int
    latency_s: float
    prompt_hash: str = ""

    @property
    def normalised_score(self) -> float:
        """The 1..5 score mapped to [0, 1]."""
        return (self.score - 1) / 4

    def meta(self) -> dict[str, Any]:
        """What is recorded with the score."""
        return {"judge_model": self.judge_model, "rubric": self.rubric, "rubric_hash": self.rubric_hash,
                "prompt_version": self.prompt_version, "prompt_hash": self.prompt_hash, "judge_score": self.score,
                "attempts": self.attempts}


@dataclass
class JudgeStats:
    """Judge call outcomes (bounded label set) and the time of the last usable verdict."""

    calls: Counter[str] = field(default_factory=Counter)
    last_success: float | None = None

    def count(self, outcome: str) -> None:
        self.calls[outcome] += 1


def _retry_after(resp: httpx.Response) -> float | None:
    raw = resp.headers.get("retry-after")
    try:
        return min(MAX_RETRY_AFTER_S, max(0.0, float(raw))) if raw is not None else None
    except ValueError:
        return None


def parse_verdict(body: Any) -> dict[str, Any]:
    """Extract exactly one schema-conformant verdict from a chat-completions body, else JudgeError."""
    return parse_structured(body, VERDICT_SCHEMA)


def parse_structured(body: Any, schema: dict[str, Any]) -> dict[str, Any]:
    """Exactly one JSON object conforming to `schema` from a chat-completions body, else JudgeError."""
    from jsonschema import Draft202012Validator

    try:
        choice = body["choices"][0]
        message = choice["message"]
        if not isinstance(choice, dict) or not isinstance(message, dict):
            raise TypeError("not an object")
    except (KeyError, IndexError, TypeError) as e:
        raise JudgeError(f"judge reply has no choices[0].message: {str(body)[:200]}", reason="unparseable") from e
    if choice.get("finish_reason") == "length":
        raise JudgeError("judge reply was truncated (finish_reason=length)", reason="length")
    if message.get("refusal"):
        raise JudgeError(f"judge refused: {str(message['refusal'])[:200]}", reason="refusal")
    content = message.get("content")
    if not isinstance(content, str) or not content.strip():
        raise JudgeError("judge reply has no content", reason="unparseable")
    text = content.strip()
    if not (text.startswith("{") and text.endswith("}")):
        raise JudgeError(f"judge reply is not one bare JSON object: {text[:200]!r}", reason="unparseable")
    try:
        verdict = parse_json(text)  # strict: no NaN, no duplicate keys, one value only
    except (ValueError, RecursionError) as e:
        raise JudgeError(f"judge reply is not valid JSON ({e}): {text[:200]!r}", reason="unparseable") from e
    errors = list(Draft202012Validator(schema).iter_errors(verdict))
    if errors:
        raise JudgeError(f"judge verdict does not match the schema: {errors[0].message[:200]}", reason="schema")
    assert isinstance(verdict, dict)
    return verdict


class SharedBudget(Protocol):
    """A budget all replicas spend from (the shared store's ledger); blocking."""

    def spend(self, budget: str, *, limit: int, window_seconds: float) -> bool: ...


REPLY_RETRIES = 1
"""Unusable replies asked again per answer (see JudgeClient.ask)."""
REPLY_RETRY_REASONS = frozenset({"length", "unparseable", "schema"})

JUDGE_BUDGET = "judge_calls"  # the ledger's name of the judge's hourly call budget


class JudgeClient:
    """Calls an OpenAI-compatible chat endpoint as a judge: bounded concurrency, retries, hourly budget (this
    replica's alone, or with `ledger` every replica's together, so N replicas spend what one would)."""

    def __init__(self, http: httpx.AsyncClient, *, base_url: str, model: str, prompt: JudgePrompt,
                 api_key: str | None = None, timeout_s: float = 30.0, max_retries: int = 3,
                 backoff_s: float = 0.5, concurrency: int = 4, budget_per_hour: int = 1000,
                 max_tokens: int = 400, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 stats: JudgeStats | None = None, wall_clock: Callable[[], float] = time.time,
                 ledger: SharedBudget | None = None) -> None:
        self.http = http
        self.ledger = ledger
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.prompt = prompt
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.budget_per_hour = budget_per_hour
        self.max_tokens = max_tokens
        self.clock = clock
        self.wall_clock = wall_clock
        self.sleep = sleep
        self.stats = stats or JudgeStats()
        self._slots = asyncio.Semaphore(concurrency)
        self._calls: deque[float] = deque()

    def budget_left(self) -> int:
        """HTTP calls still allowed in the current sliding hour."""
        now = self.clock()
        while self._calls and now - self._calls[0] >= HOUR_S:
            self._calls.popleft()
        return self.budget_per_hour - len(self._calls)

    async def _spend_shared(self) -> bool:
        """One unit of the fleet-wide budget (True without a ledger). A store that cannot answer spends
        nothing: no call is made that the budget might not allow, and the reason is the store's error."""
        if self.ledger is None:
            return True
        try:
            return await asyncio.to_thread(self.ledger.spend, JUDGE_BUDGET, limit=self.budget_per_hour,
                                           window_seconds=HOUR_S)
        except StoreError as e:
            self.stats.count("budget_unavailable")
            raise JudgeError(f"the fleet-wide judge budget cannot be read ({e}); no call made",
                             reason="budget") from e

    def _request(self, system: str, user: str, *, schema: dict[str, Any] = VERDICT_SCHEMA, name: str = "verdict",
                 temperature: float = 0.0) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "temperature": temperature,
            "max_tokens": self.max_tokens,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": name, "strict": True, "schema": schema}},
        }

    async def ask(self, system: str, user: str, *, schema: dict[str, Any], name: str,
                  temperature: float = 0.0,
                  rerender: Callable[[], tuple[str, str]] | None = None) -> tuple[dict[str, Any], int]:
        """One structured judge answer conforming to `schema` (budget, retries and outcome counts as for
        verdicts) and the HTTP calls it took, or JudgeError.

        A reply that came back unusable (truncated, not one JSON object, off the schema) is asked once more,
        at temperature 0 and with `rerender`'s fresh prompt text (a new nonce): a small judge that loops to
        `max_tokens` does so on one exact text, and greedy decoding of another text takes another path. A
        second unusable reply is the error; a refusal is never asked again."""
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        calls = 0
        for reply in range(1 + REPLY_RETRIES):
            payload = self._request(system, user, schema=schema, name=name, temperature=temperature)
            posted = False
            try:
                async with self._slots:
                    body, attempts = await self._post(payload, headers)  # counts its own outcomes
                calls, posted = calls + attempts, True
                answer = parse_structured(body, schema)
            except JudgeError as e:
                if posted:
                    self.stats.count(e.reason)
                if reply < REPLY_RETRIES and e.reason in REPLY_RETRY_REASONS:
                    temperature = 0.0
                    if rerender is not None:
                        system, user = rerender()
                    continue
                raise
            self.stats.count("ok")
            self.stats.last_success = self.wall_clock()
            return answer, calls
        raise AssertionError("unreachable: the last reply returns or raises")

    async def judge(self, *, rubric: Rubric, prompt: str, output: str, reference: str | None = None) -> Verdict:
        """Return one verdict on `output`, or raise JudgeError (never a pass or a fail by default)."""
        def rendered() -> tuple[str, str]:
            return render(self.prompt, rubric, nonce=secrets.token_hex(12), judged_prompt=prompt, output=output,
                          reference=reference)

        system, user = rendered()
        started = self.clock()
        verdict, attempts = await self.ask(system, user, schema=VERDICT_SCHEMA, name="verdict", rerender=rendered)
        return Verdict(passed=verdict["verdict"] == "pass", score=int(verdict["score"]),
                       reasoning=str(verdict["reasoning"]), judge_model=self.model, rubric=rubric.name,
                       rubric_hash=rubric.hash, prompt_version=self.prompt.version, attempts=attempts,
                       latency_s=self.clock() - started, prompt_hash=self.prompt.hash)

    async def _post(self, payload: dict[str, Any], headers: dict[str, str]) -> tuple[Any, int]:
        last = ""
        for attempt in range(self.max_retries + 1):
            if self.budget_left() <= 0 or not await self._spend_shared():
                self.stats.count("budget_exhausted")
                raise JudgeError(f"judge call budget of {self.budget_per_hour}/hour is spent", reason="budget")
            self._calls.append(self.clock())
            delay = self.backoff_s * (2 ** attempt)
            try:
                resp = await self.http.post(self.url, json=payload, headers=headers, timeout=self.timeout_s)
            except httpx.TimeoutException:
                self.stats.count("timeout")
                last, reason = f"timed out after {self.timeout_s}s", "timeout"
            except httpx.TransportError as e:
                self.stats.count("transport")
                last, reason = f"transport error: {e}", "transport"
            else:
                if resp.status_code == 200:
                    try:
                        return resp.json(), attempt + 1
                    except (json.JSONDecodeError, UnicodeDecodeError) as e:
                        self.stats.count("unparseable")
                        raise JudgeError(f"judge HTTP body is not JSON: {resp.text[:200]!r}",
                                         reason="unparseable") from e
                retryable = resp.status_code in RETRY_STATUSES
                self.stats.count("rate_limited" if resp.status_code == 429
                                 else "server_error" if resp.status_code >= 500 else "client_error")
                last, reason = f"HTTP {resp.status_code}: {resp.text[:200]!r}", "http"
                if not retryable:
                    raise JudgeError(f"judge call to {self.url} failed: {last}", reason=reason)
                delay = max(delay, _retry_after(resp) or 0.0)
            if attempt < self.max_retries:
                await self.sleep(delay)
        raise JudgeError(f"judge call to {self.url} failed after {self.max_retries + 1} attempt(s): {last}",
                         reason=reason)
