"""The simulator's answer book: golden-set prompts answered right with probability `accuracy`,
plausible wrong answers otherwise, refusals at `refusal_rate`, deterministic generic text else."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from observer_dev.sim.answers import REFUSAL, AnswerBook, choose_answer, generic_answer, json_answer
from tests.support.sim import write_answer_book

ITEMS = [
    {"prompt": "What is the capital of France? Answer with the city name only.", "reference": "Paris",
     "wrong": ["Lyon"]},
    {"messages": [{"role": "system", "content": "Be brief."},
                  {"role": "user", "content": "How many legs does a spider have?"}], "reference": 8},
    {"prompt": "Name the largest planet.", "reference": "Jupiter"},
]


@pytest.fixture
def book(tmp_path: Path) -> AnswerBook:
    write_answer_book(tmp_path / "tiny.yaml", ITEMS)
    (tmp_path / "more.jsonl").write_text(json.dumps({"prompt": "Spell cat backwards.", "reference": "tac"}) + "\n")
    (tmp_path / "broken.yaml").write_text("items: [unclosed\n")
    (tmp_path / "notes.txt").write_text("ignored")
    return AnswerBook.from_dir(tmp_path)


def test_loads_yaml_lists_messages_and_jsonl_and_reports_broken_files(book: AnswerBook) -> None:
    assert len(book) == 4
    assert len(book.errors) == 1 and "broken.yaml" in book.errors[0]
    assert book.lookup("how many legs does a spider have?").reference == "8"  # type: ignore[union-attr]
    # A prompt wrapped in a template is still recognised by its known text.
    wrapped = "Question: What is the capital of France? Answer with the city name only.\nAnswer:"
    assert book.lookup(wrapped).reference == "Paris"  # type: ignore[union-attr]
    assert book.lookup("Tell me a joke") is None


def test_mapping_files_with_items_and_absent_dirs(tmp_path: Path) -> None:
    (tmp_path / "set.yml").write_text("description: x\nitems:\n  - {prompt: 'Two plus two?', reference: '4'}\n")
    assert AnswerBook.from_dir(tmp_path).lookup("two plus two?") is not None
    assert len(AnswerBook.from_dir(tmp_path / "missing")) == 0


@pytest.mark.parametrize("accuracy", [0.9, 0.6])
def test_accuracy_is_the_share_of_reference_answers(book: AnswerBook, accuracy: float) -> None:
    rng = np.random.default_rng(1)
    kinds = [choose_answer("Name the largest planet.", book=book, accuracy=accuracy, refusal_rate=0.0,
                           draw=rng.random).kind for _ in range(4000)]
    assert abs(kinds.count("reference") / len(kinds) - accuracy) < 0.03
    assert set(kinds) == {"reference", "wrong"}


def test_wrong_answers_are_plausible(book: AnswerBook) -> None:
    france = book.lookup("What is the capital of France? Answer with the city name only.")
    spider = book.lookup("How many legs does a spider have?")
    planet = book.lookup("Name the largest planet.")
    assert france is not None and spider is not None and planet is not None
    assert book.wrong_answer(france) == "Lyon"  # a listed wrong answer
    assert book.wrong_answer(spider) in {"9", "10", "11"}  # a nearby number
    assert book.wrong_answer(planet) in {"Paris", "8", "tac"}  # another item's reference
    assert book.wrong_answer(planet) != planet.reference


def test_refusals_and_generic_answers(book: AnswerBook) -> None:
    rng = np.random.default_rng(2)
    answers = [choose_answer("Tell me about caching.", book=book, accuracy=1.0, refusal_rate=0.1,
                             draw=rng.random) for _ in range(3000)]
    refusals = sum(a.kind == "refusal" for a in answers)
    assert abs(refusals / 3000 - 0.1) < 0.02
    assert all(a.text == REFUSAL for a in answers if a.kind == "refusal")
    generic = {a.text for a in answers if a.kind == "generic"}
    assert len(generic) == 1  # deterministic per prompt
    assert generic_answer("Tell me about caching.") != generic_answer("Tell me about queues.")


def test_json_answers_follow_the_schema() -> None:
    schema = {"type": "object", "properties": {
        "answer": {"type": "string"}, "score": {"type": "integer", "minimum": 1, "maximum": 5},
        "verdict": {"enum": ["pass", "fail"]}, "tags": {"type": "array", "items": {"type": "string"}},
        "confident": {"type": "boolean"}}, "required": ["answer", "score", "verdict"]}
    doc = json.loads(json_answer({"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}, "Paris"))
    jsonschema.validate(doc, schema)
    assert doc["answer"] == "Paris"
    assert json.loads(json_answer({"type": "json_object"}, "Paris")) == {"answer": "Paris"}
