"""The OTLP/HTTP trace receiver: `POST /v1/traces`, where vLLM's `--otlp-traces-endpoint` points — on the
observer (a FastAPI route, private) and on a standalone `observer proxy` (its own path, like its metrics).
On the observer it also takes applications' GenAI client spans as samples (`sampling.otel_genai`).

Answers as the OTLP/HTTP specification asks, in the request's encoding: 200 with an
`ExportTraceServiceResponse` (its `partial_success` counts engine spans rejected for bad values), 400 with a
`google.rpc.Status` naming what is wrong for a body that is not an export request (the exporter does not
retry a 400), 413 for a body over `server.max_request_bytes`. Every answer is counted by code.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, Depends, Request, Response
from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from observer.collect.otlp import OtlpError, decode_export
from observer.export import contract
from observer.sample.genai import GenAiSource
from observer.sample.spans import SpanJoin

PROTOBUF = "application/x-protobuf"
_INVALID_ARGUMENT = 3
_OUT_OF_RANGE = 11


def otlp_router(join: SpanJoin | None, *, guard: Callable[..., None], max_request_bytes: int,
                genai: GenAiSource | None = None) -> APIRouter:
    """The `/v1/traces` route feeding `join` (engine spans) and `genai` (applications' GenAI spans)."""
    router = APIRouter(tags=["traces"], dependencies=[Depends(guard)])

    body_types = {"application/x-protobuf": {"schema": {"type": "string", "format": "binary"}},
                  "application/json": {"schema": {"type": "object"}}}
    answer_types = {"application/x-protobuf": {}, "application/json": {"schema": {"type": "object"}}}

    @router.post("/v1/traces", summary="Receive OTLP/HTTP trace exports (vLLM's llm_request spans).",
                 response_class=Response,
                 openapi_extra={"requestBody": {"required": True, "content": body_types}},
                 responses={**contract.PRIVATE,
                            200: {"description": "Accepted (ExportTraceServiceResponse).", "content": answer_types},
                            400: {"description": "Not an OTLP export request (google.rpc.Status).",
                                  "content": answer_types},
                            413: {"description": "Body over server.max_request_bytes (google.rpc.Status).",
                                  "content": answer_types}})
    async def traces(request: Request) -> Response:
        body, too_large = await contract.read_capped(request.headers.get("content-length"), request.stream(),
                                                     max_request_bytes)
        code, payload, media = answer_export(join, body, content_type=request.headers.get("content-type", ""),
                                             content_encoding=request.headers.get("content-encoding", ""),
                                             too_large=too_large, max_bytes=max_request_bytes, genai=genai)
        if genai is not None:
            await genai.commit()  # stored before the answer: an exporter that got its 200 lost nothing
        return Response(payload, status_code=code, media_type=media)

    return router


def answer_export(join: SpanJoin | None, body: bytes, *, content_type: str, content_encoding: str,
                  too_large: str | None, max_bytes: int, genai: GenAiSource | None = None) -> tuple[int, bytes, str]:
    """(status, body, media type) of the answer to one export request, counted; its spans handed to `join`
    and `genai`. `too_large` is `contract.read_capped`'s refusal (the answer is then 413, `body` not read)."""
    as_json = content_type.split(";")[0].strip().lower() == "application/json"
    if too_large is not None:
        return _answer(join, 413, _status(_OUT_OF_RANGE, too_large), as_json)
    try:
        export = decode_export(body, content_type=content_type, content_encoding=content_encoding,
                               max_bytes=max_bytes)
    except OtlpError as e:
        return _answer(join, 400, _status(_INVALID_ARGUMENT, str(e)), as_json)
    if join is not None:
        join.receive(export)
    if genai is not None:
        genai.receive(export)
    reply = ExportTraceServiceResponse()
    if export.rejected:
        reply.partial_success.rejected_spans = export.rejected
        reply.partial_success.error_message = export.error or ""
    return _answer(join, 200, reply, as_json)


def _status(code: int, message: str) -> status_pb2.Status:
    return status_pb2.Status(code=code, message=f"observer OTLP receiver: {message}")


def _answer(join: SpanJoin | None, code: int, message: status_pb2.Status | ExportTraceServiceResponse,
            as_json: bool) -> tuple[int, bytes, str]:
    if join is not None:
        join.answered(code)
    if as_json:
        return code, json_format.MessageToJson(message, indent=None).encode(), "application/json"
    return code, message.SerializeToString(), PROTOBUF
