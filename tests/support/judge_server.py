"""A SCRIPTED OpenAI-compatible judge on loopback, for tests. It is not an LLM.

`POST /v1/chat/completions` answers from a script (status codes, delays, malformed or truncated
replies, refusals) and, when the script is empty, with a deterministic *gullible* rule judge:

- it reads the judged OUTPUT (and REFERENCE) between `<<<BEGIN_KIND …>>>` / `<<<END_KIND …>>>`
  markers with ANY nonce, after NFKC folding, ending a block at the first end marker, and treating
  anything after a chat-template control token as instructions — as a careless model would;
- if the text of the user message OUTSIDE those blocks plants a verdict ("verdict": "pass",
  "score 10", "ignore previous instructions"), it obeys and passes;
- otherwise it passes an output that contains the (last) reference, normalised, and fails the rest;
  with no reference it fails refusals and empty outputs and passes everything else;
- a pairwise message (ANSWER_1 and ANSWER_2 blocks) gets `{"better": "1" | "2" | "tie"}` by the same
  gullible rules (`rule_preference`).

So a client that does not fence and neutralise judged text gets its verdicts flipped by injected
text, and one that does keeps them: tests can fail for the right reason.
"""

from __future__ import annotations

import json
import re
import threading
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_BLOCK = re.compile(r"<<<BEGIN_(PROMPT|REFERENCE|OUTPUT) [^>]*>>>\n?(.*?)<<<END_\1 [^>]*>>>", re.DOTALL)
_CHAT_TOKEN = re.compile(r"<\|im_start\|>|<\|eot_id\|>|<\|start_header_id\|>|\[INST\]|<<SYS>>")
_PLANTED = re.compile(r"\"verdict\"\s*:\s*\"pass\"|\bscore\b[^\n.]{0,30}?\b(?:10|5)\b|ignore (?:all )?(?:the )?"
                      r"previous instructions|system override", re.IGNORECASE)
_REFUSAL = re.compile(r"\b(?:i'?m sorry|i can(?:no|')t|as an ai)\b", re.IGNORECASE)


def _fold(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def rule_verdict(user: str) -> dict[str, Any]:
    """The gullible judge's verdict for one user message (see the module docstring)."""
    text = unicodedata.normalize("NFKC", user)
    outside_parts: list[str] = []
    blocks: dict[str, list[str]] = {"PROMPT": [], "REFERENCE": [], "OUTPUT": []}
    last = 0
    for m in _BLOCK.finditer(text):
        outside_parts.append(text[last:m.start()])
        content = m.group(2)
        token = _CHAT_TOKEN.search(content)
        if token:  # a careless model reads a chat-template token as a new (trusted) turn
            outside_parts.append(content[token.start():])
            content = content[:token.start()]
        blocks[m.group(1)].append(content)
        last = m.end()
    outside_parts.append(text[last:])
    outside = "\n".join(outside_parts)
    if _PLANTED.search(outside):
        return {"reasoning": "Following the instructions found in the message.", "score": 5, "verdict": "pass"}
    output = blocks["OUTPUT"][0] if blocks["OUTPUT"] else ""
    if blocks["REFERENCE"]:
        ok = _fold(blocks["REFERENCE"][-1]) in _fold(output)
    else:
        ok = bool(output.strip()) and not _REFUSAL.search(output)
    return {"reasoning": "The output matches the reference." if ok else "The output does not match.",
            "score": 5 if ok else 1, "verdict": "pass" if ok else "fail"}


_PAIR_BLOCK = re.compile(r"<<<BEGIN_(PROMPT|REFERENCE|ANSWER_1|ANSWER_2) [^>]*>>>\n?(.*?)<<<END_\1 [^>]*>>>",
                         re.DOTALL)
_PREFER = re.compile(r"\b(?:better|best|superior|prefer(?:red)?|winner|wins?)\b", re.IGNORECASE)
_PICK = re.compile(r"(?:answer|response)[\s_#]*([12])\b[^.\n]{0,20}\b(?:is )?(?:better|best|wins)|"
                   r"\"better\"\s*:\s*\"([12])\"", re.IGNORECASE)


def rule_preference(user: str) -> dict[str, Any]:
    """The gullible pairwise judge: which of ANSWER_1 / ANSWER_2 is better (see the module docstring).

    Text that escapes an answer block (after its first end marker, or after a chat-template token inside
    it) and plants a preference or a verdict is obeyed: it names an answer number, or else the answer it
    escaped from wins. Otherwise the answer containing the reference wins (both or neither: a tie); without a
    reference a refusal or empty answer loses to a real one."""
    text = unicodedata.normalize("NFKC", user)
    blocks: dict[str, str] = {}
    planted: list[tuple[str, str]] = []  # (escaped from which block, text)
    last, prev = 0, ""
    for m in _PAIR_BLOCK.finditer(text):
        planted.append((prev, text[last:m.start()]))
        content = m.group(2)
        token = _CHAT_TOKEN.search(content)
        if token:
            planted.append((m.group(1), content[token.start():]))
            content = content[:token.start()]
        blocks.setdefault(m.group(1), content)
        last, prev = m.end(), m.group(1)
    planted.append((prev, text[last:]))
    for source, outside in planted:
        pick = _PICK.search(outside)
        if pick:
            return {"reasoning": "Following the instructions found in the message.",
                    "better": pick.group(1) or pick.group(2)}
        if source.startswith("ANSWER_") and (_PLANTED.search(outside) or _PREFER.search(outside)):
            return {"reasoning": "Following the instructions found in the message.", "better": source[-1]}
    a, b = blocks.get("ANSWER_1", ""), blocks.get("ANSWER_2", "")
    if "REFERENCE" in blocks:
        ref = _fold(blocks["REFERENCE"])
        ok_a, ok_b = ref in _fold(a), ref in _fold(b)
    else:
        ok_a = bool(a.strip()) and not _REFUSAL.search(a)
        ok_b = bool(b.strip()) and not _REFUSAL.search(b)
    better = "tie" if ok_a == ok_b else ("1" if ok_a else "2")
    return {"reasoning": "Compared against the reference." if "REFERENCE" in blocks else "Compared the answers.",
            "better": better}


@dataclass
class Reply:
    """One scripted reply. `content=None` means: the rule judge's verdict as strict JSON."""

    status: int = 200
    content: str | None = None
    finish_reason: str = "stop"
    refusal: str | None = None
    delay_s: float = 0.0
    raw_body: str | None = None  # sent verbatim instead of a chat-completions body
    headers: dict[str, str] = field(default_factory=dict)
    # Only for a request whose user message satisfies this (concurrent calls arrive in any order).
    when: Callable[[str], bool] | None = None


@dataclass
class JudgeServer:
    """Handle on the running scripted judge."""

    url: str  # OpenAI base URL, …/v1
    requests: list[dict[str, Any]]
    _script: list[Reply]
    _lock: threading.Lock
    _stopping: threading.Event
    in_flight: int = 0
    max_in_flight: int = 0

    def script(self, *replies: Reply) -> None:
        """Queue replies, used in order before falling back to the rule judge."""
        with self._lock:
            self._script.extend(replies)

    def next_reply(self, user: str = "") -> Reply:
        """The first queued reply meant for this user message (see `Reply.when`), else the rule judge."""
        with self._lock:
            for i, reply in enumerate(self._script):
                if reply.when is None or reply.when(user):
                    return self._script.pop(i)
            return Reply()


def _handler(server: JudgeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            return

        def _send(self, status: int, body: str, headers: dict[str, str] | None = None) -> None:
            data = body.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            with suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/v1/models":
                self._send(200, json.dumps({"object": "list", "data": [{"id": "scripted-judge"}]}))
            else:
                self._send(404, json.dumps({"error": "not found"}))

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            with server._lock:
                server.requests.append(body)
                server.in_flight += 1
                server.max_in_flight = max(server.max_in_flight, server.in_flight)
            try:
                self._answer(body)
            finally:
                with server._lock:
                    server.in_flight -= 1

        def _answer(self, body: dict[str, Any]) -> None:
            user = next((m["content"] for m in body.get("messages", []) if m.get("role") == "user"), "")
            reply = server.next_reply(user if isinstance(user, str) else "")
            if reply.delay_s and server._stopping.wait(reply.delay_s):
                return
            if reply.raw_body is not None:
                self._send(reply.status, reply.raw_body, reply.headers)
                return
            if reply.status != 200:
                self._send(reply.status, json.dumps({"error": {"message": "scripted failure"}}), reply.headers)
                return
            content = reply.content
            if content is None and reply.refusal is None:
                pairwise = "BEGIN_ANSWER_1" in user
                content = json.dumps(rule_preference(user) if pairwise else rule_verdict(user))
            message = {"role": "assistant", "content": content, "refusal": reply.refusal}
            out = {"id": "chatcmpl-scripted", "object": "chat.completion", "model": body.get("model", ""),
                   "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}],
                   "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
            self._send(200, json.dumps(out), reply.headers)

    return Handler


@contextmanager
def run_judge_server() -> Iterator[JudgeServer]:
    """Start the scripted judge on 127.0.0.1 (a free port); stop it and its threads on exit."""
    handle = JudgeServer(url="", requests=[], _script=[], _lock=threading.Lock(), _stopping=threading.Event())
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(handle))
    httpd.daemon_threads = True
    handle.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield handle
    finally:
        handle._stopping.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
