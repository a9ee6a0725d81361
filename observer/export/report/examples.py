"""The worst answers of a canary as text: lost shadow pairs first (both answers to one prompt), then the
newest live-check failures. Two bounded reads of the store per page, only for a request carrying the token;
every text goes through the configured redactor again (a replayed answer was never captured by the proxy). Each
example names the trace of the request it came from (the sample's stored traceparent), linked through
`report.trace_url` when one is set."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from observer.export.report.model import Example
from observer.store.pairs import PairRecord
from observer.store.records import StoredSample

MAX_TEXT = 2000
"""Characters of each prompt or answer shown: the page stays light whatever the model wrote."""

SCAN = 200
"""Pairs and samples read per page at most."""

_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")


class ExampleStore(Protocol):
    """What the examples need of the sample store."""

    def pairs(self, canary: str, *, since: float, limit: int) -> list[PairRecord]: ...

    def samples(self, version: str, *, since: float | None = None, until: float | None = None,
                limit: int | None = None, source: str | None = None) -> list[StoredSample]: ...


def _lost(body: Mapping[str, Any]) -> str | None:
    judged = body.get("judge")
    if isinstance(judged, Mapping) and judged.get("outcome") == "loss":
        return "the pairwise judge preferred the baseline in both orders"
    rules = body.get("rules")
    if isinstance(rules, Mapping):
        lost = sorted(str(k) for k, v in rules.items() if v == "loss")
        if lost:
            return "rule check(s) failed on the canary only: " + ", ".join(lost)
    return None


def _answer(body: Mapping[str, Any], arm: str) -> str:
    side = body.get(arm)
    return str(side.get("output", "")) if isinstance(side, Mapping) else ""


class StoreExamples:
    """Reads the worst answers from the store (SQLite or PostgreSQL)."""

    def __init__(self, store: ExampleStore, *, redact: Callable[[str], str] | None = None,
                 trace_url: str | None = None) -> None:
        self.store = store
        self.redact = redact or (lambda text: text)
        self.trace_url = trace_url

    def _trace(self, traceparent: object) -> dict[str, str]:
        """The trace id of a stored traceparent and its viewer link; nothing when there is none."""
        m = _TRACEPARENT.fullmatch(traceparent) if isinstance(traceparent, str) else None
        if m is None or not int(m.group(1), 16):
            return {}
        trace_id = m.group(1)  # hex digits only: safe in a URL as it is
        return {"trace_id": trace_id,
                "trace_url": self.trace_url.replace("{trace_id}", trace_id) if self.trace_url else ""}

    def _text(self, text: str) -> str:
        text = self.redact(text)
        return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + " …"

    def worst(self, canary: str, *, since: float, limit: int) -> list[Example]:
        out: list[Example] = []
        if limit <= 0:
            return out
        for p in reversed(self.store.pairs(canary, since=since, limit=SCAN)):  # newest first
            why = _lost(p.body)
            if why is None:
                continue
            out.append(Example("lost pair", self._text(str(p.body.get("prompt", ""))),
                               self._text(_answer(p.body, "canary")), self._text(_answer(p.body, "baseline")), why,
                               **self._trace(p.body.get("traceparent"))))
            if len(out) >= limit:
                return out
        for s in self.store.samples(canary, since=since, limit=SCAN):
            failed = sorted(name for name, score in s.scores.items() if score.passed is False)
            if not failed:
                continue
            reasons = "; ".join(f"{name}: {s.scores[name].reason[:200]}" for name in failed)
            out.append(Example("live failure", self._text(s.prompt), self._text(s.output), "", reasons,
                               **self._trace(s.traceparent)))
            if len(out) >= limit:
                break
        return out


def none(canary: str, *, since: float, limit: int) -> Sequence[Example]:
    """No store (the sampling area is off): no examples."""
    return ()
