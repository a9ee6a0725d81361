"""Drift in the real service: samples arrive over the ingest API, a baseline is pinned and promoted with the
CLI, the scheduled drift checks run as shared jobs (offered every 10 s slot, worked and read back by the
service itself) with the bundled MiniLM model, and a real Prometheus scrapes the verdict."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from observer import conventions as names
from observer.cli.main import app
from observer.config import parse_config
from tests.support.drift_corpus import SCENARIOS, load_corpus
from tests.support.observer_proc import run_observer
from tests.support.prom import run_prometheus

pytestmark = [pytest.mark.integration, pytest.mark.slow]
TOKEN = "drift-test-token"


def _config_text(tmp_path: Path) -> str:
    return f"""
fleet:
  versions:
    - {{name: stable, role: stable, model: llama}}
    - {{name: canary, role: canary, model: llama}}
server: {{auth_token: {TOKEN}}}
sampling:
  store: {{path: {tmp_path / 'samples.db'}}}
drift:
  interval_seconds: 10
  window_seconds: 3600
  min_samples: 100
  permutations: 199
  feature_alpha: 0.05
  alpha: 0.01
  consecutive: 2
  baseline_dir: {tmp_path / 'baselines'}
  embedder: {{cache_dir: {tmp_path / 'embed-cache'}, max_cache_entries: 5000}}
"""


def _post(url: str, version: str, texts: list[str], ts: float) -> None:
    samples = [{"version": version, "prompt": t, "output": f"Answer: {t}", "ts": ts + i * 0.01, "model": "llama",
                "finish_reason": "stop", "output_tokens": len(t.split()), "conversation": f"{version}-{ts}-{i}"}
               for i, t in enumerate(texts)]
    for start in range(0, len(samples), 500):
        r = httpx.post(f"{url}/api/v1/samples", json={"samples": samples[start:start + 500]},
                       headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
        assert r.status_code == 200, r.text


def test_drifted_canary_detected_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OBSERVER_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("OBSERVER_CONVERSATION_SECRET", "drift-service-test")  # ingest keys each conversation
    text = _config_text(tmp_path)
    (tmp_path / "observer.yaml").write_text(text)
    config = parse_config(text, environ={})
    corpus = load_corpus()
    rng = np.random.default_rng(7)
    baseline_texts, _ = corpus.draw("none", 800, rng)
    _, stable_now = corpus.draw("none", 300, rng)
    from dataclasses import replace

    _, canary_now = corpus.draw(replace(SCENARIOS["language"], fraction=0.2), 300, rng)
    now = time.time()
    with run_observer(config) as obs:
        _post(obs.url, "stable", baseline_texts, now - 2 * 86400)
        pin = CliRunner().invoke(app, ["baseline", "pin", "--version", "stable", "--until", "1d", "--promote",
                                       "--by", "ci", "--config", str(tmp_path / "observer.yaml")])
        assert pin.exit_code == 0, pin.output
        digest = pin.output.split("pinned baseline ")[1].split()[0]
        _post(obs.url, "stable", stable_now, time.time() - 600)
        _post(obs.url, "canary", canary_now, time.time() - 600)
        assert {"drift-enqueue", "work-drift", "drift-sync"} <= {j.name for j in obs.service.jobs()}
        deadline = time.monotonic() + 240
        report: dict[str, object] = {}
        while time.monotonic() < deadline:  # two windows (two slots) in a row: persistence gating needs both
            report = obs.get("/api/v1/drift/canary", headers={"Authorization": f"Bearer {TOKEN}"}).json()
            if report.get("results", {}).get("prompts", {}).get("streak", 0) >= 2:  # type: ignore[union-attr]
                break
            time.sleep(1.0)
        assert obs.get("/api/v1/drift/canary").status_code == 401  # reports quote texts: guarded
        assert report["status"] == "ok" and report["baseline_hash"] == digest, json.dumps(report)[:500]
        assert "prompts" in report["moved"] and report["results"]["prompts"]["streak"] == 2
        assert any(x["text"] in set(corpus.pools["foreign"]) for x in report["examples"]["prompts"])
        host = obs.url.removeprefix("http://")
        with run_prometheus([host]) as prom:
            found = prom.wait_for(f'{names.DRIFT_DETECTED}{{field="prompts"}}', min_series=2, timeout=30)
            by_version = {s["metric"]["version"]: float(s["value"][1]) for s in found}
            assert by_version == {"canary": 1.0, "stable": 0.0}
            info = prom.wait_for(f'{names.DRIFT_BASELINE_INFO}{{version="canary"}}', timeout=30)
            assert info[0]["metric"]["baseline_hash"] == digest
            p = prom.wait_for(f'{names.DRIFT_P_VALUE}{{version="canary",field="prompts"}}', timeout=30)
            assert float(p[0]["value"][1]) < 0.01
