"""End to end: a real Prometheus loads the generated rules, scrapes the observer, which scrapes the
simulated fleet; a faulted canary drives the availability page (error_rate raised live), then the
TTFT latency page (ttft_scale raised live) to firing, while the stable version stays quiet.

The rules are rendered with `slo.time_scale: 1/60` (test only): every window and `for` shrinks 60×,
so the 1h & 5m page pair becomes 1m & 5s and the alert fires within seconds of the fault.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from observer import conventions as names
from observer.config import parse_config
from observer.render import alerts
from observer.render.writer import write_files
from tests.support.observer_proc import run_observer
from tests.support.prom import Prometheus, run_prometheus
from tests.support.sim import config_yaml, fleet_dict, running_fleet

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("prometheus") is None, reason="Debian package prometheus missing")]

SCALE = 1 / 60


def page_alerts(prom: Prometheus, *, slo: str) -> dict[str, str]:
    """version → state of the page-tier burn alerts of `slo`."""
    return {a["labels"][names.VERSION]: a["state"] for a in prom.alerts()
            if a["labels"].get("alertname") == names.ALERT_BURN_PAGE and a["labels"].get(names.SLO) == slo}


def rule_health(prom: Prometheus) -> list[dict[str, Any]]:
    groups = httpx.get(f"{prom.url}/api/v1/rules", timeout=10.0).json()["data"]["groups"]
    return [r for g in groups for r in g["rules"]]


def ratio(prom: Prometheus, record: str, version: str) -> float | None:
    got = prom.query(f'{record}{{slo="availability",version="{version}"}}')
    return float(got[0]["value"][1]) if got else None


def test_faulted_canary_drives_the_page_alerts_to_firing(tmp_path: Path) -> None:
    data, _ = fleet_dict(("stable", "canary"), weights=[0.5, 0.5], interval_seconds=1.0, window_seconds=30.0)
    # The simulator aborts 0.5% of requests when healthy: a 99% objective (page at 14.4%) stays quiet.
    data["slo"] = {"time_scale": SCALE, "availability": [{"objective": 0.99}]}
    config = parse_config(config_yaml(data), source="test config", environ={})
    rendered = alerts.render(config)
    write_files(rendered, root=tmp_path)
    rules = tmp_path / alerts.RULES_FILE

    with running_fleet(config, seed=11, total_rps=40.0) as (fleet, _), \
            run_observer(config, areas=["scrape"]) as observer:
        observer.wait_ready()
        target = observer.url.removeprefix("http://")
        with run_prometheus([target], rule_files=[rules]) as prom:
            # Every rule loaded, and every rule evaluates against live data without error.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                loaded = rule_health(prom)
                seen = prom.query('sum(increase(observer_requests_total{version="canary"}[1m]))')
                if loaded and all(r.get("lastEvaluation", "").startswith("20") for r in loaded) and \
                        seen and float(seen[0]["value"][1]) > 200:
                    break
                time.sleep(0.25)
            loaded = rule_health(prom)
            rendered_count = rendered[alerts.RULES_FILE].count("- alert:") + \
                rendered[alerts.RULES_FILE].count("- record:")
            assert len(loaded) == rendered_count
            bad = [(r["name"], r.get("lastError")) for r in loaded if r["health"] != "ok"]
            assert not bad, bad

            # Healthy fleet: once the windows hold enough requests nothing pages. (Right after start a
            # window of a few requests with one abort can page; keep_firing_for then holds it 30s.)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                quiet = page_alerts(prom, slo="availability") == {}
                if quiet and (ratio(prom, "observer_slo:sli_error:ratio_rate1h", "canary") or 0.0) < 0.144:
                    break
                time.sleep(0.5)
            assert page_alerts(prom, slo="availability") == {}, prom.alerts()
            assert (ratio(prom, "observer_slo:sli_error:ratio_rate1h", "canary") or 0.0) < 0.144

            fleet.set_profile("canary", error_rate=0.4)
            deadline = time.monotonic() + 60
            states: dict[str, str] = {}
            while time.monotonic() < deadline:
                states = page_alerts(prom, slo="availability")
                if states.get("canary") == "firing":
                    break
                time.sleep(0.25)
            assert states.get("canary") == "firing", (states, ratio(prom, "observer_slo:sli_error:ratio_rate1h",
                                                                    "canary"))
            assert "stable" not in states
            fired = next(a for a in prom.alerts() if a["labels"].get("alertname") == names.ALERT_BURN_PAGE
                         and a["labels"][names.VERSION] == "canary")
            assert fired["labels"]["severity"] == "page"
            assert fired["annotations"]["runbook_url"].endswith("/slo-availability.md")
            assert "of requests finished with error " in fired["annotations"]["description"]  # aborts apart

            # The latency SLO reads the bucket at its threshold edge by exact `le` text: if the text the
            # observer exports differed from the rule's, this page could never fire.
            fleet.set_profile("canary", ttft_scale=100.0)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                states = page_alerts(prom, slo="ttft-latency")
                if states.get("canary") == "firing":
                    break
                time.sleep(0.25)
            assert states.get("canary") == "firing", states
            assert "stable" not in states
            absent = [a for a in prom.alerts() if a["labels"].get("alertname") == names.ALERT_SLI_ABSENT]
            assert absent == [], absent
