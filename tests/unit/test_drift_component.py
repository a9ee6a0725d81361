"""The drift component end to end in-process: SQLite store, pinned baseline, checks, gating, gauges, API."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest
from fastapi import FastAPI
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from observer import conventions as names
from observer.analyse.drift import baseline as bl
from observer.analyse.drift.state import DriftReport, DriftResult, DriftState, Persistence
from observer.analyse.embed import HashingEmbedder
from observer.config import parse_config
from observer.export import errors
from observer.store.base import SampleRecord
from observer.store.sqlite import SqliteStore
from observer.wiring.drift import DriftComponent, build
from observer.wiring.runtime import Context
from tests.support.drift_corpus import load_corpus
from tests.support.drift_replicas import NOW, Clock, records


def _config(tmp_path: Path, **drift: object) -> object:
    extra = "".join(f"\n  {k}: {v}" for k, v in drift.items())
    return parse_config(f"""
fleet:
  versions:
    - {{name: stable, role: stable, model: llama}}
    - {{name: canary, role: canary, model: llama}}
    - {{name: quiet, model: llama}}
    - {{name: other, model: mistral}}
server: {{auth_token: drift-reader}}
sampling:
  store: {{path: {tmp_path / 'samples.db'}}}
drift:
  baseline_dir: {tmp_path / 'baselines'}
  min_samples: 100
  permutations: 199
  feature_alpha: 0.05
  alpha: 0.01
  consecutive: 2
  embedder: {{cache_dir: null}}{extra}
""", environ={})


@pytest.fixture()
def setup(tmp_path: Path):  # type: ignore[no-untyped-def]
    cfg = _config(tmp_path)
    store = SqliteStore(tmp_path / "samples.db")
    clock = Clock()
    ctx = Context(config=cfg, http=httpx.AsyncClient(), clock=clock,  # type: ignore[arg-type]
                  auth_token="drift-reader")
    emb = HashingEmbedder(dim=128, max_cache_entries=5000)
    component = build(ctx, store=store)
    assert isinstance(component, DriftComponent)
    component.runner.embedder_factory = lambda: emb
    corpus = load_corpus()
    rng = np.random.default_rng(0)
    ref, _ = corpus.draw("none", 600, rng)
    store.add(records("stable", ref, NOW - 30 * 86400))
    repo = bl.BaselineRepo(cfg.drift.baseline_dir)  # type: ignore[attr-defined]
    b = bl.build(store.samples("stable", until=NOW - 86400), emb, model="llama", source_version="stable",
                 since=None, until=NOW - 86400, created_by="test", created_at=NOW, max_samples=5000,
                 slice_seconds=600.0)
    repo.save(b)
    repo.promote(b.hash, by="test", at=NOW)
    yield component, store, clock, corpus, rng, b, repo
    store.close()


def _metrics(component: DriftComponent) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    for c in component.collectors():
        registry.register(c)
    out = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_drifted_canary_flagged_after_two_windows_stable_stays_quiet(setup) -> None:  # type: ignore[no-untyped-def]
    component, store, clock, corpus, rng, b, _ = setup
    for window in range(2):
        clock.now = NOW + window * 3600
        _, stable_now = corpus.draw("none", 300, rng)
        _, canary_now = corpus.draw(corpus_scenario("language", 0.3), 300, rng)
        store.add(records("stable", stable_now, clock.now - 1800))
        store.add(records("canary", canary_now, clock.now - 1800))
        canary = component.runner.check_version("canary")
        stable = component.runner.check_version("stable")
        assert canary is not None and stable is not None
        assert canary.results["prompts"].shifted and canary.results["outputs"].shifted
        assert canary.results["prompts"].drift is (window == 1)  # persistence: 2 consecutive windows
        assert not stable.results["prompts"].shifted
        assert canary.baseline_hash == b.hash and canary.results["prompts"].n_baseline == 600
    report = component.state.report("canary")
    assert report is not None and "prompts" in report.moved()
    foreign = set(corpus.pools["foreign"])
    shown = [x.text for x in report.examples["prompts"]]
    assert len(shown) == 5 and sum(t in foreign for t in shown) >= 4  # on-call sees *what* drifted
    m = _metrics(component)
    assert m[(names.DRIFT_DETECTED, (("field", "prompts"), ("version", "canary")))] == 1.0
    assert m[(names.DRIFT_DETECTED, (("field", "prompts"), ("version", "stable")))] == 0.0
    assert m[(names.DRIFT_P_VALUE, (("field", "prompts"), ("version", "canary")))] == pytest.approx(1 / 200)
    assert m[(names.DRIFT_STREAK, (("field", "prompts"), ("version", "canary")))] == 2.0
    assert m[(names.DRIFT_SAMPLES, (("arm", "current"), ("field", "prompts"), ("version", "canary")))] == 300
    info = (names.DRIFT_BASELINE_INFO, (("baseline_hash", b.hash), ("embedder", "hashing-128"),
                                        ("model", "llama"), ("version", "canary")))
    assert m[info] == 1.0
    assert m[(names.DRIFT_LAST_CHECK, (("version", "canary"),))] == NOW + 3600


def corpus_scenario(name: str, fraction: float):  # type: ignore[no-untyped-def]
    from dataclasses import replace

    from tests.support.drift_corpus import SCENARIOS

    return replace(SCENARIOS[name], fraction=fraction)


def test_insufficient_data_and_no_baseline_are_statuses_not_verdicts(setup) -> None:  # type: ignore[no-untyped-def]
    component, store, _clock, corpus, rng, *_ = setup
    _, few = corpus.draw("none", 50, rng)
    store.add(records("quiet", few, NOW - 60))
    quiet = component.runner.check_version("quiet")
    assert quiet is not None and quiet.status == "insufficient_data"
    assert all(r.status == "insufficient_data" and not r.drift for r in quiet.results.values())
    assert "50 samples" in quiet.message
    other = component.runner.check_version("other")
    assert other is not None and other.status == "no_baseline" and "mistral" in other.message
    m = _metrics(component)
    assert m[(names.DRIFT_STATUS, (("field", "prompts"), ("status", "insufficient_data"), ("version", "quiet")))] == 1
    assert (names.DRIFT_P_VALUE, (("field", "prompts"), ("version", "quiet"))) not in m  # no NaN exported


def test_tampered_active_baseline_is_an_error_counted_not_a_comparison(setup) -> None:  # type: ignore[no-untyped-def]
    component, store, clock, corpus, rng, b, repo = setup
    _, now = corpus.draw("none", 200, rng)
    store.add(records("stable", now, NOW - 60))
    path = Path(repo.root) / f"{b.hash}.npz"
    clock.now = NOW - 10
    good = component.runner.check_version("stable")
    assert good is not None and good.status == "ok"
    path.write_bytes(path.read_bytes()[:-200] + b"\0" * 200)
    clock.now = NOW
    assert component.runner.check_version("stable") is None
    report = component.state.report("stable")
    assert report is not None and report.status == "error" and "damaged" in report.message
    assert all(r.status == "error" and not r.drift for r in report.results.values())
    m = _metrics(component)
    assert m[(names.DRIFT_CHECK_ERRORS + "_total", (("reason", "baseline"), ("version", "stable")))] == 1
    # The last-check time stays at the last good check, so the staleness alert fires if failures go on.
    assert m[(names.DRIFT_LAST_CHECK, (("version", "stable"),))] == NOW - 10
    assert (names.DRIFT_P_VALUE, (("field", "prompts"), ("version", "stable"))) not in m


def test_missing_store_is_counted(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    ctx = Context(config=cfg, http=httpx.AsyncClient())  # type: ignore[arg-type]
    component = build(ctx, store=None)
    assert isinstance(component, DriftComponent)
    assert component.runner.check_version("stable") is None
    assert component.runner.errors[("stable", "no_store")] == 1


def test_disabled_drift_builds_nothing(tmp_path: Path) -> None:
    cfg = _config(tmp_path, enabled="false")
    assert build(Context(config=cfg, http=httpx.AsyncClient()), store=None) is None  # type: ignore[arg-type]


async def test_api_serves_the_latest_report(setup) -> None:  # type: ignore[no-untyped-def]
    component, store, _clock, corpus, rng, *_ = setup
    _, now = corpus.draw("none", 150, rng)
    store.add(records("stable", now, NOW - 60))
    await component.runner.run_once()  # every non-retired version, in a worker thread
    app = FastAPI()
    errors.install(app)  # the one module mapping observer errors to HTTP, as the service's app does
    for r in component.routers():
        app.include_router(r)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as anonymous:
        assert (await anonymous.get("/api/v1/drift")).status_code == 401  # reports quote sample texts
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t",
                                 headers={"Authorization": "Bearer drift-reader"}) as client:
        summary = (await client.get("/api/v1/drift")).json()
        assert set(summary) == {"stable", "canary", "quiet", "other"}
        body = (await client.get("/api/v1/drift/stable")).json()
        assert body["status"] == "ok" and body["results"]["prompts"]["n_current"] == 150
        assert (await client.get("/api/v1/drift/nope")).status_code == 404


def test_gating_resets_on_a_quiet_window_and_on_a_new_baseline() -> None:
    state = DriftState(persistence=Persistence(interval_seconds=900, window_seconds=3600, alpha=0.01,
                                               feature_alpha=0.01, fixed=2))

    def report(shifted: bool, baseline: str) -> DriftReport:
        r = DriftResult(field="prompts", statistic=1.0, p_value=0.001 if shifted else 0.5, drift=shifted,
                        shifted=shifted, n_current=10, n_baseline=10, method="mmd_rbf", status="ok")
        return DriftReport(version="v", model="m", checked_at=0.0, status="ok", baseline_hash=baseline,
                           results={"prompts": r})

    seq = [(True, "a"), (False, "a"), (True, "a"), (True, "b"), (True, "b"), (True, "b")]
    flags = [state.record(report(s, h)).results["prompts"].drift for s, h in seq]
    assert flags == [False, False, False, False, True, True]
    state.forget({"w"})
    assert state.latest("v") == {}


def test_windows_leave_golden_replays_out(tmp_path: Path) -> None:
    from observer.analyse.drift.check import select

    store = SqliteStore(tmp_path / "s.db")
    store.add([SampleRecord(version="v", prompt=f"p{i}", output="o", ts=100.0 + i, source=src)
               for i, src in enumerate(["proxy", "ingest", "golden", "proxy", "golden", "ingest"])])
    got = select(store, "v", since=None, until=None, limit=3, sources=["proxy", "ingest"])
    assert [s.prompt for s in got] == ["p5", "p3", "p1"]  # newest first, golden skipped, limit kept
    assert len(select(store, "v", since=101.0, until=105.0, limit=None, sources=["golden"])) == 2
    store.close()


def test_window_is_bounded_by_max_window_samples(tmp_path: Path) -> None:
    cfg = _config(tmp_path, max_window_samples=120)
    store = SqliteStore(tmp_path / "samples.db")
    ctx = Context(config=cfg, http=httpx.AsyncClient(), clock=lambda: NOW)  # type: ignore[arg-type]
    component = build(ctx, store=store)
    assert isinstance(component, DriftComponent)
    emb = HashingEmbedder(dim=32)
    component.runner.embedder_factory = lambda: emb
    corpus = load_corpus()
    ref, cur = corpus.draw("none", 400, np.random.default_rng(3))
    store.add(records("stable", ref, NOW - 86400))
    b = bl.build(store.samples("stable"), emb, model="llama", source_version="stable", since=None, until=None,
                 created_by="t", created_at=NOW, max_samples=5000, slice_seconds=600.0)
    repo = bl.BaselineRepo(cfg.drift.baseline_dir)  # type: ignore[attr-defined]
    repo.save(b)
    repo.promote(b.hash, by="t", at=NOW)
    store.add(records("stable", cur, NOW - 600))
    before = emb.misses + emb.hits
    report = component.runner.check_version("stable")
    assert report is not None and report.results["prompts"].n_current == 120
    assert emb.misses + emb.hits - before == 2 * 120  # only the newest 120 of the window were embedded
    store.close()


def test_config_refuses_a_window_that_can_never_be_tested(tmp_path: Path) -> None:
    from observer.errors import ConfigError

    with pytest.raises(ConfigError, match=r"min_samples \(100\) exceeds max_window_samples \(50\)"):
        _config(tmp_path, max_window_samples=50)


def test_the_embedder_is_not_built_without_something_to_compare(setup) -> None:  # type: ignore[no-untyped-def]
    """Issue #21: `serve` loaded the embedding model (~650 MB) at its first drift run with nothing to compare."""
    component, store, _clock, corpus, rng, *_ = setup
    built: list[str] = []
    emb = component.runner.embedder_factory

    def counting():  # type: ignore[no-untyped-def]
        built.append("embedder")
        return emb()

    component.runner.embedder_factory = counting
    component.runner.reset()
    _, few = corpus.draw("none", 50, rng)
    store.add(records("quiet", few, NOW - 60))
    assert component.runner.check_version("quiet").status == "insufficient_data"  # a baseline, too few samples
    assert component.runner.check_version("other").status == "no_baseline"
    assert built == []
    _, enough = corpus.draw("none", 150, rng)
    store.add(records("stable", enough, NOW - 60))
    assert component.runner.check_version("stable").status == "ok"
    assert built == ["embedder"]


def test_the_drift_gate_compares_the_canary_with_its_baseline_in_the_same_window(tmp_path: Path) -> None:
    """drift.compare_arms: the canary's texts against stable's of the same window, slice by slice, no pinned
    baseline needed; identical arms stay quiet, a canary answering in another language is shifted and, after two
    windows, drift — on `<field>:baseline`, which a canary metric of kind drift can gate on."""
    from observer.store.base import SampleRecord

    cfg = _config(tmp_path, compare_arms="true")
    store = SqliteStore(tmp_path / "samples.db")
    clock = Clock()
    component = build(Context(config=cfg, http=httpx.AsyncClient(), clock=clock,  # type: ignore[arg-type]
                              auth_token="drift-reader"), store=store)
    assert isinstance(component, DriftComponent)
    emb = HashingEmbedder(dim=128, max_cache_entries=20_000)
    component.runner.embedder_factory = lambda: emb
    corpus = load_corpus()
    rng = np.random.default_rng(5)

    def window(start: float, canary_scenario: object) -> None:
        # 40 one-minute slices; stable 15 texts and canary 5 texts in each
        for s in range(40):
            _, stable = corpus.draw("none", 15, rng)
            _, canary = corpus.draw(canary_scenario, 5, rng)  # type: ignore[arg-type]
            for version, texts in (("stable", stable), ("canary", canary)):
                store.add([SampleRecord(version=version, prompt=t, output=f"Reply: {t}", ts=start + s * 60 + i,
                                        model="llama", finish_reason="stop", latency_s=1.0)
                           for i, t in enumerate(texts)])

    clock.now = NOW
    window(NOW - 2400, "none")
    quiet = component.runner.check_version("canary")
    assert quiet is not None and quiet.status == "no_baseline"  # no pinned baseline: the gate runs all the same
    gate = quiet.results["outputs:baseline"]
    assert gate.status == "ok" and not gate.shifted and gate.method == "slice_signflip", gate
    assert gate.n_current == 200 and gate.n_baseline == 600
    assert "prompts:baseline" not in (component.runner.check_version("stable") or quiet).results  # stable: none
    for w in range(2):
        clock.now = NOW + 3600 * (w + 1)
        window(clock.now - 2400, corpus_scenario("language", 0.5))
        shifted = component.runner.check_version("canary")
        assert shifted is not None
        assert shifted.results["prompts:baseline"].shifted, shifted.results["prompts:baseline"]
        assert shifted.results["prompts:baseline"].drift is (w == 1)
    m = _metrics(component)
    assert m[(names.DRIFT_DETECTED, (("field", "prompts:baseline"), ("version", "canary")))] == 1.0
    store.close()
