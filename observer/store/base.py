"""The sample store interface (contract 3): records, stored samples, scores and the SampleStore protocol.

Synchronous by design; async callers wrap calls in `asyncio.to_thread`. Two implementations: SQLite (one
file, the embedded default) and PostgreSQL (a fleet, several replicas); `open_store` picks by config.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from observer.errors import StoreError
from observer.store.feedback import FeedbackStore
from observer.store.jobs import SharedWork
from observer.store.pairs import PairStore
from observer.store.records import SOURCES, SampleRecord, Score, Source, StoredSample

__all__ = ["SOURCES", "ManagedStore", "SampleRecord", "SampleStore", "Score", "Source", "StoreError", "StoredSample",
           "stored_sample"]


@runtime_checkable
class SampleStore(Protocol):
    """Durable storage of samples per version; `add` returns only after the samples are committed."""

    def add(self, samples: Sequence[SampleRecord], *, idempotency_key: str | None = None) -> list[int]:
        """Store samples in one transaction and return their ids, in input order. With `idempotency_key`,
        a batch already stored under that key is not stored again: its ids are returned (a retried
        request whose first attempt committed but whose answer was lost)."""
        ...

    def samples(
        self,
        version: str,
        *,
        since: float | None = None,
        until: float | None = None,
        limit: int | None = None,
        source: str | None = None,
    ) -> list[StoredSample]:
        """Return a version's samples with since <= ts < until, newest first."""
        ...

    def attach_score(
        self,
        sample_id: int,
        *,
        scorer: str,
        passed: bool | None,
        score: float | None,
        reason: str,
        meta: Mapping[str, Any],
    ) -> None:
        """Attach (or replace) one scorer's result on a sample."""
        ...

    def unscored(self, version: str, scorer: str, *, limit: int) -> list[StoredSample]:
        """Return up to `limit` of a version's samples that `scorer` has not scored, newest first."""
        ...

    def count(self, version: str | None = None) -> int:
        """Return the number of stored samples, of one version or of all."""
        ...

    def close(self) -> None:
        """Close the store; later calls fail."""
        ...



@runtime_checkable
class ManagedStore(SampleStore, SharedWork, PairStore, FeedbackStore, Protocol):
    """A SampleStore the service runs: per-version counts, size, retention, the shared work queue, the
    shadow-replay pairs and users' feedback (SQLite and PostgreSQL)."""

    def counts(self) -> dict[str, int]:
        """The number of stored samples per version."""
        ...

    def size_bytes(self) -> int:
        """Bytes the store takes on disk."""
        ...

    def fingerprint_counts(self, version: str, *, since: float, until: float) -> dict[tuple[str, str], int]:
        """Samples per observed (template hash, sampling hash) of `version` with since <= ts < until; a part
        a sample did not carry reads ""; samples with neither are left out."""
        ...

    def prune(self, *, max_age_seconds: float, max_rows_per_version: int) -> int:
        """Delete samples older than `max_age_seconds` and beyond the newest `max_rows_per_version`."""
        ...

    def not_ready(self) -> str | None:
        """Why the store cannot serve yet (a database down at start), or None."""
        ...


def stored_sample(row: Sequence[Any], scores: Mapping[str, Score]) -> StoredSample:
    """A StoredSample from a row of the stores' common column order (id, version, ts, source, model, prompt,
    output, finish_reason, prompt_tokens, output_tokens, latency_s, ttft_s, tenant_tier, content_hash,
    template_hash, sampling_hash, traceparent, conversation, response_id)."""
    (sid, version, ts, source, model, prompt, output, finish_reason, prompt_tokens, output_tokens, latency_s,
     ttft_s, tenant_tier, chash, template, sampling, traceparent, conversation, response_id) = row
    return StoredSample(version=version, prompt=prompt, output=output, ts=ts, model=model,
                        finish_reason=finish_reason, prompt_tokens=prompt_tokens, output_tokens=output_tokens,
                        latency_s=latency_s, ttft_s=ttft_s, tenant_tier=tenant_tier, source=source,
                        template_hash=template, sampling_hash=sampling, traceparent=traceparent,
                        conversation=conversation, response_id=response_id, id=int(sid),
                        content_hash=chash,
                        scores=MappingProxyType(dict(scores)))
