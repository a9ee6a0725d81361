"""What the simulator answers: golden-set references (right with probability `accuracy`), plausible
wrong answers, refusals, and deterministic generic text for every other prompt.

The answer book is read from golden-set files (`*.yaml`, `*.yml`, `*.jsonl`) whose items carry
`prompt` or `messages` and a `reference`; unreadable files are skipped and reported, never fatal.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

log = logging.getLogger("observer_dev.sim")

REFUSAL = "I'm sorry, but I can't help with that request."
AnswerKind = Literal["reference", "wrong", "refusal", "generic"]

_SENTENCES = (
    "Here is a short overview of the main points.",
    "The key idea is to start from the simplest configuration that works.",
    "In most deployments the default settings are a reasonable starting point.",
    "You can verify the result by repeating the measurement a few times.",
    "Keep in mind that the numbers depend on the workload and the hardware.",
    "A common mistake is to change several parameters at once.",
    "If the problem persists, check the logs for the first error message.",
    "The documentation describes each option together with an example.",
    "This approach trades a little latency for much higher throughput.",
    "Start with a small test, then roll the change out gradually.",
    "The answer depends on how strictly you need the guarantee to hold.",
    "Most users find the second option easier to operate.",
    "Measure before and after the change so the effect is visible.",
    "Caching the intermediate result avoids repeating the expensive step.",
    "Let me know if you would like a more detailed explanation.",
)


def normalise(text: str) -> str:
    """Case-folded text with collapsed whitespace: the answer-book key."""
    return " ".join(text.split()).casefold()


def prompt_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text of the last user message (content string or text parts)."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return content_text(message.get("content"))
    return content_text(messages[-1].get("content")) if messages else ""


def content_text(content: Any) -> str:
    """A message content as text: a string, or the `text` of its parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return "" if content is None else str(content)


@dataclass(frozen=True)
class BookItem:
    """One known prompt with its reference answer and optional wrong answers."""

    key: str
    reference: str
    wrong: tuple[str, ...] = ()


@dataclass(frozen=True)
class Answer:
    """A generated answer and why it was chosen."""

    text: str
    kind: AnswerKind


class AnswerBook:
    """Known prompts → references, matched exactly, else by the longest known prompt inside the text."""

    def __init__(self, items: Iterable[BookItem] = ()) -> None:
        self.items: dict[str, BookItem] = {}
        for item in items:
            self.items.setdefault(item.key, item)
        self._by_length = sorted(self.items, key=len, reverse=True)
        self.errors: list[str] = []

    def __len__(self) -> int:
        return len(self.items)

    @classmethod
    def load(cls, paths: Iterable[Path]) -> AnswerBook:
        """Read every golden-set file; each file that cannot be read is skipped with its reason."""
        items: list[BookItem] = []
        errors: list[str] = []
        for path in paths:
            try:
                items.extend(_read_items(path))
            except (OSError, ValueError, yaml.YAMLError) as e:
                errors.append(f"could not read golden set {path}: {e}")
                log.warning("simulator: could not read golden set %s: %s", path, e)
        book = cls(items)
        book.errors = errors
        return book

    @classmethod
    def from_dir(cls, directory: Path) -> AnswerBook:
        """Load `*.yaml|*.yml|*.jsonl` in `directory`; an absent directory gives an empty book."""
        if not directory.is_dir():
            return cls()
        files = sorted(p for p in directory.iterdir() if p.suffix in {".yaml", ".yml", ".jsonl"})
        return cls.load(files)

    def lookup(self, text: str) -> BookItem | None:
        """The item for `text`: exact match, else the longest known prompt contained in it."""
        key = normalise(text)
        if not key:
            return None
        hit = self.items.get(key)
        if hit is not None:
            return hit
        return next((self.items[k] for k in self._by_length if len(k) >= 8 and k in key), None)

    def wrong_answer(self, item: BookItem) -> str:
        """A plausible wrong answer: a listed one, a nearby number, or another item's reference."""
        if item.wrong:
            return item.wrong[_hash_int(item.key) % len(item.wrong)]
        number = re.fullmatch(r"\s*(-?\d+)(\.\d+)?\s*", item.reference)
        if number:
            return str(int(number.group(1)) + 1 + _hash_int(item.key) % 3)
        others = [i.reference for i in self.items.values() if i.reference != item.reference]
        if others:
            return others[_hash_int(item.key) % len(others)]
        return f"I believe it is not {item.reference}."


def _read_items(path: Path) -> list[BookItem]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        raw: list[Any] = [json.loads(line) for line in text.splitlines() if line.strip()]
    else:
        data = yaml.safe_load(text)
        if isinstance(data, Mapping):
            data = next((data[k] for k in ("items", "cases", "examples") if isinstance(data.get(k), list)), [])
        raw = data if isinstance(data, list) else []
    items = []
    for entry in raw:
        if not isinstance(entry, Mapping) or "reference" not in entry:
            continue
        if isinstance(entry.get("prompt"), str):
            prompt = entry["prompt"]
        elif isinstance(entry.get("messages"), list) and entry["messages"]:
            prompt = prompt_text(entry["messages"])
        else:
            continue
        reference = entry["reference"]
        if isinstance(reference, list) and reference:
            reference = reference[0]
        wrong = entry.get("wrong") or entry.get("distractors") or ()
        items.append(BookItem(key=normalise(prompt), reference=str(reference),
                              wrong=tuple(str(w) for w in wrong) if isinstance(wrong, list) else ()))
    return items


def _hash_int(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def generic_answer(prompt: str) -> str:
    """A deterministic, prompt-seeded answer of 2-8 sentences."""
    h = _hash_int(normalise(prompt))
    n = 2 + h % 7
    picks = [_SENTENCES[(h >> (4 * i)) % len(_SENTENCES)] for i in range(n)]
    return " ".join(picks)


def choose_answer(prompt: str, *, book: AnswerBook, accuracy: float, refusal_rate: float,
                  draw: Callable[[], float]) -> Answer:
    """Pick the answer for `prompt` with the profile's accuracy and refusal rate."""
    if draw() < refusal_rate:
        return Answer(REFUSAL, "refusal")
    item = book.lookup(prompt)
    if item is None:
        return Answer(generic_answer(prompt), "generic")
    if draw() < accuracy:
        return Answer(item.reference, "reference")
    return Answer(book.wrong_answer(item), "wrong")


def json_answer(response_format: Mapping[str, Any], answer: str) -> str:
    """The answer as a JSON document shaped by an OpenAI `response_format` (json_object/json_schema)."""
    schema: Any = None
    if response_format.get("type") == "json_schema":
        spec = response_format.get("json_schema") or {}
        schema = spec.get("schema") if isinstance(spec, Mapping) else None
    value = _fill(schema, answer, "answer") if isinstance(schema, Mapping) else {"answer": answer}
    return json.dumps(value, ensure_ascii=False)


def _fill(schema: Mapping[str, Any], answer: str, name: str, depth: int = 0) -> Any:
    if depth > 8:
        return None
    if schema.get("enum"):
        options = list(schema["enum"])
        return answer if answer in options else options[_hash_int(answer) % len(options)]
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {k: _fill(v, answer, k, depth + 1) for k, v in props.items() if isinstance(v, Mapping)}
    if kind == "array":
        items = schema.get("items")
        return [_fill(items, answer, name, depth + 1)] if isinstance(items, Mapping) else []
    if kind == "integer":
        return int(schema.get("minimum", 1))
    if kind == "number":
        return float(schema.get("minimum", 1.0))
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return answer
