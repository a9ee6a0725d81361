"""What a replica serves, asked of the server itself: the token ids vLLM's `/tokenize` returns for a fixed
probe conversation with the server's chat template applied. A change of tokenizer or server-side chat template
changes the ids, so it shows up without reading any file; two replicas of one version that answer differently
serve two builds under one name.

An engine without `/tokenize` (older vLLM, another server) or one that refuses it is `unknown`: named, never a
disagreement. Bounded: one hash per scrape target and model, targets capped by the version's pods.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from observer import conventions as names

UNKNOWN = "unknown"
PROBE: tuple[dict[str, str], ...] = (
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Say hello in one word. 東京 ¿qué? <tag> 3.14"},
)
"""The probe conversation: a system turn (templates differ in where they put it), a user turn, characters
tokenizers split differently (CJK, accents, markup, a number)."""
MAX_TARGETS = 64


def tokenize_url(metrics_url: str) -> str:
    """The engine's /tokenize beside its /metrics (vLLM serves both from the API server's root)."""
    parts = urlsplit(metrics_url)
    return f"{parts.scheme}://{parts.netloc}/tokenize"


def version_url(metrics_url: str) -> str:
    """The engine's /version beside its /metrics (vLLM's API server answers {"version": "0.x.y"})."""
    parts = urlsplit(metrics_url)
    return f"{parts.scheme}://{parts.netloc}/version"


MAX_ENGINE_VERSION_CHARS = 40
RELEASE = re.compile(rf"^[0-9A-Za-z.+_-]{{1,{MAX_ENGINE_VERSION_CHARS}}}$")
"""What a /version answer's release must look like to be taken (a label value: bounded, no markup)."""


def engine_version(body: Any) -> str:
    """The version in a /version answer, UNKNOWN when it has none that looks like one."""
    v = body.get("version") if isinstance(body, dict) else None
    return v if isinstance(v, str) and RELEASE.match(v) else UNKNOWN


def probe_body(model: str) -> dict[str, Any]:
    """vLLM's chat tokenize request: the template applied, with the generation prompt a chat request gets."""
    return {"model": model, "messages": list(PROBE), "add_generation_prompt": True}


def tokenizer_hash(answer: Any) -> str:
    """12 hex digits of SHA-256 over the token ids of a /tokenize answer; UNKNOWN when it has none."""
    tokens = answer.get("tokens") if isinstance(answer, dict) else None
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, int) for t in tokens):
        return UNKNOWN
    return hashlib.sha256(json.dumps(tokens).encode()).hexdigest()[:12]


def combined(hashes: Sequence[str]) -> str:
    """One version's tokenizer fact from its replicas' hashes: the hash they agree on, `mixed` when they
    disagree, UNKNOWN when none answered."""
    known = {h for h in hashes if h != UNKNOWN}
    if not known:
        return UNKNOWN
    return known.pop() if len(known) == 1 else "mixed"


@dataclass
class ReplicaIdentities:
    """Per version: (replica, model) → tokenizer hash, as last probed."""

    by_version: dict[str, dict[tuple[str, str], str]] = field(default_factory=dict)

    def record(self, version: str, hashes: dict[tuple[str, str], str]) -> None:
        self.by_version[version] = dict(list(hashes.items())[:MAX_TARGETS])

    def retain(self, versions: Collection[str]) -> None:
        """Forget the versions no longer watched."""
        self.by_version = {k: v for k, v in self.by_version.items() if k in versions}

    def of(self, version: str) -> dict[tuple[str, str], str]:
        return self.by_version.get(version, {})


class IdentityCollector(Collector):
    """observer_replica_tokenizer_info{version, model, replica, tokenizer} = 1 for each probed replica."""

    def __init__(self, identities: ReplicaIdentities) -> None:
        self.identities = identities

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        g = GaugeMetricFamily(names.REPLICA_TOKENIZER, "Hash of the token ids each replica's /tokenize returns for "
                              "a fixed probe conversation with its chat template applied (value 1); `unknown` "
                              "where the engine has no /tokenize or refuses it.",
                              labels=[names.VERSION, names.MODEL, names.REPLICA, names.TOKENIZER])
        for version, hashes in sorted(self.identities.by_version.items()):
            for (replica, model), h in sorted(hashes.items()):
                g.add_metric([version, model[:128], replica, h], 1.0)
        yield g
