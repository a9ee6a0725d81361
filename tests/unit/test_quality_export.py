"""Quality state (contract 5) and its Prometheus export: never NaN, absent + zero count when no data."""

from __future__ import annotations

import subprocess
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from observer import conventions as names
from observer.analyse.quality.collector import QualityCollector
from observer.analyse.quality.golden import load_golden_set
from observer.analyse.quality.judge import JudgeStats
from observer.analyse.quality.model import Answer, GoldenRunResult, ItemResult, Outcome
from observer.analyse.quality.state import QualityState


def item(n: int, *, passed: bool | None, error: str | None = None, judge_error: bool = False) -> ItemResult:
    answer = Answer("x", "stop", 0.1 * (n + 1), 0.5 * (n + 1), error=error)
    if error:
        return ItemResult(f"i{n}", "factual", answer, ())
    if judge_error:
        return ItemResult(f"i{n}", "summary", answer, (Outcome("judge", None, None, "judge error", error=True),))
    return ItemResult(f"i{n}", "factual", answer, (Outcome("contains", passed, 1.0 if passed else 0.0, "r"),))


def run(version: str, items: list[ItemResult], *, started: float = 100.0, gs: str = "factual") -> GoldenRunResult:
    return GoldenRunResult(version, gs, "sha256:abc", started, started + 5, tuple(items))


class Clock:
    now = 10_000.0

    def __call__(self) -> float:
        return self.now


def scrape(state: QualityState, tmp_path: Path, *, judge: JudgeStats | None = None, clock: Clock | None = None
           ) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    (tmp_path / "factual.yaml").write_text("items:\n  - {id: a, prompt: q, reference: r}\n")
    gs = load_golden_set(tmp_path / "factual.yaml")
    registry = CollectorRegistry()
    registry.register(QualityCollector(state, golden_sets=[gs], judge_stats=judge,
                                       judge_model="judge-m" if judge else None,
                                       judge_prompt_version="judge-v1" if judge else None, live_window_s=3600,
                                       clock=clock or Clock()))
    text = generate_latest(registry).decode()
    assert "NaN" not in text and "Inf" not in text
    lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert lint.returncode == 0 and not lint.stdout.strip() and not lint.stderr.strip(), lint
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def key(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted(labels.items()))


def test_no_data_exports_zero_counts_and_no_ratio(tmp_path: Path) -> None:
    state = QualityState(versions=["stable", "canary"], golden_sets=["factual"], live_checks=["refusal"])
    m = scrape(state, tmp_path)
    assert m[key(names.GOLDEN_SCORED, version="canary", golden_set="factual")] == 0
    assert m[key(names.GOLDEN_ITEMS + "_total", version="canary", golden_set="factual")] == 0
    assert m[key(names.GOLDEN_TTFT + "_count", version="canary", golden_set="factual")] == 0
    assert key(names.GOLDEN_TTFT, version="canary", golden_set="factual", quantile="0.5") not in m
    assert m[key(names.LIVE_CHECKS + "_total", version="stable", check="refusal")] == 0
    assert not any(n in (names.GOLDEN_PASS_RATIO, names.GOLDEN_MEAN_SCORE, names.GOLDEN_LAST_RUN,
                         names.LIVE_CHECK_FAILURE_RATIO) for n, _ in m)
    assert m[key(names.GOLDEN_SET_INFO, golden_set="factual", set_version=load_golden_set(
        tmp_path / "factual.yaml").version, judge_model="", judge_prompt_version="")] == 1
    assert state.golden_totals("stable", since=0) == (0, 0)
    assert state.live_check_totals("stable", "refusal", since=0) == (0, 0)
    assert state.latest("stable") == {}


def test_completed_run_exports_ratio_score_counts_and_latency(tmp_path: Path) -> None:
    state = QualityState(versions=["stable", "canary"], golden_sets=["factual"], live_checks=[])
    state.record_golden(run("stable", [item(0, passed=True), item(1, passed=True), item(2, passed=False),
                                       item(3, passed=None, error="HTTP 500"), item(4, passed=None, judge_error=True)]))
    m = scrape(state, tmp_path)
    labels = {"version": "stable", "golden_set": "factual"}
    assert m[key(names.GOLDEN_PASS_RATIO, **labels)] == 2 / 3
    assert abs(m[key(names.GOLDEN_MEAN_SCORE, **labels)] - 2 / 3) < 1e-9
    assert m[key(names.GOLDEN_SCORED, **labels)] == 3
    assert m[key(names.GOLDEN_ITEMS + "_total", **labels)] == 3
    assert m[key(names.GOLDEN_ITEMS_PASSED + "_total", **labels)] == 2
    assert m[key(names.GOLDEN_JUDGE_ERRORS + "_total", **labels)] == 1
    assert m[key(names.GOLDEN_UNSCORED + "_total", reason="request_error", **labels)] == 1
    assert m[key(names.GOLDEN_UNSCORED + "_total", reason="judge_error", **labels)] == 1
    assert m[key(names.GOLDEN_LAST_RUN, **labels)] == 105.0
    assert m[key(names.GOLDEN_TTFT, quantile="0.5", **labels)] > 0
    p50, p99 = (m[key(names.GOLDEN_LATENCY, quantile=q, **labels)] for q in ("0.5", "0.99"))
    assert p99 >= p50 > 0
    assert m[key(names.GOLDEN_LATENCY + "_count", **labels)] == 4  # answered requests (one failed)
    assert m[key(names.GOLDEN_LATENCY + "_sum", **labels)] == sum(0.5 * (n + 1) for n in (0, 1, 2, 4))
    # the canary never ran: absent ratio, zero count
    assert key(names.GOLDEN_PASS_RATIO, version="canary", golden_set="factual") not in m
    assert m[key(names.GOLDEN_SCORED, version="canary", golden_set="factual")] == 0


def test_run_with_nothing_scored_keeps_the_previous_latest(tmp_path: Path) -> None:
    state = QualityState(versions=["stable"], golden_sets=["factual"], live_checks=[])
    state.record_golden(run("stable", [item(0, passed=True), item(1, passed=False)], started=100))
    state.record_golden(run("stable", [item(0, passed=None, error="refused"), item(1, passed=None, error="x")],
                            started=200))
    m = scrape(state, tmp_path)
    labels = {"version": "stable", "golden_set": "factual"}
    assert m[key(names.GOLDEN_PASS_RATIO, **labels)] == 0.5
    assert m[key(names.GOLDEN_LAST_RUN, **labels)] == 105.0
    assert m[key(names.GOLDEN_UNSCORED + "_total", reason="request_error", **labels)] == 2
    assert state.latest("stable")["factual"].started == 100


def test_golden_totals_since_and_by_set() -> None:
    state = QualityState(versions=["canary"], golden_sets=["factual", "json"], live_checks=[])
    state.record_golden(run("canary", [item(0, passed=True)], started=100))
    state.record_golden(run("canary", [item(0, passed=False), item(1, passed=True)], started=200))
    state.record_golden(run("canary", [item(0, passed=True)], started=300, gs="json"))
    assert state.golden_totals("canary", since=0) == (3, 4)
    assert state.golden_totals("canary", since=150) == (2, 3)
    assert state.golden_totals("canary", since=150, golden_set="factual") == (1, 2)
    assert state.golden_totals("canary", since=1000) == (0, 0)
    assert state.golden_totals("stable", since=0) == (0, 0)
    assert set(state.latest("canary")) == {"factual", "json"}


def test_live_totals_and_window_ratio(tmp_path: Path) -> None:
    clock = Clock()
    state = QualityState(versions=["stable"], golden_sets=[], live_checks=["refusal", "repetition"])
    state.record_live("stable", "refusal", [(clock.now - 7200, True), (clock.now - 10, True), (clock.now - 5, False),
                                            (clock.now - 1, False)])
    assert state.live_check_totals("stable", "refusal", since=0) == (2, 4)
    assert state.live_check_totals("stable", "refusal", since=clock.now - 3600) == (1, 3)
    m = scrape(state, tmp_path, clock=clock)
    assert m[key(names.LIVE_CHECKS + "_total", version="stable", check="refusal")] == 4
    assert m[key(names.LIVE_CHECK_FAILURES + "_total", version="stable", check="refusal")] == 2
    assert m[key(names.LIVE_CHECK_FAILURE_RATIO, version="stable", check="refusal")] == 1 / 3
    assert key(names.LIVE_CHECK_FAILURE_RATIO, version="stable", check="repetition") not in m
    assert m[key(names.LIVE_CHECKS + "_total", version="stable", check="repetition")] == 0


def test_judge_metrics(tmp_path: Path) -> None:
    stats = JudgeStats()
    state = QualityState(versions=["stable"], golden_sets=["factual"], live_checks=[])
    m = scrape(state, tmp_path, judge=stats)
    assert m[key(names.JUDGE_CALLS + "_total", outcome="ok")] == 0
    assert not any(n == names.JUDGE_LAST_SUCCESS for n, _ in m)
    stats.count("ok")
    stats.count("length")
    stats.last_success = 1234.0
    m = scrape(state, tmp_path, judge=stats)
    assert m[key(names.JUDGE_CALLS + "_total", outcome="ok")] == 1
    assert m[key(names.JUDGE_CALLS + "_total", outcome="length")] == 1
    assert m[key(names.JUDGE_LAST_SUCCESS)] == 1234.0
