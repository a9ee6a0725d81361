"""The canary report pages over simulated fleet state: what each page kind says, escaping, the token, and
the states that must never give a 500 or a blank plot (unknown pair, no verdict, nodata, a source down)."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from html import unescape
from pathlib import Path
from urllib.parse import parse_qs

import numpy as np
import pytest
from fastapi.testclient import TestClient

from observer.config import parse_config
from observer.export.report import pages
from tests.support import report_app as ra

PAIR = "/report/canary/m0-canary?baseline=m0-stable"
AUTH = {"Authorization": f"Bearer {ra.TOKEN}"}


def _client(**kw: object) -> TestClient:
    app, _, _ = ra.build(**kw)  # type: ignore[arg-type]
    return TestClient(app)


def _plots(html: str) -> list[str]:
    return [base64.b64decode(m).decode() for m in re.findall(r'<img src="data:image/svg\+xml;base64,([^"]+)"', html)]


def test_failing_pair_names_the_metric_and_draws_every_plot() -> None:
    r = _client().get(PAIR)
    assert r.status_code == 200
    assert "script-src" not in r.headers["content-security-policy"]  # default-src 'none': no script at all
    assert r.headers["content-security-policy"].startswith("default-src 'none'")
    html = r.text
    assert 'class="badge verdict fail"' in html and "critical metric failed: errors" in html
    assert '<strong class="failing-metric">errors</strong>' in html
    plots = _plots(html)
    assert len(plots) == 5  # ttft, itl, e2e histograms; slice evidence; error ratios
    assert all(p.startswith("<svg") and "<script" not in p for p in plots)
    assert "missing-plot" not in html
    # each plot draws both arms' series
    assert all("canary" in p and "baseline" in p for p in plots[:3])
    assert "runbooks/canary-failed.md#ratio" in html
    assert "kubectl argo rollouts abort m0-rollout -n llm-serving" in html
    assert "http://prometheus.example:9090/graph?g0.expr=" in html
    assert "http://grafana.example:3000/d/observer-canary?" in html
    assert "latest κ against the anchors: 0.620" in html


def test_without_the_token_no_sample_text() -> None:
    html = _client().get(PAIR).text
    assert 'id="no-text"' in html and "capital of France" not in html and "Paris." not in html
    assert 'action="/report/login"' in html


def test_hostile_sample_text_is_escaped() -> None:
    html = _client().get(PAIR, headers=AUTH).text
    assert "capital of France" in html
    assert "<script>alert" not in html and 'href="javascript:' not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in html


def test_wrong_token_shows_no_text() -> None:
    html = _client().get(PAIR, headers={"Authorization": "Bearer nope"}).text
    assert 'id="no-text"' in html and "capital of France" not in html


def test_login_sets_a_cookie_that_shows_text_and_never_redirects_away() -> None:
    c = _client()
    bad = c.post("/report/login", content=b"token=nope&next=/report", headers={
        "content-type": "application/x-www-form-urlencoded"}, follow_redirects=False)
    assert bad.status_code == 403 and pages.COOKIE not in bad.cookies
    r = c.post("/report/login", content=f"token={ra.TOKEN}&next=//evil.example/x".encode(),
               headers={"content-type": "application/x-www-form-urlencoded"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/report"
    assert "httponly" in r.headers["set-cookie"].lower() and "samesite=strict" in r.headers["set-cookie"].lower()
    assert "capital of France" in c.get(PAIR).text


def test_unknown_pair_is_a_404_listing_the_known_pairs() -> None:
    r = _client(pairs=2).get("/report/canary/<script>alert(1)<script>")
    assert r.status_code == 404
    assert "&lt;script&gt;alert(1)&lt;script&gt;" in r.text and "<script>alert" not in r.text
    assert r.text.count('href="/report/canary/m') == 2


def test_no_verdict_yet() -> None:
    r = _client(judge=False).get(PAIR)
    assert r.status_code == 200 and 'id="pending"' in r.text and "no verdict yet" in r.text
    index = _client(judge=False).get("/report").text
    assert "no verdict yet" in index


def test_source_down_says_so_and_draws_no_blank_plot() -> None:
    r = _client(down=True).get(PAIR)
    assert r.status_code == 200
    html = r.text
    assert 'class="badge verdict nodata"' in html
    assert "Prometheus at http://prometheus.example:9090 unreachable" in html
    assert _plots(html) == []
    assert html.count('class="small muted missing-plot"') == 5
    assert "nodata" in html


def test_healthy_canary_passes_with_nothing_to_do() -> None:
    html = _client(healthy=True).get(PAIR).text
    assert "Nothing: the canary passed this look." in html or 'class="badge verdict inconclusive"' in html
    assert "failing-metric" not in html


def test_index_lists_every_pair_with_its_verdict() -> None:
    html = _client(pairs=3).get("/report").text
    rows = re.findall(r'<a href="/report/canary/(m\d-canary)\?baseline=(m\d-stable)">', html)
    assert rows == [(f"m{i}-canary", f"m{i}-stable") for i in range(3)]
    assert html.count('class="badge fail"') == 3


def test_no_examples_without_a_store_but_the_token() -> None:
    config = parse_config(ra.config_text(1), environ={})
    from fastapi import FastAPI

    _, service, _ = ra.build()
    app = FastAPI()
    app.include_router(pages.router(config, service, token=ra.TOKEN, anonymous=False, examples=None,
                                    group_of=lambda n: None))
    html = TestClient(app).get(PAIR, headers=AUTH).text
    assert "No lost pairs or live-check failures" in html
    assert "No kubectl lines" in html


@pytest.mark.parametrize("canary, baseline, expected", [
    ("c", None, "http://observer.observability.svc:9464/report/canary/c"),
    ("a b/c", "x&y", "http://observer.observability.svc:9464/report/canary/a%20b%2Fc?baseline=x%26y"),
    ("{{ $labels.canary }}", "{{ $labels.baseline }}",
     "http://observer.observability.svc:9464/report/canary/{{ $labels.canary }}?baseline={{ $labels.baseline }}"),
])
def test_report_url(canary: str, baseline: str | None, expected: str) -> None:
    assert parse_config("{}", environ={}).canary.report_url(canary, baseline) == expected


LINKED = """
fleet:
  versions:
    - {name: stable, role: stable}
    - {name: canary, role: canary}
canary:
  report: {public_url: "https://observer.example"}
"""


def test_canary_alerts_link_to_the_pair_report() -> None:
    import yaml

    from observer.render import alerts

    files = alerts.render(parse_config(LINKED, environ={}))
    rules = {r["alert"]: r for g in yaml.safe_load(files[alerts.RULES_FILE])["groups"] for r in g["rules"]
             if "alert" in r}
    want = "https://observer.example/report/canary/{{ $labels.canary }}?baseline={{ $labels.baseline }}"
    for name in ("ObserverCanaryFailed", "ObserverCanaryVerdictStale"):
        assert rules[name]["annotations"]["report_url"] == want, name
        assert rules[name]["annotations"]["runbook_url"].endswith((".md",))
    assert rules["ObserverCanaryFailed"]["annotations"]["runbook_url"].endswith("/canary-failed.md")
    assert not [n for n, r in rules.items() if "report_url" in r["annotations"] and "canary" not in r["expr"]]


def test_argo_templates_and_verdict_json_carry_the_report() -> None:
    from observer.export import canary_api
    from observer.render import argo

    config = parse_config(LINKED, environ={})
    gate = argo.templates(config, cluster=False)[0]
    assert gate["metadata"]["annotations"][argo.REPORT_ANNOTATION] == (
        "https://observer.example/report/canary/{{args.canary}}?baseline={{args.baseline}}")
    _, service, _ = ra.build()
    from fastapi import FastAPI

    app = FastAPI()
    app.include_router(canary_api.router(service, report_url=service.spec.report_url))
    body = TestClient(app).get("/api/v1/canary/verdict", params={"canary": "m0-canary", "baseline": "m0-stable"}).json()
    assert body["verdict"] == "fail"
    assert body["report"] == "http://observer.observability.svc:9464/report/canary/m0-canary?baseline=m0-stable"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool (Debian prometheus)")
def test_query_links_are_valid_promql(tmp_path: Path) -> None:
    html = _client().get(PAIR).text
    links = re.findall(r'href="http://prometheus\.example:9090/graph\?([^"]+)"', html)
    exprs = [parse_qs(unescape(q))["g0.expr"][0] for q in links]
    assert len(exprs) == 7 and any("histogram_quantile(0.9" in e for e in exprs)
    rules = {"groups": [{"name": "links", "rules": [{"record": f"report:link{i}", "expr": e}
                                                    for i, e in enumerate(exprs)]}]}
    path = tmp_path / "links.yaml"
    path.write_text(json.dumps(rules))
    done = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_late_failure_says_from_which_slice_in_the_result_and_the_detail() -> None:
    from observer.analyse.canary.judge import ArmData, judge_metric
    from observer.config.canary import CanaryMetricSpec

    m = CanaryMetricSpec(name="refusals", kind="ratio", live_check="refusal")  # a t-test on slices: fresh starts

    def arm(bad: list[int]) -> ArmData:
        slices = tuple(ArmData(live_checks={"refusal": (x, 100)}) for x in bad)
        return ArmData(live_checks={"refusal": (sum(bad), 100 * len(bad))}, slices=slices)

    rng = np.random.default_rng(3)
    late = [int(x) for x in rng.binomial(100, 0.05, 30)] + [int(x) for x in rng.binomial(100, 0.4, 15)]
    r = judge_metric(m, arm(late), arm([int(x) for x in rng.binomial(100, 0.05, 45)]), alpha=0.01, power=0.8)
    assert str(r.outcome) == "fail" and r.worse_since is not None and r.worse_since > 0, r
    assert f"worse since slice {r.worse_since}" in r.detail
    healthy = judge_metric(m, arm([5] * 45), arm([5] * 45), alpha=0.01, power=0.8)
    assert healthy.worse_since is None
