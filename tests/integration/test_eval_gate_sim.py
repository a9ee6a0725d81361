"""The offline gate (#18 item 6) against the simulator: `observer eval gate` replays the golden set to a
candidate and to stable, compares them item by item, and exits 0 pass / 1 fail / 3 inconclusive with a JSON
report. The simulator answers a golden prompt with its reference with probability `accuracy`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from observer.cli.main import app
from tests.support.sim import config_yaml, fleet_dict, running_fleet

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _gate(tmp_path: Path, profiles: dict[str, dict[str, float]], *args: str) -> tuple[int, dict[str, object]]:
    data, _ = fleet_dict(("stable", "canary"))
    data["quality"] = {"golden_dirs": [str(ROOT / "golden_sets")], "golden_sets": ["factual"]}
    cfg_path = tmp_path / "observer.yaml"
    cfg_path.write_text(config_yaml(data), encoding="utf-8")
    report = tmp_path / "gate.json"
    from observer.config import load_config
    cfg = load_config(cfg_path, environ={})
    with running_fleet(cfg, profiles=profiles, total_rps=0.0, golden_dir=ROOT / "golden_sets"):
        result = CliRunner().invoke(app, ["eval", "gate", "--config", str(cfg_path), "--candidate", "canary",
                                          "--baseline", "stable", "--report", str(report), "--json", *args])
    assert report.is_file(), result.output
    return result.exit_code, json.loads(report.read_text())


def test_a_worse_candidate_fails_the_gate(tmp_path: Path) -> None:
    good = {"load_rps": 0.0, "accuracy": 1.0, "refusal_rate": 0.0}
    code, body = _gate(tmp_path, {"stable": good, "canary": {**good, "accuracy": 0.2}})
    assert code == 1 and body["outcome"] == "fail"
    overall = body["overall"]
    assert overall["pairs"] == 21 and overall["losses"] >= 10 and overall["wins"] == 0  # type: ignore[index]
    assert "significantly worse" in overall["reason"]  # type: ignore[index]
    assert body["golden_sets"]["factual"]["set_version"]  # type: ignore[index]


def test_an_equal_candidate_passes_with_a_wide_margin_and_is_inconclusive_with_a_tight_one(tmp_path: Path) -> None:
    good = {"load_rps": 0.0, "accuracy": 1.0, "refusal_rate": 0.0}
    code, body = _gate(tmp_path, {"stable": good, "canary": good}, "--margin", "0.1")
    assert code == 0 and body["outcome"] == "pass", body
    code, body = _gate(tmp_path, {"stable": good, "canary": good}, "--margin", "0.02")
    assert code == 3 and body["outcome"] == "inconclusive"  # 21 items cannot show a 2-point margin
    assert "not enough evidence" in body["overall"]["reason"]  # type: ignore[index]


def test_a_candidate_outside_the_fleet_by_url_and_a_dead_one(tmp_path: Path) -> None:
    data, ports = fleet_dict(("stable", "canary"))
    data["quality"] = {"golden_dirs": [str(ROOT / "golden_sets")], "golden_sets": ["factual"]}
    cfg_path = tmp_path / "observer.yaml"
    cfg_path.write_text(config_yaml(data), encoding="utf-8")
    from observer.config import load_config
    cfg = load_config(cfg_path, environ={})
    good = {"load_rps": 0.0, "accuracy": 1.0, "refusal_rate": 0.0}
    with running_fleet(cfg, profiles={"stable": good, "canary": good}, total_rps=0.0,
                       golden_dir=ROOT / "golden_sets"):
        ok = CliRunner().invoke(app, ["eval", "gate", "--config", str(cfg_path), "--candidate", "new-model",
                                      "--candidate-url", f"http://127.0.0.1:{ports.vllm['canary']}/v1",
                                      "--baseline", "stable", "--margin", "0.1", "--json"])
        dead = CliRunner().invoke(app, ["eval", "gate", "--config", str(cfg_path), "--candidate", "gone",
                                        "--candidate-url", "http://127.0.0.1:9/v1", "--baseline", "stable",
                                        "--json"])
    assert ok.exit_code == 0 and json.loads(ok.stdout)["candidate"] == "new-model"
    assert dead.exit_code == 4  # nothing scored: never a pass
    assert json.loads(dead.stdout)["overall"]["pairs"] == 0
