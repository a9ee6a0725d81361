"""One answer to "is this config valid?": every refusal of the build is reported by `observer check-config`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from observer.crosscheck import check_references
from observer.errors import ConfigError
from observer.service import Service
from tests.support.badconfigs import corpus, parse

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("index", range(15))
def test_check_config_reports_what_the_build_refuses(tmp_path: Path, index: int) -> None:
    cases = corpus(tmp_path)
    bad = cases[index]
    config = parse(bad)
    reported = [str(p) for p in check_references(config)]
    assert any(bad.message in r for r in reported), f"{bad.name}: check-config said {reported}"
    with pytest.raises(ConfigError) as refused:
        Service.build(config)
    assert bad.message in str(refused.value), bad.name
    assert str(refused.value) in reported  # the same words, not a paraphrase


def test_the_corpus_is_the_parametrized_range(tmp_path: Path) -> None:
    assert len(corpus(tmp_path)) == 15


def test_no_build_raises_a_config_error_of_its_own() -> None:
    """Builds call their area's validation and build from what it loaded; a refusal written in a build would be
    one check-config cannot see."""
    offenders = []
    for path in [*sorted((ROOT / "observer" / "wiring").glob("*.py")), ROOT / "observer" / "service.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and node.exc is not None:
                call = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if isinstance(call, ast.Name) and call.id == "ConfigError":
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_the_issue_example_is_refused_by_check_config_naming_the_key(tmp_path: Path) -> None:
    bad = next(b for b in corpus(tmp_path) if b.name == "live judge rubric")
    (problem,) = check_references(parse(bad))
    assert problem.path == "quality.live.judge_rubric" and "known: " in str(problem)
