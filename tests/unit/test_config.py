"""The typed config: strict keys, line numbers in errors, environment overrides, `observer check-config`."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from observer.cli.main import app
from observer.config import load_config, parse_config
from observer.errors import ConfigError

REPO = Path(__file__).parent.parent.parent
GOOD = """\
fleet:
  versions:
    - name: stable
      role: stable
      vllm: [http://127.0.0.1:8000/metrics]
    - name: canary
      role: canary
      vllm: [http://127.0.0.1:8001/metrics]
scrape:
  interval_seconds: 10
"""


def test_example_config_loads() -> None:
    cfg = load_config(REPO / "deploy" / "observer.yaml")
    assert [v.name for v in cfg.fleet.versions] == ["stable", "canary"]


@pytest.mark.parametrize("text,path,line,needle", [
    (GOOD.replace("scrape:", "scrap:"), "scrap", 9, "unknown key 'scrap'"),
    (GOOD.replace("interval_seconds: 10", "interval_secs: 10"), "scrape.interval_secs", 10, "unknown key"),
    (GOOD.replace("http://127.0.0.1:8001/metrics", "not-a-url"), "fleet.versions.1.vllm", 8, "URL"),
    (GOOD.replace("name: canary", "name: stable"), "fleet.versions", 2, "duplicate version name 'stable'"),
    (GOOD.replace("name: canary", "name: Canary_1"), "fleet.versions.1.name", 6, "must match"),
    (GOOD.replace("interval_seconds: 10", "interval_seconds: -1"), "scrape.interval_seconds", 10, "greater than"),
    ("fleet: [\n", "", 2, "not valid YAML"),
    ("scrape: {}\nscrape: {}\n", "scrape", 2, "duplicate key"),
])
def test_errors_name_key_and_line(text: str, path: str, line: int, needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(text, source="obs.yaml", environ={})
    assert e.value.line == line, str(e.value)
    assert e.value.path == path and needle in str(e.value)
    assert str(e.value).startswith(f"obs.yaml:{line}")


def test_environment_overrides() -> None:
    cfg = parse_config(GOOD, environ={"OBSERVER__SCRAPE__INTERVAL_SECONDS": "30",
                                      "OBSERVER__SERVER__PORT": "9999", "UNRELATED": "x"})
    assert cfg.scrape.interval_seconds == 30 and cfg.server.port == 9999
    with pytest.raises(ConfigError, match="environment overrides applied: OBSERVER__SCRAPE__BOGUS"):
        parse_config(GOOD, environ={"OBSERVER__SCRAPE__BOGUS": "1"})


def test_timeout_must_fit_the_interval() -> None:
    with pytest.raises(ConfigError, match="timeout_seconds must not exceed"):
        parse_config("scrape: {interval_seconds: 1, timeout_seconds: 2}\n", environ={})


def test_check_config_command(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    ok = CliRunner().invoke(app, ["check-config", "--config", str(good)])
    assert ok.exit_code == 0 and "2 version(s)" in ok.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("scrape:", "scrap:"))
    result = CliRunner().invoke(app, ["check-config", "--config", str(bad)])
    assert result.exit_code == 2 and "bad.yaml:9" in result.output and "scrap" in result.output


@pytest.mark.parametrize("extra,needle", [
    ("slo:\n  latency:\n    - {name: t, histogram: ttft, threshold_seconds: 2.0, objective: 0.95}\n", "2.5"),
    ("slo:\n  availability:\n    - {name: a, objective: 0.99, versions: [canari]}\n", "canari"),
    ("canary:\n  pairs:\n    - {canary: canari, baseline: stable}\n", "canari"),
])
def test_cross_section_references_are_checked_at_start(tmp_path: Path, extra: str, needle: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD + extra)
    result = CliRunner().invoke(app, ["check-config", "--config", str(bad)])
    assert result.exit_code == 2, result.output
    assert needle in result.output
