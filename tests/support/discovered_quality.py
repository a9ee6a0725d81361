"""Quality on discovered versions, end to end: the scripted Kubernetes API serves two Rollout revisions whose pods
are simulator replicas (no static version list), an observer discovers them with quality and sampling on,
samples of both versions arrive through mirror ingest, and we wait for golden replays and live scores of each.

Used by `tests/integration/test_kubernetes_discovery.py` and `bench/topology.py` (the `discovered` part).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from observer.config import parse_config
from observer_dev.kubeapi import ScriptedKubeApi, pod, rollout
from tests.support.observer_proc import run_observer
from tests.support.prom import free_port
from tests.support.sim import running_fleet

PODS = "llm-serving/pods"
ROLLOUTS = "llm-serving/rollouts.argoproj.io"
STEPS: list[dict[str, Any]] = [{"setWeight": 25}, {"pause": {}}]
TOKEN = "discovered-quality"
GOLDEN = """description: two prompts any served model answers
items:
  - {id: capital, prompt: "What is the capital of France?", assertions: [{type: not_refusal}]}
  - {id: count, prompt: "Count to three.", assertions: [{type: not_refusal}]}
"""


@dataclass(frozen=True)
class Outcome:
    golden_replayed: dict[str, float]  # version → golden items scored
    live_scored: dict[str, float]      # version → live checks counted
    seconds: float                     # from the observer's start until both versions had both (or the deadline)


def _totals(url: str, family: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=5).text):
        for s in fam.samples:
            if s.name == family:
                out[s.labels["version"]] = out.get(s.labels["version"], 0.0) + s.value
    return out


def run(deadline_s: float = 60.0) -> Outcome:
    """Play the scenario; return what each discovered version got before `deadline_s`."""
    api = ScriptedKubeApi()
    tmp = Path(tempfile.mkdtemp(prefix="discovered-quality-"))
    (tmp / "kubeconfig").write_text(yaml.safe_dump(api.kubeconfig()), encoding="utf-8")
    (tmp / "golden").mkdir()
    (tmp / "golden" / "discovered.yaml").write_text(GOLDEN)
    ports = {"aaa": free_port(), "bbb": free_port()}
    sim = parse_config(yaml.safe_dump({"fleet": {"versions": [
        {"name": h, "vllm": [f"http://127.0.0.1:{p}/metrics"], "openai": f"http://127.0.0.1:{p}/v1"}
        for h, p in ports.items()]}}), environ={})
    config = parse_config(yaml.safe_dump({
        "discovery": {"kubernetes": {
            "namespace": "llm-serving", "kubeconfig": str(tmp / "kubeconfig"), "dcgm": None,
            "backoff_seconds": 0.05, "max_backoff_seconds": 0.2,
            "models": [{"name": "llm", "selector": {"app": "llm"}, "rollout": "llm"}]}},
        "scrape": {"interval_seconds": 0.5, "timeout_seconds": 0.5, "window_seconds": 30},
        "server": {"auth_token": TOKEN},
        "sampling": {"store": {"path": str(tmp / "s.db"), "work": {"poll_seconds": 0.2, "sync_seconds": 0.2}}},
        "quality": {"golden_dirs": [str(tmp / "golden")], "interval_seconds": 600,
                    "live": {"interval_seconds": 0.5}},
        "drift": {"enabled": False}}), environ={})
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with api.running(), running_fleet(sim, seed=5):
        api.put(ROLLOUTS, rollout("llm", steps=STEPS, stable="aaa", current="bbb", step=0))
        for h, p in ports.items():
            api.put(PODS, pod(f"llm-{h}-0", labels={"app": "llm", "rollouts-pod-template-hash": h}, port=p))
        with run_observer(config) as obs:
            started = time.monotonic()
            obs.wait_ready(timeout=20)
            golden: dict[str, float] = {}
            live: dict[str, float] = {}
            while time.monotonic() - started < deadline_s:
                samples = [{"version": h, "prompt": f"question {time.monotonic()}", "output": "I'm sorry, I can't."}
                           for h in ports]
                httpx.post(obs.url + "/api/v1/samples", json={"samples": samples}, headers=auth, timeout=5)
                golden = _totals(obs.url, "observer_golden_items_total")
                live = _totals(obs.url, "observer_live_checks_total")
                if all(golden.get(h, 0) > 0 and live.get(h, 0) > 0 for h in ports):
                    break
                time.sleep(0.5)
            return Outcome(golden_replayed={h: golden.get(h, 0.0) for h in ports},
                           live_scored={h: live.get(h, 0.0) for h in ports}, seconds=time.monotonic() - started)
