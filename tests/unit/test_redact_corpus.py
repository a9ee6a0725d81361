"""Redaction against a corpus of positive and negative cases (tests/fixtures/redaction/corpus.yaml)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from observer.config.sampling import BUILTIN_REDACTIONS, RedactionSpec
from observer.sample.redact import BUILTIN_RULES, Redactor, luhn_ok

CORPUS = yaml.safe_load((Path(__file__).parents[1] / "fixtures" / "redaction" / "corpus.yaml").read_text())
REDACTOR = Redactor.build()


@pytest.mark.parametrize("case", CORPUS["positive"], ids=[c["id"] for c in CORPUS["positive"]])
def test_positive_cases_are_redacted_and_counted(case: dict[str, Any]) -> None:
    out = REDACTOR.redact(case["text"])
    assert out.text == case["expect"]
    assert dict(out.counts) == case["counts"]


@pytest.mark.parametrize("case", CORPUS["negative"], ids=[c["id"] for c in CORPUS["negative"]])
def test_negative_cases_are_left_alone(case: dict[str, Any]) -> None:
    out = REDACTOR.redact(case["text"])
    assert out.text == case["text"]
    assert dict(out.counts) == {}


def test_corpus_covers_every_builtin_kind() -> None:
    kinds = {k for c in CORPUS["positive"] for k in c["counts"]}
    assert kinds == set(BUILTIN_REDACTIONS) == set(BUILTIN_RULES)


@pytest.mark.parametrize(("number", "ok"), [("4111111111111111", True), ("4111111111111112", False),
                                            ("79927398713", True), ("79927398710", False), ("0", True)])
def test_luhn(number: str, ok: bool) -> None:
    assert luhn_ok(number) is ok


def test_placeholders_are_stable_under_a_second_pass() -> None:
    once = REDACTOR.redact(" ".join(c["text"] for c in CORPUS["positive"])).text
    again = REDACTOR.redact(once)
    assert again.text == once and dict(again.counts) == {}


def test_user_patterns_and_kind_selection() -> None:
    spec = RedactionSpec(kinds=["email"], patterns={"employee_id": r"\bEMP-\d{6}\b"})
    redactor = Redactor.build(kinds=spec.kinds, patterns=spec.patterns)
    out = redactor.redact("EMP-123456 wrote to a@example.com from 10.0.0.1, EMP-12 too")
    assert out.text == "<EMPLOYEE_ID> wrote to <EMAIL> from 10.0.0.1, EMP-12 too"
    assert dict(out.counts) == {"employee_id": 1, "email": 1}
    assert redactor.kinds == ("email", "employee_id")


@pytest.mark.parametrize(("patterns", "kinds", "message"), [
    ({"Bad-Name": "x"}, None, "must match"),
    ({"email": "x"}, None, "built-in"),
    ({"broken": "("}, None, "not a valid regex"),
    ({"empty": "a*"}, None, "matches the empty string"),
    ({}, ["emails"], "unknown redaction kind"),
], ids=["bad-name", "shadows-builtin", "bad-regex", "empty-match", "unknown-kind"])
def test_bad_redaction_config_is_refused(patterns: dict[str, str], kinds: list[str] | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RedactionSpec(patterns=patterns, **({"kinds": kinds} if kinds is not None else {}))
