"""Conversation traffic for the drift tests and bench/drift_sessions.py, from the chatterbot-corpus texts.

A conversation stays on one topic (one of the corpus's English categories) and, within it, near one anchor
text: each turn is the anchor or one of its nearest texts in the topic (by embedding), so a user's turns are
alike as they are in production chat. Conversations start as a Poisson stream; turns follow at exponential
gaps. A shifted conversation draws its anchor and turns from another pool (another domain, another language)
or renders its turns through another chat template.

Streams are index arrays into one embedding matrix (every text embedded once), so a month of traffic is a few
arrays, not a few million strings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import numpy.typing as npt

from tests.support.drift_corpus import TECHNICAL, _data_dir, _turns, load_corpus

NEIGHBOURS = 8
"""A conversation's turns come from its anchor and the anchor's nearest texts in its topic."""
TURN_GAP_SECONDS = 45.0
"""Mean gap between a conversation's turns (exponential)."""
TEMPLATE = "<start_of_turn>user\n{text}<end_of_turn>\n<start_of_turn>model\n"
"""Another chat template: the turn as a client that renders its own prompts would send it."""
SHIFTS: tuple[str, ...] = ("domain", "language", "template")


@dataclass(frozen=True)
class Pools:
    """Texts, their embeddings and, per topic, each text's neighbours (row indices into `vectors`)."""

    texts: tuple[str, ...]
    vectors: npt.NDArray[np.float32]
    topics: Mapping[str, npt.NDArray[np.int64]]  # general topic → text rows
    neighbours: npt.NDArray[np.int64]  # row → NEIGHBOURS nearest rows of its own pool or topic
    other: Mapping[str, npt.NDArray[np.int64]]  # shift → anchor rows (domain, language)
    templated: npt.NDArray[np.int64]  # row of a general text → row of its templated rendering


def _rows(texts: Sequence[str], index: Mapping[str, int]) -> npt.NDArray[np.int64]:
    return np.array(sorted(index[t] for t in set(texts)), dtype=np.int64)


def topic_texts() -> dict[str, list[str]]:
    """The corpus's English general categories (each a topic), technical ones excluded."""
    general = set(load_corpus().pools["general"])
    out: dict[str, list[str]] = {}
    for path in sorted((_data_dir() / "english").glob("*.yml")):
        if path.stem in TECHNICAL:
            continue
        texts = sorted(set(_turns(path)) & general)
        if len(texts) >= 2 * NEIGHBOURS:
            out[path.stem] = texts
    return out


def build_pools(embed: object) -> Pools:
    """Embed every text once (`embed`: an Embedder) and index the pools."""
    corpus = load_corpus()
    topics = topic_texts()
    general = sorted({t for ts in topics.values() for t in ts})
    templated = [TEMPLATE.format(text=t) for t in general]
    texts = tuple(dict.fromkeys([*general, *corpus.pools["technical"], *corpus.pools["foreign"], *templated]))
    index = {t: i for i, t in enumerate(texts)}
    vectors = np.ascontiguousarray(embed.embed(list(texts)), dtype=np.float32)  # type: ignore[attr-defined]
    neighbours = np.zeros((len(texts), NEIGHBOURS), dtype=np.int64)
    groups = [_rows(ts, index) for ts in topics.values()]
    groups += [_rows(corpus.pools[p], index) for p in ("technical", "foreign")]
    for rows in groups:
        sim = vectors[rows] @ vectors[rows].T
        k = min(NEIGHBOURS, len(rows))
        near = np.argsort(-sim, axis=1)[:, :k]
        neighbours[rows, :k] = rows[near]
        neighbours[rows, k:] = rows[near[:, :1]]
    to_templated = np.arange(len(texts), dtype=np.int64)
    for t, tt in zip(general, templated, strict=True):
        to_templated[index[t]] = index[tt]
    return Pools(texts=texts, vectors=vectors, topics={k: _rows(v, index) for k, v in topics.items()},
                 neighbours=neighbours,
                 other={"domain": _rows(corpus.pools["technical"], index),
                        "language": _rows(corpus.pools["foreign"], index)},
                 templated=to_templated)


@dataclass(frozen=True)
class Stream:
    """Samples in time order: text row, time (s), conversation id."""

    rows: npt.NDArray[np.int64]
    ts: npt.NDArray[np.float64]
    conversation: npt.NDArray[np.int64]

    def between(self, start: float, end: float, *, newest: int | None = None) -> Stream:
        """The samples in [start, end), the newest `newest` of them at most."""
        lo, hi = np.searchsorted(self.ts, [start, end], side="left")
        if newest is not None:
            lo = max(lo, hi - newest)
        return Stream(self.rows[lo:hi], self.ts[lo:hi], self.conversation[lo:hi])


def stream(pools: Pools, rng: np.random.Generator, *, seconds: float, per_hour: float, turns: int,
           shift: str | None = None, fraction: float = 0.0, first_id: int = 0) -> Stream:
    """Conversations of `turns` turns starting over [0, seconds), `per_hour` samples an hour on average; with
    `shift`, `fraction` of the conversations are shifted."""
    n_conv = int(rng.poisson(per_hour / turns * seconds / 3600.0))
    starts = rng.uniform(0.0, seconds, n_conv)
    names = sorted(pools.topics)
    weights = np.array([len(pools.topics[n]) for n in names], dtype=np.float64)
    topic = rng.choice(len(names), size=n_conv, p=weights / weights.sum())
    moved = rng.random(n_conv) < fraction if shift else np.zeros(n_conv, dtype=bool)
    anchors = np.empty(n_conv, dtype=np.int64)
    for i in range(n_conv):
        pool = pools.other[shift] if moved[i] and shift in pools.other else pools.topics[names[topic[i]]]
        anchors[i] = pool[int(rng.integers(0, len(pool)))]
    pick = rng.integers(0, pools.neighbours.shape[1], size=(n_conv, turns))
    rows = pools.neighbours[anchors[:, None], pick]
    if shift == "template":
        rows = np.where(moved[:, None], pools.templated[rows], rows)
    gaps = rng.exponential(TURN_GAP_SECONDS, size=(n_conv, turns))
    gaps[:, 0] = 0.0
    ts = starts[:, None] + np.cumsum(gaps, axis=1)
    conv = np.repeat(np.arange(first_id, first_id + n_conv), turns)
    order = np.argsort(ts.ravel(), kind="stable")
    return Stream(rows.ravel()[order], ts.ravel()[order], conv[order])


def whole_units(s: Stream, units: npt.NDArray[np.int64], cap: int, rng: np.random.Generator) -> Stream:
    """A seeded subsample of whole units (conversations or slices) of at most `cap` samples, as a baseline pin
    keeps them."""
    ids = np.unique(units)
    keep: list[int] = []
    total = 0
    sizes = dict(zip(*np.unique(units, return_counts=True), strict=True))
    for u in rng.permutation(ids):
        if total + sizes[u] > cap:
            continue
        keep.append(int(u))
        total += int(sizes[u])
    mask = np.isin(units, np.array(keep))
    return Stream(s.rows[mask], s.ts[mask], s.conversation[mask])


@lru_cache(maxsize=1)
def cache_dir() -> Path:
    """Where the bench keeps its embedding cache (ignored by git)."""
    return Path(__file__).resolve().parents[2] / ".cache" / "drift-sessions-embed"
