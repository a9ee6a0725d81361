"""Reading captured OpenAI exchanges: chat/completions, JSON and reassembled SSE streams."""

from __future__ import annotations

import json

import pytest

from observer.sample.capture import Capture, CaptureError, render_messages, sse_events, to_record
from tests.support.scripted_openai import json_body, reply_text, split, sse_body


def cap(kind: str, request: dict[str, object], response: bytes, content_type: str) -> Capture:
    return Capture(version="stable", kind=kind, request=json.dumps(request).encode(),  # type: ignore[arg-type]
                   response=response, content_type=content_type, ts=5.0, ttft_s=0.1, latency_s=0.4)


@pytest.mark.parametrize("chat", [True, False], ids=["chat", "completion"])
def test_stream_is_reassembled(chat: bool) -> None:
    request = ({"model": "m", "messages": [{"role": "user", "content": "hello there"}], "stream": True}
               if chat else {"model": "m", "prompt": "hello there", "stream": True})
    stream = b"".join(split(sse_body(request, chat=chat)))  # chunk boundaries do not matter once joined
    record = to_record(cap("chat" if chat else "completion", request, stream, "text/event-stream; charset=utf-8"))
    assert record.output == reply_text("hello there")
    assert record.prompt == "hello there"
    assert (record.finish_reason, record.model, record.source) == ("stop", "m", "proxy")
    assert record.prompt_tokens == 2 and record.output_tokens == len(reply_text("hello there").split(" "))
    assert (record.ts, record.ttft_s, record.latency_s) == (5.0, 0.1, 0.4)


@pytest.mark.parametrize("chat", [True, False], ids=["chat", "completion"])
def test_json_reply(chat: bool) -> None:
    request = {"model": "m", "messages": [{"role": "user", "content": "q"}]} if chat else {"prompt": "q"}
    record = to_record(cap("chat" if chat else "completion", request, json_body(request, chat=chat),
                           "application/json"))
    assert record.output == reply_text("q") and record.finish_reason == "stop"
    assert (record.prompt_tokens, record.output_tokens) == (3, 9)


def test_sse_parsing_handles_comments_crlf_and_multiline_data() -> None:
    raw = b": keep-alive\r\n\r\ndata: a\r\ndata:b\n\nevent: x\nid: 1\ndata: c\n\n: ping\n\ndata: [DONE]"
    assert sse_events(raw) == ["a\nb", "c", "[DONE]"]


def test_render_messages() -> None:
    assert render_messages([{"role": "user", "content": "hi"}]) == "hi"
    assert render_messages([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]) \
        == "system: be brief\nuser: hi"
    parts = [{"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url"}]}]
    assert render_messages(parts) == "look\n[image_url]"


@pytest.mark.parametrize(("kind", "request_", "response", "ctype", "message"), [
    ("chat", {"messages": []}, b"{}", "application/json", "non-empty list"),
    ("chat", {"messages": [{"content": "x"}]}, b"{}", "application/json", "string role"),
    ("completion", {"prompt": [1, 2, 3]}, b"{}", "application/json", "token ids"),
    ("completion", {"prompt": "x"}, b"not json", "application/json", "JSONDecodeError"),
    ("completion", {"prompt": "x"}, b'{"choices": []}', "application/json", "no choices"),
    ("completion", {"prompt": "x"}, b'data: {"error": {"message": "boom"}}\n\n', "text/event-stream",
     "error event"),
    ("completion", {"prompt": "x"}, b"data: \xff\xfe\n\n", "text/event-stream", "UnicodeDecodeError"),
], ids=["empty-messages", "no-role", "token-ids", "bad-json", "no-choices", "stream-error", "bad-utf8"])
def test_unreadable_exchanges_raise_capture_error(kind: str, request_: dict[str, object], response: bytes,
                                                  ctype: str, message: str) -> None:
    with pytest.raises(CaptureError, match=message):
        to_record(cap(kind, request_, response, ctype))


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_encoded_replies_are_decoded_for_the_sample(encoding: str) -> None:
    import zlib

    request = {"prompt": "q"}
    plain = json_body(request, chat=False)
    packer = zlib.compressobj(wbits=31 if encoding == "gzip" else 15)
    packed = packer.compress(plain) + packer.flush()
    c = cap("completion", request, packed, "application/json")
    record = to_record(Capture(**{**c.__dict__, "content_encoding": encoding}))
    assert record.output == reply_text("q")
    with pytest.raises(CaptureError, match="not supported"):
        to_record(Capture(**{**c.__dict__, "content_encoding": "br"}))
    with pytest.raises(CaptureError, match="could not decode"):
        to_record(Capture(**{**c.__dict__, "content_encoding": "gzip", "response": b"plain"}))
