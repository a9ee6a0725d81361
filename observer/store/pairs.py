"""Shadow-replay pairs: one stable prompt answered by both arms, stored with its paired results.

A pair is written once, after it was judged, so a reader never sees half a pair; the (canary, sample_id)
key makes a replay of the same stable sample after a restart or by a second leader a no-op.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class PairRecord:
    """One paired comparison: `body` holds the prompt, both answers and the judge's and rule checks' results."""

    canary: str
    baseline: str
    sample_id: int
    """The baseline (stable) sample whose prompt was replayed."""
    ts: float
    body: Mapping[str, Any]


@runtime_checkable
class PairStore(Protocol):
    """Where shadow-replay pairs live (both sample stores)."""

    def add_pair(self, pair: PairRecord) -> bool:
        """Store one pair; False when this canary already has a pair for that sample (nothing written)."""
        ...

    def pairs(self, canary: str, *, since: float, limit: int) -> list[PairRecord]:
        """The canary's pairs with ts >= since, oldest first, at most `limit`."""
        ...

    def paired_samples(self, canary: str, sample_ids: Sequence[int]) -> set[int]:
        """Which of `sample_ids` this canary already has a pair for."""
        ...
