"""Generated alert rules: committed files match the config, promtool checks and runs their unit tests,
the PrometheusRule validates strictly against the CRD, and every runbook_url resolves to a runbook."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from observer import conventions as names
from observer.config import load_config, parse_config
from observer.config.spec import ObserverConfig
from observer.render import alerts
from observer.render.writer import write_files
from tests.support.reference import PROMETHEUS_RULE_CRD, reference

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "deploy" / "observer.yaml"
RUNBOOKS = ROOT / "runbooks"
SECTIONS = ("Meaning", "Impact", "Diagnosis", "Mitigation")

# Every optional rule switched on: a retired version, a quality SLO, drift and canary areas, engine spans.
FULL = """
fleet:
  versions:
    - {name: stable, role: stable, vllm: [http://127.0.0.1:1/metrics]}
    - {name: canary, role: canary, vllm: [http://127.0.0.1:2/metrics]}
    - {name: old, retired: true, vllm: [http://127.0.0.1:3/metrics]}
slo:
  latency:
    - {name: e2e-latency, histogram: e2e, threshold_seconds: 2.0, objective: 0.99, versions: [canary]}
    - {name: client-ttft, histogram: ttft, source: client, threshold_seconds: 2.5, objective: 0.95, versions: [stable]}
  quality: [{name: golden-quality, objective: 0.9, golden_set: smoke}]
  live_checks:
    - {name: live-refusals, check: refusal, objective: 0.98, labels: {team: quality}}
    - {name: live-json, check: invalid_json, objective: 0.99, fast_burn_severity: page}
  client_availability: [{name: client-availability, objective: 0.999, versions: [canary]}]
  alert_labels: {team: ml-platform, owner: sre}
quality:
  judge: {url: "http://127.0.0.1:1/v1", model: judge}
  reliability: {anchors_path: evals/anchors.jsonl, kappa_floor: 0.6}
sampling:
  engine_spans: {enabled: true}
"""

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="Debian package prometheus (promtool) not installed")


def promtool(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def deploy_config() -> ObserverConfig:
    return load_config(CONFIG, environ={})


@pytest.fixture(scope="module")
def full_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("full")
    write_files(alerts.render(parse_config(FULL, environ={})), root=root)
    return root


def test_committed_files_equal_what_the_config_generates(deploy_config: ObserverConfig) -> None:
    stale = write_files(alerts.render(deploy_config), root=ROOT, check=True).changed
    assert not stale, f"run `observer render alerts --config deploy/observer.yaml`; differing: {stale}"


@needs_promtool
@pytest.mark.parametrize("where", ["committed", "full"])
def test_promtool_check_rules_is_clean(where: str, full_dir: Path) -> None:
    root = ROOT if where == "committed" else full_dir
    result = promtool("check", "rules", alerts.RULES_FILE, cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"SUCCESS: \d+ rules found", result.stdout)
    assert "lint" not in (result.stdout + result.stderr).lower(), result.stdout + result.stderr


def _test_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in (root / "alerts").glob("*.test*.yaml"))


@needs_promtool
@pytest.mark.parametrize("where", ["committed", "full"])
def test_promtool_unit_tests_pass(where: str, full_dir: Path) -> None:
    root = ROOT if where == "committed" else full_dir
    files = _test_files(root)
    assert files, "no generated promtool test files"
    result = promtool("test", "rules", *files, cwd=root, timeout=600)  # the full set: ~2 min on 2 busy cores
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def _cases(root: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for f in _test_files(root):
        for case in yaml.safe_load((root / f).read_text())["tests"]:
            out[case["name"]] = case
    return out


def _fired(case: dict[str, Any], alertname: str) -> list[dict[str, Any]]:
    return next(t["exp_alerts"] for t in case["alert_rule_test"] if t["alertname"] == alertname)


@pytest.mark.parametrize(("slo", "scenario", "ratio", "page", "ticket"), [
    ("availability", "high", "5.0000%", True, True),
    ("availability", "mid", "0.5000%", False, True),
    ("availability", "low", "0.0500%", False, False),
    ("ttft-latency", "high", "86.0000%", True, True),
    ("ttft-latency", "mid", "25.0000%", False, True),
    ("ttft-latency", "low", "2.5000%", False, False),
    ("golden-quality", "high", "80.0000%", True, True),
    ("golden-quality", "mid", "50.0000%", False, True),
    ("golden-quality", "low", "5.0000%", False, False),
], ids=lambda x: str(x))
def test_generated_scenarios_encode_the_burn_rate_claims(slo: str, scenario: str, ratio: str, page: bool,
                                                         ticket: bool) -> None:
    """5% errors for an hour pages, 0.5% only tickets, 0.05% is quiet; the latency SLO likewise."""
    name = f"{names.RULE_GROUP_SLO}{slo}: {slo} stable: {ratio} bad for 60m ({scenario})"
    case = _cases(ROOT)[name]
    assert bool(_fired(case, names.ALERT_BURN_PAGE)) is page
    assert bool(_fired(case, names.ALERT_BURN_TICKET)) is ticket
    assert case["alert_rule_test"][0]["eval_time"] == "1h"


def test_generated_tests_cover_every_absent_guard_and_every_alert(full_dir: Path) -> None:
    cases = _cases(full_dir)
    removed = [n for n in cases if n.startswith(names.RULE_GROUP_ABSENT) and n.endswith("removed")]
    assert len(removed) == 7  # one per SLO: e2e and client TTFT buckets, requests, golden items, two live
    # checks, the proxy's requests
    le_case = next(cases[n] for n in removed if "e2e-latency" in n)
    (only,) = _fired(le_case, names.ALERT_SLI_ABSENT)
    assert only["exp_labels"]["le"] == "2.0" and only["exp_labels"]["version"] == "canary"
    tested = {t["alertname"] for c in cases.values() for t in c["alert_rule_test"] if t["exp_alerts"]}
    rules = yaml.safe_load((full_dir / alerts.RULES_FILE).read_text())
    defined = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    assert defined == tested, f"alerts never shown firing: {defined - tested}"


@needs_promtool
def test_promtool_tests_catch_a_broken_rule(tmp_path: Path, deploy_config: ObserverConfig) -> None:
    """The generated tests can fail: a wrong bucket edge and a wrong factor are both caught."""
    write_files(alerts.render(deploy_config), root=tmp_path)
    rules = tmp_path / alerts.RULES_FILE
    text = rules.read_text()
    assert 'le="2.5"' in text and "(14.4 * (1 - 0.999))" in text
    broken = text.replace('le="2.5"', 'le="2"')  # a threshold that is no bucket edge
    broken = broken.replace("(14.4 * (1 - 0.999))", "(144 * (1 - 0.999))").replace("(6 * (1 - 0.999))",
                                                                                 "(60 * (1 - 0.999))")
    rules.write_text(broken)
    # Only the burn-rate scenarios of the two broken SLOs: the other cases would pass and cost ~2 minutes.
    tests = tmp_path / alerts.TESTS_FILE
    doc = yaml.safe_load(tests.read_text())
    doc["tests"] = [c for c in doc["tests"] if "ttft-latency" in c["name"] or "availability" in c["name"]]
    assert doc["tests"]
    tests.write_text(yaml.safe_dump(doc, sort_keys=False))
    result = promtool("test", "rules", alerts.TESTS_FILE, cwd=tmp_path)
    assert result.returncode != 0
    out = result.stdout + result.stderr
    assert "ttft-latency stable: 86.0000% bad" in out and "availability stable: 5.0000% bad" in out


def strict(schema: Any) -> Any:
    """A copy of an OpenAPI schema that refuses unknown keys wherever it lists properties."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


@pytest.fixture(scope="module")
def crd_validator() -> jsonschema.Draft7Validator:
    crd = yaml.safe_load(reference(PROMETHEUS_RULE_CRD).read_text())
    schema = strict(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    # metadata is a bare object in the CRD: hold it to what the API server accepts for our fields.
    schema["properties"]["metadata"] = {
        "type": "object", "additionalProperties": False, "required": ["name"],
        "properties": {"name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"},
                       "namespace": {"type": "string"},
                       "labels": {"type": "object", "additionalProperties": {"type": "string"}}}}
    schema["required"] = ["apiVersion", "kind", "metadata", "spec"]
    return jsonschema.Draft7Validator(schema)


def test_prometheusrule_validates_strictly_against_the_crd(crd_validator: jsonschema.Draft7Validator,
                                                           full_dir: Path) -> None:
    for root in (ROOT, full_dir):
        cr = yaml.safe_load((root / alerts.PROMETHEUS_RULE_FILE).read_text())
        errors = [e.message for e in crd_validator.iter_errors(cr)]
        assert not errors, errors
        assert cr["apiVersion"] == "monitoring.coreos.com/v1" and cr["kind"] == "PrometheusRule"
        plain = yaml.safe_load((root / alerts.RULES_FILE).read_text())
        assert cr["spec"]["groups"] == plain["groups"]


@pytest.mark.parametrize("mutation", ["typo-in-rule", "bad-for", "unknown-group-key", "bad-name"])
def test_crd_validation_rejects_broken_resources(crd_validator: jsonschema.Draft7Validator, mutation: str) -> None:
    cr = yaml.safe_load((ROOT / alerts.PROMETHEUS_RULE_FILE).read_text())
    bad = copy.deepcopy(cr)
    rule = next(r for g in bad["spec"]["groups"] for r in g["rules"] if "alert" in r)
    if mutation == "typo-in-rule":
        rule["anotations"] = rule.pop("annotations")
    elif mutation == "bad-for":
        rule["for"] = "1 hour"
    elif mutation == "unknown-group-key":
        bad["spec"]["groups"][0]["evaluation_interval"] = "1m"
    else:
        bad["metadata"]["name"] = "Observer_SLO"
    assert list(crd_validator.iter_errors(bad)), f"{mutation} was accepted"


def _runbook_urls(root: Path) -> dict[str, set[str]]:
    rules = yaml.safe_load((root / alerts.RULES_FILE).read_text())
    urls: dict[str, set[str]] = {}
    for g in rules["groups"]:
        for r in g["rules"]:
            if "alert" in r:
                urls.setdefault(r["annotations"]["runbook_url"], set()).add(r["alert"])
    return urls


def test_every_runbook_url_resolves_to_a_runbook_with_four_sections(deploy_config: ObserverConfig,
                                                                    full_dir: Path) -> None:
    base = deploy_config.slo.runbook_base_url.rstrip("/") + "/"
    linked: set[str] = set()
    for root in (ROOT, full_dir):
        for url, alert_names in _runbook_urls(root).items():
            assert url.startswith(base), url
            page = RUNBOOKS / url[len(base):]
            assert page.is_file(), f"{url} → missing {page.relative_to(ROOT)}"
            linked.add(page.name)
            text = page.read_text(encoding="utf-8")
            headings = re.findall(r"^## (.+)$", text, flags=re.M)
            assert headings[:4] == list(SECTIONS), f"{page.name}: sections {headings}"
            assert "```promql" in text, f"{page.name}: no PromQL"
            assert re.search(r"Open first: .*\*\*.+ → .+\*\*", text), f"{page.name}: no dashboard panel to open"
            for name in alert_names:
                assert name in text, f"{page.name} does not name {name}"
    orphans = {p.name for p in RUNBOOKS.glob("*.md")} - linked
    assert not orphans, f"runbooks no alert links to: {orphans}"


def test_runbook_panels_exist_in_the_generated_dashboards() -> None:
    """The panel a runbook says to open first is a real panel of a generated dashboard."""
    import json

    panels: dict[str, set[str]] = {}
    for f in (ROOT / "dashboards").glob("*.json"):
        d = json.loads(f.read_text(encoding="utf-8"))
        found: set[str] = set()
        stack = list(d.get("panels", []))
        while stack:
            p = stack.pop()
            found.add(str(p.get("title", "")))
            stack.extend(p.get("panels", []))
        panels[str(d["title"]).split(" / ")[-1]] = found
    assert panels, "no generated dashboards in dashboards/"
    for page in sorted(RUNBOOKS.glob("*.md")):
        m = re.search(r"Open first: [^*]*\*\*(.+?) → (.+?)\*\*", page.read_text(encoding="utf-8"))
        assert m, page.name
        dashboard, panel = m.groups()
        assert dashboard in panels, f"{page.name}: no dashboard {dashboard!r} (have {sorted(panels)})"
        assert panel in panels[dashboard], f"{page.name}: no panel {panel!r} on {dashboard}"


def test_owner_labels_and_per_slo_severity(full_dir: Path) -> None:
    """#18 item 4: slo.alert_labels on every alert (an SLO's own labels over them), quality and live-check
    SLOs tickets on the fast tier unless fast_burn_severity says page, and the drift ticket."""
    rules = yaml.safe_load((full_dir / alerts.RULES_FILE).read_text())
    alerts_ = [r for g in rules["groups"] for r in g["rules"] if "alert" in r]
    assert alerts_ and all(r["labels"].get("team") and r["labels"]["owner"] == "sre" for r in alerts_)
    page = {r["labels"]["slo"]: r for r in alerts_ if r["alert"] == names.ALERT_BURN_PAGE}
    assert page["golden-quality"]["labels"]["severity"] == "ticket"
    assert page["live-refusals"]["labels"]["severity"] == "ticket"
    assert page["live-refusals"]["labels"]["team"] == "quality"  # the SLO's own label wins
    assert page["live-json"]["labels"]["severity"] == "page"
    assert page["e2e-latency"]["labels"]["severity"] == "page"
    assert 'observer_live_check_failures_total{check="refusal"' in next(
        r["expr"] for g in rules["groups"] for r in g["rules"]
        if r.get("record", "").endswith("5m") and r.get("labels", {}).get("slo") == "live-refusals")
    drift = next(r for r in alerts_ if r["alert"] == names.ALERT_DRIFT_DETECTED)
    assert drift["labels"]["severity"] == "ticket"
    # A missing SLI series routes as its SLO's fast burn: quality and live-check absence is a ticket, not a
    # 3 a.m. page; GPU faults and a blind target page.
    absent = {r["labels"]["slo"]: r["labels"]["severity"] for r in alerts_ if r["alert"] == names.ALERT_SLI_ABSENT}
    assert absent["golden-quality"] == absent["live-refusals"] == "ticket"
    assert absent["live-json"] == absent["e2e-latency"] == "page"
    by_name = {r["alert"]: r["labels"]["severity"] for r in alerts_}
    for name in (names.ALERT_GPU_XID, names.ALERT_GPU_MEMORY_ERRORS, names.ALERT_TARGET_DOWN):
        assert by_name[name] == "page", name


def test_severity_is_overridable_per_alert_and_an_unknown_name_is_refused() -> None:
    cfg = parse_config(FULL.replace("  alert_labels:", "  alert_severity: {ObserverGPUXidErrors: warning, "
                                                    "ObserverSLIAbsent: info}\n  alert_labels:"), environ={})
    rules = yaml.safe_load(alerts.render(cfg)[alerts.RULES_FILE])
    got = [(r["alert"], r["labels"]["severity"]) for g in rules["groups"] for r in g["rules"]
           if r.get("alert") in (names.ALERT_GPU_XID, names.ALERT_SLI_ABSENT)]
    assert got and {s for a, s in got if a == names.ALERT_GPU_XID} == {"warning"}
    assert {s for a, s in got if a == names.ALERT_SLI_ABSENT} == {"info"}
    with pytest.raises(ValueError, match="alert_severity names no generated alert: ObserverGPUXid "):
        parse_config("slo: {alert_severity: {ObserverGPUXid: page}}\n", environ={})


@pytest.mark.parametrize(("labels", "message"), [("{severity: x}", "set by the observer"),
                                                  ("{'bad-name': x}", "not a valid Prometheus label name")])
def test_alert_labels_are_checked(labels: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_config(f"slo: {{alert_labels: {labels}}}\n", environ={})


def test_every_runbook_has_a_command_block_an_on_call_engineer_can_paste() -> None:
    """#18 item 8: a kubectl / argo block in every runbook, and the TTFT runbook's branches."""
    for page in sorted(RUNBOOKS.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
        assert blocks and any("kubectl" in b for b in blocks), f"{page.name}: no kubectl block"
    latency = (RUNBOOKS / "slo-latency.md").read_text(encoding="utf-8")
    for branch in ("ObserverQueueDepthHigh", "maxReplicaCount", "Pending", "node pool", "Throttled time",
                   "escalate", "argo rollouts abort", "argo rollouts undo"):
        assert branch in latency, branch


def test_the_ttft_runbook_leads_to_the_alerts_that_explain_a_slow_ttft() -> None:
    latency = (RUNBOOKS / "slo-latency.md").read_text(encoding="utf-8")
    generated = {v for k, v in vars(names).items() if k.startswith("ALERT_") and isinstance(v, str)}
    explaining = (names.ALERT_QUEUE_DEPTH, names.ALERT_AUTOSCALER_CEILING, names.ALERT_PODS_NOT_ARRIVING,
                  names.ALERT_REPLICA_OUTLIER, names.ALERT_VERSION_ON_ONE_NODE, names.ALERT_PATH_TTFT)
    for alert in explaining:
        assert f"`{alert}`" in latency, alert
    assert set(re.findall(r"`(Observer[A-Za-z]+)`", latency)) <= generated | {"ObserverSLOBurnRatePage",
                                                                              "ObserverSLOBurnRateTicket"}
    assert "within 15 minutes" in latency and "## Follow-up" in latency
    rollback = latency.split("*Roll back* (canary)", 1)[1].split("\n- ", 1)[0]
    for part in ("weights", "prompt", "engine config", "together"):
        assert part in rollback, part
