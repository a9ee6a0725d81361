"""Prompts of the built-in load: a home domain (product support) and, for the `drifted` preset, a
share of prompts from another domain (legal and medical questions, longer), seeded and deterministic.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from threading import Lock

import numpy as np

HOME_TEMPLATES = (
    "How do I reset the password of my {thing} account?",
    "My {thing} stopped syncing after the last update. What should I try?",
    "Can I change the billing date for my {thing} subscription?",
    "What is the difference between the basic and the pro plan of {thing}?",
    "The {thing} app crashes when I open settings on my phone.",
    "How can I export my data from {thing} to a spreadsheet?",
    "Is there a way to share my {thing} workspace with a colleague?",
    "Why was I charged twice for {thing} this month?",
    "How do I turn on two-factor authentication in {thing}?",
    "Where can I download the invoice for my {thing} order?",
)
HOME_THINGS = ("cloud storage", "calendar", "photo backup", "music", "notes", "email", "VPN", "password manager")

OTHER_TEMPLATES = (
    "What are the statutory notice periods for terminating a residential {thing} agreement, and do they "
    "differ when the landlord wants to sell the property?",
    "Summarise the usual contraindications and interactions for {thing} in elderly patients who also take "
    "anticoagulants.",
    "Draft a clause limiting liability for indirect damages in a {thing} services contract under English law.",
    "Which diagnostic criteria distinguish {thing} from similar conditions, and what first-line treatment "
    "do current guidelines recommend?",
    "Explain how a court would interpret an ambiguous force majeure clause in a {thing} supply contract.",
)
OTHER_THINGS = ("lease", "ibuprofen", "software licensing", "hypertension", "freight", "metformin")

OTHER_LENGTH_FACTOR = 1.6  # other-domain prompts are longer: the token-length probe moves too


@dataclass(frozen=True)
class LoadSample:
    """One request of the built-in load, kept for inspection (GET /sim/recent)."""

    ts: float
    prompt: str
    output: str
    domain: str
    finish_reason: str
    prompt_tokens: int
    output_tokens: int
    ttft_s: float | None
    latency_s: float


def draw_prompt(rng: np.random.Generator, drift_fraction: float) -> tuple[str, str]:
    """(prompt, domain) for one load request; `domain` is `home` or `other`."""
    if drift_fraction > 0 and rng.random() < drift_fraction:
        template = OTHER_TEMPLATES[int(rng.integers(len(OTHER_TEMPLATES)))]
        return template.format(thing=OTHER_THINGS[int(rng.integers(len(OTHER_THINGS)))]), "other"
    template = HOME_TEMPLATES[int(rng.integers(len(HOME_TEMPLATES)))]
    return template.format(thing=HOME_THINGS[int(rng.integers(len(HOME_THINGS)))]), "home"


class RecentSamples:
    """A bounded ring of the latest requests (load and API), newest last."""

    def __init__(self, maxlen: int = 1000) -> None:
        self._items: deque[LoadSample] = deque(maxlen=maxlen)
        self._lock = Lock()

    def add(self, sample: LoadSample) -> None:
        with self._lock:
            self._items.append(sample)

    def latest(self, limit: int) -> list[LoadSample]:
        """Up to `limit` newest samples, newest first."""
        with self._lock:
            items = list(self._items)
        return items[::-1][:max(0, limit)]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
