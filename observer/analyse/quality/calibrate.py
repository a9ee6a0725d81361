"""Judge calibration: agreement of the judge's verdicts with human labels (TPR, TNR, Cohen's κ)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from observer.analyse.quality.judge import JudgeClient, Verdict
from observer.analyse.quality.prompts import Rubric
from observer.errors import ConfigError, JudgeError


class _LabelSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
    rubric: str
    prompt: str = Field(min_length=1)
    output: str
    reference: str | None = None
    label: Literal["pass", "fail"]
    note: str = ""


@dataclass(frozen=True)
class LabelledItem:
    """One human-labelled (prompt, output) pair of the anchor set."""

    id: str
    rubric: str
    prompt: str
    output: str
    reference: str | None
    human_pass: bool
    note: str


@dataclass(frozen=True)
class Agreement:
    """Confusion matrix of judge vs human ("positive" = pass) and derived rates; None where undefined."""

    tp: int
    fn: int
    tn: int
    fp: int
    errors: int  # judge errors: excluded from the matrix, reported beside it

    @property
    def n(self) -> int:
        return self.tp + self.fn + self.tn + self.fp

    @property
    def tpr(self) -> float | None:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None

    @property
    def tnr(self) -> float | None:
        return self.tn / (self.tn + self.fp) if self.tn + self.fp else None

    @property
    def accuracy(self) -> float | None:
        return (self.tp + self.tn) / self.n if self.n else None

    @property
    def kappa(self) -> float | None:
        """Cohen's κ; None when chance agreement is 1 (both raters constant) or there is no data."""
        n = self.n
        if not n:
            return None
        po = (self.tp + self.tn) / n
        pe = ((self.tp + self.fp) * (self.tp + self.fn) + (self.tn + self.fn) * (self.tn + self.fp)) / (n * n)
        return None if pe >= 1.0 else (po - pe) / (1 - pe)


def agreement(pairs: Iterable[tuple[bool, bool | None]]) -> Agreement:
    """Build the confusion matrix from (human_pass, judge_pass or None for a judge error) pairs."""
    tp = fn = tn = fp = errors = 0
    for human, judge in pairs:
        if judge is None:
            errors += 1
        elif human and judge:
            tp += 1
        elif human:
            fn += 1
        elif judge:
            fp += 1
        else:
            tn += 1
    return Agreement(tp=tp, fn=fn, tn=tn, fp=fp, errors=errors)


def load_labels(path: str | Path) -> list[LabelledItem]:
    """Read a JSONL anchor set; errors name the file, line and field."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"could not read labels: {e}", source=str(p)) from e
    out: list[LabelledItem] = []
    seen: set[str] = set()
    for n, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            spec = _LabelSpec.model_validate(json.loads(raw))
        except json.JSONDecodeError as e:
            raise ConfigError(f"not valid JSON: {e.msg}", source=str(p), line=n) from e
        except ValidationError as e:
            err = e.errors()[0]
            loc = ".".join(str(x) for x in err["loc"])
            msg = f"unknown key {loc!r}" if err["type"] == "extra_forbidden" else err["msg"]
            raise ConfigError(msg, path=loc, source=str(p), line=n) from e
        if spec.id in seen:
            raise ConfigError(f"duplicate id {spec.id!r}", path="id", source=str(p), line=n)
        seen.add(spec.id)
        out.append(LabelledItem(spec.id, spec.rubric, spec.prompt, spec.output, spec.reference,
                                spec.label == "pass", spec.note))
    if not out:
        raise ConfigError("no labelled items", source=str(p))
    return out


@dataclass(frozen=True)
class Judged:
    """One anchor item with the judge's verdict or error."""

    item: LabelledItem
    verdict: Verdict | None
    error: str | None


async def calibrate(judge: JudgeClient, rubrics: Mapping[str, Rubric], items: Sequence[LabelledItem], *,
                    progress: Callable[[Judged], None] | None = None) -> tuple[Agreement, list[Judged]]:
    """Judge every labelled item (concurrency bounded by the client) and compare with the human labels."""
    missing = sorted({i.rubric for i in items} - set(rubrics))
    if missing:
        raise ConfigError(f"labels use unknown rubric(s) {', '.join(missing)}; known: {', '.join(sorted(rubrics))}")

    async def one(item: LabelledItem) -> Judged:
        try:
            v = await judge.judge(rubric=rubrics[item.rubric], prompt=item.prompt, output=item.output,
                                  reference=item.reference)
            j = Judged(item, v, None)
        except JudgeError as e:
            j = Judged(item, None, f"{e.reason}: {e}")
        if progress is not None:
            progress(j)
        return j

    judged = list(await asyncio.gather(*(one(i) for i in items)))
    agree = agreement((j.item.human_pass, j.verdict.passed if j.verdict else None) for j in judged)
    return agree, judged
