"""What drifted: the current texts lying furthest along the shift direction (current mean − baseline mean)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

MAX_EXAMPLE_CHARS = 240
"""Example texts are cut to this length in reports and API answers."""


@dataclass(frozen=True)
class ShiftedExample:
    """A current text and how far it lies along the shift direction (baseline mean at 0)."""

    text: str
    score: float


def most_shifted(baseline: npt.NDArray[np.float32], current: npt.NDArray[np.float32], texts: Sequence[str],
                 *, k: int = 5) -> list[ShiftedExample]:
    """Return the `k` current texts with the largest projection on the unit shift direction."""
    if len(texts) != len(current):
        raise ValueError(f"{len(texts)} texts for {len(current)} current embeddings")
    if k <= 0 or len(current) == 0 or len(baseline) == 0:
        return []
    mu_ref = baseline.mean(axis=0, dtype=np.float64)
    direction = current.mean(axis=0, dtype=np.float64) - mu_ref
    norm = float(np.linalg.norm(direction))
    if norm == 0.0:
        return []
    scores = (current.astype(np.float64) - mu_ref) @ (direction / norm)
    out: list[ShiftedExample] = []
    seen: set[str] = set()
    for i in np.argsort(-scores, kind="stable"):
        text = texts[int(i)]
        if text in seen:  # a repeated text would crowd out the others
            continue
        seen.add(text)
        clipped = text if len(text) <= MAX_EXAMPLE_CHARS else text[: MAX_EXAMPLE_CHARS - 1] + "…"
        out.append(ShiftedExample(text=clipped, score=float(scores[int(i)])))
        if len(out) == k:
            break
    return out
