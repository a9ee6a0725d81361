"""The LiteLLM callback (`observer/integrations/litellm.py`) inside a real LiteLLM proxy process, in front of
the simulator: one model group with a stable and a canary deployment, samples landing in a real observer's
ingest under each deployment's version, redacted before storage; and an observer that is down when
LiteLLM's requests come, which neither slows nor fails them and whose lost samples the observer counts
once it is back."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from observer.config import parse_config
from tests.support import gateways as gw
from tests.support.observer_proc import ObserverProcess, run_observer, wait_until
from tests.support.prom import free_port, metric
from tests.support.sim import running_fleet, sim_config

pytestmark = pytest.mark.skipif(not gw.LITELLM_BIN.exists(), reason="the LiteLLM proxy is not installed "
                                "(tools/gateways/setup.sh, run by make setup)")

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "ingest-token"
IDLE = {"preset": "idle", "time_scale": 0.0}


def litellm_yaml(urls: dict[str, str]) -> str:
    """deploy/litellm/config.yaml as documented, its deployments pointed at the simulator's versions (each
    serves `sim-<version>`) and its master key set: one model group, `llama`, a deployment per version."""
    config = yaml.safe_load((ROOT / "deploy" / "litellm" / "config.yaml").read_text())
    for deployment in config["model_list"]:
        version = deployment["model_info"]["observer_version"]
        deployment["litellm_params"].update(model=f"openai/sim-{version}", api_base=urls[version], weight=1)
    config["general_settings"]["master_key"] = gw.LITELLM_KEY
    return yaml.safe_dump(config, sort_keys=False)


def observer_config(store: Path) -> Any:
    text = f"""
fleet:
  versions:
    - {{name: stable, openai: "http://127.0.0.1:9/v1"}}
    - {{name: canary, openai: "http://127.0.0.1:9/v1"}}
server: {{auth_token: {TOKEN}}}
sampling:
  store: {{path: "{store}"}}
"""
    return parse_config(text, environ={})


@pytest.fixture
def fleet() -> Iterator[dict[str, str]]:
    cfg = sim_config()
    with running_fleet(cfg, profiles={"stable": IDLE, "canary": IDLE}, total_rps=0.0) as (_, cfg):
        yield {v.name: str(v.openai) for v in cfg.fleet.versions}


def traceparent(i: int) -> str:
    return f"00-{i + 1:032x}-{i + 1:016x}-01"


def ask(url: str, i: int, *, stream: bool) -> tuple[int, float]:
    body = {"model": "llama", "stream": stream, "max_tokens": 16,
            "messages": [{"role": "user", "content": f"Question {i}: mail me at jo{i}@example.com"}]}
    t0 = time.perf_counter()
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=30,
                      headers={"authorization": f"Bearer {gw.LITELLM_KEY}", "traceparent": traceparent(i)}) as resp:
        resp.read()
    return resp.status_code, time.perf_counter() - t0


def stored(obs: ObserverProcess, version: str) -> list[dict[str, Any]]:
    return obs.samples(version, TOKEN)


def start_litellm(tmp_path: Path, fleet: dict[str, str], observer_port: int, **env: str) -> Any:
    shutil.copy(ROOT / "observer" / "integrations" / "litellm.py", tmp_path / "observer_callback.py")
    return gw.litellm(tmp_path, litellm_yaml(fleet), env={
        "OBSERVER_INGEST_URL": f"http://127.0.0.1:{observer_port}", "OBSERVER_AUTH_TOKEN": TOKEN, **env})


def test_samples_land_under_each_deployments_version_redacted(tmp_path: Path, fleet: dict[str, str]) -> None:
    port = free_port()
    with run_observer(observer_config(tmp_path / "samples.db"), areas=["sample"], port=port) as obs, \
            start_litellm(tmp_path, fleet, port) as litellm:
        answers = [ask(litellm.url, i, stream=i % 2 == 1) for i in range(40)]
        assert all(code == 200 for code, _ in answers)
        wait_until(lambda: len(stored(obs, "stable")) + len(stored(obs, "canary")) == 40, timeout=30,
                   message=lambda: f"{len(stored(obs, 'stable'))} + {len(stored(obs, 'canary'))} of 40 landed")
        stable, canary = stored(obs, "stable"), stored(obs, "canary")
        assert stable and canary  # LiteLLM balanced between the deployments; each landed under its own
        for sample in stable + canary:
            assert "@example.com" not in sample["prompt"] and "<EMAIL>" in sample["prompt"]
            assert sample["output"] and sample["source"] == "ingest"
            assert sample["latency_s"] is not None and sample["output_tokens"]
        assert sum(s["ttft_s"] is not None for s in stable + canary) >= 15  # the streamed half
        # the caller's trace context, read from the request headers LiteLLM keeps, links the sample's scores
        for sample in stable + canary:
            i = int(sample["prompt"].split(":")[0].removeprefix("Question "))
            assert sample["traceparent"] == traceparent(i), sample
        assert metric(obs.url, "observer_ingest_client_dropped_total", client="litellm") == 0


def test_an_observer_that_is_down_costs_litellm_nothing_and_is_told_later(tmp_path: Path,
                                                                           fleet: dict[str, str]) -> None:
    port = free_port()  # nothing listens there yet
    with start_litellm(tmp_path, fleet, port, OBSERVER_RETRY_SECONDS="1", OBSERVER_QUEUE_SIZE="5") as litellm:
        down = [ask(litellm.url, i, stream=False) for i in range(30)]
        assert all(code == 200 for code, _ in down)  # LiteLLM answers as if nothing were wrong
        # LiteLLM runs success callbacks in a logging worker behind its answers; on a busy machine they can run
        # after the observer is back, with nothing dropped. The outage is the premise: wait until the callback
        # met it (its once-a-minute warning says it dropped).
        log = litellm.log
        assert log is not None
        wait_until(lambda: "observer callback: dropped" in log.read_text(errors="replace"), timeout=30,
                   message=lambda: f"the callback never met the outage; LiteLLM's log:\n{litellm.log_tail()}")
        with run_observer(observer_config(tmp_path / "samples.db"), areas=["sample"], port=port) as obs:
            up = [ask(litellm.url, 100 + i, stream=False) for i in range(10)]
            assert all(code == 200 for code, _ in up)

            def landed() -> int:
                return len(stored(obs, "stable")) + len(stored(obs, "canary"))

            def lost() -> float:
                return sum(metric(obs.url, "observer_ingest_client_dropped_total", client="litellm", reason=r)
                           for r in ("observer_down", "queue_full"))

            # Every sample is accounted for: stored (sent once the observer was up, or of the outage and still
            # being retried when it came back) or counted lost, by reason (the queue holds five).
            wait_until(lambda: landed() + lost() == 40, timeout=30,
                       message=lambda: f"{landed()} stored + {lost()} counted lost of 40")
            assert lost() > 0 and landed() > 0
            before = landed()
            assert all(ask(litellm.url, 200 + i, stream=False)[0] == 200 for i in range(5))
            wait_until(lambda: landed() == before + 5, timeout=15)  # recovered: nothing lost any more
    # The outage did not slow LiteLLM: its median with the observer down is no worse than with it up
    # (sends happen on the callback's own thread).
    median_down = sorted(t for _, t in down)[len(down) // 2]
    median_up = sorted(t for _, t in up)[len(up) // 2]
    assert median_down < median_up * 2 + 0.05
