"""deploy/gateways/ as written, in real nginx and HAProxy processes in front of `observer proxy` (the sidecar)
in front of a constant-delay OpenAI-compatible server: replies pass, streamed chunks are not held back,
samples are stored, and a gateway's timeout is counted as unavailable (504) where a user's stop is a 499."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.support import gateways as gw
from tests.support.poll import wait_until
from tests.support.prom import metric

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "deploy" / "gateways"
SIDECAR = "vllm-llama.llm-serving.svc.cluster.local:8001"

pytestmark = pytest.mark.skipif(gw.binary("nginx") is None or gw.binary("haproxy") is None,
                                reason="nginx and haproxy are Debian packages that `make setup` installs")


def nginx_conf(*, read_timeout: str | None = None) -> str:
    """The recipe included in a minimal nginx.conf, as the nginx image includes conf.d; its addresses made
    local (and braces doubled for `gw.nginx`'s formatting)."""
    snippet = (RECIPES / "nginx-observer.conf").read_text().replace(SIDECAR, "{upstream}").replace(
        "listen 8080;", "listen 127.0.0.1:{port};")
    if read_timeout is not None:
        snippet = snippet.replace("proxy_read_timeout 300s;", f"proxy_read_timeout {read_timeout};")
    body = snippet.replace("{", "{{").replace("}", "}}").replace("{{upstream}}", "{upstream}").replace(
        "{{port}}", "{port}")
    return ("worker_processes 1;\npid {workdir}/nginx.pid;\nerror_log {workdir}/nginx-error.log warn;\n"
            "events {{ worker_connections 1024; }}\nhttp {{\n  access_log off;\n"
            "  client_body_temp_path {workdir}/nginx-body;\n  proxy_temp_path {workdir}/nginx-proxy;\n"
            + body + "\n}}\n")


def haproxy_conf() -> str:
    text = (RECIPES / "haproxy.cfg").read_text().replace(SIDECAR, "@U@").replace("bind :8080", "bind 127.0.0.1:@P@")
    return text.replace("{", "{{").replace("}", "}}").replace("@U@", "{upstream}").replace("@P@", "{port}")


def chat(stream: bool) -> dict[str, object]:
    return {"model": "stable", "stream": stream, "max_tokens": 8,
            "messages": [{"role": "user", "content": "Write to jo@example.com about the release."}]}


def proxy_metric(proxy: gw.Gateway, name: str, **labels: str) -> float:
    return metric(proxy.url, name, path="/observer/metrics", **labels)


@pytest.mark.parametrize("gateway", ["nginx", "haproxy"])
def test_recipe_forwards_streams_and_samples(tmp_path: Path, gateway: str) -> None:
    with gw.constant_upstream(tmp_path, delay_ms=20, chunk_gap_ms=200, chunks=4) as upstream, \
            gw.observer_proxy(tmp_path, upstream.url, fraction=1.0) as proxy, \
            (gw.nginx(tmp_path, proxy.url, conf=nginx_conf()) if gateway == "nginx"
             else gw.haproxy(tmp_path, proxy.url, conf=haproxy_conf())) as front:
        plain = httpx.post(front.url + "/v1/chat/completions", json=chat(False), timeout=10)
        assert plain.status_code == 200 and plain.json()["choices"][0]["message"]["content"]
        t0 = time.perf_counter()
        with httpx.stream("POST", front.url + "/v1/chat/completions", json=chat(True), timeout=10) as resp:
            chunks = resp.iter_raw()
            first = next(chunks)
            t_first = time.perf_counter() - t0
            rest = b"".join(chunks)
        t_all = time.perf_counter() - t0
        assert b"data:" in first and rest.endswith(b"data: [DONE]\n\n")
        assert t_first < 0.4 < t_all  # the first chunk left at once, not with the last (800 ms later)
        wait_until(lambda: proxy_metric(proxy, "observer_samples_stored_total") == 2, timeout=30,
                   message="both replies stored by the sidecar behind the gateway")
        # and the start-up probe's GET /v1/models, forwarded too
        assert proxy_metric(proxy, "observer_proxy_requests_total", code="200") == 3


def test_a_gateway_timeout_is_unavailable_and_a_users_stop_is_a_499(tmp_path: Path) -> None:
    with gw.constant_upstream(tmp_path, delay_ms=3000) as upstream, \
            gw.observer_proxy(tmp_path, upstream.url, env={
                "OBSERVER__SAMPLING__PROXY__GATEWAY_TIMEOUT_SECONDS": "1"}) as proxy, \
            gw.nginx(tmp_path, proxy.url, conf=nginx_conf(read_timeout="1s")) as front:
        timed_out = httpx.post(front.url + "/v1/chat/completions", json=chat(False), timeout=10)
        assert timed_out.status_code == 504  # nginx gave up after its proxy_read_timeout
        with pytest.raises(httpx.ReadTimeout):  # a user who stops waiting after 0.3 s
            httpx.post(front.url + "/v1/chat/completions", json=chat(False), timeout=0.3)
        wait_until(lambda: proxy_metric(proxy, "observer_proxy_requests_total", code="499") == 1, timeout=10)
        assert proxy_metric(proxy, "observer_proxy_requests_total", code="504") == 1
