"""`observer scrape SOURCE... --json` on files and on a live loopback target."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from observer.cli.main import app

FIX = Path(__file__).parent.parent / "fixtures"
VLLM = FIX / "vllm" / "generated_vllm-0.33.0_single-engine.prom"
DCGM = FIX / "dcgm" / "SYNTHETIC_dcgm-exporter_4.x_template_H100_k8s_Hostname.prom"


def test_json_shape_from_files() -> None:
    result = CliRunner().invoke(app, ["scrape", str(VLLM), str(DCGM), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    model = out["models"]["demo-model-v2"]
    ttft = model["histograms"]["time_to_first_token_seconds"]
    assert set(ttft) == {"count", "sum", "p50", "p95", "p99"}
    assert "kv_cache_usage_perc" in model["gauges"]
    assert set(model["counters"]["request_success"]) >= {"stop", "length", "abort", "error"}
    assert len(out["gpus"]) == 2 and out["gpus"][0]["pod"].startswith("vllm-llama3-8b-stable")


def test_url_source_and_errors() -> None:
    body = VLLM.read_bytes()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            code = 200 if self.path == "/metrics" else 500
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; version=1.0.0; charset=utf-8")
            self.end_headers()
            self.wfile.write(body if code == 200 else b"boom")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        ok = CliRunner().invoke(app, ["scrape", f"{base}/metrics", "--json"])
        assert ok.exit_code == 0 and "demo-model-v2" in json.loads(ok.output)["models"]
        bad = CliRunner().invoke(app, ["scrape", f"{base}/broken"])
        assert bad.exit_code == 1 and "HTTP 500" in bad.output
    finally:
        server.shutdown()


@pytest.mark.parametrize("content,needle", [("metric{a=1} 1\n", "line 1"), (None, "could not read")])
def test_bad_sources_fail_with_the_reason(tmp_path: Path, content: str | None, needle: str) -> None:
    path = tmp_path / "m.prom"
    if content is not None:
        path.write_text(content)
    result = CliRunner().invoke(app, ["scrape", str(path)])
    assert result.exit_code == 1 and needle in result.output
