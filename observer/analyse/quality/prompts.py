"""Judge prompt and rubrics from `evals/`: versioned, hashed, and rendered with untrusted text fenced.

Judged text (the prompt, the output, the reference) is untrusted: it is wrapped in delimiters tagged
with a fresh random nonce, and anything that looks like a delimiter (or a chat-template control
token) inside it is neutralised first, so an output cannot close its own block and speak as the
instructions.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from observer.errors import ConfigError

VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["reasoning", "score", "verdict"],
    "properties": {
        "reasoning": {"type": "string", "maxLength": 2000},
        "score": {"type": "integer", "minimum": 1, "maximum": 5},
        "verdict": {"type": "string", "enum": ["pass", "fail"]},
    },
}

_PLACEHOLDER = re.compile(r"\{(rubric_name|criteria|scale|pass_rule|blocks)\}")
_ANGLE_RUN = re.compile(r"<{2,}|>{2,}")
_BLOCK_WORD = re.compile(r"(BEGIN|END)[\s_-]*(PROMPT|OUTPUT|REFERENCE|UNTRUSTED|ANSWER)", re.IGNORECASE)
_CHAT_TOKEN = re.compile(r"<\|[^|<>]{0,40}\|>|\[/?INST\]|<</?SYS>>|</?s>|<\|?(?:im_start|im_end|eot_id)\|?>",
                         re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]")


class _RubricFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z0-9_-]{1,64}$")
    version: int = Field(ge=1)
    description: str = ""
    criteria: str = Field(min_length=1)
    scale: str = Field(min_length=1)
    pass_rule: str = Field(min_length=1)


class _PromptFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str = Field(min_length=1)
    system: str = Field(min_length=1)
    user: str = Field(min_length=1)


@dataclass(frozen=True)
class Rubric:
    """A grading rubric; `hash` identifies its exact content and is recorded with every score."""

    name: str
    version: int
    criteria: str
    scale: str
    pass_rule: str
    hash: str


@dataclass(frozen=True)
class JudgePrompt:
    """The versioned judge prompt template."""

    version: str
    system: str
    user: str

    @property
    def hash(self) -> str:
        """Identifies the exact template (a version not bumped on an edit still gets a new hash)."""
        return _hash({"version": self.version, "system": self.system, "user": self.user})


def _hash(obj: Any) -> str:
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def _load_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"could not read: {e}", source=str(path)) from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise ConfigError(f"not valid YAML: {getattr(e, 'problem', e)}", source=str(path),
                          line=None if mark is None else mark.line + 1) from e


def _validated(model: type[BaseModel], data: Any, path: Path) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        msg = f"unknown key {loc!r}" if err["type"] == "extra_forbidden" else err["msg"]
        raise ConfigError(msg, path=loc, source=str(path)) from e


def load_rubric(path: str | Path) -> Rubric:
    """Load one rubric file; its name must equal the file stem."""
    p = Path(path)
    spec: _RubricFile = _validated(_RubricFile, _load_yaml(p), p)
    if spec.name != p.stem:
        raise ConfigError(f"rubric name {spec.name!r} differs from the file name {p.stem!r}", path="name",
                          source=str(p))
    return Rubric(name=spec.name, version=spec.version, criteria=spec.criteria.strip(), scale=spec.scale.strip(),
                  pass_rule=spec.pass_rule.strip(), hash=_hash(spec.model_dump(mode="json")))


def load_rubrics(directory: str | Path) -> dict[str, Rubric]:
    """Every `*.yaml` rubric in `directory`, by name."""
    d = Path(directory)
    if not d.is_dir():
        raise ConfigError(f"rubric directory {str(d)!r} does not exist", path="quality.judge.rubric_dir")
    return {r.name: r for r in (load_rubric(f) for f in sorted(d.glob("*.yaml")))}


def load_prompt(path: str | Path) -> JudgePrompt:
    """Load the judge prompt template (placeholders: rubric_name, criteria, scale, pass_rule, blocks)."""
    p = Path(path)
    spec: _PromptFile = _validated(_PromptFile, _load_yaml(p), p)
    if "{blocks}" not in spec.user:
        raise ConfigError("the user template must contain {blocks}", path="user", source=str(p))
    return JudgePrompt(version=spec.version, system=spec.system.strip(), user=spec.user.strip())


def neutralise(text: str) -> str:
    """Make untrusted text unable to forge a delimiter or a chat-template control token."""
    text = unicodedata.normalize("NFKC", text)  # folds full-width and other look-alike brackets
    text = _CONTROL.sub("", text)
    text = _CHAT_TOKEN.sub(lambda m: m.group(0).replace("<", "‹").replace(">", "›").replace("[", "(")
                           .replace("]", ")").replace("|", "¦"), text)
    text = _ANGLE_RUN.sub(lambda m: ("‹" if m.group(0)[0] == "<" else "›") * len(m.group(0)), text)
    return _BLOCK_WORD.sub(lambda m: f"{m.group(1).lower()} {m.group(2).lower()}", text)


def block(kind: str, text: str, nonce: str) -> str:
    """One fenced block of untrusted text."""
    return f"<<<BEGIN_{kind} {nonce}>>>\n{neutralise(text)}\n<<<END_{kind} {nonce}>>>"


def render(prompt: JudgePrompt, rubric: Rubric, *, nonce: str, judged_prompt: str, output: str,
           reference: str | None) -> tuple[str, str]:
    """(system, user) messages for one judge call."""
    blocks = [block("PROMPT", judged_prompt, nonce)]
    if reference is not None:
        blocks.append(block("REFERENCE", reference, nonce))
    blocks.append(block("OUTPUT", output, nonce))
    return _fill(prompt, rubric, nonce, blocks)


def render_pair(prompt: JudgePrompt, rubric: Rubric, *, nonce: str, judged_prompt: str, first: str, second: str,
                reference: str | None = None) -> tuple[str, str]:
    """(system, user) messages for one pairwise call: which of ANSWER_1 and ANSWER_2 is better."""
    blocks = [block("PROMPT", judged_prompt, nonce)]
    if reference is not None:
        blocks.append(block("REFERENCE", reference, nonce))
    blocks += [block("ANSWER_1", first, nonce), block("ANSWER_2", second, nonce)]
    return _fill(prompt, rubric, nonce, blocks)


def _fill(prompt: JudgePrompt, rubric: Rubric, nonce: str, blocks: list[str]) -> tuple[str, str]:
    values = {"rubric_name": rubric.name, "criteria": rubric.criteria, "scale": rubric.scale,
              "pass_rule": rubric.pass_rule, "blocks": "\n\n".join(blocks)}

    # One pass over the trusted template only: inserted text is never scanned for placeholders.
    def fill(template: str) -> str:
        return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template.replace("{nonce}", nonce))

    return fill(prompt.system), fill(prompt.user)
