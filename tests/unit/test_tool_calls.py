"""Tool-call validity (#18 item 7): the OpenAI `tool_calls` shape, a declared function, arguments that parse as
one JSON object and match the function's parameter schema — checked when a sampled exchange is parsed
(plain and streamed replies) and scored by the `tool_call` live check; replies without tool calls are
undecided, and a reply that is only a tool call is not `empty`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from observer.analyse.quality import rules
from observer.sample.capture import Capture, to_record
from observer.sample.tool_calls import check

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city"], "additionalProperties": False}}}]


def call(name: str = "get_weather", arguments: str = '{"city": "Paris"}', **extra: Any) -> dict[str, Any]:
    return {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}, **extra}


@pytest.mark.parametrize(("c", "error"), [
    (call(), None),
    (call(arguments='{"city": "Paris", "days": 3}'), None),
    (call(name="get_time"), "function 'get_time' was not declared in tools"),
    (call(arguments='{"city": "Paris"'), "arguments are not valid JSON"),
    (call(arguments='{"city": "a", "city": "b"}'), "duplicate key"),
    (call(arguments='["Paris"]'), "arguments are not a JSON object"),
    (call(arguments='{"days": 2}'), "'city' is a required property"),
    (call(arguments='{"city": "Paris", "days": 0}'), "at days"),
    (call(arguments='{"city": NaN}'), "NaN is not valid JSON"),
    ({"type": "function", "function": {"arguments": "{}"}}, "function.name is missing"),
    ({"type": "retrieval"}, "not a function call"),
    (call(arguments={"city": "Paris"}), "function.arguments is not a string"),  # type: ignore[arg-type]
])
def test_each_call_is_checked_against_the_declared_tools(c: dict[str, Any], error: str | None) -> None:
    [r] = check(TOOLS, [c])
    assert r["valid"] is (error is None), r
    if error:
        assert error in r["error"]


def test_without_declared_tools_only_the_shape_and_json_are_checked() -> None:
    assert check(None, [call(name="anything")])[0]["valid"] is True
    assert check(None, [call(arguments="{")])[0]["valid"] is False
    assert check(TOOLS, "not a list")[0]["valid"] is False


def _capture(response: dict[str, Any] | bytes, *, stream: bool = False) -> Capture:
    body = response if isinstance(response, bytes) else json.dumps(response).encode()
    req = {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS}
    return Capture(version="v", kind="chat", request=json.dumps(req).encode(), response=body,
                   content_type="text/event-stream" if stream else "application/json", ts=0.0, ttft_s=None,
                   latency_s=0.1)


def test_a_plain_reply_with_tool_calls_is_recorded_and_scored() -> None:
    reply = {"model": "m", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "tool_calls": [call(), call(arguments='{"days": 1}')]}}]}
    rec = to_record(_capture(reply))
    assert rules.not_empty(rec.output).passed is True  # only tool calls: not an empty answer
    o = rules.valid_tool_calls(rec.output)
    assert o.passed is False and "1 of 2 tool call(s) invalid" in o.reason and "city" in o.reason


def test_a_streamed_reply_is_reassembled_by_index() -> None:
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [
            {"index": 0, "id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"ci'}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": 'ty": "Oslo"}'}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    rec = to_record(_capture(body.encode(), stream=True))
    o = rules.valid_tool_calls(rec.output)
    assert o.passed is True and o.reason == "1 valid tool call(s)"
    assert rec.finish_reason == "tool_calls"


def test_a_reply_without_tool_calls_is_undecided() -> None:
    reply = {"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Hi"}}]}
    rec = to_record(_capture(reply))
    assert rec.output == "Hi" and rules.valid_tool_calls(rec.output).passed is None
