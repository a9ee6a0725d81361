"""Turning a captured OpenAI-compatible exchange (request JSON, reply JSON or SSE stream) into a SampleRecord.

Runs off the request path (in the writer thread); every failure is a `CaptureError` with a short reason.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from observer.conventions import fingerprint
from observer.errors import ObserverError
from observer.sample import tool_calls
from observer.store.base import SampleRecord

Kind = Literal["chat", "completion"]
SAMPLED_PATHS: dict[str, Kind] = {"/v1/chat/completions": "chat", "/v1/completions": "completion"}


class CaptureError(ObserverError, ValueError):
    """A captured exchange could not be read as an OpenAI request and reply."""


@dataclass(frozen=True)
class Capture:
    """The raw bytes of one sampled exchange plus client-side timings; parsed later, off the hot path."""

    version: str
    kind: Kind
    request: bytes
    response: bytes
    content_type: str
    ts: float
    ttft_s: float | None
    latency_s: float
    content_encoding: str = ""
    traceparent: str = ""  # what went upstream: the client's, or the one the proxy made
    conversation: str = ""  # the conversation key header's value, raw (the pipeline keeps only its keyed hash)


def render_messages(messages: Any) -> str:
    """Render chat messages to text: a lone user turn is its content, otherwise `role: content` lines."""
    if not isinstance(messages, list) or not messages:
        raise CaptureError("messages must be a non-empty list")
    parts: list[tuple[str, str]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise CaptureError(f"messages[{i}] must be an object with a string role")
        parts.append((message["role"], _content_text(message.get("content"), f"messages[{i}].content")))
    if len(parts) == 1 and parts[0][0] == "user":
        return parts[0][1]
    return "\n".join(f"{role}: {text}" for role, text in parts)


def _content_text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                out.append(part["text"])
            elif isinstance(part, dict) and isinstance(part.get("type"), str):
                out.append(f"[{part['type']}]")  # images, audio: a marker, never the bytes
            else:
                raise CaptureError(f"{where} has a part that is not a typed object")
        return "\n".join(out)
    raise CaptureError(f"{where} must be a string or a list of parts")


def _prompt(kind: Kind, request: dict[str, Any]) -> str:
    if kind == "chat":
        return render_messages(request.get("messages"))
    prompt = request.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        return "\n".join(prompt)
    raise CaptureError("prompt must be a string or a list of strings (token ids are not sampled)")


def _choice_text(kind: Kind, choice: dict[str, Any], *, stream: bool) -> str:
    if kind == "chat":
        body = choice.get("delta" if stream else "message") or {}
        text = body.get("content") if isinstance(body, dict) else None
    else:
        text = choice.get("text")
    return text if isinstance(text, str) else ""


def sse_events(data: bytes) -> list[str]:
    """The `data:` payloads of a server-sent-event stream (comments and other fields skipped)."""
    text = data.decode("utf-8")
    events: list[str] = []
    lines: list[str] = []
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if line == "":
            if lines:
                events.append("\n".join(lines))
                lines = []
        elif line.startswith("data:"):
            value = line[5:]
            lines.append(value[1:] if value.startswith(" ") else value)
    if lines:
        events.append("\n".join(lines))
    return events


def _merge_tool_deltas(calls: dict[int, dict[str, Any]], deltas: Any) -> None:
    """Fold one chunk's `delta.tool_calls` into `calls` by index (name once, arguments in pieces)."""
    if not isinstance(deltas, list):
        return
    for d in deltas:
        if not isinstance(d, dict):
            continue
        idx = d.get("index", 0)
        call = calls.setdefault(idx if isinstance(idx, int) else 0, {"function": {"name": "", "arguments": ""}})
        for key in ("id", "type"):
            if isinstance(d.get(key), str):
                call[key] = d[key]
        fn = d.get("function")
        if isinstance(fn, dict):
            if isinstance(fn.get("name"), str):
                call["function"]["name"] += fn["name"]
            if isinstance(fn.get("arguments"), str):
                call["function"]["arguments"] += fn["arguments"]


def _merge_stream(kind: Kind, events: Sequence[str]) -> dict[str, Any]:
    """Reassemble choice 0 of a streamed reply: text, tool calls, finish reason, model and usage."""
    text: list[str] = []
    merged: dict[str, Any] = {}
    calls: dict[int, dict[str, Any]] = {}
    for payload in events:
        if payload.strip() == "[DONE]":
            break
        chunk = json.loads(payload)
        if not isinstance(chunk, dict):
            raise CaptureError("a stream event is not a JSON object")
        if "error" in chunk:
            raise CaptureError("the stream carried an error event")
        merged.setdefault("model", chunk.get("model"))
        merged.setdefault("id", chunk.get("id"))
        if isinstance(chunk.get("usage"), dict):
            merged["usage"] = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                text.append(_choice_text(kind, choice, stream=True))
                if kind == "chat" and isinstance(choice.get("delta"), dict):
                    _merge_tool_deltas(calls, choice["delta"].get("tool_calls"))
                if choice.get("finish_reason"):
                    merged["finish_reason"] = choice["finish_reason"]
    merged["text"] = "".join(text)
    merged["tool_calls"] = [calls[i] for i in sorted(calls)]
    return merged


def _decoded(capture: Capture) -> bytes:
    """The reply body without its content encoding (the proxy forwards it encoded, as received)."""
    encoding = capture.content_encoding.strip().lower()
    if encoding in ("", "identity"):
        return capture.response
    try:
        if encoding in ("gzip", "x-gzip"):
            return zlib.decompress(capture.response, wbits=31)
        if encoding == "deflate":
            return zlib.decompress(capture.response)
    except zlib.error as e:
        raise CaptureError(f"could not decode the {encoding} reply: {e}") from e
    raise CaptureError(f"reply content encoding {encoding!r} is not supported for sampling")


MAX_RESPONSE_ID = 200
"""Longest engine response id kept (vLLM's `chatcmpl-<32 hex>` is 41): a longer one is not an id to join by."""


def to_record(capture: Capture, *, key: Callable[[object], str | None] | None = None, openai_user: bool = False
              ) -> SampleRecord:
    """Parse a capture into a SampleRecord (source `proxy`); CaptureError when it cannot be read. `key` turns the
    conversation key (the header's, else with `openai_user` the request's `user`) into what is stored."""
    response = _decoded(capture)
    try:
        request = json.loads(capture.request)
        if not isinstance(request, dict):
            raise CaptureError("the request body is not a JSON object")
        prompt = _prompt(capture.kind, request)
        if "text/event-stream" in capture.content_type:
            reply = _merge_stream(capture.kind, sse_events(response))
        else:
            body = json.loads(response)
            if not isinstance(body, dict) or not isinstance(body.get("choices"), list) or not body["choices"]:
                raise CaptureError("the reply has no choices")
            choice = body["choices"][0]
            message = choice.get("message") if isinstance(choice, dict) else None
            reply = {"model": body.get("model"), "usage": body.get("usage"), "id": body.get("id"),
                     "text": _choice_text(capture.kind, choice, stream=False),
                     "finish_reason": choice.get("finish_reason"),
                     "tool_calls": message.get("tool_calls") if isinstance(message, dict) else None}
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError, TypeError) as e:
        raise CaptureError(f"could not read the exchange: {type(e).__name__}") from e
    raw_usage = reply.get("usage")
    usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
    model = reply.get("model") or request.get("model")
    response_id = reply.get("id")
    finish = reply.get("finish_reason")
    output = str(reply.get("text") or "")
    template, sampling = fingerprint.request_fingerprint(request, chat=capture.kind == "chat")
    if reply.get("tool_calls"):
        output += tool_calls.render(tool_calls.check(request.get("tools"), reply["tool_calls"]))
    return SampleRecord(
        version=capture.version, prompt=prompt, output=output, ts=capture.ts,
        model=model if isinstance(model, str) else None,
        finish_reason=finish if isinstance(finish, str) else None,
        prompt_tokens=_int(usage.get("prompt_tokens")), output_tokens=_int(usage.get("completion_tokens")),
        latency_s=capture.latency_s, ttft_s=capture.ttft_s, source="proxy", template_hash=template,
        sampling_hash=sampling, traceparent=capture.traceparent or None,
        response_id=response_id if isinstance(response_id, str) and 0 < len(response_id) <= MAX_RESPONSE_ID else None,
        conversation=None if key is None else key(capture.conversation or (
            request.get("user") if openai_user and isinstance(request.get("user"), str) else None)))


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
