"""Is this config valid? One answer: each area's validation function, the same one its build calls.

`observer check-config` and `observer serve` (before anything starts) run every area's check; each area's
build calls its own check again and builds from what it loaded, so a config `check-config` passes cannot be
refused by the build. Only facts of the place the observer runs are left to `serve`: a port in use, the
pod's service account, the database answering.
"""

from __future__ import annotations

from collections.abc import Callable

from observer.config.spec import ObserverConfig
from observer.errors import ConfigError


def _slo(config: ObserverConfig) -> None:
    from observer.render.objectives import build_alerting

    build_alerting(config)


def _canary(config: ObserverConfig) -> None:
    if config.canary.enabled:
        from observer.analyse.pairs import resolve_pairs

        resolve_pairs(config)


def _quality(config: ObserverConfig) -> None:
    from observer.analyse.quality.checks import validate

    validate(config)


def _sampling(config: ObserverConfig) -> None:
    from observer.sample.checks import validate

    validate(config)


def _discovery(config: ObserverConfig) -> None:
    from observer.discover.kubeapi import validate

    validate(config.discovery.kubernetes)


CHECKS: tuple[tuple[str, Callable[[ObserverConfig], None]], ...] = (
    ("discovery", _discovery), ("sampling", _sampling), ("quality", _quality), ("slo", _slo), ("canary", _canary))


def check_references(config: ObserverConfig) -> list[ConfigError]:
    """Every area's problem with `config` (empty when it is valid); one per area, the first it finds."""
    problems: list[ConfigError] = []
    for _, check in CHECKS:
        try:
            check(config)
        except ConfigError as e:
            if str(e) not in {str(p) for p in problems}:  # shadow replay checks the canary's pairs too
                problems.append(e)
    return problems
