"""Which versions are judged against which: configured pairs or roles, and the expected traffic share."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from observer.config.fleet import VersionSpec
from observer.config.spec import ObserverConfig
from observer.errors import ConfigError
from observer.fleetview import FleetView

log = logging.getLogger("observer.canary")
ROLE_ALIASES = ("canary", "stable")


@dataclass(frozen=True)
class Pair:
    """A canary version judged against a baseline version."""

    canary: str
    baseline: str


def resolve_pairs(config: ObserverConfig) -> list[Pair]:
    """The configured pairs, or every role=canary version against the single role=stable one."""
    known = {v.name for v in config.fleet.versions}
    if config.canary.pairs:
        pairs = [Pair(p.canary, p.baseline) for p in config.canary.pairs]
        for i, p in enumerate(pairs):
            for side in ("canary", "baseline"):
                name = getattr(p, side)
                if name not in known:
                    raise ConfigError(f"unknown version {name!r}; fleet versions: {', '.join(sorted(known))}",
                                      path=f"canary.pairs.{i}.{side}")
            if p.canary == p.baseline:
                raise ConfigError("a version cannot be its own baseline", path=f"canary.pairs.{i}")
        return pairs
    stable = [v.name for v in config.fleet.versions if v.role == "stable"]
    canaries = [v.name for v in config.fleet.versions if v.role == "canary"]
    if not canaries:
        return []
    if len(stable) != 1:
        raise ConfigError(f"{len(stable)} role=stable versions: list canary.pairs explicitly",
                          path="canary.pairs")
    return [Pair(c, stable[0]) for c in canaries]


def role_pairs(versions: Sequence[VersionSpec]) -> list[Pair]:
    """Discovered versions' pairs: within each group (model), every canary against the group's one stable
    version; a group without exactly one stable version has no pair (until the rollout settles)."""
    groups: dict[str | None, list[VersionSpec]] = {}
    for v in versions:
        groups.setdefault(v.group, []).append(v)
    pairs: list[Pair] = []
    for group, members in groups.items():
        stable = [v.name for v in members if v.role == "stable"]
        canaries = [v.name for v in members if v.role == "canary"]
        if canaries and len(stable) == 1:
            pairs.extend(Pair(c, stable[0]) for c in canaries)
        elif canaries:
            log.debug("group %s: %d stable versions, canaries not judged", group, len(stable))
    return pairs


class FleetPairs:
    """The pairs now: configured pairs (or static roles), plus discovered canaries against their group's
    stable version; recomputed when the fleet changes (a promotion ends a pair, a new revision starts one).
    The one answer the canary judge and shadow replays both read."""

    def __init__(self, config: ObserverConfig, fleet: FleetView) -> None:
        self.config = config
        self.fleet = fleet
        self._static = resolve_pairs(config)  # validates configured pairs and roles at start
        self._static_names = {v.name for v in config.fleet.versions}
        self._at: tuple[int, list[Pair]] = (-1, [])

    def current(self) -> list[Pair]:
        gen = self.fleet.generation
        if self._at[0] != gen:
            discovered = [v for v in self.fleet.versions() if v.name not in self._static_names]
            pairs = list(self._static)
            if not self.config.canary.pairs:
                pairs += [p for p in role_pairs(discovered) if p not in pairs]
            self._at = (gen, pairs)
        return self._at[1]


def resolve_alias(name: str, versions: Sequence[VersionSpec]) -> str:
    """`name` itself when a version has it; else a role (`canary`, `stable`) or `GROUP:ROLE` names the one
    version holding that role now — so an Argo AnalysisTemplate can say `canary=canary` while versions are
    pod-template hashes and promotion moves the role. Ambiguous or unknown: `name` unchanged."""
    if any(v.name == name for v in versions):
        return name
    group, _, role = name.rpartition(":")
    if role not in ROLE_ALIASES:
        return name
    hits = [v.name for v in versions if v.role == role and (not group or v.group == group)]
    return hits[0] if len(hits) == 1 else name


def expected_share(lookup: Callable[[str], VersionSpec | None], canary: str, baseline: str) -> float | None:
    """Expected canary share of the pair's traffic from the versions' expected_traffic_weight (configured,
    or from the Rollout's current step when discovered)."""
    c, b = lookup(canary), lookup(baseline)
    if c is None or b is None:
        return None
    wc, wb = c.expected_traffic_weight, b.expected_traffic_weight
    if wc is None:
        return None
    if wb is None:
        return wc if 0 < wc < 1 else None
    total = wc + wb
    return wc / total if total > 0 and 0 < wc < total else None
