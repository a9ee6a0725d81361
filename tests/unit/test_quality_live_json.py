"""The `invalid_json` live check: scored only where JSON was expected, and read by the canary judge."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from observer.analyse.canary.judge import Outcome as Verdict
from observer.analyse.canary.sources import OwnSource
from observer.analyse.canary.verdict import judge
from observer.analyse.quality import rules
from observer.analyse.quality.live import DONE_MARKER, LiveScorer
from observer.analyse.quality.state import QualityState
from observer.analyse.signals import SignalStore
from observer.config.canary import CanarySpec
from observer.config.fleet import VersionSpec
from observer.config.quality import LIVE_CHECKS, LiveSpec
from observer.store.base import SampleRecord
from observer.store.sqlite import SqliteStore

FENCED_OK = '```json\n{"ok": true}\n```'
FENCED_CUT = '```json\n{"items": [1, 2'


@pytest.mark.parametrize(("prompt", "output", "passed"), [
    ("List the pods.", '{"pods": ["a", "b"]}', True),
    ("List the pods.", '  \n[1, 2, 3]', True),
    ("List the pods.", FENCED_OK, True),
    ("Answer in JSON.", '{"a": 1}', True),
    ("List the pods.", '{"pods": ["a", "b"', False),
    ("List the pods.", FENCED_CUT, False),
    ("List the pods.", '{"a": 1, "a": 2}', False),
    ("List the pods.", '[NaN]', False),
    ("Reply as json, please.", 'Sure! Here are the pods: a, b.', False),
    ("Give me a JSON object.", '   ', False),
    ("List the pods.", 'The pods are a and b.', None),
    ("List the pods.", 'Pods: {a, b}', None),
    ("Say nothing.", '', None),
], ids=["object", "array-after-whitespace", "fenced", "prompt-asks-valid", "cut-object", "cut-fence",
        "duplicate-key", "nan", "prompt-asks-prose", "prompt-asks-empty", "prose", "brace-later", "empty"])
def test_scored_only_when_json_expected(prompt: str, output: str, passed: bool | None) -> None:
    o = rules.valid_json_when_expected(prompt, output)
    assert o.check == "invalid_json" and o.passed is passed
    assert rules.json_expected(prompt, output) is (passed is not None)


def test_invalid_json_is_a_default_live_check_and_a_default_canary_metric() -> None:
    assert "invalid_json" in LIVE_CHECKS and "invalid_json" in LiveSpec().checks
    m = next(m for m in CanarySpec().metrics if m.name == "invalid_json")
    assert (m.kind, m.live_check, m.group, m.critical, m.advisory) == ("ratio", "invalid_json", "quality",
                                                                         False, False)


def _records(version: str, n: int, *, bad_every: int, ts: float) -> list[SampleRecord]:
    out = []
    for i in range(n):
        out.append(SampleRecord(version=version, prompt="Summarise the incident.", output=f"Incident {i} closed.",
                                ts=ts + i, finish_reason="stop"))
        body = f'{{"status": "ok", "n": {i}' + ("" if bad_every and i % bad_every == 0 else "}")
        out.append(SampleRecord(version=version, prompt="Return the status as JSON.", output=body,
                                ts=ts + i, finish_reason="stop"))
    return out


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    s = SqliteStore(tmp_path / "samples.db")
    s.add(_records("stable", 300, bad_every=0, ts=1000.0))
    s.add(_records("canary", 100, bad_every=3, ts=1000.0))
    yield s
    s.close()


async def test_live_scoring_counts_only_json_samples_and_the_canary_judge_fails_it(store: SqliteStore) -> None:
    state = QualityState(versions=["stable", "canary"], golden_sets=[], live_checks=list(LIVE_CHECKS))
    scorer = LiveScorer(store=store, state=state, spec=LiveSpec(batch_size=1000))
    assert await scorer.run_once(["stable", "canary"]) == 800
    # prose samples are undecided for invalid_json: half of each version's samples are counted
    assert state.live_check_totals("stable", "invalid_json", since=0) == (0, 300)
    assert state.live_check_totals("canary", "invalid_json", since=0) == (34, 100)
    assert state.live_check_totals("canary", "empty", since=0) == (0, 200)
    by_output = {s.output: s for s in store.samples("canary", limit=1000)}
    prose = by_output["Incident 1 closed."]
    assert prose.scores["rule:invalid_json"].passed is None and prose.scores[DONE_MARKER].passed is True
    cut = by_output['{"status": "ok", "n": 0']
    assert cut.scores["rule:invalid_json"].passed is False
    assert "invalid_json" in cut.scores[DONE_MARKER].reason

    spec = CanarySpec()
    signals = SignalStore([VersionSpec(name="stable", role="stable"), VersionSpec(name="canary", role="canary")],
                          window_seconds=60, stale_after_seconds=30)
    source = OwnSource(signals=signals, quality=state)
    arms = [await source.arm(v, spec.metrics, since=0, now=2000.0, with_drift=False) for v in ("canary", "stable")]
    assert arms[0].live_checks["invalid_json"] == (34, 100) and arms[1].live_checks["invalid_json"] == (0, 300)
    v = judge(spec, canary="canary", baseline="stable", canary_data=arms[0], baseline_data=arms[1],
              expected_share=None, now=2000.0)
    m = v.metric("invalid_json")
    assert m.outcome is Verdict.FAIL and (m.n_canary, m.n_baseline) == (100, 300)
    assert v.metric("empty_outputs").outcome is not Verdict.FAIL
