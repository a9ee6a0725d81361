"""Scalar features of stored samples: token counts, output length, latency, finish reason, refusals.

Each feature is one column (NumPy array, one value per sample). Continuous columns are float64 with NaN
where the sample did not carry the value; categorical columns are short bounded strings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt

from observer.conventions.labels import FINISHED_REASONS
from observer.store.base import SampleRecord

Kind = Literal["continuous", "categorical"]
Column = npt.NDArray[np.float64] | npt.NDArray[np.str_]

FEATURES: Mapping[str, Kind] = {
    "prompt_tokens": "continuous",
    "output_tokens": "continuous",
    "output_chars": "continuous",
    "latency_s": "continuous",
    "ttft_s": "continuous",
    "finish_reason": "categorical",
    "refusal": "categorical",
}
"""Every scalar feature and how it is tested (KS for continuous, chi-square for categorical)."""

REFUSAL = re.compile(
    r"\b(i'?m sorry,? but|i am sorry,? but|i apologi[sz]e,? but|i can(?:no|')t (?:help|assist|provide|comply|do)"
    r"|i(?:'m| am) (?:not able|unable) to (?:help|assist|provide|comply)|i won'?t be able to"
    r"|as an ai(?: language model)?,? i (?:can(?:no|')t|am unable))",
    re.IGNORECASE,
)
REFUSAL_SCAN_CHARS = 400
"""Refusals are looked for in the first characters only: a refusal leads, a long answer that quotes one does
not count."""


def is_refusal(output: str) -> bool:
    """True when the output opens with a refusal phrase (English)."""
    return REFUSAL.search(output[:REFUSAL_SCAN_CHARS].replace("\u2019", "'")) is not None


def _finish(reason: str | None) -> str:
    if reason is None:
        return "unknown"
    return reason if reason in FINISHED_REASONS else "other"


def _num(value: float | int | None) -> float:
    return float("nan") if value is None else float(value)


def extract(samples: Sequence[SampleRecord], *, names: Sequence[str] | None = None) -> dict[str, Column]:
    """Return the feature columns of `samples` (all features, or only `names`)."""
    wanted = list(FEATURES) if names is None else list(names)
    unknown = [n for n in wanted if n not in FEATURES]
    if unknown:
        raise ValueError(f"unknown drift feature(s) {unknown}; known: {list(FEATURES)}")
    out: dict[str, Column] = {}
    for name in wanted:
        if FEATURES[name] == "continuous":
            out[name] = np.asarray([_continuous(name, s) for s in samples], dtype=np.float64)
        else:
            out[name] = np.asarray([_categorical(name, s) for s in samples], dtype="<U16")
    return out


def _continuous(name: str, s: SampleRecord) -> float:
    if name == "output_chars":
        return float(len(s.output))
    value: float | int | None = getattr(s, name)
    return _num(value)


def _categorical(name: str, s: SampleRecord) -> str:
    if name == "finish_reason":
        return _finish(s.finish_reason)
    return "yes" if is_refusal(s.output) else "no"
