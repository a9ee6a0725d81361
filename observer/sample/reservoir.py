"""Seeded, unbiased per-window sampling: a Bernoulli gate, then a fixed-size reservoir per version and window.

A request is a candidate with probability `fraction` (decided before its reply is captured, so unsampled
requests cost nothing). Candidates completing in one window go through reservoir sampling (Algorithm R):
each keeps a place with equal probability min(1, k/n). At the window's end the reservoir is emitted and
a new one starts, so a burst can fill only its own window's k places and never crowds out the rest.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class _Window(Generic[T]):
    start: float
    items: list[T] = field(default_factory=list)
    offered: int = 0


@dataclass(frozen=True)
class Offer:
    """What happened to one offered candidate: kept (possibly displacing `evicted` earlier ones)."""

    kept: bool
    evicted: int


class WindowReservoir(Generic[T]):
    """Per-key (version) reservoirs over consecutive windows of `window_seconds`."""

    def __init__(self, *, capacity: int, window_seconds: float, seed: int = 0,
                 clock: Callable[[], float]) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        if window_seconds <= 0:
            raise ValueError("window_seconds must be positive")
        self.capacity = capacity
        self.window_seconds = window_seconds
        self._clock = clock
        self._rng = random.Random(seed)
        self._windows: dict[str, _Window[T]] = {}

    def gate(self, fraction: float) -> bool:
        """Decide, before capturing a reply, whether the request is a candidate."""
        if fraction >= 1.0:
            return True
        return fraction > 0.0 and self._rng.random() < fraction

    def _window_start(self, now: float) -> float:
        return now - (now % self.window_seconds)

    def offer(self, key: str, item: T) -> tuple[Offer, list[T]]:
        """Offer a candidate; returns the outcome and any window of `key` that has just closed."""
        now = self._clock()
        closed: list[T] = []
        window = self._windows.get(key)
        start = self._window_start(now)
        if window is None or window.start != start:
            if window is not None:
                closed = window.items
            window = self._windows[key] = _Window(start)
        window.offered += 1
        if len(window.items) < self.capacity:
            window.items.append(item)
            return Offer(kept=True, evicted=0), closed
        slot = self._rng.randrange(window.offered)
        if slot < self.capacity:
            window.items[slot] = item
            return Offer(kept=True, evicted=1), closed
        return Offer(kept=False, evicted=0), closed

    def flush(self, *, force: bool = False) -> dict[str, list[T]]:
        """Return and forget the windows that have closed (all of them with `force`), by key."""
        start = self._window_start(self._clock())
        out: dict[str, list[T]] = {}
        for key in list(self._windows):
            window = self._windows[key]
            if force or window.start != start:
                if window.items:
                    out[key] = window.items
                del self._windows[key]
        return out

    def has_open(self) -> bool:
        """Whether any window is open (something will need flushing when it closes)."""
        return bool(self._windows)

    def pending(self) -> int:
        """Candidates held in open windows."""
        return sum(len(w.items) for w in self._windows.values())
