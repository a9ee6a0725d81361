"""Mirror ingest `POST /api/v1/samples` and the admin read-back `GET /api/v1/samples`, behind the bearer guard.

A batch is acknowledged (200) only after it is redacted and committed to the store. Errors are precise:
413 over server.max_request_bytes, 400 naming the offending field, 422 naming an unknown version,
503 when the store cannot commit. A client that retries sends the same `Idempotency-Key` header (the
sidecar sends the SHA-256 of the body): a batch already committed under that key is answered with its
ids and not stored again, so a retry after a lost answer never duplicates samples.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Callable, Collection, Sequence
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from observer.conventions import fingerprint
from observer.export import contract
from observer.export.contract import inline_schema
from observer.sample.capture import CaptureError, render_messages
from observer.sample.conversation import KEY_HEX, Keyer
from observer.sample.metrics import SamplingMetrics
from observer.sample.pipeline import redact_records
from observer.sample.proxy import valid_traceparent
from observer.sample.redact import Redactor
from observer.sample.tenants import Tenants
from observer.store.base import SampleRecord, SampleStore, StoreError

_TEXT_LIMIT = 1_000_000
MAX_TOKENS = 100_000_000  # far above any context window; bounded so every value fits SQLite's INTEGER
MAX_SECONDS = 86_400.0  # a request's latency, at most a day
MAX_TS = 4_102_444_800.0  # 2100-01-01: a `ts` beyond it is a unit mistake (ms, ns) or garbage
_KEY = re.compile(r"[\x21-\x7e]{1,200}")  # an Idempotency-Key: printable ASCII, bounded
_HASH = f"^[0-9a-f]{{{fingerprint.HASH_HEX}}}$"  # an observed fingerprint hash (conventions.fingerprint)
FUTURE_SLACK_SECONDS = 86_400.0  # clock skew tolerated for a `ts` ahead of the observer's clock


class IngestSample(BaseModel):
    """One mirrored request/response pair."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    version: str = Field(min_length=1, max_length=63)
    prompt: str | None = Field(None, max_length=_TEXT_LIMIT)
    messages: list[dict[str, Any]] | None = None
    output: str = Field(max_length=_TEXT_LIMIT)
    ts: float | None = Field(None, gt=0, le=MAX_TS, description="Unix time (seconds) of the request; default: "
                             "arrival time; at most a day ahead of the observer's clock.")
    model: str | None = Field(None, max_length=256)
    finish_reason: str | None = Field(None, max_length=32)
    prompt_tokens: int | None = Field(None, ge=0, le=MAX_TOKENS)
    output_tokens: int | None = Field(None, ge=0, le=MAX_TOKENS)
    latency_s: float | None = Field(None, ge=0, le=MAX_SECONDS)
    ttft_s: float | None = Field(None, ge=0, le=MAX_SECONDS)
    tenant_tier: str | None = Field(None, max_length=32)
    source: Literal["ingest", "proxy"] = "ingest"
    template_hash: str | None = Field(None, pattern=_HASH, description="Observed system-prompt hash "
                                      "(`observer fingerprint`); default: computed from `messages`.")
    sampling_hash: str | None = Field(None, pattern=_HASH, description="Observed sampling-parameter hash; "
                                      "default: computed from `sampling`.")
    sampling: dict[str, Any] | None = Field(None, description="The request's sampling parameters (temperature, "
                                            "top_p, ...), hashed into sampling_hash and not stored.")
    traceparent: str | None = Field(None, max_length=55, description="The W3C traceparent the request carried "
                                    "(version 00): the sample's scores are linked to its trace.")
    conversation: str | None = Field(None, max_length=4096, description="The user's conversation (a session id, "
                                     "a chat id): stored only as a keyed hash; drift tests conversations as units.")
    conversation_key: str | None = Field(None, pattern=f"^[0-9a-f]{{{KEY_HEX}}}$", description="A conversation "
                                         "key already keyed with the shared conversation secret (the sidecar's).")
    response_id: str | None = Field(None, min_length=1, max_length=200, description="The id the engine gave the "
                                    "answer (`chatcmpl-…`): users' feedback on it joins by this id.")
    tenant: str | None = Field(None, max_length=256, description="The tenant the request served, as the sender "
                               "knows it (a LiteLLM team, the gateway's tenant): a bounded label "
                               "(sampling.tenants), never stored.")

    @field_validator("traceparent")
    @classmethod
    def _traceparent(cls, value: str | None) -> str | None:
        if value is not None and not valid_traceparent(value):
            raise ValueError("not a W3C traceparent: 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>, "
                             "lowercase, ids not all zero")
        return value

    @model_validator(mode="after")
    def _one_prompt(self) -> IngestSample:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of prompt or messages")
        if self.conversation is not None and self.conversation_key is not None:
            raise ValueError("give at most one of conversation (raw) or conversation_key (already keyed)")
        return self


class IngestAccepted(BaseModel):
    """The acknowledgement: every sample of the batch is committed."""

    accepted: int
    ids: list[int]


class IngestBatch(BaseModel):
    """A batch of mirrored samples."""

    model_config = ConfigDict(extra="forbid")

    samples: list[IngestSample] = Field(min_length=1)


def error_response(status: int, error: str, field: str, detail: str) -> JSONResponse:
    """An error answer in the one error shape (export/contract)."""
    body = contract.ErrorBody(error=error, field=field, detail=detail)  # the one error shape (export/contract)
    return JSONResponse(body.model_dump(exclude_none=True), status_code=status)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


async def read_json(request: Request, max_request_bytes: int) -> Any:
    """The request's JSON body, or the error to answer: 413 over `max_request_bytes`, 400 when it is not JSON
    (NaN and Infinity included) or nests too deeply."""
    body, too_large = await contract.read_capped(request.headers.get("content-length"), request.stream(),
                                                 max_request_bytes)
    if too_large is not None:
        return error_response(413, "too_large", "body", too_large)
    try:
        return json.loads(body, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as e:
        return error_response(400, "invalid_json", "body", f"body is not valid JSON: {e}")
    except RecursionError:
        return error_response(400, "invalid_json", "body", "body nests JSON too deeply")


def ingest_router(*, store: SampleStore, metrics: SamplingMetrics, redactor: Redactor | None,
                  versions: Collection[str], guard: Callable[..., None], max_request_bytes: int,
                  max_batch_samples: int, clock: Callable[[], float], keyer: Keyer | None = None,
                  tenants: Tenants | None = None) -> APIRouter:
    """The ingest and admin routes of this area."""
    router = APIRouter(prefix="/api/v1", tags=["samples"], dependencies=[Depends(guard)])

    def known() -> str:  # the fleet may change while we run (discovery)
        names = sorted(versions)
        return f"{names[:20]}" + (f" and {len(names) - 20} more" if len(names) > 20 else "")

    @router.post("/samples", summary="Ingest a batch of mirrored samples (acknowledged after commit).",
                 response_model=IngestAccepted,
                 openapi_extra={"requestBody": {"required": True, "content": {
                     "application/json": {"schema": inline_schema(IngestBatch)}}}},
                 responses={**contract.PRIVATE,
                            400: contract.error("Not JSON, or a sample field is invalid (named in `field`)."),
                            413: contract.error("Body over server.max_request_bytes, or too many samples."),
                            422: contract.error("A sample names a version the fleet does not define."),
                            503: contract.error("No token configured, or the store cannot commit (retry).")})
    async def ingest(request: Request) -> JSONResponse:
        # An ingest client's own drops count whatever becomes of this batch: the client forgets them once
        # it has an answer.
        metrics.client_report(request.headers.get("x-observer-client"), request.headers.get("x-observer-dropped"))
        data = await read_json(request, max_request_bytes)
        if isinstance(data, JSONResponse):
            return data
        if isinstance(data, dict) and isinstance(data.get("samples"), list) \
                and len(data["samples"]) > max_batch_samples:
            return error_response(413, "too_many_samples", "samples",
                          f"{len(data['samples'])} samples exceed the batch limit {max_batch_samples}")
        try:
            batch = IngestBatch.model_validate(data)
        except ValidationError as e:
            err = e.errors()[0]
            field = ".".join(str(p) for p in err["loc"]) or "body"
            return error_response(400, "invalid_sample", field, f"{field}: {err['msg']}")
        key = request.headers.get("idempotency-key")
        if key is not None and not _KEY.fullmatch(key):
            return error_response(400, "invalid_header", "Idempotency-Key",
                          "Idempotency-Key must be 1-200 printable ASCII characters")
        records: list[SampleRecord] = []
        now = clock()
        for i, s in enumerate(batch.samples):
            if s.version not in versions:
                return error_response(422, "unknown_version", f"samples.{i}.version",
                              f"unknown version {s.version!r}; configured: {known()}")
            if s.ts is not None and s.ts > now + FUTURE_SLACK_SECONDS:
                return error_response(400, "invalid_sample", f"samples.{i}.ts",
                              f"samples.{i}.ts: {s.ts:.0f} is more than a day ahead of the observer's clock "
                              f"({now:.0f}); send Unix seconds")
            try:
                prompt = s.prompt if s.prompt is not None else render_messages(s.messages)
            except CaptureError as e:
                return error_response(400, "invalid_sample", f"samples.{i}.messages", f"samples.{i}.{e}")
            records.append(SampleRecord(
                version=s.version, prompt=prompt, output=s.output, ts=s.ts if s.ts is not None else now,
                model=s.model, finish_reason=s.finish_reason, prompt_tokens=s.prompt_tokens,
                output_tokens=s.output_tokens, latency_s=s.latency_s, ttft_s=s.ttft_s,
                tenant_tier=s.tenant_tier, source=s.source, traceparent=s.traceparent, response_id=s.response_id,
                conversation=s.conversation_key or (keyer.key(s.conversation) if keyer is not None else None),
                **_observed(s)))
        for r in records:
            metrics.seen[(r.version, r.source)] += 1
            metrics.sampled[(r.version, r.source)] += 1
        try:
            ids, counts = await asyncio.to_thread(_commit, store, redactor, records, key)
        except Exception as e:  # every seen sample ends stored or dropped with a reason, never lost silently
            for r in records:
                metrics.drop(r.version, "store_error")
            if isinstance(e, StoreError):
                raise
            raise StoreError(f"could not store {len(records)} sample(s): {type(e).__name__}: {e}") from e
        metrics.redactions.update(counts)
        for r in records:
            metrics.stored[r.version] += 1
        if tenants is not None:  # behind the API token: a trusted source of tenants
            for s in batch.samples:
                if s.tenant is None:  # a sender that names no tenants makes no tenant series
                    continue
                tenants.metrics.observe(s.version, tenants.labels.label(s.tenant),
                                        code=500 if s.finish_reason == "error" else 200, ttft_s=s.ttft_s,
                                        prompt_tokens=s.prompt_tokens, output_tokens=s.output_tokens)
        return JSONResponse({"accepted": len(ids), "ids": ids})

    @router.get("/samples", summary="Read back a version's newest stored samples (admin).",
                responses={**contract.PRIVATE,
                           422: contract.error("Unknown version, or a query parameter out of range.")})
    async def list_samples(version: str, limit: int = Query(50, ge=1, le=1000),
                           since: float | None = None, source: str | None = None) -> JSONResponse:
        if version not in versions:
            return error_response(422, "unknown_version", "version",
                                  f"unknown version {version!r}; configured: {known()}")
        rows = await asyncio.to_thread(store.samples, version, since=since, limit=limit, source=source)
        return JSONResponse({"samples": [_public(r) for r in rows]})

    return router


def _observed(s: IngestSample) -> dict[str, str | None]:
    """The sample's observed identity: hashes sent as they are, else computed from messages / sampling."""
    template = s.template_hash
    if template is None and s.messages is not None:
        template = fingerprint.messages_template_hash(s.messages)
    sampling = s.sampling_hash
    if sampling is None and s.sampling is not None:
        sampling = fingerprint.sampling_hash(s.sampling)
    return {"template_hash": template, "sampling_hash": sampling}


def _commit(store: SampleStore, redactor: Redactor | None, records: Sequence[SampleRecord], key: str | None
            ) -> tuple[list[int], Any]:
    redacted, counts = redact_records(redactor, records)
    return store.add(redacted, idempotency_key=key), counts


def _public(sample: Any) -> dict[str, Any]:
    out = {k: getattr(sample, k) for k in (
        "id", "version", "ts", "source", "model", "prompt", "output", "finish_reason", "prompt_tokens",
        "output_tokens", "latency_s", "ttft_s", "tenant_tier", "content_hash", "template_hash", "sampling_hash",
        "traceparent", "conversation", "response_id")}
    out["scores"] = {name: {"passed": s.passed, "score": None if s.score is None or math.isnan(s.score)
                            else s.score, "reason": s.reason} for name, s in sample.scores.items()}
    return out
