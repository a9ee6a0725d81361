"""Tool calls of a sampled reply, checked against the functions the request declared.

Checked where the exchange is parsed (off the request path), because the declared `tools` live in the
request, which is not stored: each call must have the OpenAI shape (`type: function`, a `function.name`, a
string `function.arguments`), name a declared function (when the request declared any), and carry arguments
that parse as one JSON object (strictly: no NaN, no duplicate keys) and validate against that function's
`parameters` JSON schema. The result is appended to the stored output as one marker line per call,

    [[observer:tool_call {"name": "get_weather", "valid": false, "error": "...", "arguments": "..."}]]

(observer.conventions.toolcalls) so the `tool_call` live check (and the `empty` check: a reply that is only a
tool call is not empty) can read it later, and the output text keeps what the model produced.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from observer.conventions.toolcalls import render as render
from observer.jsonsafe import loads_strict

MAX_CALLS = 16
MAX_ARGUMENT_CHARS = 8192
MAX_SCHEMA_CHARS = 65536


def _declared(tools: Any) -> dict[str, Any] | None:
    """name → parameters schema (or None) of the declared functions; None when the request declared none."""
    if not isinstance(tools, list) or not tools:
        return None
    out: dict[str, Any] = {}
    for t in tools:
        fn = t.get("function") if isinstance(t, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            out[fn["name"]] = fn.get("parameters")
    return out


def _one(call: Any, declared: Mapping[str, Any] | None) -> dict[str, Any]:
    if not isinstance(call, dict):
        return {"name": "", "valid": False, "error": "a tool call is not an object"}
    fn = call.get("function")
    if call.get("type", "function") != "function" or not isinstance(fn, dict):
        return {"name": "", "valid": False, "error": "not a function call (type/function missing)"}
    name, args = fn.get("name"), fn.get("arguments")
    out: dict[str, Any] = {"name": name if isinstance(name, str) else "",
                           "arguments": args[:MAX_ARGUMENT_CHARS] if isinstance(args, str) else ""}
    if not isinstance(name, str) or not name:
        return {**out, "valid": False, "error": "function.name is missing"}
    if declared is not None and name not in declared:
        return {**out, "valid": False, "error": f"function {name!r} was not declared in tools"}
    if not isinstance(args, str):
        return {**out, "valid": False, "error": "function.arguments is not a string"}
    try:
        parsed = loads_strict(args)
    except (ValueError, RecursionError) as e:
        return {**out, "valid": False, "error": f"arguments are not valid JSON: {str(e)[:120]}"}
    if not isinstance(parsed, dict):
        return {**out, "valid": False, "error": "arguments are not a JSON object"}
    schema = declared.get(name) if declared is not None else None
    if isinstance(schema, dict) and len(json.dumps(schema)) <= MAX_SCHEMA_CHARS:
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import SchemaError

        try:
            errors = list(Draft202012Validator(schema).iter_errors(parsed))
        except SchemaError:
            errors = []  # a broken declared schema is the client's problem, not the model's
        if errors:
            where = "/".join(str(p) for p in errors[0].absolute_path) or "(root)"
            return {**out, "valid": False, "error": f"arguments do not match the schema at {where}: "
                                                    f"{errors[0].message[:160]}"}
    return {**out, "valid": True}


def check(tools: Any, calls: Any) -> list[dict[str, Any]]:
    """Each tool call of a reply checked against the request's declared `tools` (at most MAX_CALLS)."""
    if not isinstance(calls, list):
        return [{"name": "", "valid": False, "error": "tool_calls is not a list"}]
    declared = _declared(tools)
    return [_one(c, declared) for c in calls[:MAX_CALLS]]
