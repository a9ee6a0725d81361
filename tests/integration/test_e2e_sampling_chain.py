"""The sampling chain end to end, with real parts only.

Simulated fleet (observer_dev.sim: stable healthy, canary on preset `worse` with a raised refusal rate) →
one `observer proxy` sidecar process per version, posting redacted samples to the observer's ingest API →
the observer's SQLite sample store → the quality area's live rule checks → `observer_live_checks_total`
and `observer_live_check_failures_total` per version on the observer's /metrics. The canary's refusal
failure ratio must be higher than stable's. Then a drift baseline is pinned from stable's stored samples
with `observer baseline pin` and `observer drift check` runs once for the canary, embedding through a
scripted `/v1/embeddings` server on loopback (feature hashing, not a model: no torch is loaded).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from observer import conventions as names
from observer.cli.main import app
from observer.config import parse_config
from tests.support.embeddings_server import run_embeddings_server
from tests.support.observer_proc import ObserverProcess, run_observer, wait_until
from tests.support.prom import wait_http
from tests.support.proxy_proc import ProxyProcess, run_proxy
from tests.support.sim import config_yaml, fleet_dict, running_fleet

pytestmark = pytest.mark.integration

VERSIONS = ("stable", "canary")
REQUESTS = 90  # per version; every third one streamed
TURNS = 3  # turns of a user's conversation (its x-session-id), the drift tests' unit
SECRET = "e2e-conversation-secret"
TOKEN = "e2e-token"
PROFILES = {"stable": {"preset": "healthy", "load_rps": 0.0, "time_scale": 0.2},
            "canary": {"preset": "worse", "refusal_rate": 0.35, "load_rps": 0.0, "time_scale": 0.2}}


@pytest.fixture
def embed_url() -> Iterator[str]:
    with run_embeddings_server() as url:
        yield url


def observer_config(tmp: Path, embed_url: str) -> dict[str, Any]:
    data, _ = fleet_dict(VERSIONS, with_dcgm=False)
    (tmp / "golden").mkdir()  # no golden sets: only live scoring runs
    data["server"]["auth_token"] = TOKEN
    data["sampling"] = {"store": {"path": str(tmp / "samples.db")}}
    data["quality"] = {"golden_dirs": [str(tmp / "golden")], "run_at_start": False,
                       "live": {"interval_seconds": 0.5, "window_seconds": 600}}
    data["drift"] = {"min_samples": 50, "permutations": 999, "min_baseline_units": REQUESTS // TURNS,
                     "baseline_dir": str(tmp / "baselines"),
                     "models": {"stable": "shared", "canary": "shared"},
                     "embedder": {"kind": "remote", "url": embed_url, "model": "hashing", "dim": 64,
                                  "cache_dir": None}}
    return data


def sidecar_config(data: dict[str, Any], tmp: Path, version: str) -> Path:
    """The config of `observer proxy` for `version`, which posts its samples to the observer's ingest."""
    cfg = {**data, "sampling": {"fraction": 1.0, "reservoir": {"window_seconds": 0.2},
                                "store": {"path": str(tmp / f"unused-{version}.db")}}}
    path = tmp / f"proxy-{version}.yaml"
    path.write_text(config_yaml(cfg))
    return path


async def send_traffic(url: str, version: str) -> None:
    """REQUESTS chat completions through one proxy, 16 in flight, every third streamed."""
    limit = asyncio.Semaphore(16)

    async def one(c: httpx.AsyncClient, model: str, i: int) -> None:
        body: dict[str, Any] = {"model": model, "max_tokens": 16,
                                "messages": [{"role": "user", "content": f"{version} question {i} on topic {i % 7}?"}]}
        session = {"x-session-id": f"{version}-user-{i // TURNS}"}
        async with limit:
            if i % 3 == 0:
                body |= {"stream": True, "stream_options": {"include_usage": True}}
                async with c.stream("POST", "/v1/chat/completions", json=body, headers=session) as resp:
                    assert resp.status_code == 200
                    chunks = [line async for line in resp.aiter_lines() if line.startswith("data: ")]
                assert chunks[-1] == "data: [DONE]"
            else:
                resp = await c.post("/v1/chat/completions", json=body, headers=session)
                assert resp.status_code == 200 and resp.json()["choices"][0]["message"]["content"]

    async with httpx.AsyncClient(base_url=url, timeout=30) as c:
        model = (await c.get("/v1/models")).json()["data"][0]["id"]
        await asyncio.gather(*(one(c, model, i) for i in range(REQUESTS)))


def live_counters(obs: ObserverProcess) -> dict[tuple[str, str, str], float]:
    """(metric, version, check) → value of the exported live-check counters."""
    wanted = {names.LIVE_CHECKS + "_total", names.LIVE_CHECK_FAILURES + "_total"}
    return {(s.name, s.labels["version"], s.labels["check"]): s.value
            for fam in text_string_to_metric_families(obs.get("/metrics").text)
            for s in fam.samples if s.name in wanted}


def test_proxied_traffic_is_stored_scored_exported_and_drift_checked(tmp_path: Path, embed_url: str) -> None:
    data = observer_config(tmp_path, embed_url)
    config_path = tmp_path / "observer.yaml"
    config_path.write_text(config_yaml(data))
    cfg = parse_config(config_yaml(data), source=str(config_path), environ={})
    with (running_fleet(cfg, profiles=PROFILES, seed=5) as _,
          run_observer(cfg, areas=["sample", "quality"]) as obs):
        sidecars: dict[str, ProxyProcess] = {}
        with contextlib.ExitStack() as stack:
            for v in VERSIONS:
                sidecars[v] = stack.enter_context(run_proxy(
                    sidecar_config(data, tmp_path, v), "--version", v, "--ingest-url", obs.url,
                    env={"OBSERVER_AUTH_TOKEN": TOKEN, "OBSERVER_CONVERSATION_SECRET": SECRET}))
            for sidecar in sidecars.values():
                wait_http(sidecar.url + "/readyz", timeout=30)

            async def both() -> None:
                await asyncio.gather(*(send_traffic(p.url, v) for v, p in sidecars.items()))

            asyncio.run(both())
            store = obs.service.services.store
            wait_until(lambda: all(store.count(v) == REQUESTS for v in VERSIONS), timeout=20,
                       message=f"{REQUESTS} stored samples per version")
        for sidecar in sidecars.values():  # stopped (SIGTERM: queued samples drained) when the stack closed
            assert sidecar.proc.returncode == 0 and "Traceback" not in sidecar.output, sidecar.output

        stored = {v: store.samples(v) for v in VERSIONS}
        for v in VERSIONS:
            assert {s.source for s in stored[v]} == {"proxy"}
            assert all(s.prompt.startswith(f"{v} question ") and s.output for s in stored[v])
        assert not any((tmp_path / f"unused-{v}.db").exists() for v in VERSIONS)  # remote sink only
        # The sidecar keyed each x-session-id with the secret; the store holds the keys, never the ids.
        for v in VERSIONS:
            keys = {s.conversation for s in stored[v]}
            assert len(keys) == REQUESTS // TURNS and all(k and len(k) == 32 and "user" not in k for k in keys)
        assert not {s.conversation for s in stored["stable"]} & {s.conversation for s in stored["canary"]}

        checks = names.LIVE_CHECKS + "_total"
        failures = names.LIVE_CHECK_FAILURES + "_total"
        counters: dict[tuple[str, str, str], float] = {}

        def all_scored() -> bool:
            counters.update(live_counters(obs))
            return all(counters.get((checks, v, "refusal")) == REQUESTS for v in VERSIONS)

        wait_until(all_scored, timeout=20, interval=0.2, message="live checks of every stored sample")
        ratio = {v: counters[(failures, v, "refusal")] / counters[(checks, v, "refusal")] for v in VERSIONS}
        # canary refuses at 0.35, stable at 0.02: the exported counters must show it
        assert ratio["canary"] > ratio["stable"] + 0.15, ratio
        assert ratio["canary"] >= 0.15 and ratio["stable"] <= 0.1, ratio
        for v in VERSIONS:  # the counters agree with the scores attached in the store
            refused = sum(1 for s in store.samples(v) if s.scores["rule:refusal"].passed is False)
            assert counters[(failures, v, "refusal")] == refused

        runner = CliRunner()
        pinned = runner.invoke(app, ["baseline", "pin", "--version", "stable", "--promote", "--by", "e2e",
                                     "--config", str(config_path)])
        assert pinned.exit_code == 0, pinned.output
        assert f"({REQUESTS} samples of stable, {REQUESTS // TURNS} conversations)" in pinned.output
        checked = runner.invoke(app, ["drift", "check", "--version", "canary", "--json",
                                      "--config", str(config_path)])
        assert checked.exit_code == 0, checked.output
        report = json.loads(checked.output)
        assert report["status"] == "ok" and report["version"] == "canary" and report["model"] == "shared", report
        for field in ("prompts", "outputs"):
            result = report["results"][field]
            assert result["status"] == "ok", result
            assert (result["n_current"], result["n_baseline"]) == (REQUESTS, REQUESTS), result
            assert 0 < result["p_value"] <= 1
            assert result["units"] == (f"window: {REQUESTS // TURNS} conversations; baseline: "
                                       f"{REQUESTS // TURNS} conversations"), result
        # the drift area's own refusal feature sees the same shift the live checks exported
        assert report["results"]["refusal"]["status"] == "ok" and report["results"]["refusal"]["p_value"] < 0.01
