"""The HTTP face of one simulated vLLM replica: `/metrics`, an OpenAI-compatible API
(`/v1/chat/completions`, `/v1/completions`, both with SSE streaming, `/v1/models`) and the simulator's
admin endpoints (`GET/PUT /sim/profile`, `POST /sim/restart`, `GET /sim/recent`).

Latencies are drawn from the version's profile; the client waits `time_scale` real seconds per
simulated second, while `/metrics` reports the simulated seconds.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from observer.conventions.routers import RouterKind
from observer.errors import ConfigError, ObserverError
from observer_dev.sim import dcgm_exposition, router_exposition, vllm_exposition
from observer_dev.sim.answers import choose_answer, content_text, json_answer, prompt_text
from observer_dev.sim.engine import ABORT, ERROR, LENGTH, STOP, Requests
from observer_dev.sim.replica import Replica, SimVersion
from observer_dev.sim.spans import FinishedRequest
from observer_dev.sim.traffic import LoadSample

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
HUNG_HOLD_SECONDS = 30.0
"""How long a hung engine holds an API request before the simulated gateway gives up with 504."""
_PIECE = re.compile(r"\s*\S+")


class SimApiError(ObserverError):
    """An OpenAI-style error reply."""

    def __init__(self, status: int, message: str, kind: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


def _error(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": status}},
                        status_code=status)


def count_tokens(text: str) -> int:
    """A rough token count (about four characters per token), at least one."""
    return max(1, round(len(text) / 4))


def split_pieces(text: str) -> list[str]:
    """Split text into streamable pieces (one simulated token each: a word with its leading space)."""
    return _PIECE.findall(text) or [text]


def tokenize_answer(body: Mapping[str, Any], *, template: str, max_model_len: int) -> dict[str, Any]:
    """vLLM's /tokenize answer: the messages rendered with the chat template `template` (or the prompt as is),
    one id per word piece, the same ids for the same text and template."""
    messages = body.get("messages")
    if isinstance(messages, list):
        text = f"<{template}>" + "".join(f"<|{m.get('role')}|>{m.get('content')}" for m in messages
                                         if isinstance(m, Mapping))
        text += "<|assistant|>" if body.get("add_generation_prompt", True) else ""
    else:
        text = str(body.get("prompt", ""))
    tokens = [int(hashlib.sha256(p.encode()).hexdigest()[:5], 16) for p in split_pieces(text)]
    return {"count": len(tokens), "max_model_len": max_model_len, "tokens": tokens, "token_strs": None}


def create_replica_app(version: SimVersion, replica: Replica, *, metrics_paths: tuple[str, ...] = ("/metrics",)
                       ) -> FastAPI:
    """The app serving one replica of `version`."""
    app = FastAPI(title=f"observer simulator: {version.name}/{replica.index}", docs_url=None, redoc_url=None,
                  openapi_url=None)
    engine = replica.engine
    registry = vllm_exposition.build_registry(engine.snapshot)

    async def metrics() -> Response:
        return Response(vllm_exposition.render(registry), media_type=vllm_exposition.CONTENT_TYPE)

    for path in sorted({*metrics_paths, "/metrics", "/metrics/"}):
        app.add_api_route(path, metrics, methods=["GET"])

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/version")
    async def version_info() -> dict[str, str]:
        return {"version": engine.profile.engine_version}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{
            "id": name, "object": "model", "created": int(engine.created), "owned_by": "vllm",
            "root": version.model if name == version.model else f"/adapters/{name}",
            "parent": None if name == version.model else version.model, "max_model_len": version.max_model_len}
            for name in (version.model, *sorted(version.adapters))]}

    @app.post("/tokenize", response_model=None)
    async def tokenize(request: Request) -> JSONResponse | dict[str, Any]:
        profile = engine.profile
        if not profile.tokenize:
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, Mapping):
            return _error(400, "the body must be a JSON object", "BadRequestError")
        return tokenize_answer(body, template=profile.chat_template, max_model_len=version.max_model_len)

    async def serving(request: Request) -> tuple[SimVersion, Replica, str]:
        """Who answers: an adapter's version when the body asks for its model name, else this replica."""
        if version.adapters:
            try:
                body = await request.json()
            except ValueError:
                body = None
            name = body.get("model") if isinstance(body, Mapping) else None
            target = version.adapters.get(name) if isinstance(name, str) else None
            if target is not None and isinstance(name, str):
                return target, target.replicas[replica.index % len(target.replicas)], name
        return version, replica, version.model

    @app.get("/sim/profile")
    async def get_profile() -> dict[str, Any]:
        return {"version": version.name, "profile": version.profile.model_dump()}

    @app.put("/sim/profile", response_model=None)
    async def put_profile(request: Request) -> JSONResponse | dict[str, Any]:
        try:
            changes = await request.json()
            if not isinstance(changes, dict):
                raise ConfigError("the body must be a JSON object of profile fields", source="simulator profile")
            profile = version.set_profile(changes)
        except ValueError as e:  # ConfigError and JSON errors are ValueErrors
            return _error(400, f"could not change the profile of {version.name}: {e}", "BadRequestError")
        return {"version": version.name, "profile": profile.model_dump()}

    @app.post("/sim/restart")
    async def restart() -> dict[str, Any]:
        version.restart(replica.index)
        return {"version": version.name, "replica": replica.index, "restarts": engine.restarts}

    @app.get("/sim/recent")
    async def recent(limit: int = 100) -> dict[str, Any]:
        return {"version": version.name, "samples": [asdict(s) for s in version.recent.latest(min(limit, 1000))]}

    @app.post(CHAT, response_model=None)
    async def chat(request: Request) -> Response:
        v, r, served = await serving(request)
        return await _complete(request, v, r, chat=True, served=served)

    @app.post(COMPLETIONS, response_model=None)
    async def completions(request: Request) -> Response:
        v, r, served = await serving(request)
        return await _complete(request, v, r, chat=False, served=served)

    return app


def create_dcgm_app(replicas: list[Replica], *, path: str = "/metrics") -> FastAPI:
    """The app of one simulated DCGM exporter serving the GPUs of `replicas` (as many as each holds now)."""
    app = FastAPI(title="observer simulator: dcgm-exporter", docs_url=None, redoc_url=None, openapi_url=None)

    async def metrics() -> Response:
        gpus = [g for r in replicas for g in r.gpus()]
        return Response(dcgm_exposition.render(gpus), media_type=dcgm_exposition.CONTENT_TYPE)

    for p in sorted({path, "/metrics"}):
        app.add_api_route(p, metrics, methods=["GET"])
    return app


def create_router_app(kind: str, routed: list[router_exposition.Routed], *, path: str = "/metrics") -> FastAPI:
    """The app of one simulated router (llm-d EPP or Dynamo frontend) in front of the `routed` versions: its
    /metrics only (requests go to the versions directly; the router's own view is computed from their engines)."""
    app = FastAPI(title=f"observer simulator: {kind} router", docs_url=None, redoc_url=None, openapi_url=None)
    router_kind = RouterKind(kind)

    async def metrics() -> Response:
        return Response(router_exposition.render(router_kind, routed), media_type=router_exposition.CONTENT_TYPE)

    for p in sorted({path, "/metrics"}):
        app.add_api_route(p, metrics, methods=["GET"])
    return app


def _parse(body: Any, version: SimVersion, *, chat: bool, served: str | None = None) -> tuple[str, int, int | None]:
    """(prompt text, prompt tokens, max_tokens) of a request body, or SimApiError; `served`: the model name
    answered under (an adapter's), default the version's."""
    if not isinstance(body, Mapping):
        raise SimApiError(400, "the request body must be a JSON object", "BadRequestError")
    model = body.get("model")
    if model is not None and model != (served or version.model):
        raise SimApiError(404, f"The model `{model}` does not exist.", "NotFoundError")
    if body.get("n", 1) != 1:
        raise SimApiError(400, "the simulator supports n=1 only", "BadRequestError")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, Mapping) for m in messages):
            raise SimApiError(400, "`messages` must be a non-empty list of message objects", "BadRequestError")
        text = prompt_text(messages)
        tokens = sum(count_tokens(content_text(m.get("content"))) + 4 for m in messages)
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise SimApiError(400, "`prompt` must be a string", "BadRequestError")
        text, tokens = prompt, count_tokens(prompt)
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise SimApiError(400, "`max_tokens` must be a positive integer", "BadRequestError")
    if tokens >= version.max_model_len:
        raise SimApiError(400, f"This model's maximum context length is {version.max_model_len} tokens; the "
                       f"prompt has {tokens}.", "BadRequestError")
    return text, tokens, limit


async def _complete(request: Request, version: SimVersion, replica: Replica, *, chat: bool,
                    served: str | None = None) -> Response:
    arrival_ns = time.time_ns()
    handler = CHAT if chat else COMPLETIONS
    engine = replica.engine
    try:
        body = await request.json()
    except ValueError:
        engine.end_request(handler=handler, status=400, reqs=None, begun=False)
        return _error(400, "the request body is not valid JSON", "BadRequestError")
    try:
        text, prompt_tokens, limit = _parse(body, version, chat=chat, served=served)
    except SimApiError as e:
        engine.end_request(handler=handler, status=e.status, reqs=None, begun=False)
        return _error(e.status, str(e), e.kind)
    profile = engine.profile
    scale = profile.time_scale
    if profile.asleep:
        engine.end_request(handler=handler, status=503, reqs=None, begun=False)
        return _error(503, "the engine is asleep (sleep mode); POST /wake_up first", "ServiceUnavailableError")
    if profile.admission_reject_rate and engine.uniform() < profile.admission_reject_rate:
        engine.reject_admission(handler=handler)
        return _error(503, "the request queue is full (max_num_queued_reqs)", "ServiceUnavailableError")
    if profile.hung:  # the engine takes the request and never finishes it; the client gives up first
        engine.begin_request()
        await asyncio.sleep(HUNG_HOLD_SECONDS)
        engine.end_request(handler=handler, status=504, reqs=None)
        return _error(504, "the engine did not answer (hung)", "GatewayTimeoutError")
    if profile.shed_rate and engine.uniform() < profile.shed_rate:
        engine.end_request(handler=handler, status=503, reqs=None, begun=False)
        return _error(503, f"server overloaded: request shed (shed_rate={profile.shed_rate})",
                      "ServiceUnavailableError")
    engine.begin_request()
    if engine.uniform() < profile.error_rate:
        reqs = engine.draw(1, prompt_tokens=[prompt_tokens], gen_tokens=[0], reasons=[ERROR])
        await _sleep(float(reqs.queue[0]) * scale)
        engine.end_request(handler=handler, status=500, reqs=reqs)
        return _error(500, f"simulated engine failure (error_rate={profile.error_rate})", "InternalServerError")
    answer = choose_answer(text, book=version.book, accuracy=profile.accuracy,
                           refusal_rate=profile.refusal_rate, draw=engine.uniform)
    response_format = body.get("response_format")
    output = answer.text
    if isinstance(response_format, Mapping) and response_format.get("type") in {"json_object", "json_schema"}:
        output = json_answer(response_format, answer.text)
    pieces = split_pieces(output)
    max_tokens = limit if limit is not None else version.max_model_len - prompt_tokens
    reason = STOP
    if len(pieces) > max_tokens:
        pieces, reason = pieces[:max_tokens], LENGTH
    reqs = engine.draw(1, prompt_tokens=[prompt_tokens], gen_tokens=[len(pieces)], max_tokens=[max_tokens],
                       reasons=[reason])
    meta = _Meta(chat=chat, model=served or version.model, id=("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex,
                 created=int(time.time()), prompt_tokens=prompt_tokens, completion_tokens=len(pieces),
                 finish_reason="length" if reason == LENGTH else "stop")
    if body.get("stream"):
        options = body.get("stream_options")
        usage = isinstance(options, Mapping) and bool(options.get("include_usage"))
        traced = _Traced(version, request.headers, arrival_ns, limit)
        return StreamingResponse(_stream(version, replica, meta, pieces, reqs, text, scale, usage=usage,
                                         traced=traced), media_type="text/event-stream")
    await _sleep(float(reqs.e2e[0]) * scale)
    engine.end_request(handler=handler, status=200, reqs=reqs)
    _remember(version, text, "".join(pieces), meta, reqs)
    _Traced(version, request.headers, arrival_ns, limit).finished(
        meta, ttft_s=min(float(reqs.ttft[0]), float(reqs.e2e[0])) * scale, queue_s=float(reqs.queue[0]) * scale)
    choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": meta.finish_reason}
    if chat:
        choice["message"] = {"role": "assistant", "content": "".join(pieces).strip()}
    else:
        choice["text"] = "".join(pieces)
    return JSONResponse({"id": meta.id, "object": "chat.completion" if chat else "text_completion",
                         "created": meta.created, "model": meta.model, "choices": [choice],
                         "usage": meta.usage()})


class _Meta:
    def __init__(self, *, chat: bool, model: str, id: str, created: int, prompt_tokens: int,
                 completion_tokens: int, finish_reason: str) -> None:
        self.chat, self.model, self.id, self.created = chat, model, id, created
        self.prompt_tokens, self.completion_tokens, self.finish_reason = prompt_tokens, completion_tokens, finish_reason

    def usage(self) -> dict[str, int]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens}

    def chunk(self, *, piece: str | None = None, role: bool = False, finish: bool = False) -> str:
        base = {"id": self.id, "object": "chat.completion.chunk" if self.chat else "text_completion",
                "created": self.created, "model": self.model}
        reason = self.finish_reason if finish else None
        if self.chat:
            delta: dict[str, str] = {"role": "assistant", "content": ""} if role else {}
            if piece is not None:
                delta["content"] = piece
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
        else:
            choice = {"index": 0, "text": piece or "", "logprobs": None, "finish_reason": reason}
        return "data: " + json.dumps({**base, "choices": [choice]}) + "\n\n"


async def _stream(version: SimVersion, replica: Replica, meta: _Meta, pieces: list[str], reqs: Requests,
                  prompt: str, scale: float, *, usage: bool, traced: _Traced) -> AsyncIterator[str]:
    engine = replica.engine
    sent = 0
    finished = False
    try:
        await _sleep(float(reqs.ttft[0]) * scale)
        first_ns = time.time_ns()
        if meta.chat:
            yield meta.chunk(role=True)
        gaps = reqs.itl
        for i, piece in enumerate(pieces):
            if i > 0:
                await _sleep(float(gaps[i - 1]) * scale)
            yield meta.chunk(piece=piece)
            sent += 1
        yield meta.chunk(finish=True)
        if usage:
            kind = "chat.completion.chunk" if meta.chat else "text_completion"
            yield "data: " + json.dumps({"id": meta.id, "object": kind, "created": meta.created,
                                         "model": meta.model, "choices": [], "usage": meta.usage()}) + "\n\n"
        yield "data: [DONE]\n\n"
        finished = True
    finally:
        handler = CHAT if meta.chat else COMPLETIONS
        if finished:
            engine.end_request(handler=handler, status=200, reqs=reqs)
            _remember(version, prompt, "".join(pieces), meta, reqs)
            traced.finished(meta, ttft_s=(first_ns - traced.arrival_ns) / 1e9, queue_s=float(reqs.queue[0]) * scale)
        else:
            # The client went away mid-stream: vLLM counts an abort.
            aborted = engine.draw(1, prompt_tokens=[meta.prompt_tokens], gen_tokens=[sent], reasons=[ABORT])
            engine.end_request(handler=handler, status=200, reqs=aborted)


@dataclass(frozen=True)
class _Traced:
    """What a finished request's engine span needs from its start (observer_dev/sim/spans.py)."""

    version: SimVersion
    headers: Mapping[str, str]
    arrival_ns: int
    max_tokens: int | None

    def finished(self, meta: _Meta, *, ttft_s: float, queue_s: float) -> None:
        if self.version.tracer is not None:
            self.version.tracer.finished(self.headers, FinishedRequest(
                arrival_ns=self.arrival_ns, end_ns=time.time_ns(), ttft_s=ttft_s, queue_s=queue_s,
                prompt_tokens=meta.prompt_tokens, completion_tokens=meta.completion_tokens,
                max_tokens=self.max_tokens))


def _remember(version: SimVersion, prompt: str, output: str, meta: _Meta, reqs: Requests) -> None:
    version.recent.add(LoadSample(
        ts=time.time(), prompt=prompt, output=output, domain="api", finish_reason=meta.finish_reason,
        prompt_tokens=meta.prompt_tokens, output_tokens=meta.completion_tokens, ttft_s=float(reqs.ttft[0]),
        latency_s=float(reqs.e2e[0])))


async def _sleep(seconds: float) -> None:
    if seconds > 0:
        await asyncio.sleep(seconds)
