"""The fast-rollback window after a promotion: Argo keeps the previous stable ReplicaSet's pods for
`scaleDownDelaySeconds` (30 s by default with traffic routing) so an abort right after promotion shifts
traffic back without starting a model. If those pods go sooner (an autoscaler, a node drain, a person scaling
by hand), a rollback now waits for new pods to schedule and load.

Discovery sees a promotion as the Rollout's `stableRS` changing; the window is counted from that moment, so an
observer started inside a window does not know of it (no series, never a false 0).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from observer.discover.model import PodInfo, RolloutInfo


@dataclass
class Window:
    """One model's last promotion, while its previous version should still have pods."""

    previous: str           # the previous stable's pod-template hash
    promoted_at: float      # discovery's clock when it saw the promotion
    delay: float            # the Rollout's scaleDownDelaySeconds
    pods: int = 0           # the previous version's serving pods at the last recompute
    version: str = ""       # its version name (the hash with the model's version_prefix)


@dataclass
class RollbackWindows:
    """Per model: the stable hash last seen and the open rollback window, if any."""

    clock: Callable[[], float]
    stable: dict[str, str] = field(default_factory=dict)
    windows: dict[str, Window] = field(default_factory=dict)

    def observe(self, group: str, rollout: RolloutInfo | None, pods: Iterable[PodInfo], identity_label: str,
                prefix: str = "") -> int:
        """Record the Rollout's stable hash (a change opens a window) and count the previous version's serving
        pods; returns that count while the window is open, else 0 (for the stale-revision count to leave out)."""
        if rollout is None or rollout.stable_hash is None:
            return 0
        before = self.stable.get(group)
        self.stable[group] = rollout.stable_hash
        now = self.clock()
        if before is not None and before != rollout.stable_hash and rollout.scale_down_delay:
            self.windows[group] = Window(previous=before, promoted_at=now, delay=float(rollout.scale_down_delay))
        w = self.open(group)
        if w is None:
            return 0
        w.pods = sum(1 for p in pods if p.serving and p.labels.get(identity_label) == w.previous)
        w.version = f"{prefix}{w.previous}"
        return w.pods

    def open(self, group: str) -> Window | None:
        """The model's window if it has not run out (an expired one is dropped)."""
        w = self.windows.get(group)
        if w is not None and self.clock() - w.promoted_at >= w.delay:
            del self.windows[group]
            return None
        return w
