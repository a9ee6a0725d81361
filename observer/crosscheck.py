"""Cross-section config checks: references between sections that only the areas' own models resolve
(an SLO naming an unknown version, a canary pair of unknown versions, a latency threshold that is not
a bucket edge). Run by `observer check-config` and before `observer serve` starts, so a bad reference
is refused at start, not at render or evaluation time."""

from __future__ import annotations

from collections.abc import Callable

from observer.config.spec import ObserverConfig
from observer.errors import ConfigError


def _slo(config: ObserverConfig) -> None:
    from observer.render.objectives import build_alerting

    build_alerting(config)


def _canary(config: ObserverConfig) -> None:
    if config.canary.enabled:
        from observer.analyse.canary.pairs import resolve_pairs

        resolve_pairs(config)


CHECKS: tuple[tuple[str, Callable[[ObserverConfig], None]], ...] = (("slo", _slo), ("canary", _canary))


def check_references(config: ObserverConfig) -> list[ConfigError]:
    """Every cross-section problem of `config` (empty when it is consistent)."""
    problems: list[ConfigError] = []
    for _, check in CHECKS:
        try:
            check(config)
        except ConfigError as e:
            problems.append(e)
    return problems
