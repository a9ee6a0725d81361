"""The short game day: simulator → observer → real Prometheus → generated Argo queries and web verdict."""

from __future__ import annotations

import shutil
from typing import Any

import pytest

from observer_dev.gameday import SCENARIOS, Report
from observer_dev.gameday.runner import Kind, play

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs the prometheus binary")]


# 27 scenarios: 657 s for 26 on a slow CPU of this kind (the suite's 300 s is for one test, not a game day); 720 s
# timed out there at the 27th.
@pytest.mark.timeout(1200)
def test_short_gameday_every_scenario_matches() -> None:
    report = Report(rows=play(Kind.SINGLE, short=True, seed=7))
    names = [r.scenario for r in report.rows]
    assert names == [s.name for s in SCENARIOS if s.needs != "drift" and not s.pending_pods]
    for row in report.rows:
        assert row.ok, f"{row.scenario}: {row.detail} (verdicts per look {row.verdicts}; {row.readers()})"
    by_name = {r.scenario: r for r in report.rows}
    assert by_name["healthy"].web_gate == "Successful"
    assert by_name["slow"].prometheus["latency"] == "Failed"
    assert by_name["idle"].verdicts and set(by_name["idle"].verdicts) == {"nodata"}
    assert "pass" not in by_name["restart"].verdicts
    _check_failing_reports(report.rows)
    # Each blind spot is caught soon after the change and never before it; the observed template change within
    # one look (one fingerprint interval), the scrape-based ones within a few: the slow replica's median moves
    # once most of its window is slow (the third look after two healthy rounds), a scrape on a busy CI machine
    # can time out and skip a cycle, and the noisy neighbour's tenants fill a scaled 10-minute rate window.
    for name in ("template-rollback", "slow-replica", "shed", "gpu-ecc", "noisy-neighbour"):
        row = by_name[name]
        assert row.verdicts[:2] == ["quiet", "quiet"] and row.verdicts[-1] == "alert", (name, row.verdicts)
        looks = [int(v.split("look ")[1].split()[0]) for v in row.prometheus.values()]
        assert looks and max(looks) <= (1 if name == "template-rollback" else 5), (name, row.prometheus)
    # The neighbour's share alone, high from the first look, with nobody slowing: never a page.
    aa = by_name["noisy-neighbour-aa"]
    assert len(aa.verdicts) >= 16 and set(aa.verdicts) == {"quiet"}, aa.verdicts


def _check_failing_reports(rows: list[Any]) -> None:
    """Each failing scenario's report page names a failing metric (or, failed by canary.end, the policy) and, in
    Chromium, draws every plot with no console error (the page as the game day's observer served it)."""
    failing = [r for r in rows if r.expected == "fail"]
    assert failing
    for row in failing:
        assert 'class="badge verdict fail"' in row.report, (row.scenario, row.verdicts, row.readers())
        if row.scenario == "starved":  # no metric failed: the page names the policy that ended it, and its runbook
            assert "canary.end.then: fail" in row.report and "canary-undecided.md" in row.report, row.scenario
            continue
        assert '<strong class="failing-metric">' in row.report, row.scenario
    if shutil.which("chromium") is None:
        return
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update"])
        try:
            for row in failing:
                page = browser.new_page()
                errors: list[str] = []
                page.on("console", lambda m, e=errors: e.append(m.text) if m.type == "error" else None)
                page.set_content(row.report, wait_until="load")
                drawn = page.eval_on_selector_all("figure.plot img", "i => i.map(x => x.naturalWidth > 0)")
                missing = page.locator(".missing-plot").all_inner_texts()
                assert drawn and all(drawn), (row.scenario, drawn)
                # a plot may be missing only where its data are (e.g. no per-slice HTTP counters), said in words
                assert len(drawn) + len(missing) == 5, (row.scenario, missing)
                assert errors == [], (row.scenario, errors)
                page.close()
        finally:
            browser.close()
