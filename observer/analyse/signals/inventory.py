"""What each version says it serves, beside what the scrapes see: facts its OpenAI endpoint reports per
model (e.g. max_model_len from /v1/models), bounded in models and facts."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

MAX_MODELS = 16
MAX_FACTS = 8


@dataclass
class ServedInfo:
    """Per version, model → facts, as last reported."""

    by_version: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)

    def record(self, version: str, info: Mapping[str, Mapping[str, str]]) -> None:
        self.by_version[version] = {m: dict(list(i.items())[:MAX_FACTS]) for m, i in list(info.items())[:MAX_MODELS]}

    def retain(self, versions: Collection[str]) -> None:
        """Forget the versions no longer watched."""
        self.by_version = {k: i for k, i in self.by_version.items() if k in versions}

    def of(self, version: str) -> dict[str, dict[str, str]]:
        return self.by_version.get(version, {})
