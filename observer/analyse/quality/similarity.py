"""Embedding similarity to a reference, using the drift area's Embedder protocol (contract 4).

The embedder (MiniLM, torch) is loaded lazily: importing this module imports neither torch nor
sentence-transformers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from observer.analyse.quality.model import Outcome

if TYPE_CHECKING:
    import numpy.typing as npt


class Embedder(Protocol):
    """What the scorer needs of an embedder: float32 rows, L2-normalised."""

    @property
    def model_id(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]: ...


def load_default_embedder() -> Embedder:
    """The bundled all-MiniLM-L6-v2 (offline), from the drift area's loader."""
    from observer.analyse.embed import load_local_embedder

    embedder: Embedder = load_local_embedder()
    return embedder


def cosine_scores(embedder: Embedder, outputs: Sequence[str], references: Sequence[str]) -> list[float]:
    """Cosine similarity of each output to its reference, embedding all texts in one batch."""
    if len(outputs) != len(references):
        raise ValueError(f"{len(outputs)} outputs but {len(references)} references")
    if not outputs:
        return []
    # Embedders reject empty strings in some backends; a single space embeds as "nothing".
    texts = [t if t.strip() else " " for t in (*outputs, *references)]
    vecs = np.asarray(embedder.embed(texts), dtype=np.float32)
    n = len(outputs)
    a, b = vecs[:n], vecs[n:]
    # Rows are L2-normalised by contract; renormalise anyway so a sloppy embedder cannot push |cos| > 1.
    na = np.linalg.norm(a, axis=1)
    nb = np.linalg.norm(b, axis=1)
    denom = np.where((na * nb) > 0, na * nb, 1.0)
    sims = np.clip(np.einsum("ij,ij->i", a, b) / denom, -1.0, 1.0)
    return [float(s) for s in sims]


def similarity_outcome(score: float, threshold: float, *, model_id: str) -> Outcome:
    """Pass when cosine similarity ≥ threshold; the score is the cosine, negatives counted as 0."""
    ok = score >= threshold
    return Outcome("similarity", ok, round(max(0.0, score), 4),
                   f"cosine {score:.3f} {'≥' if ok else '<'} {threshold:.2f}",
                   {"cosine": round(score, 4), "threshold": threshold, "embedder": model_id})
