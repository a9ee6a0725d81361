"""`observer check-config --edges-from URL` against the simulator's live /metrics (#18 item 5): the default
TTFT SLO's 2.5 s is an edge there; an SLO declared on custom edges with 2.0 is refused with the vLLM flag
that adds the edge; a dead target is named."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from observer.cli.main import app
from observer.conventions import vllm
from tests.support.sim import config_yaml, fleet_dict, running_fleet

pytestmark = pytest.mark.integration


def test_edges_from_a_live_target(tmp_path: Path) -> None:
    data, ports = fleet_dict(("stable", "canary"))
    ok_cfg, bad_cfg = tmp_path / "ok.yaml", tmp_path / "bad.yaml"
    ok_cfg.write_text(config_yaml(data), encoding="utf-8")
    custom = sorted({*vllm.TTFT_EDGES, 2.0})
    data["slo"] = {"latency": [{"name": "ttft-2s", "threshold_seconds": 2.0, "bucket_edges": custom}]}
    bad_cfg.write_text(config_yaml(data), encoding="utf-8")
    url = f"http://127.0.0.1:{ports.vllm['stable']}/metrics"
    from observer.config import load_config
    with running_fleet(load_config(ok_cfg, environ={}), total_rps=1.0):
        ok = CliRunner().invoke(app, ["check-config", "--config", str(ok_cfg), "--edges-from", url])
        bad = CliRunner().invoke(app, ["check-config", "--config", str(bad_cfg), "--edges-from", url])
    dead = CliRunner().invoke(app, ["check-config", "--config", str(ok_cfg), "--edges-from",
                                    "http://127.0.0.1:9/metrics"])
    assert ok.exit_code == 0, ok.output
    assert "every latency SLO threshold is a bucket edge" in ok.output
    assert bad.exit_code == 2
    text = " ".join(bad.output.split())
    assert "SLO 'ttft-2s' threshold 2s is not a bucket edge" in text and "--custom-histogram-buckets" in text
    assert dead.exit_code == 2 and "could not read the exposition" in dead.output
