"""`observer proxy` as a sidecar process: forwards to a scripted upstream and posts its redacted samples to
a real observer's ingest API; SIGTERM drains what is queued and exits cleanly."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from observer.config import parse_config
from tests.support.observer_proc import run_observer
from tests.support.prom import free_port
from tests.support.proxy_proc import run_proxy
from tests.support.scripted_openai import ScriptedUpstream, reply_text

pytestmark = pytest.mark.integration


def test_sidecar_proxy_posts_samples_to_the_observer(tmp_path: Path) -> None:
    observer_cfg = parse_config(f"""
fleet:
  versions: [{{name: stable, openai: "http://127.0.0.1:9/v1"}}]
server: {{auth_token: tok}}
sampling: {{store: {{path: "{tmp_path / 'central.db'}"}}}}
""", environ={})
    with ScriptedUpstream() as upstream, run_observer(observer_cfg, areas=["sample"]) as observer:
        config = tmp_path / "proxy.yaml"
        config.write_text(f"""
fleet:
  versions: [{{name: stable, openai: "{upstream.url}/v1"}}]
sampling:
  fraction: 1.0
  reservoir: {{window_seconds: 0.2}}
  store: {{path: "{tmp_path / 'unused.db'}"}}
""")
        with run_proxy(config, "--version", "stable", "--ingest-url", observer.url,
                       env={"OBSERVER_AUTH_TOKEN": "tok"}) as proxy:
            assert httpx.get(proxy.url + "/readyz").status_code == 200
            for i in range(3):
                resp = httpx.post(proxy.url + "/v1/completions",
                                  json={"prompt": f"ping {i} from 10.1.2.3", "stream": i % 2 == 0}, timeout=10)
                assert resp.status_code == 200
            assert proxy.stop() == 0, proxy.output  # SIGTERM is graceful: the open window is flushed and posted
            assert "Traceback" not in proxy.output
        deadline = time.monotonic() + 10
        rows: list[dict[str, object]] = []
        while time.monotonic() < deadline and len(rows) < 3:
            rows = httpx.get(observer.url + "/api/v1/samples", params={"version": "stable"},
                             headers={"Authorization": "Bearer tok"}).json()["samples"]
            time.sleep(0.05)
        assert sorted(str(r["prompt"]) for r in rows) == [f"ping {i} from <IPV4>" for i in range(3)]
        assert {r["source"] for r in rows} == {"proxy"}
        assert {r["output"] for r in rows} == {reply_text(f"ping {i} from 10.1.2.3") for i in range(3)}
    assert not (tmp_path / "unused.db").exists()  # remote sink: no local store was created


def test_proxy_cli_refuses_an_unknown_version(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("fleet:\n  versions: [{name: stable, openai: 'http://127.0.0.1:9/v1'}]\n")
    out = subprocess.run([sys.executable, "-m", "observer", "proxy", "--config", str(config), "--version", "blue"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "unknown version 'blue'" in out.stderr


def test_serve_mode_runs_the_configured_proxies_into_the_shared_store(tmp_path: Path) -> None:

    port = free_port()
    with ScriptedUpstream() as upstream:
        cfg = parse_config(f"""
fleet:
  versions: [{{name: stable, openai: "{upstream.url}/v1"}}, {{name: canary}}]
sampling:
  fraction: 0.0
  versions:
    stable: {{fraction: 1.0, listen: "127.0.0.1:{port}"}}
  reservoir: {{window_seconds: 0.2}}
  store: {{path: "{tmp_path / 's.db'}"}}
""", environ={})
        with run_observer(cfg, areas=["sample"]) as observer:
            store = observer.service.services.store
            resp = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=10,
                              json={"messages": [{"role": "user", "content": "hello"}]})
            assert resp.status_code == 200
            deadline = time.monotonic() + 10
            while store.count("stable") < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            [sample] = store.samples("stable")
            assert sample.prompt == "hello" and sample.output == reply_text("hello")
            metrics = observer.get("/metrics").text
            assert 'observer_proxy_requests_total{code="200",version="stable"} 1.0' in metrics
            assert 'observer_proxy_added_latency_seconds_count{version="stable"} 1.0' in metrics
        with pytest.raises(httpx.ConnectError):  # the proxy stopped with the service
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
