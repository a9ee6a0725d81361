"""Per-version rounds of periodic shared work (golden replays, drift checks): one round per interval slot per
version, so a version that appears mid-interval gets its round at the next look, one that stays gets one per
interval, and a leader that changes mid-slot offers nothing twice (the work's keys carry the slot)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from observer.config.fleet import VersionSpec


def live(versions: Sequence[VersionSpec]) -> list[VersionSpec]:
    """The versions not retired."""
    return [v for v in versions if not v.retired]


@dataclass
class Rounds:
    """Which versions are due a round: one per interval slot per version, so a version that appears
    mid-interval gets one at once and one that stays gets one per interval."""

    interval_seconds: float
    clock: Callable[[], float]
    run_at_start: bool = True  # False: the versions there at the first look wait for the next slot
    select: Callable[[Sequence[VersionSpec]], list[VersionSpec]] = live  # the versions that get rounds
    _done: dict[str, int] = field(default_factory=dict)  # version → last slot with a round (bounded by the fleet)
    _looked: bool = False

    def due(self, versions: Sequence[VersionSpec]) -> tuple[int, list[VersionSpec]]:
        """(this slot, the selected versions without a round in it yet)."""
        slot = int(self.clock() // self.interval_seconds)
        now = self.select(versions)
        if not self._looked:
            self._looked = True
            if not self.run_at_start:
                self._done.update((v.name, slot) for v in now)
        names = {v.name for v in now}
        for gone in [n for n in self._done if n not in names]:
            del self._done[gone]
        return slot, [v for v in now if self._done.get(v.name) != slot]

    def done(self, version: str, slot: int) -> None:
        self._done[version] = slot
