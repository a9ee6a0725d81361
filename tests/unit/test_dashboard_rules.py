"""The dashboards' recording rules: per-version rates summed over pods, one replica's where replicas repeat them
(checked by promtool on series it expands), and every per-pod rate the dashboards read is recorded."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from observer.config import parse_config
from observer.conventions.recording import RECORDED, recorded
from observer.render.dashboard_rules import dashboard_group
from observer.render.dashboards import render
from observer.render.dashboards.lint import queries
from observer.render.rulemodel import groups_data

ROOT = Path(__file__).resolve().parents[2]
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="Debian package prometheus missing")


def _config(replica_labels: list[str]) -> Any:
    return parse_config(yaml.safe_dump({"canary": {"prometheus": {"replica_labels": replica_labels}}}), environ={})


def _promtool(tmp_path: Path, replica_labels: list[str], series: list[dict[str, str]], expect: list[dict[str, Any]]
              ) -> subprocess.CompletedProcess[str]:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups_data([dashboard_group(
        _config(replica_labels))], "")}))
    test = {"rule_files": ["rules.yaml"], "evaluation_interval": "15s",
            "tests": [{"interval": "15s", "input_series": series, "promql_expr_test": [
                {"expr": recorded("observer_requests_total"), "eval_time": "5m", "exp_samples": expect}]}]}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test))
    return subprocess.run(["promtool", "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)


@needs_promtool
def test_pods_are_summed_per_version(tmp_path: Path) -> None:
    pods = [{"series": f'observer_requests_total{{namespace="llm",version="v1",model="m",finished_reason="stop",'
                       f'pod="p{i}",instance="10.0.0.{i}:8000"}}', "values": f"0+{15 * (i + 1)}x40"}
            for i in range(3)]  # 1, 2 and 3 requests per second
    want = [{"labels": f'{recorded("observer_requests_total")}{{namespace="llm",version="v1",model="m",'
                       f'finished_reason="stop"}}', "value": 6}]
    res = _promtool(tmp_path, [], pods, want)
    assert res.returncode == 0, res.stdout + res.stderr


@needs_promtool
def test_observer_replicas_are_counted_once(tmp_path: Path) -> None:
    replicas = [{"series": f'observer_requests_total{{version="v1",model="m",finished_reason="stop",'
                           f'pod="observer-{r}",instance="10.1.0.{r}:9464"}}', "values": "0+30x40"} for r in range(2)]
    want = [{"labels": f'{recorded("observer_requests_total")}{{version="v1",model="m",finished_reason="stop"}}',
             "value": 2}]
    assert _promtool(tmp_path, ["pod", "instance"], replicas, want).returncode == 0
    summed = _promtool(tmp_path, [], replicas, want)  # without replica labels: twice the traffic
    assert summed.returncode != 0 and "} 4E+00" in summed.stdout + summed.stderr


def test_every_per_pod_rate_the_dashboards_read_is_recorded_and_every_recording_is_read() -> None:
    out = render(parse_config((ROOT / "deploy" / "observer.yaml").read_text(), environ={}))
    exprs = [q.expr for name, text in out.items() if name.endswith(".json") for q in queries(json.loads(text))]
    raw = {m for e in exprs for m in re.findall(r"rate\((observer_[a-z0-9_]+)\{", e)}
    assert not raw & set(RECORDED), sorted(raw & set(RECORDED))  # a panel that still rates pod series
    read = {m for e in exprs for m in re.findall(r"(version:observer_[a-z0-9_]+:rate1m)", e)}
    assert read == {recorded(s) for s in RECORDED}  # no recording Prometheus evaluates for nothing
