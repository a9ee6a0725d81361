"""Dashboards from the example config: committed files match, structure is sound, every query parses.

Parsing uses the real PromQL parser: every query (variables substituted as Grafana would) becomes a
recording rule in a temporary file that `promtool check rules` must accept.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from observer import conventions as names
from observer.config import load_config, parse_config
from observer.conventions.recording import RECORDED, recorded
from observer.errors import ConfigError
from observer.render.alerts import rule_groups
from observer.render.dashboards import render
from observer.render.dashboards.lint import problems, queries, substitute, variables
from observer.render.rulemodel import Alert
from observer.render.writer import write_files

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "deploy" / "observer.yaml"
# What Grafana sends for "All" on a multi-value variable, and a realistic single selection.
ALL = {"datasource": "prometheus", "namespace": ".*", "model": ".*", "version": ".*"}
ONE = {"datasource": "prometheus", "namespace": "llm-serving", "model": "sim-model", "version": "(stable|canary)"}


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    return render(load_config(CONFIG))


@pytest.fixture(scope="module")
def dashboards(rendered: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {Path(p).stem: json.loads(t) for p, t in rendered.items() if p.endswith(".json")}




def test_renders_the_five_dashboards_and_their_configmaps(rendered: dict[str, str]) -> None:
    assert sorted(rendered) == sorted(
        [f"dashboards/{s}.json" for s in ("fleet", "gpu", "canary", "quality", "cost")]
        + [f"deploy/grafana/{s}-configmap.yaml" for s in ("fleet", "gpu", "canary", "quality", "cost")])


def test_committed_files_equal_what_the_config_generates(rendered: dict[str, str]) -> None:
    stale = write_files(rendered, root=ROOT, check=True).changed
    assert not stale, f"run `observer render dashboards --config deploy/observer.yaml`; differing: {stale}"


def test_render_is_deterministic() -> None:
    config = load_config(CONFIG)
    assert render(config) == render(config)


@pytest.mark.parametrize("slug", ["fleet", "gpu", "canary", "quality"])
def test_structure(dashboards: dict[str, dict[str, Any]], slug: str) -> None:
    d = dashboards[slug]
    assert problems(d) == []
    assert list(variables(d)) == ["datasource", "namespace", "model", "version"]
    assert d["uid"] == f"observer-{slug}" and d["schemaVersion"] >= 39  # Grafana 11 schema, not 10.1's


def test_lint_catches_what_it_claims(dashboards: dict[str, dict[str, Any]]) -> None:
    d = json.loads(json.dumps(dashboards["fleet"]))
    body = [p for p in d["panels"] if p["type"] != "row"]
    body[1]["id"] = body[0]["id"]
    body[2]["gridPos"] = dict(body[3]["gridPos"])
    body[3]["targets"][0]["expr"] += ' + on() vector($nope)'
    body[4]["datasource"] = {"type": "prometheus", "uid": "some-other-uid"}
    body[0]["targets"][0]["legendFormat"] = "{{slo}}"
    found = "\n".join(problems(d))
    for expected in ("duplicate panel ids", "overlap", "undefined variable $nope", "neither a variable",
                     "must split by version"):
        assert expected in found


def _metric_names() -> set[str]:
    values = {v for k, v in vars(names).items() if k.isupper() and isinstance(v, str) and v.startswith("observer")}
    suffixed = {v + s for v in values for s in ("", "_total", "_bucket", "_sum", "_count")}
    windows = {names.RULE_SLI_ERROR_RATIO + w for w in ("5m", "30m", "1h", "2h", "6h", "1d", "3d")}
    return suffixed | windows | {recorded(s) for s in RECORDED}


def test_every_series_name_comes_from_the_conventions(dashboards: dict[str, dict[str, Any]]) -> None:
    known = _metric_names()
    used = {m for d in dashboards.values() for q in queries(d)
            for m in re.findall(r"((?:\bversion:)?\bobserver[a-z0-9_:]*)", q.expr)}
    assert used and used <= known, sorted(used - known)
    assert not any("vllm:" in q.expr or "DCGM_" in q.expr for d in dashboards.values() for q in queries(d))


@pytest.mark.skipif(shutil.which("promtool") is None, reason="Debian package prometheus (promtool) missing")
@pytest.mark.parametrize("values", [ALL, ONE], ids=["all-selected", "one-selected"])
def test_every_query_parses_with_promtool(dashboards: dict[str, dict[str, Any]], values: dict[str, str],
                                          tmp_path: Path) -> None:
    rules = [{"record": f"dashboard:check_{i}", "expr": substitute(q.expr, values)}
             for i, q in enumerate(q for d in dashboards.values() for q in queries(d))]
    assert len(rules) > 60
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    res = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{len(rules)} rules found" in res.stdout


def test_promtool_check_rejects_a_broken_query(tmp_path: Path) -> None:
    # The parse check above must be able to fail: a typo in a query is a promtool error.
    if shutil.which("promtool") is None:
        pytest.skip("promtool missing")
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [
        {"record": "x:y", "expr": substitute('sum by (version (rate(up[$__rate_interval]))', ALL)}]}]}))
    res = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode != 0


def test_variables_chain_and_default_to_all(dashboards: dict[str, dict[str, Any]]) -> None:
    v = variables(dashboards["fleet"])
    assert v["datasource"]["type"] == "datasource" and v["datasource"]["query"] == "prometheus"
    assert v["datasource"]["current"]["text"] == "Prometheus"
    for name in ("namespace", "model", "version"):
        assert v[name]["includeAll"] and v[name]["multi"] and v[name]["allValue"] == ".*"
        assert v[name]["datasource"]["uid"] == "${datasource}"
    assert '$namespace' in v["version"]["query"] and names.TARGET_UP in v["version"]["query"]


def test_configmaps_are_labelled_for_the_grafana_sidecar(rendered: dict[str, str]) -> None:
    for slug in ("fleet", "gpu", "canary", "quality"):
        cm = yaml.safe_load(rendered[f"deploy/grafana/{slug}-configmap.yaml"])
        assert cm["kind"] == "ConfigMap" and cm["apiVersion"] == "v1"
        assert cm["metadata"]["labels"] == {"grafana_dashboard": "1"}
        assert cm["metadata"]["annotations"] == {"grafana_folder": "Observer"}
        assert cm["metadata"]["namespace"] == "monitoring"
        (key, text), = cm["data"].items()
        assert key == f"observer-{slug}.json" and text == rendered[f"dashboards/{slug}.json"]


def _panel(d: dict[str, Any], title: str) -> dict[str, Any]:
    return next(p for p in d["panels"] if p["title"] == title)


def _steps(p: dict[str, Any]) -> list[Any]:
    return [s["value"] for s in p["fieldConfig"]["defaults"].get("thresholds", {}).get("steps", [])]


def _with(overrides: str) -> str:
    """The example config with top-level sections replaced by those in `overrides` (YAML)."""
    data = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    data.update(yaml.safe_load(overrides))
    return yaml.safe_dump(data)


def test_thresholds_and_runbooks_follow_the_config() -> None:
    extra = """
slo:
  runbook_base_url: https://example.org/rb
  latency: [{name: ttft, histogram: ttft, threshold_seconds: 1.0, objective: 0.9}]
  availability: [{name: avail, objective: 0.99, error_reasons: [error]}]
  quality: [{name: golden, objective: 0.8}]
  leading: {kv_cache_usage: 0.8, queue_depth_per_replica: 4}
canary: {pass_score: 90, marginal_score: 60}
dashboards: {uid_prefix: team-, datasource_name: Mimir, configmap_namespace: grafana, refresh: 1m}
"""
    out = render(parse_config(_with(extra), environ={}))
    fleet = json.loads(out["dashboards/fleet.json"])
    assert fleet["uid"] == "team-fleet" and fleet["refresh"] == "1m"
    assert _steps(_panel(fleet, "Time to first token")) == [None, 1.0]
    assert _steps(_panel(fleet, "KV-cache usage")) == [None, 0.8]
    assert _steps(_panel(fleet, "Queue depth per replica")) == [None, 4]
    assert _steps(_panel(fleet, "Errors and aborts")) == [None, pytest.approx(0.01)]
    assert _steps(_panel(fleet, "Inter-token latency")) == []  # no SLO on it: no line, description says so
    assert "No latency SLO" in _panel(fleet, "Inter-token latency")["description"]
    assert [link["url"] for link in _panel(fleet, "Time to first token")["links"]] == [
        "https://example.org/rb/slo-latency.md"]
    canary = json.loads(out["dashboards/canary.json"])
    assert _steps(_panel(canary, "Score")) == [None, 60, 90]
    quality = json.loads(out["dashboards/quality.json"])
    assert _steps(_panel(quality, "Golden-set pass rate")) == [None, 0.8]
    cm = yaml.safe_load(out["deploy/grafana/fleet-configmap.yaml"])
    assert cm["metadata"]["namespace"] == "grafana" and "team-fleet.json" in cm["data"]
    assert variables(fleet)["datasource"]["current"]["text"] == "Mimir"


def test_every_runbook_link_is_a_page_the_alert_renderer_links(dashboards: dict[str, dict[str, Any]]) -> None:
    config = load_config(CONFIG)
    pages = {r.runbook for g in rule_groups(config) for r in g.rules if isinstance(r, Alert)}
    base = config.slo.runbook_base_url.rstrip("/")
    links = [link["url"] for d in dashboards.values() for p in d["panels"] for link in p.get("links", [])]
    assert len(links) >= 10
    for url in links:
        assert url.startswith(base + "/") and url.endswith(".md")
        assert url[len(base) + 1:-3] in pages
    committed = ROOT / "runbooks"
    if any(committed.glob("*.md")):  # once the alert area commits its pages, every link must resolve
        assert not [u for u in links if not (committed / u.rsplit("/", 1)[1]).exists()]


def test_disabled_renders_nothing() -> None:
    config = parse_config(_with("dashboards: {enabled: false}"), environ={})
    assert render(config) == {}


@pytest.mark.parametrize(("section", "message"), [
    ("{uid_prefix: 'bad prefix!'}", "uid_prefix"),
    ("{refresh: soon}", "refresh"),
    ("{configmap_labels: {'bad key!': '1'}}", "label key"),
    ("{colour: blue}", "unknown key 'colour'"),
], ids=["uid", "refresh", "label", "unknown-key"])
def test_bad_dashboards_config_is_refused_with_the_key(section: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        parse_config(f"dashboards: {section}\n", environ={})
    assert "dashboards" in str(err.value)


def test_the_docs_config_example_is_valid_and_documents_the_defaults() -> None:
    doc = (ROOT / "docs" / "dashboards.md").read_text(encoding="utf-8")
    block = doc.split("## Configuration", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    config = parse_config(block, environ={})
    assert config.dashboards == parse_config("{}", environ={}).dashboards
