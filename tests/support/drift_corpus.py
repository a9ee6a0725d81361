"""A seeded drift test corpus assembled from real chat text shipped in the `chatterbot-corpus` wheel.

Pools (unique turns of the corpus's YAML conversations):
- `general`: English turns of every category except the technical ones;
- `technical`: English `coding`, `computers` and `tech_support` turns (code requests and code answers);
- `foreign`: turns in other languages (Spanish, Italian, Portuguese, German, French, Dutch, Turkish, …);
- `styled`: `general` turns wrapped in an assistant boilerplate (a changed system prompt or template).

Scenarios draw a reference and a current sample of n texts, with replacement (i.i.d. from the pool):
`none` (both from `general`: no drift), `domain` (10% of current from `technical`), `language` (10% of
current from `foreign`), `style` (15% of current outputs re-templated). Used by tests and bench/drift.py.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import yaml

from observer.errors import MissingDependencyError

TECHNICAL = ("coding", "computers", "tech_support")
FOREIGN = ("spanish", "italian", "portuguese", "german", "french", "dutch", "turkish", "swedish",
           "indonesian")
MAX_SHIFT_POOL = 400
"""Shift pools are capped (hash-chosen) so a test embeds the whole corpus in seconds."""
STYLE_TEMPLATES = (
    "Certainly! Here is a detailed answer to your question.\n\n{text}\n\nI hope this helps! "
    "Let me know if you have any other questions.",
    "Great question! {text} Feel free to ask if you would like me to elaborate further.",
    "As an AI assistant, I am happy to help. {text} Please let me know if there is anything else I can do.",
)


@dataclass(frozen=True)
class Scenario:
    """A drift scenario: the current sample mixes `fraction` of pool `other` into pool `base`."""

    name: str
    description: str
    base: str = "general"
    other: str | None = None
    fraction: float = 0.0


SCENARIOS: Mapping[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("none", "no drift: both samples from the general English pool"),
        Scenario("domain", "10% of current texts from another domain (coding / tech support)",
                 other="technical", fraction=0.10),
        Scenario("language", "10% of current texts in another language", other="foreign", fraction=0.10),
        Scenario("style", "15% of current outputs re-templated with an assistant boilerplate",
                 other="styled", fraction=0.15),
    )
}
SHIFTS: tuple[str, ...] = tuple(name for name in SCENARIOS if name != "none")


def _data_dir() -> Path:
    try:
        import chatterbot_corpus  # type: ignore[import-untyped]
    except ImportError as e:
        raise MissingDependencyError("chatterbot-corpus", "dev") from e
    return Path(chatterbot_corpus.__file__).parent / "data"


def _turns(path: Path) -> list[str]:
    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    out: list[str] = []
    for conversation in doc.get("conversations") or []:
        for turn in conversation or []:
            if isinstance(turn, str | int | float) and str(turn).strip():
                out.append(str(turn).strip())
    return out


def _style(text: str) -> str:
    pick = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big") % len(STYLE_TEMPLATES)
    return STYLE_TEMPLATES[pick].format(text=text)


@dataclass(frozen=True)
class Corpus:
    """Named pools of unique texts, each sorted so draws are reproducible across runs."""

    pools: Mapping[str, tuple[str, ...]]

    def all_texts(self) -> list[str]:
        """Every distinct text of every pool (embed these once, then draw by lookup)."""
        return sorted({t for pool in self.pools.values() for t in pool})

    def draw(self, scenario: str | Scenario, n: int, rng: np.random.Generator, *,
             n_reference: int | None = None) -> tuple[list[str], list[str]]:
        """Draw (reference, current) texts for `scenario`; sizes n_reference (default n) and n."""
        sc = SCENARIOS[scenario] if isinstance(scenario, str) else scenario
        base = self.pools[sc.base]
        ref = [base[i] for i in rng.integers(0, len(base), n_reference or n)]
        n_other = round(sc.fraction * n) if sc.other else 0
        cur = [base[i] for i in rng.integers(0, len(base), n - n_other)]
        if sc.other and n_other:
            other = self.pools[sc.other]
            cur += [other[i] for i in rng.integers(0, len(other), n_other)]
            rng.shuffle(cur)
        return ref, cur


@lru_cache(maxsize=1)
def load_corpus() -> Corpus:
    """Read the wheel's YAML files into the drift pools (cached: the files never change)."""
    root = _data_dir()
    general: set[str] = set()
    technical: set[str] = set()
    for path in sorted((root / "english").glob("*.yml")):
        (technical if path.stem in TECHNICAL else general).update(_turns(path))
    foreign: set[str] = set()
    for lang in FOREIGN:
        for path in sorted((root / lang).glob("*.yml")):
            foreign.update(_turns(path))
    general -= technical
    gen = tuple(sorted(general))
    return Corpus(pools={
        "general": gen,
        "technical": tuple(sorted(technical)),
        "foreign": _subset(foreign - general - technical, MAX_SHIFT_POOL),
        "styled": _subset({_style(t) for t in gen}, MAX_SHIFT_POOL),
    })


def _subset(texts: set[str], limit: int) -> tuple[str, ...]:
    """At most `limit` texts, chosen by hash (stable across runs, no RNG state involved)."""
    ranked = sorted(texts, key=lambda t: hashlib.sha256(t.encode()).digest())
    return tuple(sorted(ranked[:limit]))
