"""Pin a drift baseline from a version's stored samples: the one function the CLI and the game day call."""

from __future__ import annotations

from dataclasses import dataclass, replace

from observer.analyse.drift import baseline as bl
from observer.analyse.drift.baseline import BaselineRepo
from observer.analyse.drift.calibrate import Calibration, calibrate
from observer.analyse.drift.check import Checker, model_key, select
from observer.analyse.drift.embedder import make_embedder
from observer.config.spec import ObserverConfig
from observer.errors import ConfigError
from observer.store.open import open_store
from observer.store.records import SOURCES


@dataclass(frozen=True)
class Pinned:
    """A pinned baseline: its content hash, model key, sample count and whether it is now active."""

    hash: str
    short: str
    model: str
    n: int
    active: bool
    units: str = ""  # "412 conversations", as the baseline's units were formed
    calibration: str = ""  # its own false-alarm rate, or why it was not measured


def open_checker(cfg: ObserverConfig) -> Checker:
    """A drift checker on the configured sample store, baseline folder and embedder."""
    store = open_store(cfg.sampling.store)
    return Checker(config=cfg, store=store, repo=BaselineRepo(cfg.drift.baseline_dir),
                   embedder_factory=lambda: make_embedder(cfg.drift.embedder))


def known_version(cfg: ObserverConfig, version: str) -> None:
    """ConfigError unless `version` may be checked or pinned: a configured version, or with Kubernetes
    discovery on any version (a Rollout revision's pod-template hash is in no list a command can read
    offline; its stored samples decide, and none gives a clear error where they are read)."""
    names = [v.name for v in cfg.fleet.versions]
    if version not in names and cfg.discovery.kubernetes is None:
        raise ConfigError(f"unknown version {version!r}; configured: {', '.join(names) or 'none'}",
                          path="fleet.versions")


def pin_baseline(cfg: ObserverConfig, version: str, *, now: float, created_by: str, since: float | None = None,
                 until: float | None = None, source: str | None = None, model: str | None = None,
                 promote: bool = False, note: str = "", checker: Checker | None = None) -> Pinned:
    """Capture an immutable baseline of `version`'s stored samples in [since, until); optionally promote it.

    Raises ConfigError for an unknown version (with Kubernetes discovery on, every version is known: its
    samples decide) or source, BaselineError/StoreError/EmbeddingError as the
    repository, store and embedder do."""
    known_version(cfg, version)
    if source is not None and source not in SOURCES:
        raise ConfigError(f"unknown source {source!r}; choose {', '.join(SOURCES)}")
    checker = checker or open_checker(cfg)
    samples = select(checker.store, version, since=since, until=until, limit=None,
                     sources=[source] if source else cfg.drift.sources)
    key = model or model_key(cfg, version, samples)
    spec = cfg.drift
    b = bl.build(samples, checker.embedder(), model=key, source_version=version, since=since, until=until,
                 created_by=created_by, created_at=now, max_samples=spec.max_baseline_samples,
                 slice_seconds=spec.slice_seconds, seed=spec.seed, source=source or ",".join(spec.sources),
                 note=note, min_units=spec.min_baseline_units)
    # Its own windows against the rest, as live windows will be tested: its false-alarm rate and spread.
    measured = calibrate(b, window_seconds=spec.window_seconds, slice_seconds=spec.slice_seconds, alpha=spec.alpha,
                         feature_alpha=spec.feature_alpha, permutations=spec.permutations,
                         min_samples=spec.min_samples, seed=spec.seed)
    b = bl.seal(replace(b, meta=replace(b.meta, calibration=measured.as_json())))
    checker.repo.save(b)
    if promote:
        checker.repo.promote(b.hash, by=created_by, at=now,
                             reason="pinned with --promote" + (f": {note}" if note else ""))
    return Pinned(hash=b.hash, short=b.short(), model=key, n=b.meta.n, active=promote,
                  units=f"{b.meta.unit_count} {b.meta.units}", calibration=describe(measured))


def describe(c: Calibration) -> str:
    """One line on a baseline's own noise, for `observer baseline pin` and `show`."""
    if not c.windows:
        return f"own false-alarm rate not measured: {c.note}"
    rates = ", ".join(f"{name} {c.flagged[name]}/{c.windows}" for name in sorted(c.flagged))
    return f"its own {c.window_seconds / 3600.0:g} h windows against the rest, flagged: {rates}"
