"""Observed version identity: which system prompt and sampling parameters each version's sampled requests
carry now, compared with what the same version carried before and with what the fleet config declares.

"The rollback that forgot the prompt template": the weights are rolled back (or forward) but the new
system prompt stays, or a temperature changes through a ConfigMap nobody versioned. The version name and
the served model do not change, so nothing else sees it. Each stored sample carries the hashes of its
request (conventions.fingerprint); this check counts them per version in two windows read from the store
(so an observer restart loses nothing):

    reference                                 current
    [now - window - reference, now - window)  [now - window, now)

A window's fingerprint is the (template, sampling) pair holding at least `dominant_share` of its samples
(none when no pair does, or fewer than `min_samples`). Per part (template, sampling):

- changed:  both windows have a fingerprint and the part differs → FINGERPRINT_CHANGED 1. It holds until
  the reference window is mostly the new fingerprint too (about half the reference window), long enough
  for the ticket.
- mismatch: the fleet declares the part's hash and the current fingerprint's part is not it →
  FINGERPRINT_MISMATCH 1.

Only the top_k pairs per version are exported (FINGERPRINT_SHARE): the label values are hashes, bounded
by top_k × versions, never text.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from observer import conventions as names
from observer.config.sampling import FingerprintSpec
from observer.conventions.fingerprint import HASH_HEX
from observer.fleetview import FleetView

log = logging.getLogger("observer.fingerprint")
PARTS = ("template", "sampling")
Pair = tuple[str, str]  # (template hash, sampling hash); "" where the sample did not carry that part


class FingerprintCounts(Protocol):
    """The store's per-fingerprint sample counts of a version in a time range (blocking)."""

    def fingerprint_counts(self, version: str, *, since: float, until: float) -> dict[Pair, int]: ...


@dataclass(frozen=True)
class Window:
    """Fingerprint counts of one version in one window."""

    counts: Mapping[Pair, int]
    min_samples: int
    dominant_share: float

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def dominant(self) -> Pair | None:
        """The pair holding at least dominant_share of min_samples or more, or None."""
        total = self.total
        if total < self.min_samples:
            return None
        pair, n = max(self.counts.items(), key=lambda kv: (kv[1], kv[0]))
        return pair if n >= self.dominant_share * total else None

    def top(self, k: int) -> list[tuple[Pair, float]]:
        """The k most frequent pairs with their share of the window."""
        total = self.total
        ranked = sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        return [(pair, n / total) for pair, n in ranked] if total else []


def _matches(declared: str | None, observed: str) -> bool:
    """A declared hash matches when one is a prefix of the other (a full SHA-256 or our 12 digits)."""
    if not declared or not observed:
        return True  # nothing declared, or the part was not observed: nothing to compare
    d = declared.strip().lower()
    return d.startswith(observed) or observed.startswith(d[:HASH_HEX])


@dataclass(frozen=True)
class VersionFingerprint:
    """What one check found for one version."""

    version: str
    current: Window
    reference: Window
    declared: Mapping[str, str | None]

    def changed(self) -> dict[str, bool]:
        """Per part: current and reference fingerprints differ (absent when either window has none)."""
        now, before = self.current.dominant(), self.reference.dominant()
        if now is None or before is None:
            return {}
        return {part: bool(now[i] and before[i] and now[i] != before[i]) for i, part in enumerate(PARTS)}

    def mismatch(self) -> dict[str, bool]:
        """Per declared part: the current fingerprint is not the declared one (absent without either)."""
        now = self.current.dominant()
        if now is None:
            return {}
        return {part: not _matches(self.declared.get(part), now[i]) for i, part in enumerate(PARTS)
                if self.declared.get(part) and now[i]}


@dataclass
class FingerprintWatch:
    """Runs the check per version of the fleet and keeps the last results for the collector."""

    fleet: FleetView
    store: FingerprintCounts
    spec: FingerprintSpec
    results: dict[str, VersionFingerprint] = field(default_factory=dict)

    def check(self, now: float) -> dict[str, VersionFingerprint]:
        """Count both windows of every version (blocking: call it off the event loop)."""
        s = self.spec
        split = now - s.window_seconds
        out: dict[str, VersionFingerprint] = {}
        for v in self.fleet.versions():
            current = self.store.fingerprint_counts(v.name, since=split, until=now + 1.0)
            reference = self.store.fingerprint_counts(v.name, since=split - s.reference_seconds, until=split)
            out[v.name] = VersionFingerprint(
                version=v.name, current=Window(current, s.min_samples, s.dominant_share),
                reference=Window(reference, s.min_samples, s.dominant_share),
                declared={"template": v.prompt_template_hash, "sampling": v.sampling_defaults_hash})
            before = self.results.get(v.name)
            was = before.changed() if before is not None else {}
            for part, differs in out[v.name].changed().items():
                if differs and not was.get(part):  # once when it turns on, not at every check it holds
                    log.warning("fingerprint: the %s of version %s changed from %s to %s without a new version "
                                "(runbook fingerprint-changed)", part, v.name,
                                out[v.name].reference.dominant(), out[v.name].current.dominant())
        self.results = out
        return out


class FingerprintCollector(Collector):
    """Exports the last check's shares, window sizes, changed and mismatch gauges."""

    def __init__(self, watch: FingerprintWatch) -> None:
        self.watch = watch

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        share = GaugeMetricFamily(names.FINGERPRINT_SHARE, "Share of a version's sampled requests in the current "
                                  "window per observed (system prompt, sampling parameters) hash pair; top-k.",
                                  labels=[names.VERSION, names.TEMPLATE_HASH, names.SAMPLING_HASH])
        samples = GaugeMetricFamily(names.FINGERPRINT_SAMPLES, "Sampled requests with a fingerprint per window.",
                                    labels=[names.VERSION, names.WINDOW])
        changed = GaugeMetricFamily(names.FINGERPRINT_CHANGED, "1 when a version's observed system prompt or "
                                    "sampling parameters differ from its reference window (same version name).",
                                    labels=[names.VERSION, names.PART])
        mismatch = GaugeMetricFamily(names.FINGERPRINT_MISMATCH, "1 when a version's observed hash differs from "
                                     "the one declared in fleet.versions.", labels=[names.VERSION, names.PART])
        k = self.watch.spec.top_k
        for version, r in sorted(self.watch.results.items()):
            for (template, sampling), value in r.current.top(k):
                share.add_metric([version, template or "unknown", sampling or "unknown"], value)
            samples.add_metric([version, "current"], float(r.current.total))
            samples.add_metric([version, "reference"], float(r.reference.total))
            for part, differs in r.changed().items():
                changed.add_metric([version, part], float(differs))
            for part, differs in r.mismatch().items():
                mismatch.add_metric([version, part], float(differs))
        yield from (share, samples, changed, mismatch)
