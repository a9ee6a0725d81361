"""Golden replay client: streaming TTFT against the simulator, and every way a request can fail."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from observer.analyse.quality.golden import GoldenSet, load_golden_set
from observer.analyse.quality.runner import GoldenRunner, ask
from observer.analyse.quality.scorer import Scorer
from observer.config.fleet import VersionSpec
from observer.config.quality import QualitySpec
from tests.support.judge_server import Reply, run_judge_server
from tests.support.prom import free_port
from tests.support.sim import running_fleet


@pytest.fixture()
def golden(tmp_path: Path) -> GoldenSet:
    p = tmp_path / "mini.yaml"
    p.write_text("""
items:
  - {id: a, prompt: "What is the capital of France? Answer with the city name only.", reference: Paris,
     assertions: [{type: contains, values: [Paris]}]}
  - {id: b, prompt: "What is 17 multiplied by 23? Number only.", reference: "391",
     assertions: [{type: regex, pattern: "391"}]}
  - {id: c, prompt: "Say something nice.", reference: "Something nice.", assertions: [{type: not_refusal}]}
""".lstrip())
    return load_golden_set(p)


@contextmanager
def raw_server(body: bytes, content_type: str = "text/event-stream") -> Iterator[str]:
    class H(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()
        t.join(5)


def version(url: str, model: str | None = "m") -> VersionSpec:
    return VersionSpec(name="v", openai=url, model=model)


async def test_replay_against_simulator_measures_ttft_and_scores(golden: GoldenSet, tmp_path: Path) -> None:
    with running_fleet(profiles={"stable": {"accuracy": 1.0, "refusal_rate": 0.0, "load_rps": 0.0}},
                       golden_dir=Path(golden.path).parent, seed=1) as (_fleet, cfg):
        stable = cfg.fleet.version("stable").model_copy(update={"model": None})
        async with httpx.AsyncClient() as http:
            runner = GoldenRunner(http, spec=QualitySpec(concurrency=2), scorer=Scorer())
            seen: list[str] = []
            result = await runner.run(stable, golden, progress=lambda item, _a: seen.append(item.id))
    assert sorted(seen) == ["a", "b", "c"]
    assert result.scored == 3 and result.passed == 3 and result.pass_ratio == 1.0
    assert result.set_version == golden.version
    for i in result.items:
        assert i.answer.finish_reason == "stop" and i.answer.error is None
        assert i.answer.ttft_s is not None and 0 < i.answer.ttft_s <= i.answer.latency_s
    assert result.items[0].answer.text.strip() == "Paris"


async def test_http_errors_leave_items_unscored(golden: GoldenSet) -> None:
    with running_fleet(profiles={"stable": {"error_rate": 1.0, "load_rps": 0.0}}, seed=2) as (_fleet, cfg):
        async with httpx.AsyncClient() as http:
            runner = GoldenRunner(http, spec=QualitySpec(), scorer=Scorer())
            result = await runner.run(cfg.fleet.version("stable"), golden)
    assert result.scored == 0 and not result.completed and result.pass_ratio is None
    assert result.unscored == {"request_error": 3}
    assert all(i.answer.error and i.answer.error.startswith("HTTP 5") for i in result.items)


async def test_unreachable_endpoint_without_model_name(golden: GoldenSet) -> None:
    async with httpx.AsyncClient() as http:
        runner = GoldenRunner(http, spec=QualitySpec(request_timeout_seconds=2), scorer=Scorer())
        result = await runner.run(version(f"http://127.0.0.1:{free_port()}/v1", model=None), golden)
    assert result.unscored == {"request_error": 3}
    assert "could not read the served model" in (result.items[0].answer.error or "")


async def test_non_streaming_server_is_read_as_one_json_body(golden: GoldenSet) -> None:
    with run_judge_server() as server:
        server.script(Reply(content="Paris", finish_reason="length"))
        async with httpx.AsyncClient() as http:
            answer = await ask(http, base_url=server.url, model="m", messages=golden.items[0].chat(),
                               max_tokens=8, temperature=0, timeout=5)
    assert answer.text == "Paris" and answer.finish_reason == "length" and answer.ttft_s is None
    assert server.requests[0]["stream"] is True and server.requests[0]["max_tokens"] == 8


async def test_timeout_is_a_request_error(golden: GoldenSet) -> None:
    with run_judge_server() as server:
        server.script(Reply(delay_s=5.0))
        async with httpx.AsyncClient() as http:
            answer = await ask(http, base_url=server.url, model="m", messages=golden.items[0].chat(),
                               max_tokens=8, temperature=0, timeout=0.3)
    assert answer.error is not None
    assert "timed out" in answer.error or "Timeout" in answer.error, answer.error
    assert answer.latency_s < 3.0


@pytest.mark.parametrize(("body", "fragment"), [
    (b"data: {not json}\n\n", "malformed reply"),
    (b'data: {"choices": [{"delta": {"content": "Par"}}]}\n\n', "stream ended before [DONE]"),
    (b'data: {"error": {"message": "overloaded"}}\n\n', "stream error"),
])
async def test_malformed_streams_are_request_errors(body: bytes, fragment: str) -> None:
    with raw_server(body) as url:
        async with httpx.AsyncClient() as http:
            answer = await ask(http, base_url=url, model="m", messages=[{"role": "user", "content": "q"}],
                               max_tokens=8, temperature=0, timeout=5)
    assert answer.error is not None and fragment in answer.error


async def test_stream_with_finish_reason_and_done() -> None:
    body = (b': keep-alive\n\ndata: {"choices": [{"delta": {"role": "assistant"}}]}\n\n'
            b'data: {"choices": [{"delta": {"content": "Pa"}}]}\n\n'
            b'data: {"choices": [{"delta": {"content": "ris \xc3\xa9"}, "finish_reason": "stop"}]}\n\n'
            b'data: {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}\n\ndata: [DONE]\n\n')
    with raw_server(body) as url:
        async with httpx.AsyncClient() as http:
            answer = await ask(http, base_url=url, model="m", messages=[{"role": "user", "content": "q"}],
                               max_tokens=8, temperature=0, timeout=5)
    assert answer.error is None and answer.text == "Paris é" and answer.finish_reason == "stop"
    assert answer.prompt_tokens == 5 and answer.completion_tokens == 2 and answer.ttft_s is not None
