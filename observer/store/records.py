"""What the sample store keeps: a sample as recorded, one scorer's result, a sample as read back.

Plain frozen data with no store behind it, so the job queue (`observer.store.jobs`) and the store
protocols (`observer.store.base`) both import it without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

Source = Literal["proxy", "ingest", "otel", "golden"]
SOURCES: tuple[Source, ...] = ("proxy", "ingest", "otel", "golden")

__all__ = ["SOURCES", "SampleRecord", "Score", "Source", "StoredSample"]


@dataclass(frozen=True)
class SampleRecord:
    """One request/response pair of one version; `prompt` is chat messages rendered to text."""

    version: str
    prompt: str
    output: str
    ts: float
    model: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    latency_s: float | None = None
    ttft_s: float | None = None
    tenant_tier: str | None = None
    source: Source = "ingest"
    template_hash: str | None = None  # observed identity (conventions.fingerprint); None: not known
    sampling_hash: str | None = None
    traceparent: str | None = None  # the W3C traceparent the request carried (its scores link to its trace)
    conversation: str | None = None  # keyed hash of the user's conversation (observer.sample.conversation)
    response_id: str | None = None  # the id the engine gave the response (`chatcmpl-…`): user feedback joins by it


@dataclass(frozen=True)
class Score:
    """One scorer's verdict on one sample (golden-set check, judge, live check)."""

    scorer: str
    passed: bool | None
    score: float | None
    reason: str
    meta: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    ts: float = 0.0


@dataclass(frozen=True)
class StoredSample(SampleRecord):
    """A sample as read back from the store, with its id, content hash and attached scores."""

    id: int = 0
    content_hash: str = ""
    scores: Mapping[str, Score] = field(default_factory=lambda: MappingProxyType({}))
