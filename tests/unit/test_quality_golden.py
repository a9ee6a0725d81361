"""Golden-set loading: the shipped sets, canonical-content versions, and errors naming file, line, field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from observer.analyse.quality.golden import discover, load_golden_set
from observer.analyse.quality.model import Answer
from observer.analyse.quality.scorer import rule_outcome
from observer.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SETS = discover([ROOT / "golden_sets"])
CATEGORIES = {"factual", "json_extraction", "instruction_following", "benign", "summary"}


def test_shipped_sets_cover_the_categories_with_60_items() -> None:
    items = [i for s in SETS for i in s.items]
    assert len(items) >= 60
    assert {i.category for i in items} == CATEGORIES
    assert len({i.id for i in items}) == len(items)  # ids unique across sets too
    assert all(i.reference for i in items)  # the simulator answers from the reference
    assert all(s.version.startswith("sha256:") for s in SETS)


@pytest.mark.parametrize("item", [i for s in SETS for i in s.items], ids=lambda i: i.id)
def test_every_reference_passes_its_own_rule_checks(item: object) -> None:
    from observer.analyse.quality.golden import GoldenItem

    assert isinstance(item, GoldenItem)
    answer = Answer(item.reference or "", "stop", 0.1, 0.2)
    for a in item.assertions:
        o = rule_outcome(a, item, answer)
        assert o is None or o.passed is not False, (a, o)


def test_listed_wrong_answers_fail_the_rule_checks() -> None:
    """Items without judge/similarity checks must reject their own listed wrong answers."""
    for s in SETS:
        raw = {r["id"]: r for r in yaml.safe_load(Path(s.path).read_text())["items"]}
        for item in s.items:
            if any(a.type in ("judge", "similarity") for a in item.assertions):
                continue
            for wrong in raw[item.id].get("wrong", []):
                outs = [rule_outcome(a, item, Answer(wrong, "stop", 0.1, 0.2)) for a in item.assertions]
                assert any(o is not None and o.passed is False for o in outs), (item.id, wrong)


def write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.write_text(text, encoding="utf-8")
    return p


def test_version_ignores_formatting_and_order_but_not_content(tmp_path: Path) -> None:
    y = "  - {id: y, prompt: yo, reference: Yo}\n"
    a = write(tmp_path, "a.yaml", "items:\n  - {id: x, prompt: hi, reference: Hello}\n" + y)
    b = write(tmp_path, "b.yaml", "# comment\ndescription: other text\nitems:\n  - id: y\n    reference: Yo\n"
              "    prompt: yo\n  - id: x\n    prompt: hi\n    reference: Hello\n")
    c = write(tmp_path, "c.yaml", "items:\n  - {id: x, prompt: hi, reference: Hello!}\n" + y)
    d = write(tmp_path, "d.jsonl", '{"id": "x", "prompt": "hi", "reference": "Hello"}\n\n'
              '{"id": "y", "prompt": "yo", "reference": "Yo"}\n')
    va, vb, vc, vd = (load_golden_set(p).version for p in (a, b, c, d))
    assert va == vb == vd
    assert va != vc


def test_defaults_and_chat_items(tmp_path: Path) -> None:
    gs = load_golden_set(write(tmp_path, "s.yaml", """
items:
  - {id: a, prompt: "Q?", reference: "A"}
  - id: b
    messages: [{role: system, content: be brief}, {role: user, content: "Q2?"}]
    rubric: summary
""".lstrip()))
    a, b = gs.items
    assert [x.type for x in a.assertions] == ["normalised", "not_truncated"]
    assert [x.type for x in b.assertions] == ["judge", "not_truncated"]
    assert b.chat() == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Q2?"}]
    assert a.line == 2 and b.line == 3 and gs.name == "s"


def test_an_item_whose_start_is_all_that_counts_gets_no_truncation_check(tmp_path: Path) -> None:
    gs = load_golden_set(write(tmp_path, "s.yaml", """
items:
  - {id: a, prompt: "Repeat: walrus", truncation_ok: true, assertions: [{type: contains, values: [walrus]}]}
  - {id: b, prompt: "Repeat: walrus", assertions: [{type: contains, values: [walrus]}]}
""".lstrip()))
    a, b = gs.items
    assert [x.type for x in a.assertions] == ["contains"]
    assert [x.type for x in b.assertions] == ["contains", "not_truncated"]


@pytest.mark.parametrize(("name", "text", "line", "fragment"), [
    ("bad-key.yaml", "items:\n  - id: a\n    prompt: q\n    reference: r\n    refrence: typo\n", 5,
     "unknown key 'refrence'"),
    ("no-prompt.yaml", "items:\n  - id: a\n    reference: r\n", 2, "exactly one of prompt or messages"),
    ("bad-regex.yaml", "items:\n  - id: a\n    prompt: q\n    assertions:\n"
     "      - {type: regex, pattern: '(unclosed'}\n", 5, "pattern does not compile"),
    ("bad-schema.yaml", "items:\n  - id: a\n    prompt: q\n    assertions:\n      - type: json_schema\n"
     "        json_schema: {type: 12}\n", 6, "not a valid JSON Schema"),
    ("bad-type.yaml", "items:\n  - id: a\n    prompt: q\n    assertions: [{type: sparkle}]\n", 4, "sparkle"),
    ("dup.yaml", "items:\n  - {id: a, prompt: q, reference: r}\n  - {id: a, prompt: q2, reference: r}\n", 3,
     "duplicate item id 'a'"),
    ("nothing.yaml", "items:\n  - {id: a, prompt: q}\n", 2, "nothing to check"),
    ("no-ref.yaml", "items:\n  - id: a\n    prompt: q\n    assertions: [{type: exact}]\n", 2, "no reference"),
    ("length.yaml", "items:\n  - id: a\n    prompt: q\n    assertions: [{type: length, min_words: 5, max_words: 2}]\n",
     4, "min_words > max_words"),
    ("yaml-syntax.yaml", "items:\n  - id: a\n   prompt: [\n", 3, "not valid YAML"),
    ("dup-key.yaml", "items:\n  - id: a\n    id: b\n    prompt: q\n", 3, "duplicate key 'id'"),
    ("jsonl.jsonl", '{"id": "a", "prompt": "q", "reference": "r"}\n{"id": "b", "promt": "q"}\n', 2,
     "unknown key 'promt'"),
    ("jsonl-syntax.jsonl", '{"id": "a", "prompt": "q", "reference": "r"}\n\n{"id": "b",\n', 3, "not valid JSON"),
    ("last-role.yaml", "items:\n  - id: a\n    messages: [{role: assistant, content: hi}]\n    reference: r\n", 2,
     "last message must have role user"),
])
def test_errors_name_file_line_and_field(tmp_path: Path, name: str, text: str, line: int, fragment: str) -> None:
    p = write(tmp_path, name, text)
    with pytest.raises(ConfigError) as info:
        load_golden_set(p)
    msg = str(info.value)
    assert fragment in msg
    assert msg.startswith(f"{p}:{line}:"), msg
    assert info.value.line == line


def test_error_path_names_the_field(tmp_path: Path) -> None:
    p = write(tmp_path, "f.yaml", "items:\n  - {id: a, prompt: q, reference: r}\n  - id: b\n    prompt: q\n"
              "    assertions:\n      - {type: length, min_chars: -1}\n")
    with pytest.raises(ConfigError) as info:
        load_golden_set(p)
    assert info.value.path == "items[1].assertions[0].min_chars" and info.value.line == 6


def test_discover_selects_names_and_rejects_unknown_and_duplicates(tmp_path: Path) -> None:
    write(tmp_path, "one.yaml", "items:\n  - {id: a, prompt: q, reference: r}\n")
    write(tmp_path, "two.jsonl", '{"id": "b", "prompt": "q", "reference": "r"}\n')
    write(tmp_path, "notes.txt", "ignored")
    assert [s.name for s in discover([tmp_path])] == ["one", "two"]
    assert [s.name for s in discover([tmp_path], names=["two"])] == ["two"]
    with pytest.raises(ConfigError, match=r"three.*not found"):
        discover([tmp_path], names=["three"])
    other = tmp_path / "other"
    other.mkdir()
    write(other, "one.yml", "items:\n  - {id: z, prompt: q, reference: r}\n")
    with pytest.raises(ConfigError, match="defined twice"):
        discover([tmp_path, other])
    with pytest.raises(ConfigError, match="does not exist"):
        discover([tmp_path / "missing"])
