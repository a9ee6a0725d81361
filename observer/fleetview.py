"""The fleet as it is now: the configured versions, plus those discovery found, changing while we run.

`FleetView` is the seam every area reads versions through (the scrape loop, the canary judge, the
inventory); `LiveFleet` is the one implementation: static versions from `fleet.versions` and one
discovered set per source (e.g. the Kubernetes API), replaced whole on every change. A listener runs
after each change, on the caller's thread; listeners must be quick (they re-bind scrape targets).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Protocol

from observer.config.fleet import VersionSpec


class FleetView(Protocol):
    """Read side of the fleet."""

    @property
    def generation(self) -> int: ...

    def versions(self) -> Sequence[VersionSpec]: ...

    def version(self, name: str) -> VersionSpec | None: ...


class LiveFleet:
    """Static versions plus discovered ones; static names win (a discovered duplicate is dropped)."""

    def __init__(self, static: Sequence[VersionSpec] = ()) -> None:
        self._static = tuple(static)
        self._discovered: dict[str, tuple[VersionSpec, ...]] = {}
        self._lock = threading.Lock()
        self._generation = 0
        self._merged: tuple[VersionSpec, ...] = self._static
        self._by_name: Mapping[str, VersionSpec] = {v.name: v for v in self._static}
        self._listeners: list[Callable[[Sequence[VersionSpec]], None]] = []
        self.shadowed: set[str] = set()  # discovered names hidden by a static version of the same name

    @property
    def generation(self) -> int:
        """Bumped on every change; a reader caches per generation."""
        return self._generation

    def versions(self) -> Sequence[VersionSpec]:
        return self._merged

    def version(self, name: str) -> VersionSpec | None:
        return self._by_name.get(name)

    def subscribe(self, listener: Callable[[Sequence[VersionSpec]], None]) -> None:
        """Call `listener(versions)` after every change (not now)."""
        self._listeners.append(listener)

    def replace(self, source: str, versions: Sequence[VersionSpec]) -> bool:
        """Set what `source` discovered; True when the merged fleet changed (listeners were called)."""
        with self._lock:
            new = tuple(versions)
            if self._discovered.get(source) == new:
                return False
            self._discovered[source] = new
            merged = list(self._static)
            seen = {v.name for v in merged}
            shadowed: set[str] = set()
            for src in sorted(self._discovered):
                for v in self._discovered[src]:
                    if v.name in seen:
                        shadowed.add(v.name)
                        continue
                    seen.add(v.name)
                    merged.append(v)
            self.shadowed = shadowed
            if tuple(merged) == self._merged:
                return False
            self._merged = tuple(merged)
            self._by_name = {v.name: v for v in merged}
            self._generation += 1
            listeners = list(self._listeners)
            snapshot = self._merged
        for listener in listeners:
            listener(snapshot)
        return True


class VersionNames(Collection[str]):
    """The fleet's version names now, as a collection (`name in names` asks the live fleet)."""

    def __init__(self, fleet: FleetView) -> None:
        self.fleet = fleet

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.fleet.version(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter([v.name for v in self.fleet.versions()])

    def __len__(self) -> int:
        return len(self.fleet.versions())
