"""Golden sets: load YAML/JSONL files into typed items, with errors naming file, line and field.

A set's version is the hash of its canonical content (items sorted by id, keys sorted, defaults
omitted), so reformatting a file keeps the version and any change to a prompt, reference or
assertion makes a new one. The version is recorded with every score.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from observer.analyse.quality.assertions import Assertion, NotTruncated
from observer.config.load import LinePath, compose_yaml
from observer.errors import ConfigError

SUFFIXES = (".yaml", ".yml", ".jsonl")
ASSERTION_TYPES = frozenset(get_args(cls.model_fields["type"].annotation)[0]
                            for cls in get_args(get_args(Assertion)[0]))


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["system", "user", "assistant"]
    content: str = Field(min_length=1)


class _ItemSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
    category: str = Field("general", pattern=r"^[a-z0-9_]{1,40}$")
    prompt: str | None = Field(None, min_length=1)
    messages: list[_Message] | None = Field(None, min_length=1)
    reference: str | None = None
    rubric: str | None = Field(None, pattern=r"^[a-z0-9_-]{1,64}$")
    assertions: list[Assertion] = Field(default_factory=list)
    max_tokens: int | None = Field(None, ge=1, le=65536)
    # Only the start of the answer is checked (a label, an echoed word) and the limit is cut short on purpose:
    # no not_truncated check is added. Base models without a stop token need it too.
    truncation_ok: bool = False
    tags: list[str] = Field(default_factory=list)
    wrong: list[str] = Field(default_factory=list)  # plausible wrong answers; only the simulator reads them

    @model_validator(mode="after")
    def _check(self) -> _ItemSpec:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of prompt or messages")
        if self.messages is not None and self.messages[-1].role != "user":
            raise ValueError("the last message must have role user")
        if not self.assertions and self.reference is None and self.rubric is None:
            raise ValueError("nothing to check: give a reference, a rubric or assertions")
        for a in self.assertions:
            needs_ref = getattr(a, "value", "absent") is None
            if needs_ref and self.reference is None:
                raise ValueError(f"assertion {a.type} has no value and the item has no reference")
            if a.type == "judge" and a.rubric is None and self.rubric is None:
                raise ValueError("judge assertion has no rubric and the item has no rubric")
        return self


class _SetFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str = ""
    items: list[_ItemSpec] = Field(min_length=1)


@dataclass(frozen=True)
class GoldenItem:
    """One golden item, ready to send and score."""

    id: str
    category: str
    messages: tuple[tuple[str, str], ...]  # (role, content)
    reference: str | None
    rubric: str | None
    assertions: tuple[Any, ...]
    max_tokens: int | None
    line: int | None

    @property
    def prompt_text(self) -> str:
        """The prompt as text (single user prompt verbatim; chats rendered `role: content`)."""
        if len(self.messages) == 1:
            return self.messages[0][1]
        return "\n".join(f"{role}: {content}" for role, content in self.messages)

    def chat(self) -> list[dict[str, str]]:
        """The OpenAI chat `messages` of this item."""
        return [{"role": r, "content": c} for r, c in self.messages]


@dataclass(frozen=True)
class GoldenSet:
    """A named, versioned golden set."""

    name: str
    version: str
    path: str
    description: str
    items: tuple[GoldenItem, ...]

    def uses(self, assertion_type: str) -> bool:
        """True when any item has an assertion of this type."""
        return any(a.type == assertion_type for i in self.items for a in i.assertions)


def _dotted(loc: Sequence[str | int]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _validation_error(e: ValidationError, *, source: str, lines: dict[LinePath, int],
                      prefix: LinePath = ()) -> ConfigError:
    err = e.errors()[0]
    # Pydantic inserts the union tag (e.g. 'regex') after the list index; drop it for a readable path.
    raw = tuple(err["loc"])
    loc: LinePath = tuple(p for n, p in enumerate(raw)
                          if not (n >= 2 and raw[n - 2] == "assertions" and isinstance(raw[n - 1], int)
                                  and p in ASSERTION_TYPES))
    full = (*prefix, *loc)
    line = next((lines[full[:n]] for n in range(len(full), 0, -1) if full[:n] in lines), None)
    msg = f"unknown key {str(loc[-1])!r}" if err["type"] == "extra_forbidden" and loc else err["msg"]
    more = f" (and {len(e.errors()) - 1} more error(s))" if len(e.errors()) > 1 else ""
    return ConfigError(msg + more, path=_dotted(full) or "(top level)", line=line, source=source)


def _to_item(spec: _ItemSpec, line: int | None) -> GoldenItem:
    if spec.messages is not None:
        messages = tuple((m.role, m.content) for m in spec.messages)
    else:
        messages = (("user", spec.prompt or ""),)
    assertions: list[Any] = list(spec.assertions)
    if not assertions:
        if spec.reference is not None:
            from observer.analyse.quality.assertions import Normalised

            assertions.append(Normalised(type="normalised"))
        if spec.rubric is not None:
            from observer.analyse.quality.assertions import Judge

            assertions.append(Judge(type="judge"))
    # A golden answer cut off by the token limit is never a good answer, unless the item says only its start counts.
    if not spec.truncation_ok and not any(a.type == "not_truncated" for a in assertions):
        assertions.append(NotTruncated(type="not_truncated"))
    return GoldenItem(id=spec.id, category=spec.category, messages=messages, reference=spec.reference,
                      rubric=spec.rubric, assertions=tuple(assertions), max_tokens=spec.max_tokens, line=line)


def content_hash(items: Iterable[_ItemSpec]) -> str:
    """Hash of the canonical content of a set's items (order- and formatting-independent)."""
    canonical = sorted((i.model_dump(mode="json", exclude_none=True, exclude_defaults=True) for i in items),
                       key=lambda d: str(d["id"]))
    blob = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def _read_yaml(text: str, source: str) -> tuple[_SetFile, dict[LinePath, int]]:
    data, lines = compose_yaml(text, source=source)
    if not isinstance(data, dict):
        raise ConfigError("the top level must be a mapping with `items:`", source=source, line=1)
    try:
        return _SetFile.model_validate(data), lines
    except ValidationError as e:
        raise _validation_error(e, source=source, lines=lines) from e


def _read_jsonl(text: str, source: str) -> tuple[_SetFile, dict[LinePath, int]]:
    items: list[_ItemSpec] = []
    lines: dict[LinePath, int] = {}
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ConfigError(f"not valid JSON: {e.msg} (column {e.colno})", source=source, line=n) from e
        idx = len(items)
        lines[("items", idx)] = n
        try:
            items.append(_ItemSpec.model_validate(obj))
        except ValidationError as e:
            # Every field of a JSONL item sits on the item's line.
            raise _validation_error(e, source=source, lines={("items", idx): n}, prefix=("items", idx)) from e
    if not items:
        raise ConfigError("no items", source=source)
    return _SetFile(items=items), lines


def load_golden_set(path: str | Path) -> GoldenSet:
    """Load one golden-set file; ConfigError names the file, line and field of the first problem."""
    p = Path(path)
    source = str(p)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"could not read golden set: {e}", source=source) from e
    spec, lines = _read_jsonl(text, source) if p.suffix == ".jsonl" else _read_yaml(text, source)
    seen: dict[str, int | None] = {}
    items: list[GoldenItem] = []
    for idx, item in enumerate(spec.items):
        line = lines.get(("items", idx))
        if item.id in seen:
            raise ConfigError(f"duplicate item id {item.id!r} (first on line {seen[item.id]})",
                              path=f"items[{idx}].id", line=line, source=source)
        seen[item.id] = line
        items.append(_to_item(item, line))
    return GoldenSet(name=p.stem, version=content_hash(spec.items), path=source, description=spec.description,
                     items=tuple(items))


def discover(dirs: Sequence[str | Path], *, names: Sequence[str] = (), base: Path | None = None
             ) -> list[GoldenSet]:
    """Load every golden set in `dirs` (relative to `base`), or only those named; names must be unique."""
    found: dict[str, GoldenSet] = {}
    for d in dirs:
        root = Path(d) if base is None or Path(d).is_absolute() else base / d
        if not root.is_dir():
            raise ConfigError(f"golden-set directory {str(root)!r} does not exist", path="quality.golden_dirs")
        for f in sorted(root.iterdir()):
            if f.suffix not in SUFFIXES or not f.is_file():
                continue
            gs = load_golden_set(f)
            if gs.name in found:
                raise ConfigError(f"golden set {gs.name!r} defined twice: {found[gs.name].path} and {gs.path}",
                                  path="quality.golden_dirs")
            found[gs.name] = gs
    missing = [n for n in names if n not in found]
    if missing:
        raise ConfigError(f"golden set(s) {', '.join(missing)} not found; known: {', '.join(sorted(found))}",
                          path="quality.golden_sets")
    return [found[n] for n in names] if names else [found[k] for k in sorted(found)]
