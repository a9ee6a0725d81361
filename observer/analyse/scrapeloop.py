"""The scrape cycle: scraper → target health → signal store, and the served-model inventory read from each
version's OpenAI endpoint.

It follows the live fleet: the composition root rebinds the store and the health on every fleet change,
so discovered pods become targets at the next cycle and leave it the same way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from observer.analyse.signals import SignalStore
from observer.analyse.signals.identity import (
    UNKNOWN,
    ReplicaIdentities,
    combined,
    engine_version,
    probe_body,
    tokenize_url,
    tokenizer_hash,
    version_url,
)
from observer.analyse.signals.model import replica_name
from observer.collect.scraper import Scraper, TargetHealth
from observer.conventions.labels import ENGINE_VERSION
from observer.fleetview import FleetView

log = logging.getLogger("observer.scrape")


@dataclass
class ScrapeLoop:
    """One scrape cycle at a time over the health's targets; `first_cycle_done` gates readiness."""

    scraper: Scraper
    store: SignalStore
    health: TargetHealth
    fleet: FleetView
    http: httpx.AsyncClient
    clock: Callable[[], float]
    timeout_seconds: float
    identities: ReplicaIdentities = field(default_factory=ReplicaIdentities)
    first_cycle_done: bool = field(default=False, init=False)
    last_cycle_seconds: float | None = field(default=None, init=False)

    async def cycle(self) -> None:
        """Scrape every target once, fold the results into the store, update target health."""
        started = self.clock()
        t0 = time.perf_counter()
        results = await self.scraper.scrape_all(self.health.targets)
        self.health.record(results)
        self.store.record(results, ts=started)
        self.last_cycle_seconds = time.perf_counter() - t0
        self.first_cycle_done = True
        down = sum(1 for r in results.values() if not r.ok)
        log.debug("scrape cycle: %d target(s), %d down, %.3fs", len(results), down, self.last_cycle_seconds)

    async def served_models(self) -> None:
        """Read each version's /v1/models (vLLM reports max_model_len and the weights' `root` there), ask each
        replica's /tokenize for its tokenizer-and-template hash and its /version for the engine's release, for
        the version inventory."""
        versions = list(self.fleet.versions())
        self.identities.retain({v.name for v in versions})
        for v in versions:
            info: dict[str, dict[str, str]] = {}
            url = (v.openai or "").rstrip("/") + "/models"
            try:
                if v.openai:
                    r = await self.http.get(url, timeout=self.timeout_seconds)
                    r.raise_for_status()
                    info = {str(m["id"]): {"max_model_len": str(m["max_model_len"]), "root": str(m.get("root") or "")}
                            for m in r.json().get("data", [])
                            if isinstance(m, dict) and "id" in m and m.get("max_model_len") is not None}
            except (httpx.HTTPError, ValueError, AttributeError, KeyError, TypeError) as e:
                log.warning("version %s: could not read served models from %s: %s", v.name, url, e)
            models = [v.model] if v.model else (sorted(self.store.served_models(v.name)) or sorted(info))[:1]
            hashes = {(replica_name(v, i, target), m): await self._tokenizer(v.name, target, m)
                      for i, target in enumerate(v.vllm) for m in models}
            self.identities.record(v.name, hashes)
            engine = combined([await self._engine_version(v.name, target) for target in v.vllm])
            for m in models:
                info.setdefault(m, {})["tokenizer"] = combined([h for (_, model), h in hashes.items() if model == m])
                if engine != UNKNOWN:
                    info[m][ENGINE_VERSION] = engine
            if info:
                self.store.record_served_info(v.name, info)

    async def _engine_version(self, version: str, metrics_url: str) -> str:
        """One replica's vLLM release from /version; UNKNOWN without it (an engine that serves none)."""
        url = version_url(metrics_url)
        try:
            r = await self.http.get(url, timeout=self.timeout_seconds)
            r.raise_for_status()
            return engine_version(r.json())
        except (httpx.HTTPError, ValueError) as e:
            log.debug("version %s: no engine version from %s: %s", version, url, e)
            return UNKNOWN

    async def _tokenizer(self, version: str, metrics_url: str, model: str) -> str:
        """One replica's tokenizer-and-template hash; UNKNOWN (logged once per answer kind) without /tokenize."""
        url = tokenize_url(metrics_url)
        try:
            r = await self.http.post(url, json=probe_body(model), timeout=self.timeout_seconds)
            r.raise_for_status()
            return tokenizer_hash(r.json())
        except (httpx.HTTPError, ValueError) as e:
            log.debug("version %s: no tokenizer fingerprint from %s: %s", version, url, e)
            return UNKNOWN

    def not_ready(self) -> str | None:
        """Why the observer is not ready as far as scraping goes (None: the first cycle has finished)."""
        return None if self.first_cycle_done else "the first scrape cycle has not finished"
