"""A rollout source's plan: the versions its objects name, before the pods are matched to them.

Every source's reader (observer/discover/primitives.py, revisions.py, and the Argo and role-label reader in
model.py) makes one; one builder (model.py `build_state`) turns a plan and the model's pods into the versions
discovery publishes, so caps, counts, URLs, the DCGM join and the expected shares are the same for all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

Role = Literal["stable", "canary", "other"]


@dataclass(frozen=True)
class Member:
    """One version a source names."""

    identity: str
    role: Role
    weight: float | None  # expected share of the model's traffic, 0..1; None: the objects do not say
    pod_labels: Mapping[str, str]  # equality selector of the pods serving it (shared pods: the pool's)
    model: str | None = None  # the model name that tells it apart on shared pods (adapter rewrites)
    created: float | None = None


@dataclass(frozen=True)
class Plan:
    """The versions one source names, and what was wrong with its objects."""

    primitive: str  # the source's key (observer.config.sources)
    name: str
    members: tuple[Member, ...]
    problems: Mapping[str, int]
    details: tuple[str, ...] = ()  # one line per problem, for the log
    canary_weight: float | None = None  # the canary's share where the source says it without a canary member

    def member(self, identity: str) -> Member | None:
        return next((m for m in self.members if m.identity == identity), None)


class _Reading:
    """Problems met while reading, with a line each."""

    def __init__(self) -> None:
        self.problems: Counter[str] = Counter()
        self.details: list[str] = []

    def add(self, problem: str, detail: str) -> None:
        self.problems[problem] += 1
        self.details.append(f"{problem}: {detail}")

    def plan(self, primitive: str, name: str, members: Sequence[Member]) -> Plan:
        if not members and not self.problems:
            self.add("no_members", f"{primitive} {name} names no version")
        return Plan(primitive, name, tuple(members), dict(self.problems), tuple(self.details))


