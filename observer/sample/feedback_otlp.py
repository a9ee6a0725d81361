"""Users' feedback as OpenTelemetry `gen_ai.evaluation.result` events: `POST /v1/logs` (OTLP/HTTP logs).

The GenAI semantic conventions carry an evaluation of a response as a log-based event named
`gen_ai.evaluation.result` (attributes `gen_ai.evaluation.name`, `gen_ai.evaluation.score.value`,
`gen_ai.evaluation.score.label`, `gen_ai.evaluation.explanation`, `gen_ai.response.id`), parented to the span of the
operation it evaluates. The convention names no evaluator type: a model judge's results and a user's thumbs use
the same event. So only evaluations whose name the config maps to a feedback kind
(`sampling.feedback.otel_evaluations`) are the users' feedback; any other evaluation is counted `not_feedback`
and dropped, and every other log record is ignored.

Each feedback event becomes one event of `POST /api/v1/feedback` and takes the same path (joined to its sampled
answer by response id or by the trace id of its context, then the late window, the scale, duplicates and the
flood bound). Its id is a hash of the record, so an exporter's retry of the same batch is a duplicate, never a
second count. The answer is an `ExportLogsServiceResponse` whose partial success counts the feedback events
refused, with the first reason.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc import status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)

from observer.collect.otlp import OtlpError, Value, attributes, read_request
from observer.config.sampling import FeedbackSpec
from observer.export import contract
from observer.sample.feedback import admit_counted
from observer.sample.metrics import SamplingMetrics
from observer.sample.redact import Redactor
from observer.store.feedback import FeedbackKind, FeedbackStore

EVENT = "gen_ai.evaluation.result"
PROTOBUF = "application/x-protobuf"
UP = frozenset({"up", "thumbs_up", "positive", "pass", "good", "like"})
DOWN = frozenset({"down", "thumbs_down", "negative", "fail", "bad", "dislike"})
"""Score labels a thumbs evaluation may carry instead of a value (1 up, 0 down)."""
_INVALID_ARGUMENT = 3
_OUT_OF_RANGE = 11


def evaluation_records(request: ExportLogsServiceRequest) -> Iterator[tuple[Any, dict[str, Value]]]:
    """Each `gen_ai.evaluation.result` log record and its attributes (the event name in the record's field, or
    in the `event.name` attribute older SDKs set)."""
    for rl in request.resource_logs:
        for sl in rl.scope_logs:
            for record in sl.log_records:
                attrs = attributes(record.attributes)
                if (record.event_name or attrs.get("event.name")) == EVENT:
                    yield record, attrs


def feedback_event(record: Any, attrs: Mapping[str, Value], kind: FeedbackKind) -> dict[str, Any]:
    """The feedback-ingest event of one evaluation record (validated by the same model as the JSON API)."""
    trace = record.trace_id.hex() if len(record.trace_id) == 16 and any(record.trace_id) else None
    response = attrs.get("gen_ai.response.id")
    value = attrs.get("gen_ai.evaluation.score.value")
    label = attrs.get("gen_ai.evaluation.score.label")
    if kind == "thumbs" and value is None and isinstance(label, str):
        value = 1.0 if label.lower() in UP else 0.0 if label.lower() in DOWN else label
    ts = (record.time_unix_nano or record.observed_time_unix_nano) / 1e9 or None
    explanation = attrs.get("gen_ai.evaluation.explanation")
    identity = "|".join(str(x) for x in (trace, record.span_id.hex(), record.time_unix_nano,
                                          attrs.get("gen_ai.evaluation.name"), response, value, label))
    event: dict[str, Any] = {"id": "otel-" + hashlib.sha256(identity.encode()).hexdigest()[:40], "kind": kind,
                             "response_id": response if isinstance(response, str) and response else None,
                             "trace_id": trace, "value": value, "ts": ts}
    if isinstance(explanation, str):
        event["comment"] = explanation
    return event


def feedback_events(request: ExportLogsServiceRequest, kinds: Mapping[str, FeedbackKind]
                    ) -> tuple[list[dict[str, Any]], int]:
    """The users' feedback events of an export, and how many evaluations were not feedback (unmapped names)."""
    events: list[dict[str, Any]] = []
    other = 0
    for record, attrs in evaluation_records(request):
        kind = kinds.get(str(attrs.get("gen_ai.evaluation.name")))
        if kind is None:
            other += 1
        else:
            events.append(feedback_event(record, attrs, kind))
    return events, other


def feedback_logs_router(*, store: FeedbackStore, metrics: SamplingMetrics, spec: FeedbackSpec,
                         redactor: Redactor | None, guard: Callable[..., None], max_request_bytes: int,
                         clock: Callable[[], float]) -> APIRouter:
    """The `/v1/logs` route: users' feedback from OpenTelemetry evaluation events."""
    router = APIRouter(tags=["feedback"], dependencies=[Depends(guard)])
    types = {PROTOBUF: {"schema": {"type": "string", "format": "binary"}},
             "application/json": {"schema": {"type": "object"}}}

    @router.post("/v1/logs", summary="Receive OTLP/HTTP log exports: gen_ai.evaluation.result events as users' "
                                     "feedback.", response_class=Response,
                 openapi_extra={"requestBody": {"required": True, "content": types}},
                 responses={**contract.PRIVATE,
                            200: {"description": "Accepted (ExportLogsServiceResponse).", "content": types},
                            400: {"description": "Not an OTLP logs export request (google.rpc.Status).",
                                  "content": types},
                            413: {"description": "Body over server.max_request_bytes (google.rpc.Status).",
                                  "content": types}})
    async def logs(request: Request) -> Response:
        as_json = request.headers.get("content-type", "").split(";")[0].strip().lower() == "application/json"
        body, too_large = await contract.read_capped(request.headers.get("content-length"), request.stream(),
                                                     max_request_bytes)
        if too_large is not None:
            return _answer(413, _status(_OUT_OF_RANGE, too_large), as_json)
        export = ExportLogsServiceRequest()
        try:
            read_request(body, export, items=("resourceLogs", "scopeLogs", "logRecords"),
                         content_type=request.headers.get("content-type", ""),
                         content_encoding=request.headers.get("content-encoding", ""), max_bytes=max_request_bytes)
        except OtlpError as e:
            return _answer(400, _status(_INVALID_ARGUMENT, str(e)), as_json)
        events, other = feedback_events(export, spec.otel_evaluations)
        metrics.feedback_rejected["not_feedback"] += other
        reply = ExportLogsServiceResponse()
        if events:
            outcomes, _ = await admit_counted(events, store=store, spec=spec, redactor=redactor, now=clock(),
                                              metrics=metrics)
            refused = [o for o in outcomes if o.status not in ("stored", "duplicate")]
            if refused:  # a duplicate was taken before: the exporter's retry is not a refusal
                reply.partial_success.rejected_log_records = len(refused)
                reply.partial_success.error_message = f"{refused[0].status}: {refused[0].detail}"[:500]
        return _answer(200, reply, as_json)

    return router


def _status(code: int, message: str) -> status_pb2.Status:
    return status_pb2.Status(code=code, message=f"observer OTLP logs receiver: {message}")


def _answer(code: int, message: Message, as_json: bool) -> Response:
    if as_json:
        return Response(json_format.MessageToJson(message, indent=None).encode(), status_code=code,
                        media_type="application/json")
    return Response(message.SerializeToString(), status_code=code, media_type=PROTOBUF)
