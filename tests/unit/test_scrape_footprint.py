"""The sidecar path in a fresh interpreter: no torch import, and RSS under 150 MB while scraping 20
targets (the targets are served from this test process, so they do not count against the observer)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.observer_proc import Route, scaled_exposition, target_server

ROOT = Path(__file__).resolve().parents[2]
VLLM_033 = (ROOT / "tests" / "fixtures" / "vllm" / "generated_vllm-0.33.0_single-engine.prom").read_text()
DCGM = (ROOT / "tests" / "fixtures" / "dcgm" / "SYNTHETIC_dcgm-exporter_4.x_template_H100_k8s_Hostname.prom")

SCRIPT = r"""
import asyncio, json, sys
import psutil
import observer.service
import observer.cli.main
from observer.config.spec import ObserverConfig
from observer.service import Service

cfg = ObserverConfig.model_validate(json.loads(sys.argv[1]))

built = {}

async def main():
    service = Service.build(cfg)
    built["rss"] = psutil.Process().memory_info().rss / 2**20
    scrape = next(j for j in service.jobs() if j.name == "scrape")
    for _ in range(int(sys.argv[2])):
        await service.run_job(scrape)
    signals = service.services.signals
    ok = sum(1 for v in signals.versions() if (signals.latest(v) or None) and signals.latest(v).replicas_up)
    await service.stop()
    return ok

ok = asyncio.run(main())
print(json.dumps({"torch": "torch" in sys.modules, "sentence_transformers": "sentence_transformers" in sys.modules,
                  "rss_mb": psutil.Process().memory_info().rss / 2**20, "rss_after_build_mb": built["rss"],
                  "heavy_modules": sorted(m for m in ("scipy", "pandas", "sklearn", "evidently") if m in sys.modules),
                  "versions_up": ok}))
"""


class Growing:
    def __init__(self) -> None:
        self.k = 0

    def __call__(self) -> bytes:
        self.k += 1
        return scaled_exposition(VLLM_033, self.k).encode()


def test_sidecar_scrapes_20_targets_without_torch_under_150mb() -> None:
    with target_server() as server:
        urls = [server.set(f"/t{i}", Route(body=Growing())) for i in range(20)]
        dcgm = server.set("/dcgm", Route(body=DCGM.read_bytes()))
        versions = [{"name": f"v{i}", "vllm": urls[i * 4:(i + 1) * 4], "dcgm": [dcgm]} for i in range(5)]
        cfg = {"fleet": {"versions": versions}, "scrape": {"interval_seconds": 15, "timeout_seconds": 5}}
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
        run = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(cfg), "6"], capture_output=True, text=True,
                             timeout=120, cwd=ROOT, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["versions_up"] == 5, out
    assert out["torch"] is False and out["sentence_transformers"] is False, out
    # rss_after_build_mb is every area built and idle; the difference is what scraping costs.
    assert out["rss_mb"] - out["rss_after_build_mb"] < 20, out
    assert out["rss_mb"] < 150, f"observer RSS over budget (heavy imports at build time?): {out}"
