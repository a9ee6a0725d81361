"""The HTTP contract's shared pieces: error bodies and the answers every private route can give.

Declared in the OpenAPI document so clients and fuzzers see the real contract; the
one module mapping observer errors to HTTP (`export/errors.py`) and the routes answer with these shapes.
"""

from __future__ import annotations

from collections.abc import AsyncIterable
from typing import Any

from pydantic import BaseModel, Field


class ErrorBody(BaseModel):
    """Every error answer: `detail` always (a message, or FastAPI's list of validation errors); `error` (a
    bounded token) and `field` (the offending input) where the observer knows them."""

    detail: str | list[dict[str, Any]] = Field(description="What went wrong, and the fix where there is one.")
    error: str | None = Field(None, description="Bounded error token, e.g. invalid_json, unknown_version.")
    field: str | None = Field(None, description="Dotted path of the offending input, e.g. samples.3.ts.")


def error(description: str) -> dict[str, Any]:
    """One declared error answer."""
    return {"model": ErrorBody, "description": description}


PRIVATE: dict[int | str, dict[str, Any]] = {
    401: error("No `Authorization: Bearer <token>` header."),
    403: error("The bearer token is not accepted."),
    503: error("No token is configured (private routes fail closed), or the store is unavailable."),
}
"""What the bearer guard in front of every private route can answer."""


def inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """`model`'s JSON schema with its `$defs` inlined (for an `openapi_extra` request body)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return resolve(defs[ref.rsplit("/", 1)[1]])
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    out: dict[str, Any] = resolve(schema)
    return out


async def read_capped(declared: str | None, chunks: AsyncIterable[bytes], max_bytes: int) -> tuple[bytes, str | None]:
    """A request body of at most `max_bytes`, from its Content-Length header (`declared`) and its `chunks`
    (Starlette's `request.stream()`, or the proxy's ASGI messages). The second item says why it is refused,
    else None: a declared length over the cap (nothing is read), or a stream running past it (reading
    stops there). Never more than one chunk past the cap is held."""
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        return b"", f"body of {declared} bytes exceeds server.max_request_bytes ({max_bytes})"
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > max_bytes:
            return b"", f"body exceeds server.max_request_bytes ({max_bytes})"
    return bytes(body), None
