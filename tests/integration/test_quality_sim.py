"""Golden replay end to end: simulator fleet (canary preset `worse`) → observer quality component with
the scripted judge on loopback and the real MiniLM embedder → the observer's own /metrics."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from observer import conventions as names
from observer.cli.main import app
from observer.config import parse_config
from observer.config.spec import ObserverConfig
from observer_dev.sim.fleet import FleetHandle
from tests.support.judge_server import JudgeServer, run_judge_server
from tests.support.observer_proc import run_observer
from tests.support.sim import config_yaml, fleet_dict, running_fleet

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SETS = sorted(p.stem for p in (ROOT / "golden_sets").glob("*.yaml"))


def quality_config(judge_url: str, *, live: bool = False) -> tuple[dict[str, Any], ObserverConfig]:
    data, _ = fleet_dict(("stable", "canary"), with_dcgm=False)
    data["quality"] = {
        "golden_dirs": [str(ROOT / "golden_sets")],
        "interval_seconds": 3600,
        "concurrency": 8,
        "judge": {"url": judge_url, "model": "scripted-judge", "max_retries": 1,
                  "prompt_path": str(ROOT / "evals" / "judge_prompt.yaml"),
                  "rubric_dir": str(ROOT / "evals" / "rubrics")},
        "live": {"enabled": live},
    }
    return data, parse_config(config_yaml(data), source="test", environ={})


@pytest.fixture(scope="module")
def judge() -> Iterator[JudgeServer]:
    with run_judge_server() as s:
        yield s


@pytest.fixture(scope="module")
def fleet(judge: JudgeServer) -> Iterator[tuple[FleetHandle, dict[str, Any], ObserverConfig]]:
    data, cfg = quality_config(judge.url)
    profiles = {"stable": {"preset": "healthy", "load_rps": 0.5}, "canary": {"preset": "worse", "load_rps": 0.5}}
    with running_fleet(cfg, profiles=profiles, seed=11, golden_dir=ROOT / "golden_sets") as (handle, _):
        yield handle, data, cfg


def metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    assert "NaN" not in text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def by(m: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, version: str) -> dict[str, float]:
    return {dict(labels)["golden_set"]: v for (n, labels), v in m.items()
            if n == name and dict(labels).get("version") == version}


def test_worse_canary_shows_lower_pass_rate_in_exported_gauges(
        fleet: tuple[FleetHandle, dict[str, Any], ObserverConfig], judge: JudgeServer) -> None:
    _, _, cfg = fleet
    with run_observer(cfg, areas=["quality"]) as obs:
        deadline = time.monotonic() + 150
        m: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        text = ""
        while time.monotonic() < deadline:
            text = obs.get("/metrics").text
            m = metrics(text)
            done = [k for k in m if k[0] == names.GOLDEN_LAST_RUN]
            if len(done) == 2 * len(SETS):
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"golden runs did not complete: {sorted(k for k in m if k[0] == names.GOLDEN_LAST_RUN)}")
        latest = obs.get("/quality/latest").json()
    lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert lint.returncode == 0 and not lint.stdout.strip(), lint
    stable_ratio = by(m, names.GOLDEN_PASS_RATIO, "stable")
    canary_ratio = by(m, names.GOLDEN_PASS_RATIO, "canary")
    assert set(stable_ratio) == set(canary_ratio) == set(SETS)
    # overall pass rate from the exported counters (what the SLO / canary gate reads)
    passed = {v: sum(by(m, names.GOLDEN_ITEMS_PASSED + "_total", v).values()) for v in ("stable", "canary")}
    total = {v: sum(by(m, names.GOLDEN_ITEMS + "_total", v).values()) for v in ("stable", "canary")}
    stable_rate, canary_rate = passed["stable"] / total["stable"], passed["canary"] / total["canary"]
    assert total["stable"] >= 55 and total["canary"] >= 55  # nearly every item scored
    # The healthy arm passes about 0.87 of its items (20 runs of this fixture: 48 to 56 of 61, mean 53.2; a
    # binomial standard deviation of 0.043): 0.8 failed a clean run at 48 of 61; 0.7 is 4 standard deviations
    # below the mean and still says the healthy version passes most of its golden items.
    assert stable_rate > 0.7, (passed, total)
    # About 61 items an arm (accuracy 0.9 against 0.6 with 10% refusals): the difference of the two pass rates
    # has a standard deviation near 0.08 around roughly 0.25, so a margin of 0.15 failed in a clean run
    # (0.82 against 0.67, 0.148); 0.05 is 2.5 standard deviations below it and still says which arm is worse.
    assert canary_rate < stable_rate - 0.05, (stable_rate, canary_rate)
    assert sum(canary_ratio.values()) < sum(stable_ratio.values())
    # judged summaries went through the scripted judge, and similarity through MiniLM
    assert len(judge.requests) >= 16
    assert m[(names.JUDGE_CALLS + "_total", (("outcome", "ok"),))] >= 16
    assert by(m, names.GOLDEN_SCORED, "stable")["summaries"] == 8
    for v in ("stable", "canary"):
        assert set(by(m, names.GOLDEN_UNSCORED + "_total", v)) == set(SETS)  # zero-valued counters exported
        ttft = {dict(k[1])["quantile"]: val for k, val in m.items()
                if k[0] == names.GOLDEN_TTFT and dict(k[1])["version"] == v and dict(k[1])["golden_set"] == "factual"}
        assert set(ttft) == {"0.5", "0.95", "0.99"} and 0 < ttft["0.5"] <= ttft["0.99"]
    assert latest["canary"]["factual"]["pass_ratio"] == canary_ratio["factual"]
    assert latest["stable"]["factual"]["set_version"].startswith("sha256:")


def test_cli_eval_run_against_the_simulator(fleet: tuple[FleetHandle, dict[str, Any], ObserverConfig],
                                            tmp_path: Path) -> None:
    _, data, _ = fleet
    cfg = tmp_path / "observer.yaml"
    plain = {**data, "quality": {**data["quality"], "judge": {}}}
    cfg.write_text(yaml.safe_dump(plain))
    runner = CliRunner()
    result = runner.invoke(app, ["eval", "run", "--config", str(cfg), "--version", "canary",
                                 "--golden-set", "factual", "--golden-set", "instructions", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output.strip().splitlines()[-1])
    assert [r["golden_set"] for r in rows] == ["factual", "instructions"]
    assert all(r["scored"] == r["items"] and 0 <= r["pass_ratio"] < 1 for r in rows)
    table = runner.invoke(app, ["eval", "run", "--config", str(cfg), "--version", "stable", "-g", "benign"])
    assert table.exit_code == 0, table.output
    assert "golden-set results: stable" in table.output and "benign" in table.output
    unknown = runner.invoke(app, ["eval", "run", "--config", str(cfg), "--version", "nope"])
    assert unknown.exit_code == 2 and "unknown version 'nope'" in unknown.output


def test_cli_eval_run_exits_1_when_nothing_is_scored(tmp_path: Path) -> None:
    from tests.support.prom import free_port

    cfg = tmp_path / "observer.yaml"
    port = free_port()
    cfg.write_text(yaml.safe_dump({
        "fleet": {"versions": [{"name": "down", "openai": f"http://127.0.0.1:{port}/v1"}]},
        "quality": {"golden_dirs": [str(ROOT / "golden_sets")], "request_timeout_seconds": 2}}))
    result = CliRunner().invoke(app, ["eval", "run", "--config", str(cfg), "--version", "down", "-g", "factual"])
    assert result.exit_code == 1
    assert "could not read the served model" in result.output
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1)
