"""Multi-window multi-burn-rate presets as data, and Prometheus duration text.

The Google SRE workbook recipe for a 30-day period: page when 2% of the budget burns in 1h (14.4×)
or 5% in 6h (6×); ticket when 10% burns in 1d (3×) or in 3d (1×). Each long window is paired with
a short one (1/12 of it) so an alert stops soon after the burn stops. Factors are derived from the
budget fractions, so another `period_days` keeps the same budget semantics.
"""

from __future__ import annotations

from dataclasses import dataclass

HOUR = 3600.0
DAY = 86400.0


@dataclass(frozen=True)
class WindowPair:
    """Alert when the error ratio over both windows exceeds factor × budget."""

    budget_fraction: float  # share of the period's error budget burnt over `long_seconds`
    long_seconds: float
    short_seconds: float

    def factor(self, period_seconds: float) -> float:
        """The burn-rate multiplier of the error budget (14.4 for 2% of 30 days in 1h)."""
        return round(self.budget_fraction * period_seconds / self.long_seconds, 6)


@dataclass(frozen=True)
class Tier:
    """An alert tier: its severity, the window pairs OR-ed together, and how long it keeps firing."""

    severity: str
    pairs: tuple[WindowPair, ...]
    keep_firing_seconds: float  # Prometheus ≥ 2.42 `keep_firing_for`: rides out dips of the short window

    def __post_init__(self) -> None:
        if self.keep_firing_seconds > max(p.short_seconds for p in self.pairs):
            raise ValueError("keep_firing_for longer than the longest short window delays every reset")


# keep_firing_for = the tier's longest short window: at low traffic the short window's ratio hovers
# around the threshold and the plain recipe re-pages many times per incident (bench/alerts.py).
PAGE = Tier("page", (WindowPair(0.02, 1 * HOUR, 5 * 60.0), WindowPair(0.05, 6 * HOUR, 30 * 60.0)), 30 * 60.0)
TICKET = Tier("ticket", (WindowPair(0.10, 1 * DAY, 2 * HOUR), WindowPair(0.10, 3 * DAY, 6 * HOUR)), 6 * HOUR)
TIERS: tuple[Tier, ...] = (PAGE, TICKET)

RECORDED_WINDOWS: tuple[float, ...] = tuple(sorted({s for t in TIERS for p in t.pairs
                                                    for s in (p.long_seconds, p.short_seconds)}))
"""Every window an SLI error ratio is recorded over: 5m 30m 1h 2h 6h 1d 3d."""

_UNITS: tuple[tuple[str, int], ...] = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000),
                                       ("ms", 1))


def duration(seconds: float, *, days: bool = True) -> str:
    """Prometheus duration text for `seconds`, to the millisecond: 3600 → '1h', 5400 → '1h30m'. `days=False`:
    Go's time.ParseDuration text (no `d` unit: 86400 → '24h'), as Kubernetes controllers read durations."""
    ms = round(seconds * 1000)
    if ms <= 0:
        return "0s"
    parts = []
    for unit, size in _UNITS if days else _UNITS[1:]:
        if ms >= size:
            parts.append(f"{ms // size}{unit}")
            ms %= size
    return "".join(parts)
