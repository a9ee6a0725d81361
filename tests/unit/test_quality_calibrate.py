"""Judge calibration: agreement maths, the shipped anchor set, and `observer eval calibrate`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from observer.analyse.quality.calibrate import agreement, calibrate, load_labels
from observer.analyse.quality.judge import JudgeClient
from observer.analyse.quality.prompts import load_prompt, load_rubrics
from observer.cli.main import app
from observer.errors import ConfigError
from tests.support.judge_server import JudgeServer, Reply, run_judge_server

ROOT = Path(__file__).resolve().parents[2]
ANCHORS = ROOT / "evals" / "anchors.jsonl"


def test_agreement_known_values() -> None:
    pairs = [(True, True)] * 20 + [(True, False)] * 5 + [(False, True)] * 10 + [(False, False)] * 15 + [(True, None)]
    a = agreement(pairs)
    assert (a.tp, a.fn, a.fp, a.tn, a.errors, a.n) == (20, 5, 10, 15, 1, 50)
    assert a.tpr == 0.8 and a.tnr == 0.6 and a.accuracy == 0.7
    assert a.kappa == pytest.approx(0.4)


def test_agreement_degenerate_cases_are_none_not_nan() -> None:
    empty = agreement([])
    assert (empty.tpr, empty.tnr, empty.accuracy, empty.kappa) == (None, None, None, None)
    constant = agreement([(True, True)] * 5)  # both raters always "pass": chance agreement 1
    assert constant.kappa is None and constant.tpr == 1.0 and constant.tnr is None
    perfect = agreement([(True, True), (False, False)])
    assert perfect.kappa == 1.0
    inverse = agreement([(True, False), (False, True)])
    assert inverse.kappa == -1.0


def test_shipped_anchor_set() -> None:
    items = load_labels(ANCHORS)
    assert len(items) >= 60
    passes = sum(i.human_pass for i in items)
    assert 0.3 < passes / len(items) < 0.7  # balanced enough for TPR and TNR to mean something
    rubrics = load_rubrics(ROOT / "evals" / "rubrics")
    assert {i.rubric for i in items} <= set(rubrics)
    assert len({i.rubric for i in items}) >= 3


@pytest.mark.parametrize(("text", "line", "fragment"), [
    ('{"id": "a", "rubric": "r", "prompt": "p", "output": "o", "label": "maybe"}\n', 1, "label"),
    ('{"id": "a", "rubric": "r", "prompt": "p", "output": "o", "label": "pass"}\n{"id": "a", "rubric": "r", '
     '"prompt": "p", "output": "o", "label": "fail"}\n', 2, "duplicate id"),
    ('\n{"id": "a", "rubric": "r", "prompt": "p", "output": "o", "label": "pass", "extra": 1}\n', 2, "unknown key"),
    ('{"id": "a",\n', 1, "not valid JSON"),
])
def test_label_file_errors(tmp_path: Path, text: str, line: int, fragment: str) -> None:
    p = tmp_path / "labels.jsonl"
    p.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_labels(p)
    assert fragment in str(info.value) and info.value.line == line


@pytest.fixture()
def judge_server() -> Iterator[JudgeServer]:
    with run_judge_server() as s:
        yield s


async def test_calibrate_counts_judge_errors_beside_the_matrix(judge_server: JudgeServer) -> None:
    items = load_labels(ANCHORS)[:10]
    # The judge answers garbage on one anchor, twice (an unusable reply is asked once more): one error.
    assert all(items[0].output not in x.output for x in items[1:])

    def on_first(user: str) -> bool:
        return items[0].output in user

    judge_server.script(*[Reply(content="garbage", when=on_first)] * 2)
    async with httpx.AsyncClient() as http:
        judge = JudgeClient(http, base_url=judge_server.url, model="scripted", concurrency=1, max_retries=0,
                            prompt=load_prompt(ROOT / "evals" / "judge_prompt.yaml"))
        agree, judged = await calibrate(judge, load_rubrics(ROOT / "evals" / "rubrics"), items)
    assert agree.errors == 1 and agree.n == 9 and len(judged) == 10
    assert sum(1 for j in judged if j.error) == 1


def test_cli_calibrate_reports_agreement(judge_server: JudgeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    monkeypatch.chdir(ROOT)
    cfg = tmp_path / "observer.yaml"
    cfg.write_text(yaml.safe_dump({"quality": {"judge": {"url": judge_server.url, "model": "scripted",
                                                         "max_retries": 0}}}))
    result = CliRunner().invoke(app, ["eval", "calibrate", "--config", str(cfg), "--labels", str(ANCHORS)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "human pass" in out and "judge fail" in out
    m = re.search(r"items (\d+)\s+judged (\d+)\s+judge errors (\d+)\s+TPR ([\d.]+)%\s+TNR ([\d.]+)%", out)
    assert m, out
    n_items, judged, errors = int(m[1]), int(m[2]), int(m[3])
    assert n_items == len(load_labels(ANCHORS)) and judged + errors == n_items
    assert "Cohen's κ" in out
    # the scripted rule judge cannot read instructions, so it misses some human fails: TNR < 100%
    assert float(m[5]) < 100.0 and len(judge_server.requests) == n_items


def test_cli_calibrate_without_judge_fails_with_a_reason(tmp_path: Path) -> None:
    cfg = tmp_path / "observer.yaml"
    cfg.write_text("quality: {}\n")
    result = CliRunner().invoke(app, ["eval", "calibrate", "--config", str(cfg), "--labels", str(ANCHORS)])
    assert result.exit_code == 2 and "no judge configured" in result.output
