"""The version inventory reads max_model_len from each version's /v1/models (the simulator's, here)."""

from __future__ import annotations

import time

import pytest

from tests.support.observer_proc import run_observer
from tests.support.sim import running_fleet

pytestmark = pytest.mark.integration


def test_version_info_carries_max_model_len_from_the_openai_endpoint() -> None:
    with running_fleet() as (_fleet, cfg):
        cfg = cfg.model_copy(update={"scrape": cfg.scrape.model_copy(
            update={"interval_seconds": 1.0, "timeout_seconds": 1.0})})
        with run_observer(cfg, areas=["scrape", "canary"]) as obs:
            obs.wait_ready()
            deadline = time.monotonic() + 30
            lines: list[str] = []
            while time.monotonic() < deadline:
                lines = [ln for ln in obs.get("/metrics").text.splitlines()
                         if ln.startswith("observer_version_info{")]
                if len(lines) == 2 and all('max_model_len="8192"' in ln for ln in lines):
                    break
                time.sleep(0.2)
            assert len(lines) == 2, lines
            assert all('max_model_len="8192"' in ln for ln in lines), lines
            assert {ln.split('version="')[1].split('"')[0] for ln in lines} == {"stable", "canary"}
            # the same max_model_len names what "near the context limit" means for the prompt-length window: the
            # largest edge the engine exposes at or under 0.9 × 8192 (the simulator's edges stop at 2000)
            near: list[str] = []
            while time.monotonic() < deadline + 30 and len(near) < 2:
                near = [ln for ln in obs.get("/metrics").text.splitlines()
                        if ln.startswith("observer_prompt_near_limit_threshold_tokens{")]
                time.sleep(0.2)
            assert sorted(near) == ['observer_prompt_near_limit_threshold_tokens{version="canary"} 2000.0',
                                    'observer_prompt_near_limit_threshold_tokens{version="stable"} 2000.0'], near


def test_each_replica_is_asked_its_tokenizer_and_a_replica_with_another_template_stands_out() -> None:
    """The simulator's /tokenize applies the replica's chat template: a canary replica with another template
    answers other ids (its version's fingerprint says `mixed`); an engine without /tokenize is `unknown`."""
    from observer.config import parse_config
    from observer_dev.promserver import free_port
    from tests.support.sim import config_yaml, fleet_dict

    data, _ = fleet_dict(interval_seconds=1.0)
    canary = data["fleet"]["versions"][1]
    canary["vllm"].append(f"http://127.0.0.1:{free_port()}/metrics")
    canary.pop("pods", None)  # replicas named by host:port
    cfg = parse_config(config_yaml(data), source="test config", environ={})
    with running_fleet(cfg) as (fleet, cfg):
        fleet.set_profile("stable", tokenize=False)
        fleet.set_profile("canary", replica=1, chat_template="v2")
        with run_observer(cfg, areas=["scrape", "canary"]) as obs:
            obs.wait_ready()
            deadline = time.monotonic() + 30
            info: list[str] = []
            replicas: list[str] = []
            while time.monotonic() < deadline:
                text = obs.get("/metrics").text.splitlines()
                info = [ln for ln in text if ln.startswith("observer_version_info{")]
                replicas = [ln for ln in text if ln.startswith("observer_replica_tokenizer_info{")]
                if len(replicas) == 3 and len(info) == 2:
                    break
                time.sleep(0.2)
    assert len(replicas) == 3, replicas
    hashes = {ln.split('tokenizer="')[1].split('"')[0] for ln in replicas if 'version="canary"' in ln}
    assert len(hashes) == 2 and "unknown" not in hashes, replicas  # the two canary replicas disagree
    assert [ln for ln in replicas if 'version="stable"' in ln and 'tokenizer="unknown"' in ln], replicas
    by_version = {ln.split('version="')[1].split('"')[0]: ln.split('tokenizer="')[1].split('"')[0] for ln in info}
    assert by_version == {"stable": "unknown", "canary": "mixed"}, info


def test_a_canary_on_another_engine_release_is_named_and_not_judged_as_a_weights_change() -> None:
    """The simulator's /version answers each version's release: a canary on vLLM 0.34.0 beside a stable on 0.33.0
    is inconclusive on `engine_version` (saying how to judge an engine rollout), its report names what changes,
    and the release is in the fingerprint and the environment series."""
    from observer.config import parse_config
    from tests.support.sim import config_yaml, fleet_dict

    data, _ = fleet_dict(interval_seconds=1.0)
    data["canary"] = {"interval_seconds": 1.0}
    cfg = parse_config(config_yaml(data), source="test config", environ={})
    with running_fleet(cfg) as (fleet, cfg):
        fleet.set_profile("canary", engine_version="0.34.0")
        with run_observer(cfg, areas=["scrape", "canary"]) as obs:
            obs.wait_ready()
            deadline = time.monotonic() + 40
            env: list[str] = []
            body: dict[str, object] = {}
            while time.monotonic() < deadline:
                env = [ln for ln in obs.get("/metrics").text.splitlines()
                       if ln.startswith("observer_version_environment_info{")]
                body = obs.get("/api/v1/canary/verdict").json()
                if len(env) == 2 and "engine_version differs" in str(body.get("reason", "")):
                    break
                time.sleep(0.3)
            assert sorted(ln.split('engine_version="')[1].split('"')[0] for ln in env) == ["0.33.0", "0.34.0"], env
            assert body["verdict"] == "inconclusive", body
            assert "drop engine_version from canary.fairness.same_environment" in str(body["reason"]), body
            page = obs.get("/report/canary/canary").text
            assert "What changes" in page and "vLLM 0.33.0 → 0.34.0" in page, page[:2000]
