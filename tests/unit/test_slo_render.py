"""Alert rule rendering: rule structure, annotation templates, the file writer and `observer render`."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from observer import conventions as names
from observer.cli.main import app
from observer.config import parse_config
from observer.config.spec import ObserverConfig
from observer.errors import ObserverError
from observer.render import alerts
from observer.render.rulemodel import Alert, expand
from observer.render.writer import HEADER_TEXT, with_header, write_files

CONFIG = """
fleet:
  versions:
    - {name: stable, role: stable, vllm: [http://127.0.0.1:1/metrics]}
    - {name: canary, role: canary, vllm: [http://127.0.0.1:2/metrics]}
    - {name: old, retired: true, vllm: [http://127.0.0.1:3/metrics]}
slo:
  quality: [{name: golden-quality, objective: 0.9}]
"""


@pytest.fixture
def config() -> ObserverConfig:
    return parse_config(CONFIG, environ={})


def all_alerts(config: ObserverConfig) -> list[Alert]:
    return [r for g in alerts.rule_groups(config) for r in g.rules if isinstance(r, Alert)]


def test_every_alert_has_severity_summary_description_with_value_and_runbook(config: ObserverConfig) -> None:
    rules = yaml.safe_load(alerts.render(config)[alerts.RULES_FILE])
    seen = 0
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "alert" not in rule:
                continue
            seen += 1
            assert rule["labels"]["severity"] in {"page", "ticket", "warning"}, rule["alert"]
            ann = rule["annotations"]
            assert ann["summary"] and "$value" in ann["description"], rule["alert"]
            assert re.fullmatch(r"https://.+/runbooks/[a-z0-9-]+\.md", ann["runbook_url"]), ann["runbook_url"]
    assert seen >= 20


def test_burn_rate_alerts_use_the_recipe_windows_and_factors(config: ObserverConfig) -> None:
    page = next(a for a in all_alerts(config) if a.name == names.ALERT_BURN_PAGE and
                dict(a.labels)[names.SLO] == "availability")
    compact = " ".join(page.expr.split())
    assert 'observer_slo:sli_error:ratio_rate1h{slo="availability"} > (14.4 * (1 - 0.999))' in compact
    assert 'observer_slo:sli_error:ratio_rate5m{slo="availability"} > (14.4 * (1 - 0.999))' in compact
    assert 'ratio_rate6h{slo="availability"} > (6 * (1 - 0.999))' in compact
    ticket = next(a for a in all_alerts(config) if a.name == names.ALERT_BURN_TICKET and
                  dict(a.labels)[names.SLO] == "availability")
    compact = " ".join(ticket.expr.split())
    assert "ratio_rate1d" in compact and "ratio_rate2h" in compact and "(3 * " in compact
    assert "ratio_rate3d" in compact and "ratio_rate6h" in compact and "(1 * " in compact


def test_every_sli_of_every_live_version_has_an_absent_guard(config: ObserverConfig) -> None:
    guards = {(dict(a.labels)[names.SLO], dict(a.labels)[names.VERSION]): a.expr
              for a in all_alerts(config) if a.name == names.ALERT_SLI_ABSENT}
    assert set(guards) == {(slo, v) for slo in ("ttft-latency", "availability", "golden-quality")
                           for v in ("stable", "canary")}
    assert guards[("ttft-latency", "canary")] == 'absent(observer_ttft_seconds_bucket{version="canary",le="2.5"})'
    assert guards[("availability", "stable")] == 'absent(observer_requests_total{version="stable"})'


def test_retired_versions_get_a_traffic_alert_and_no_slo(config: ObserverConfig) -> None:
    text = alerts.render(config)[alerts.RULES_FILE]
    retired = next(a for a in all_alerts(config) if a.name == names.ALERT_RETIRED_TRAFFIC)
    assert 'version=~"old"' in retired.expr
    slo_exprs = [a.expr for a in all_alerts(config) if a.name in (names.ALERT_SLI_ABSENT,)]
    assert all('"old"' not in e for e in slo_exprs)
    assert 'version=~"stable|canary"' in text


def test_rules_read_only_normalised_observer_series(config: ObserverConfig) -> None:
    text = alerts.render(config)[alerts.RULES_FILE]
    assert "vllm:" not in text and "vllm_" not in text


def test_time_scale_renders_short_windows_for_tests() -> None:
    c = parse_config(CONFIG + "  time_scale: 0.016666666666666666\n", environ={})
    rules = yaml.safe_load(alerts.render(c)[alerts.RULES_FILE])
    group = next(g for g in rules["groups"] if g["name"] == "observer-slo-availability")
    by_name = {r["record"]: r["expr"] for r in group["rules"] if "record" in r}
    # Recording names keep the nominal window; the range is scaled (1h → 1m, 5m → 5s).
    assert "[1m]" in by_name["observer_slo:sli_error:ratio_rate1h"]
    assert "[5s]" in by_name["observer_slo:sli_error:ratio_rate5m"]


def test_expand_renders_the_supported_template_subset() -> None:
    tpl = '{{ $labels.version }} at {{ $value | humanizePercentage }} ({{ printf "%.2f" $value }})'
    assert expand(tpl, {"version": "canary"}, value=0.05) == "canary at 5% (0.05)"
    assert expand("{{ $value | humanizePercentage }}", {}, value=0.123456) == "12.35%"
    with pytest.raises(ValueError, match="unsupported template"):
        expand("{{ $value | humanizeDuration }}", {}, value=1.0)


@pytest.mark.parametrize(("path", "first"), [("a/x.yaml", f"# {HEADER_TEXT}"), ("r.md", f"<!-- {HEADER_TEXT} -->"),
                                             ("d/x.json", "{}")], ids=["yaml", "markdown", "json-no-comments"])
def test_header_uses_the_format_comment_syntax(path: str, first: str) -> None:
    assert with_header(path, "{}").splitlines()[0] == first


def test_writer_check_mode_lists_differences_and_writes_nothing(tmp_path: Path) -> None:
    files = {"alerts/a.yaml": "x: 1\n", "deploy/b.yaml": "y: 2\n"}
    assert write_files(files, root=tmp_path, check=True).changed == ("alerts/a.yaml", "deploy/b.yaml")
    assert not (tmp_path / "alerts").exists()
    assert write_files(files, root=tmp_path).changed == ("alerts/a.yaml", "deploy/b.yaml")
    assert write_files(files, root=tmp_path, check=True).changed == ()
    (tmp_path / "deploy/b.yaml").write_text("hand edited\n")
    assert write_files(files, root=tmp_path, check=True).changed == ("deploy/b.yaml",)


def test_writer_refuses_paths_outside_the_root(tmp_path: Path) -> None:
    with pytest.raises(ObserverError, match="inside the root"):
        write_files({"../escape.yaml": "x"}, root=tmp_path)


def test_cli_render_then_check(tmp_path: Path) -> None:
    cfg = tmp_path / "observer.yaml"
    cfg.write_text(CONFIG)
    runner = CliRunner()
    args = ["render", "alerts", "--config", str(cfg), "--root", str(tmp_path)]
    result = runner.invoke(app, [*args, "--check"])
    assert result.exit_code == 1 and "alerts/observer-rules.yaml" in result.output
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "alerts/observer-rules.yaml").read_text().startswith(f"# {HEADER_TEXT}")
    assert (tmp_path / "deploy/prometheusrule.yaml").exists()
    assert runner.invoke(app, [*args, "--check"]).exit_code == 0
    cfg.write_text(CONFIG.replace("objective: 0.9", "objective: 0.8"))
    result = runner.invoke(app, [*args, "--check"])
    assert result.exit_code == 1 and "differs" in result.output


def test_cli_render_refuses_a_bad_config(tmp_path: Path) -> None:
    cfg = tmp_path / "observer.yaml"
    cfg.write_text(CONFIG + "  latency: [{threshold_seconds: 2.0}]\n")
    result = CliRunner().invoke(app, ["render", "alerts", "--config", str(cfg), "--root", str(tmp_path)])
    assert result.exit_code == 2 and "nearest edges: 1 or 2.5" in " ".join(result.output.split())


def test_burn_alerts_keep_firing_through_short_window_dips(config: ObserverConfig) -> None:
    rules = yaml.safe_load(alerts.render(config)[alerts.RULES_FILE])
    burn = [r for g in rules["groups"] for r in g["rules"] if r.get("alert", "").startswith("ObserverSLOBurnRate")]
    assert {(r["alert"], r["keep_firing_for"]) for r in burn} == {(names.ALERT_BURN_PAGE, "30m"),
                                                                   (names.ALERT_BURN_TICKET, "6h")}
    off = parse_config(CONFIG + "  keep_firing: false\n", environ={})
    text = alerts.render(off)[alerts.RULES_FILE]
    assert "keep_firing_for" not in text


def test_check_fails_loudly_when_a_renderer_cannot_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from observer.cli import render as cli_render

    monkeypatch.setitem(cli_render.MODULES, cli_render.Target.ARGO, "observer.render.no_such_module")
    cfg = tmp_path / "observer.yaml"
    cfg.write_text(CONFIG)
    result = CliRunner().invoke(app, ["render", "argo", "--check", "--config", str(cfg), "--root", str(tmp_path)])
    assert result.exit_code != 0, result.output
    assert "could not load the argo renderer" in " ".join(result.output.split())


def test_missing_render_extra_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_grafana(name: str, *args: object, **kwargs: object) -> object:
        if name.startswith("grafana_foundation_sdk"):
            raise ImportError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    for mod in [m for m in sys.modules if m.startswith(("observer.render.dashboards", "grafana_foundation_sdk"))]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setattr(builtins, "__import__", no_grafana)
    cfg = tmp_path / "observer.yaml"
    cfg.write_text(CONFIG)
    result = CliRunner().invoke(app, ["render", "dashboards", "--check", "--config", str(cfg), "--root", str(tmp_path)])
    assert result.exit_code != 0, result.output
    assert "observer[render]" in " ".join(result.output.split())


def test_two_renderers_writing_one_path_is_an_error(config: ObserverConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    from observer.cli import render as cli_render

    monkeypatch.setitem(cli_render.MODULES, cli_render.Target.ARGO, "observer.render.alerts")
    with pytest.raises(ObserverError, match="also written by another renderer"):
        cli_render.render_files(config, [cli_render.Target.ALERTS, cli_render.Target.ARGO])


FLEET_SLO = """
fleet:
  versions:
    - {name: stable, role: stable, vllm: [http://127.0.0.1:1/metrics]}
    - {name: canary, role: canary, vllm: [http://127.0.0.1:2/metrics]}
slo:
  quality: [{name: golden-quality, objective: 0.9}]
"""


def test_probe_slos_read_the_probes_series_and_keep_the_proxy_default() -> None:
    text = FLEET_SLO.replace("slo:\n", "slo:\n  client_availability: [{name: via-probe, source: probe}, "
                                    "{name: via-proxy}]\n  latency: [{name: probe-ttft, source: probe, "
                                    "threshold_seconds: 2.5}]\n")
    rules = alerts.render(parse_config(text, environ={}))[alerts.RULES_FILE]
    records = {r["labels"]["slo"]: r["expr"] for g in yaml.safe_load(rules)["groups"] for r in g["rules"]
               if "record" in r and r["record"].endswith("ratio_rate5m") and "slo" in r.get("labels", {})}
    assert names.PROBE_REQUESTS + "_total" in records["via-probe"] and names.PROXY_REQUESTS not in records["via-probe"]
    assert names.PROXY_REQUESTS + "_total" in records["via-proxy"]
    assert names.PROBE_TTFT + "_bucket" in records["probe-ttft"]
    with pytest.raises(ObserverError, match="probe's ttft histogram"):
        parse_config(FLEET_SLO.replace("slo:\n", "slo:\n  latency: [{name: x, source: probe, histogram: e2e, "
                                              "threshold_seconds: 2.5}]\n"), environ={})


def test_probe_targets_are_templated_and_unknown_fields_refused() -> None:
    from pydantic import ValidationError

    from observer.analyse.probe import target
    from observer.config.fleet import VersionSpec
    from observer.config.probe import ProbeSpec

    v = VersionSpec(name="llm-b2", role="canary", openai="http://10.0.0.1:8000/v1", group="llm")
    spec = ProbeSpec(enabled=True, url="https://gw.example/{group}/v1/", headers={"x-canary": "{role}",
                                                                                   "x-model": "{model}"})
    assert target(spec, v, "support") == ("https://gw.example/llm/v1/chat/completions",
                                          {"x-canary": "canary", "x-model": "support"})
    assert target(ProbeSpec(), v, "m")[0] == "http://10.0.0.1:8000/v1/chat/completions"  # the version's own URL
    assert target(ProbeSpec(), VersionSpec(name="x"), "m")[0] is None
    with pytest.raises(ValidationError, match=r"names pod"):
        ProbeSpec(url="https://gw/{pod}/v1")
    with pytest.raises(ValidationError, match="must not exceed"):
        ProbeSpec(interval_seconds=5, timeout_seconds=10)
