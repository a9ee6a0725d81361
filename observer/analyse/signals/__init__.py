"""Per-version signals over the sliding window, from deltas between scrapes (contract 2: SignalStore).

Each scrape cycle is folded in by `record`: vLLM targets update their reset-adjusted running totals
(observer.analyse.window), the totals are summed per version and kept as a bounded history, and the
window signals are computed from the difference between the newest snapshot and the one at
`now - window_seconds` — PromQL `histogram_quantile` on bucket increases, rates as increase / elapsed.
A target that is down keeps its last totals in the version sum, so the exported per-version counters
never go down when a pod dies. GPUs come from the version's DCGM targets, joined on namespace + pod.

Thread safety: `record` and the queries take one lock; the exporter reads `snapshot`, an immutable
object swapped in at the end of each cycle (the /metrics route runs in a worker thread).
"""

from observer.analyse.signals.model import (
    MAX_SLICES,
    GpuSignals,
    Quantiles,
    SliceTotals,
    Snapshot,
    VersionExport,
    VersionSignals,
)
from observer.analyse.signals.store import SignalStore

__all__ = ["MAX_SLICES", "GpuSignals", "Quantiles", "SignalStore", "SliceTotals", "Snapshot", "VersionExport",
           "VersionSignals"]
