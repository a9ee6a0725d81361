"""`observer canary judge` against a real observer watching the simulated fleet (own data source)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from observer.cli.main import app
from tests.support.observer_proc import run_observer, wait_until
from tests.support.sim import config_yaml, fleet_dict, running_fleet

pytestmark = pytest.mark.integration


def test_canary_judge_table_and_json_from_a_running_observer(tmp_path: Path) -> None:
    data, _ = fleet_dict(weights=[0.8, 0.2], interval_seconds=1.0)
    data.update({"sampling": {"enabled": False}, "quality": {"enabled": False}, "drift": {"enabled": False},
                 "canary": {"interval_seconds": 1.0, "slice_seconds": 1.0}})  # time compressed ~23×
    from observer.config import parse_config

    cfg = parse_config(config_yaml(data), environ={})
    profiles = {"stable": {"load_rps": 60.0, "time_scale": 0.0},
                "canary": {"preset": "slow", "load_rps": 15.0, "time_scale": 0.0}}
    payload = {"name": "llm", "namespace": "llm-serving", "phase": "Progressing", "checksum": "1",
               "metadata": {"canary": "canary", "baseline": "stable"}}
    with running_fleet(cfg, profiles=profiles, seed=3) as (fleet, _), run_observer(cfg) as obs:
        obs.wait_ready()
        # Flagger's first interval of this revision (checksum "1"): its analysis window starts here.
        assert httpx.post(f"{obs.url}/api/v1/flagger/rollout", json=payload, timeout=10).status_code == 200
        deadline = time.monotonic() + 30
        verdict, flagged = "none", "none"
        while time.monotonic() < deadline and not verdict == flagged == "fail":
            fleet.advance("stable", 30)
            fleet.advance("canary", 30)
            time.sleep(1.3)
            verdict = httpx.get(obs.url + "/api/v1/canary/verdict", timeout=10).json()["verdict"]
            # Flagger's window (since its first interval) is a little shorter: it may decide a look later.
            flagged = httpx.post(f"{obs.url}/api/v1/flagger/rollout", json=payload, timeout=10).json()["verdict"]
        assert verdict == "fail", httpx.get(obs.url + "/api/v1/canary/verdict", timeout=10).json()["reason"]
        path = tmp_path / "observer.yaml"
        path.write_text(config_yaml(data))
        runner = CliRunner()
        res = runner.invoke(app, ["canary", "judge", "--config", str(path), "--url", obs.url, "--json"])
        assert res.exit_code == 1, res.output
        body = json.loads(res.output)
        assert body["verdict"] == "fail" and body["metrics"]["ttft"]["result"] == "fail"
        res = runner.invoke(app, ["canary", "judge", "--config", str(path), "--url", obs.url],
                            env={"COLUMNS": "200"})
        assert res.exit_code == 1 and "FAIL" in res.output and "ttft (critical)" in res.output
        # The pipeline's gate on the same observer: the failing verdict ends the wait with 1, its reason, the report.
        res = runner.invoke(app, ["canary", "wait", "--config", str(path), "--url", obs.url, "--timeout", "30",
                                  "--interval", "1"], env={"COLUMNS": "200"})
        assert res.exit_code == 1 and "canary vs stable: FAIL — " in res.output and "ttft" in res.output, res.output
        assert "Report: http://observer.observability.svc:9464/report/canary/canary?baseline=stable" in res.output
        assert "Report: http://observer.observability.svc:9464/report/canary/canary?baseline=stable" in res.output
        # Flagger's webhooks on the same observer, with Flagger's payload: promotion held, rollback asked for, the
        # rollout check failed; each answer says why.
        codes = {hook: httpx.post(f"{obs.url}/api/v1/flagger/{hook}", json=payload, timeout=10)
                 for hook in ("confirm-promotion", "rollback", "rollout")}
        assert {h: r.status_code for h, r in codes.items()} == {"confirm-promotion": 403, "rollback": 200,
                                                                "rollout": 412}
        assert codes["confirm-promotion"].json()["verdict"] == "fail"
        assert "ttft" in codes["rollback"].json()["reason"] and codes["rollback"].json()["report"].endswith(
            "/report/canary/canary?baseline=stable")
        # The running observer's report page names the failing metric and draws its plots.
        page = obs.get("/report/canary/canary?baseline=stable")
        assert page.status_code == 200 and "default-src 'none'" in page.headers["content-security-policy"]
        assert '<strong class="failing-metric">ttft</strong>' in page.text
        assert page.text.count('<img src="data:image/svg+xml;base64,') >= 4, page.text[-3000:]
        assert "/report/canary/canary?baseline=stable" in obs.get("/report").text
        # The gauge is the periodic job's last look (every canary.interval_seconds), the API's answer is now:
        # on a busy machine the job may not have looked since the data turned.
        gauge = 'observer_canary_verdict{baseline="stable",canary="canary"} -1.0'
        wait_until(lambda: gauge in obs.get("/metrics").text, timeout=15, message="the verdict gauge at fail (-1)")
        assert "observer_version_info{" in obs.get("/metrics").text
        # The next revision (a new checksum, the same names) starts its own window: the failing requests of the
        # one before do not roll it back.
        again = httpx.post(f"{obs.url}/api/v1/flagger/rollback", json={**payload, "checksum": "2"}, timeout=10)
        assert again.status_code == 409 and again.json()["verdict"] in ("nodata", "inconclusive"), again.text


def test_canary_judge_names_an_unreachable_observer(tmp_path: Path) -> None:
    data, _ = fleet_dict()
    path = tmp_path / "observer.yaml"
    path.write_text(config_yaml(data))
    res = CliRunner().invoke(app, ["canary", "judge", "--config", str(path)])
    assert res.exit_code == 2 and "could not ask the observer" in res.output
