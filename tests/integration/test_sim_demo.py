"""`python -m observer_dev.demo --duration 20`: simulated fleet → `observer serve` subprocess → real
Prometheus; exits 0 only once Prometheus returns a TTFT p95 per version."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.sim import config_yaml, fleet_dict

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="Debian package prometheus is not installed")
def test_demo_runs_and_prometheus_has_ttft_p95_per_version(tmp_path: Path) -> None:
    data, ports = fleet_dict(interval_seconds=1.0)
    # Only the scrape path is under test here; the other areas have their own integration tests.
    data.update({area: {"enabled": False} for area in ("sampling", "quality", "drift", "canary")})
    text = config_yaml(data)
    path = tmp_path / "observer.yaml"
    path.write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "observer_dev.demo", "--config", str(path), "--duration", "20",
         "--prometheus-port", "0", "--prometheus-interval", "2s"],
        capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert f"http://127.0.0.1:{ports.observer}/metrics" in out
    assert f"http://127.0.0.1:{ports.observer}/api/v1/signals" in out
    assert "/graph?g0.expr=histogram_quantile" in out
    line = next(x for x in out.splitlines() if x.startswith("TTFT p95 from Prometheus:"))
    assert "canary=" in line and "stable=" in line
