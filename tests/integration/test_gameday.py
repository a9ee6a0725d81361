"""The short game day: simulator → observer → real Prometheus → generated Argo queries and web verdict."""

from __future__ import annotations

import shutil

import pytest

from observer_dev.gameday import SCENARIOS, run_gameday

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs the prometheus binary")]


def test_short_gameday_every_scenario_matches() -> None:
    report = run_gameday(short=True, seed=7)
    names = [r.scenario for r in report.rows]
    assert names == [s.name for s in SCENARIOS if s.needs != "drift"]
    for row in report.rows:
        assert row.ok, f"{row.scenario}: {row.detail} (verdicts {row.verdicts}, prometheus {row.prometheus})"
    by_name = {r.scenario: r for r in report.rows}
    assert by_name["healthy"].web_gate == "Successful"
    assert by_name["slow"].prometheus["latency"] == "Failed"
    assert by_name["idle"].verdicts and set(by_name["idle"].verdicts) == {"nodata"}
    assert "pass" not in by_name["restart"].verdicts
    # Issue 18 items 1-3: each blind spot is caught soon after the change and never before it; the observed
    # template change within one look (one fingerprint interval), the scrape-based ones within a few: the slow
    # replica's median moves once most of its window is slow (the third look after two healthy rounds), and a
    # scrape on a busy CI machine can time out and skip a cycle.
    for name in ("template-rollback", "slow-replica", "shed", "gpu-ecc"):
        row = by_name[name]
        assert row.verdicts[:2] == ["quiet", "quiet"] and row.verdicts[-1] == "alert", (name, row.verdicts)
        looks = [int(v.split("look ")[1].split()[0]) for v in row.prometheus.values()]
        assert looks and max(looks) <= (1 if name == "template-rollback" else 5), (name, row.prometheus)
