"""The `slo` config section and its mapping to the internal alerting model."""

from __future__ import annotations

import pytest
import yaml
from prometheus_client import Histogram
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import CollectorRegistry

from observer.config import parse_config
from observer.conventions.vllm import format_le as le_text
from observer.errors import ConfigError
from observer.render.burnrate import PAGE, RECORDED_WINDOWS, TICKET, duration
from observer.render.objectives import SliKind, build_alerting

FLEET = """
fleet:
  versions:
    - {name: stable, role: stable, vllm: [http://127.0.0.1:1/metrics]}
    - {name: canary, role: canary, vllm: [http://127.0.0.1:2/metrics]}
    - {name: old, retired: true, vllm: [http://127.0.0.1:3/metrics]}
"""


def cfg(slo: str = "") -> object:
    return parse_config(FLEET + ("slo:\n" + slo if slo else ""), environ={})


def test_ttft_threshold_not_an_edge_is_refused_with_nearest_edges() -> None:
    with pytest.raises(ConfigError) as e:
        cfg("  latency:\n    - {threshold_seconds: 2.0}\n")
    msg = str(e.value)
    assert "slo.latency.0" in msg
    assert "2 is not a bucket edge of the ttft histogram" in msg
    assert "nearest edges: 1 or 2.5" in msg


@pytest.mark.parametrize(("histogram", "threshold"), [("e2e", 2.0), ("inter_token", 0.075), ("ttft", 640)],
                         ids=["e2e-has-2s", "itl-75ms", "ttft-640s"])
def test_thresholds_on_edges_are_accepted(histogram: str, threshold: float) -> None:
    c = cfg(f"  latency:\n    - {{histogram: {histogram}, threshold_seconds: {threshold}}}\n")
    assert c.slo.latency[0].threshold_seconds == threshold  # type: ignore[attr-defined]


def test_custom_bucket_edges_allow_another_threshold() -> None:
    c = cfg("  latency:\n    - {threshold_seconds: 2.0, bucket_edges: [0.5, 1.0, 2.0, 4.0]}\n")
    a = build_alerting(c)  # type: ignore[arg-type]
    assert a.objectives[0].le == "2.0"


def test_threshold_beyond_last_edge_names_the_last_edge() -> None:
    with pytest.raises(ConfigError, match="nearest edges: 2560"):
        cfg("  latency:\n    - {threshold_seconds: 5000}\n")


@pytest.mark.parametrize(("snippet", "needle"), [
    ("  availability:\n    - {objective: 1.0}\n", "slo.availability.0.objective"),
    ("  availability:\n    - {objective: 0.99, error_reason: [error]}\n", "unknown key 'error_reason'"),
    ("  availability:\n    - {error_reasons: [boom]}\n", "slo.availability.0.error_reasons.0"),
    ("  latency: [{name: a}]\n  availability: [{name: a}]\n", "duplicate SLO name 'a'"),
    ("  quality:\n    - {name: Bad_Name}\n", "must match"),
    ("  time_scale: 2\n", "slo.time_scale"),
], ids=["objective-1", "typo-key", "bad-reason", "dup-name", "bad-name", "time-scale-over-1"])
def test_invalid_slo_config_is_refused_precisely(snippet: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.").replace("(", r"\(")):
        cfg(snippet)


def test_unknown_version_in_an_slo_is_refused_at_render_time() -> None:
    c = cfg("  availability:\n    - {versions: [canary, nope]}\n")
    with pytest.raises(ConfigError) as e:
        build_alerting(c)  # type: ignore[arg-type]
    assert "slo.availability.0.versions" in str(e.value) and "'nope'" in str(e.value)


def test_defaults_cover_live_versions_only_and_skip_retired() -> None:
    a = build_alerting(cfg())  # type: ignore[arg-type]
    kinds = {o.kind for o in a.objectives}
    assert kinds == {SliKind.LATENCY, SliKind.AVAILABILITY}  # quality SLOs are opt-in
    for o in a.objectives:
        assert o.versions == ("stable", "canary")
    assert a.retired_versions == ("old",)
    assert a.objectives[0].le == "2.5" and a.objectives[0].budget == pytest.approx(0.05)


def test_quality_slo_needs_the_quality_area() -> None:
    text = FLEET + "quality: {enabled: false}\nslo:\n  quality: [{objective: 0.9}]\n"
    a = build_alerting(parse_config(text, environ={}))
    assert all(o.kind is not SliKind.QUALITY for o in a.objectives)


def test_le_text_matches_what_prometheus_client_and_vllm_expose() -> None:
    # vLLM exposes its histograms through prometheus_client; the observer re-exports the text as is.
    edges = (0.001, 0.25, 1.0, 2.5, 10.0, 2560.0)
    reg = CollectorRegistry()
    Histogram("h", "h", buckets=edges, registry=reg).observe(1)
    exposed = generate_latest(reg).decode()
    for edge in edges:
        assert f'h_bucket{{le="{le_text(edge)}"}}' in exposed


def test_burn_rate_factors_are_the_sre_workbook_ones_for_30_days() -> None:
    period = 30 * 86400
    assert [p.factor(period) for p in PAGE.pairs] == [14.4, 6.0]
    assert [p.factor(period) for p in TICKET.pairs] == [3.0, 1.0]
    assert [duration(w) for w in RECORDED_WINDOWS] == ["5m", "30m", "1h", "2h", "6h", "1d", "3d"]
    # A 7-day period keeps "2% of the budget in 1h" as the page condition.
    assert PAGE.pairs[0].factor(7 * 86400) == pytest.approx(3.36)


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (2.5, "2s500ms"), (5400, "1h30m"), (86400 * 3, "3d"),
                                               (60.0 / 60, "1s")])
def test_duration_text(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_time_scale_shrinks_windows_and_limits() -> None:
    a = build_alerting(cfg("  time_scale: 0.016666666666666666\n"))  # type: ignore[arg-type]
    assert a.limits.absent_for == pytest.approx(10.0)
    assert a.limits.golden_stale == pytest.approx(360.0)


def test_deploy_config_slo_section_is_valid() -> None:
    from pathlib import Path

    from observer.config import load_config

    c = load_config(Path(__file__).parents[2] / "deploy" / "observer.yaml", environ={})
    data = yaml.safe_load((Path(__file__).parents[2] / "deploy" / "observer.yaml").read_text())
    assert "slo" in data and c.slo.enabled


def test_docs_yaml_examples_are_valid_configs() -> None:
    import re
    from pathlib import Path

    from observer.render import alerts

    text = (Path(__file__).parents[2] / "docs" / "alerts.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
    assert blocks
    for block in blocks:
        c = parse_config(FLEET + block, environ={})
        # latency, availability, client availability, quality, goodput and a live check: one fast-burn alert each
        assert alerts.render(c)[alerts.RULES_FILE].count("alert: ObserverSLOBurnRatePage") == 6
