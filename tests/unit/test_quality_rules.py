"""Rule scorers: edge cases (unicode, empty output, nested JSON, near-threshold lengths, loops)."""

from __future__ import annotations

import pytest

from observer.analyse.quality import rules

SCHEMA = {
    "type": "object",
    "required": ["user", "tags"],
    "additionalProperties": False,
    "properties": {
        "user": {"type": "object", "required": ["name", "address"], "properties": {
            "name": {"type": "string"},
            "address": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}}},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
}


@pytest.mark.parametrize(("out", "ref", "ok"), [
    ("Paris", "Paris", True),
    ("  Paris\n", "Paris", True),
    ("paris", "Paris", False),
    ("", "", True),
    ("", "Paris", False),
])
def test_exact(out: str, ref: str, ok: bool) -> None:
    assert rules.exact(out, ref).passed is ok


@pytest.mark.parametrize(("out", "ref", "ok"), [
    ("PARIS.", "Paris", True),
    ("  paris  !", "Paris", True),
    ("Ｐａｒｉｓ", "Paris", True),  # full-width folds under NFKC
    ("Straße", "STRASSE", True),  # casefold
    ("Cafe\u0301", "Café", True),  # combining accent vs precomposed
    ("Paris, France", "Paris", False),
    ("", "Paris", False),
    ("", "", False),  # an empty reference never matches
    ("...", "!!!", False),
])
def test_normalised_match(out: str, ref: str, ok: bool) -> None:
    assert rules.normalised_match(out, ref).passed is ok


def test_contains_word_boundaries_all_any_and_unicode() -> None:
    assert rules.contains("The capital is Paris.", ["paris"]).passed
    assert not rules.contains("Parisian food", ["Paris"]).passed  # whole words after folding
    assert rules.contains("Parisian food", ["Paris"], fold=False).passed
    r = rules.contains("carbon dioxide", ["carbon dioxide", "CO2"])
    assert not r.passed and r.score == 0.5 and "CO2" in r.reason
    assert rules.contains("CO₂ is absorbed", ["co2", "carbon dioxide"], mode="any").passed  # subscript folds
    assert rules.contains("Zürich, Switzerland", ["zürich"]).passed
    assert rules.contains("日本で一番高い山は富士山です", ["富士山"], fold=False).passed
    assert rules.contains("日本で一番高い山は富士山です。", ["富士山"]).passed  # no word boundaries in CJK
    assert not rules.contains("日本で一番高い山は北岳です", ["富士山"]).passed
    assert not rules.contains("", ["x"]).passed


def test_not_contains() -> None:
    assert rules.not_contains("The moon is bright.", ["night"]).passed
    assert not rules.not_contains("Bright at NIGHT!", ["night"]).passed
    assert rules.not_contains("overnight", ["night"]).passed  # whole word only


@pytest.mark.parametrize(("out", "pattern", "mode", "ok"), [
    ("answer: 404", r"(?<!\d)404(?!\d)", "search", True),
    ("answer: 4040", r"(?<!\d)404(?!\d)", "search", False),
    ("  yes \n", r"yes", "fullmatch", True),
    ("yes, it is", r"yes", "fullmatch", False),
    ("", r".*", "fullmatch", True),
    ("", r".+", "fullmatch", False),
    ("東京", r"^\w+$", "search", True),
])
def test_regex(out: str, pattern: str, mode: str, ok: bool) -> None:
    assert rules.regex(out, pattern, mode=mode).passed is ok


def test_regex_flags() -> None:
    assert rules.regex("YES", "yes", ignore_case=True).passed
    assert rules.regex("a\nb", "^b$", multiline=True).passed
    assert not rules.regex("a\nb", "^b$").passed


@pytest.mark.parametrize(("out", "ok"), [
    ('{"a": {"b": [1, {"c": null}]}}', True),
    ("[]", True),
    ("0", True),
    ('"just a string"', True),
    ('```json\n{"a": 1}\n```', True),
    ('```\n{"a": 1}\n```', True),
    ('{"a": 1', False),
    ('{"a": NaN}', False),
    ('{"a": Infinity}', False),
    ('{"a": 1, "a": 2}', False),
    ('{"a": 1} {"b": 2}', False),
    ("", False),
    ("   ", False),
    ("Here it is: {\"a\": 1}", False),
    ("{'a': 1}", False),
])
def test_json_valid(out: str, ok: bool) -> None:
    assert rules.json_valid(out).passed is ok


def test_json_valid_deep_nesting_is_a_fail_not_a_crash() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    assert rules.json_valid(deep).passed is False


def test_json_schema_nested_and_first_error_named() -> None:
    good = '{"user": {"name": "Zoë", "address": {"city": "Zürich"}}, "tags": ["a", "ü"]}'
    assert rules.json_schema(good, SCHEMA).passed
    bad = '{"user": {"name": "Zoë", "address": {}}, "tags": ["a", 3]}'
    r = rules.json_schema(bad, SCHEMA)
    assert not r.passed and "2 schema error(s)" in r.reason
    assert "/tags/1" in r.reason or "/user/address" in r.reason
    extra = '{"user": {"name": "x", "address": {"city": "y"}}, "tags": [], "z": 1}'
    assert "Additional properties" in rules.json_schema(extra, SCHEMA).reason
    assert "not valid JSON" in rules.json_schema("nope", SCHEMA).reason


@pytest.mark.parametrize(("text", "kwargs", "ok"), [
    ("a" * 40, {"max_chars": 40}, True),
    ("a" * 41, {"max_chars": 40}, False),
    ("a" * 5, {"min_chars": 5}, True),
    ("a" * 4, {"min_chars": 5}, False),
    ("  " + "a" * 40 + "\n", {"max_chars": 40}, True),  # outer whitespace does not count
    ("é" * 40, {"max_chars": 40}, True),  # code points, not bytes
    ("e\u0301" * 40, {"max_chars": 40}, True),  # NFC composes e + combining accent
    ("🙂" * 40, {"max_chars": 40}, True),
    ("one two three", {"max_words": 3}, True),
    ("one two three four", {"max_words": 3}, False),
    ("one two three", {"min_words": 3}, True),
    ("one two", {"min_words": 3}, False),
    ("東京都", {"max_words": 3}, True),  # each CJK character is a word
    ("東京都庁", {"max_words": 3}, False),
    ("", {"min_chars": 1}, False),
    ("", {"max_words": 0}, True),
])
def test_length_bounds(text: str, kwargs: dict[str, int], ok: bool) -> None:
    assert rules.length(text, **kwargs).passed is ok


@pytest.mark.parametrize(("out", "refused"), [
    ("I'm sorry, but I can't help with that request.", True),
    ("I’m sorry, but I can’t help with that.", True),  # curly apostrophes
    ("I cannot assist with that.", True),
    ("I am unable to provide information about lock picking.", True),
    ("As an AI language model, I cannot do that.", True),
    ("Thanks for asking! However, I can't help with that request.", True),
    ("I must decline.", True),
    ("Sorry, I can't assist with terminating things.", True),
    ("I'm sorry to hear that your deployment failed. Try kubectl rollout undo.", False),
    ("You cannot kill a zombie process; kill its parent instead.", False),
    ("Run kill -9 PID.", False),
    ("", False),
])
def test_refusal_detection(out: str, refused: bool) -> None:
    assert rules.is_refusal(out) is refused
    assert rules.not_refusal(out).passed is (not refused)
    assert rules.refusal(out).passed is refused


@pytest.mark.parametrize(("out", "looped"), [
    ("The cat sat on the mat. " * 6, True),
    ("I think I think I think I think I think", True),
    ("very very very good", False),
    ("no no no no no no no no", True),
    ("no no no no no", False),  # single-token needs 8 repeats
    ("1, 2, 3, 4, 5, 6, 7, 8, 9, 10", False),
    ("東京" * 10, True),
    ("A normal answer with varied words and no loop at all, even if long. " + "x y z " * 2, False),
    ("", False),
])
def test_repetition_loop(out: str, looped: bool) -> None:
    r = rules.no_repetition(out)
    assert r.passed is (not looped), r.reason


def test_repetition_reports_period_on_long_text() -> None:
    # Its speed on long text is a benchmark matter, not a wall-clock bound in the unit tier.
    text = " ".join(f"w{i}" for i in range(30_000)) + " loop me now" * 5
    r = rules.no_repetition(text)
    assert not r.passed and r.meta["period"] == 3 and r.meta["repeats"] == 5


@pytest.mark.parametrize(("finish", "expected"), [("stop", True), ("length", False), ("abort", True), (None, None)])
def test_truncation(finish: str | None, expected: bool | None) -> None:
    assert rules.not_truncated(finish).passed is expected


def test_empty() -> None:
    assert not rules.not_empty(" \n\t").passed
    assert rules.not_empty("x").passed
