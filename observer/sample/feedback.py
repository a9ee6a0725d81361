"""Users' feedback ingest `POST /api/v1/feedback`, behind the bearer guard, as mirror ingest.

Each event is joined to the sampled response it is about (the engine's response id, or the trace its request
carried) and counted for the version that answered it. A batch is taken event by event: a malformed event,
one about a response the observer never sampled, a retry of a stored event, one after the late window, a
rating off its scale or one past the per-conversation bound is refused with its reason in the answer and in
`observer_feedback_rejected_total`, and the good events of the batch are stored all the same. The event id
makes a retried batch a no-op. A comment is redacted like any sample, stored, and never exported.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from observer.config.sampling import FeedbackSpec
from observer.export import contract
from observer.export.contract import inline_schema
from observer.sample.ingest import FUTURE_SLACK_SECONDS, MAX_TS, error_response, read_json
from observer.sample.metrics import SamplingMetrics
from observer.sample.redact import Redactor
from observer.store.base import StoreError
from observer.store.feedback import FeedbackKind, FeedbackRecord, FeedbackStore, Response

EVENT_ID = re.compile(r"[\x21-\x7e]{1,200}")


class FeedbackEvent(BaseModel):
    """One user event on one answer."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    id: str = Field(pattern=EVENT_ID.pattern, description="The event's own id (1-200 printable ASCII): a retry "
                                                          "with the same id is not counted again.")
    response_id: str | None = Field(None, min_length=1, max_length=200,
                                    description="The id the engine gave the answer (`chatcmpl-…`).")
    trace_id: str | None = Field(None, pattern="^[0-9a-f]{32}$",
                                 description="The W3C trace id the answer's request carried (32 lowercase hex).")
    kind: FeedbackKind = Field(description="thumbs (value 1 up, 0 or -1 down), rating (value on "
                                           "sampling.feedback.rating_scale), regenerate or abandon (negative).")
    value: float | None = None
    ts: float | None = Field(None, gt=0, le=MAX_TS, description="Unix seconds the user gave it; default: arrival.")
    comment: str | None = Field(None, max_length=100_000, description="Redacted, stored, never exported.")

    @model_validator(mode="after")
    def _joinable(self) -> FeedbackEvent:
        if self.response_id is None and self.trace_id is None:
            raise ValueError("give response_id or trace_id: the answer the event is about")
        return self


class FeedbackBatch(BaseModel):
    """A batch of feedback events (each taken or refused on its own)."""

    events: list[FeedbackEvent] = Field(min_length=1)


@dataclass(frozen=True)
class Outcome:
    """What became of one event: `stored`, or the reason it was refused."""

    id: str
    status: str
    detail: str = ""


def judge_value(e: FeedbackEvent, spec: FeedbackSpec) -> bool | str:
    """Whether the event is negative, or why its value is off its scale."""
    match e.kind:
        case "thumbs":
            if e.value not in (1.0, 0.0, -1.0):
                return f"thumbs value {e.value!r} is not 1 (up), 0 or -1 (down)"
            return e.value != 1.0
        case "rating":
            low, high = spec.rating_scale
            if e.value is None or not low <= e.value <= high:
                return f"rating {e.value!r} is off the scale [{low:g}, {high:g}] (sampling.feedback.rating_scale)"
            return e.value <= spec.negative_at_most
        case "regenerate" | "abandon":
            return True


def admit(raw: Sequence[Any], *, store: FeedbackStore, spec: FeedbackSpec, redactor: Redactor | None,
          now: float) -> tuple[list[Outcome], list[tuple[int, FeedbackRecord]]]:
    """Each raw event's outcome (store errors aside), and the records to store with their event's place in the
    batch. Joins each event to its response, then applies the late window, the scale and the flood bound."""
    outcomes: list[Outcome | None] = [None] * len(raw)
    parsed: list[tuple[int, FeedbackEvent]] = []
    for i, item in enumerate(raw):
        try:
            parsed.append((i, FeedbackEvent.model_validate(item)))
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "event"
            ident = item.get("id") if isinstance(item, Mapping) and isinstance(item.get("id"), str) else ""
            outcomes[i] = Outcome(str(ident)[:200], "invalid", f"events.{i}.{where}: {first['msg']}")
    by_response, by_trace = store.responses(response_ids={e.response_id for _, e in parsed if e.response_id},
                                            trace_ids={e.trace_id for _, e in parsed if e.trace_id})
    joined: list[tuple[int, FeedbackEvent, Response, bool]] = []
    for i, e in parsed:
        found = (by_response.get(e.response_id) if e.response_id else None) \
            or (by_trace.get(e.trace_id) if e.trace_id else None)
        ts = e.ts if e.ts is not None else now
        negative = judge_value(e, spec)
        if found is None:
            outcomes[i] = Outcome(e.id, "unknown_response", "no sampled response with that response_id or trace_id "
                                                            "(feedback joins sampled answers only)")
        elif ts > now + FUTURE_SLACK_SECONDS:
            outcomes[i] = Outcome(e.id, "invalid", f"ts {ts:.0f} is more than a day ahead of the observer's clock")
        elif ts - found.ts > spec.late_seconds:
            outcomes[i] = Outcome(e.id, "late", f"given {ts - found.ts:.0f} s after the answer; the window is "
                                                f"{spec.late_seconds:g} s (sampling.feedback.late_seconds)")
        elif isinstance(negative, str):
            outcomes[i] = Outcome(e.id, "off_scale", negative)
        else:
            joined.append((i, e, found, negative))
    seen = Counter(store.unit_feedback({r.unit for _, _, r, _ in joined}, since=now - spec.late_seconds))
    # A retried batch's events were stored and counted in their conversation's window: they are duplicates, and
    # never take (or are refused for want of) a flood slot; nor does a second copy of an id within the batch.
    taken = store.stored_feedback_ids({e.id for _, e, _, _ in joined})
    records: list[tuple[int, FeedbackRecord]] = []
    for i, e, r, negative in joined:
        if e.id in taken:
            outcomes[i] = Outcome(e.id, "duplicate", "an event with this id was stored before")
            continue
        if seen[r.unit] >= spec.max_events_per_unit:
            outcomes[i] = Outcome(e.id, "flood", f"the conversation has {spec.max_events_per_unit} events in the "
                                                 "window already (sampling.feedback.max_events_per_unit)")
            continue
        seen[r.unit] += 1
        taken.add(e.id)
        comment = None if e.comment is None else e.comment[:spec.max_comment_chars]
        if comment is not None and redactor is not None:
            comment = redactor.redact(comment).text
        records.append((i, FeedbackRecord(event_id=e.id, version=r.version, sample_id=r.sample_id, unit=r.unit,
                                          answered=r.ts, ts=max(e.ts if e.ts is not None else now, r.ts),
                                          kind=e.kind, value=e.value, negative=negative, comment=comment)))
        outcomes[i] = Outcome(e.id, "stored")
    return [o if o is not None else Outcome("", "invalid") for o in outcomes], records


def feedback_router(*, store: FeedbackStore, metrics: SamplingMetrics, spec: FeedbackSpec,
                    redactor: Redactor | None, guard: Callable[..., None], max_request_bytes: int,
                    clock: Callable[[], float]) -> APIRouter:
    """The feedback ingest route."""
    router = APIRouter(prefix="/api/v1", tags=["feedback"], dependencies=[Depends(guard)])

    @router.post("/feedback", summary="Ingest users' feedback events on sampled answers (each taken or refused).",
                 openapi_extra={"requestBody": {"required": True, "content": {
                     "application/json": {"schema": inline_schema(FeedbackBatch)}}}},
                 responses={**contract.PRIVATE,
                            400: contract.error("Not JSON, or not an object with a list of `events`."),
                            413: contract.error("Body over server.max_request_bytes, or too many events."),
                            503: contract.error("No token configured, or the store cannot commit (retry).")})
    async def ingest(request: Request) -> JSONResponse:
        data = await read_json(request, max_request_bytes)
        if isinstance(data, JSONResponse):
            return data
        events = data.get("events") if isinstance(data, dict) else None
        if not isinstance(events, list) or not events:
            return error_response(400, "invalid_batch", "events",
                                  'the body must be {"events": [...]} with at least one event')
        if len(events) > spec.max_batch_events:
            return error_response(413, "too_many_events", "events",
                          f"{len(events)} events exceed the batch limit {spec.max_batch_events} "
                          "(sampling.feedback.max_batch_events)")
        outcomes, records = await admit_counted(events, store=store, spec=spec, redactor=redactor, now=clock(),
                                                metrics=metrics)
        rejected = Counter(o.status for o in outcomes if o.status != "stored")
        return JSONResponse({"accepted": len(records), "rejected": dict(sorted(rejected.items())),
                             "events": [{"id": o.id, "status": o.status, **({"detail": o.detail} if o.detail else {})}
                                        for o in outcomes]})

    return router


async def admit_counted(raw: Sequence[Any], *, store: FeedbackStore, spec: FeedbackSpec, redactor: Redactor | None,
                        now: float, metrics: SamplingMetrics) -> tuple[list[Outcome], list[FeedbackRecord]]:
    """`admit_and_store` off the event loop, counted: a store that cannot commit counts every event `store_error`
    and raises (answered 503: the sender retries, and the events' ids keep each once)."""
    try:
        outcomes, records = await asyncio.to_thread(admit_and_store, raw, store, spec, redactor, now)
    except StoreError:
        metrics.feedback_rejected["store_error"] += len(raw)
        raise
    count_outcomes(metrics, outcomes, records)
    return outcomes, records


def count_outcomes(metrics: SamplingMetrics, outcomes: Sequence[Outcome], records: Sequence[FeedbackRecord]) -> None:
    """The feedback counters of one admitted batch: refusals by reason, stored events by version, kind, outcome."""
    for o in outcomes:
        if o.status != "stored":
            metrics.feedback_rejected[o.status] += 1
    for r in records:
        metrics.feedback[(r.version, r.kind, "negative" if r.negative else "positive")] += 1


def admit_and_store(raw: Sequence[Any], store: FeedbackStore, spec: FeedbackSpec, redactor: Redactor | None,
                    now: float) -> tuple[list[Outcome], list[FeedbackRecord]]:
    """Outcomes in batch order and the records written; an id stored before (or twice in the batch: its first
    copy is written) is a duplicate."""
    outcomes, records = admit(raw, store=store, spec=spec, redactor=redactor, now=now)
    try:
        written = store.add_feedback([r for _, r in records])
    except StoreError:
        raise
    except Exception as e:
        raise StoreError(f"could not store {len(records)} feedback event(s): {type(e).__name__}: {e}") from e
    for (i, r), new in zip(records, written, strict=True):
        if not new:
            outcomes[i] = Outcome(r.event_id, "duplicate", "an event with this id was stored before")
    return outcomes, [r for (_, r), new in zip(records, written, strict=True) if new]

