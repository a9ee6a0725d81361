"""Which versions are judged against which: configured pairs or roles, and the expected traffic share."""

from __future__ import annotations

from dataclasses import dataclass

from observer.config.spec import ObserverConfig
from observer.errors import ConfigError


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


def expected_share(config: ObserverConfig, canary: str, baseline: str) -> float | None:
    """Expected canary share of the pair's traffic from fleet.versions[].expected_traffic_weight."""
    try:
        wc = config.fleet.version(canary).expected_traffic_weight
        wb = config.fleet.version(baseline).expected_traffic_weight
    except KeyError:
        return None
    if wc is None:
        return None
    if wb is None:
        return wc if 0 < wc < 1 else None
    total = wc + wb
    return wc / total if total > 0 and 0 < wc < total else None
