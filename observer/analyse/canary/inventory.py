"""Version inventory: one info series per (version, served model) carrying a fingerprint of what serves.

The fingerprint hashes the served model name and max model length read from vLLM with the prompt-template
and sampling-defaults hashes given in config (and, where the engine reports them, its tokenizer, weights, cache
settings and release), so "a rollback that forgot the prompt template" (same model,
other fingerprint than before) and "old pods still serving after promotion" (two fingerprints for one
version) become visible in PromQL: `count by (version) (observer_version_info) > 1`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from observer import conventions as names
from observer.analyse.canary.sources import ENVIRONMENT_KEYS, SignalsReader, environment
from observer.analyse.signals.identity import MAX_ENGINE_VERSION_CHARS
from observer.fleetview import FleetView

MAX_LABEL = 128


class ServedModels(Protocol):
    """Model name → info per version, as the scrape area reads it from /metrics and /v1/models."""

    def served_models(self, version: str) -> dict[str, dict[str, str]]: ...


@dataclass(frozen=True)
class VersionInfo:
    """What one version serves, as observed and as configured."""

    version: str
    model: str
    max_model_len: str
    prompt_template_hash: str
    sampling_defaults_hash: str
    tokenizer: str = ""  # the replicas' /tokenize probe hash (observer.analyse.signals.identity), mixed, unknown
    root: str = ""  # the weights the engine says it loaded (/v1/models `root`: a path or a hub id)
    engine_args: str = ""  # vLLM's cache settings (cache_config_info), as the fairness check compares them
    engine_version: str = ""  # vLLM's release from its replicas' /version (`mixed` when they differ)
    images: str = ""  # the pods' images, by digest where the kubelet reports one (Kubernetes discovery)

    @property
    def fingerprint(self) -> str:
        """12 hex digits of SHA-256 over the facts (the server-side ones only where the engine reports them,
        so a fingerprint is stable across observer upgrades for engines that report none)."""
        facts = [self.model, self.max_model_len, self.prompt_template_hash, self.sampling_defaults_hash]
        facts += [f"{k}={v}" for k, v in (("tokenizer", self.tokenizer), ("root", self.root),
                                           ("engine_args", self.engine_args), ("engine_version", self.engine_version),
                                           ("images", self.images))
                  if v and v != "unknown"]
        return hashlib.sha256("\x1f".join(facts).encode()).hexdigest()[:12]


def inventory(fleet: FleetView, signals: ServedModels | None) -> list[VersionInfo]:
    """One VersionInfo per (version, served model) the scrapes report; nothing for unseen versions."""
    out: list[VersionInfo] = []
    for v in fleet.versions():
        served: dict[str, dict[str, str]] = {}
        if signals is not None:
            served = dict(signals.served_models(v.name) or {})
        for model, info in sorted(served.items()):
            out.append(VersionInfo(version=v.name, model=model[:MAX_LABEL],
                                   max_model_len=str(info.get("max_model_len", ""))[:32],
                                   prompt_template_hash=(v.prompt_template_hash or "")[:MAX_LABEL],
                                   sampling_defaults_hash=(v.sampling_defaults_hash or "")[:MAX_LABEL],
                                   tokenizer=str(info.get("tokenizer", "unknown"))[:16], root=str(info.get("root", "")),
                                   engine_args=str(info.get(names.ENGINE_ARGS, "")),
                                   engine_version=str(info.get(names.ENGINE_VERSION, ""))[:MAX_ENGINE_VERSION_CHARS],
                                   images=",".join(v.images)))
    return out


class VersionInfoCollector(Collector):
    """Exports VERSION_INFO from the signal store at each scrape of /metrics."""

    def __init__(self, fleet: FleetView, signals: ServedModels | None) -> None:
        self.fleet = fleet
        self.signals = signals

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        g = GaugeMetricFamily(names.VERSION_INFO, "What each version serves (value 1); the fingerprint "
                              "changes when the model, max length, prompt template or sampling defaults do.",
                              labels=[names.VERSION, names.MODEL, names.MAX_MODEL_LEN,
                                      names.PROMPT_TEMPLATE_HASH, names.SAMPLING_DEFAULTS_HASH,
                                      names.TOKENIZER, names.FINGERPRINT])
        for i in inventory(self.fleet, self.signals):
            g.add_metric([i.version, i.model, i.max_model_len, i.prompt_template_hash,
                          i.sampling_defaults_hash, i.tokenizer, i.fingerprint], 1.0)
        yield g


class EnvironmentCollector(Collector):
    """Exports VERSION_ENVIRONMENT: the same-environment facts the own source judges with (GPU model and driver,
    engine cache settings), so a judge reading Prometheus (fleet mode) checks the same fairness."""

    def __init__(self, fleet: FleetView, signals: SignalsReader | None) -> None:
        self.fleet = fleet
        self.signals = signals

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        g = GaugeMetricFamily(names.VERSION_ENVIRONMENT, "Facts compared between a canary and its baseline "
                              "(value 1): GPU model and driver from DCGM, vLLM cache settings from "
                              "cache_config_info, vLLM's release from /version, the weights from /v1/models.",
                              labels=[names.VERSION, *ENVIRONMENT_KEYS])
        if self.signals is not None:
            for v in self.fleet.versions():
                env = environment(self.signals, v.name)
                if env:
                    g.add_metric([v.name, *(env.get(k, "") for k in ENVIRONMENT_KEYS)], 1.0)
        yield g
