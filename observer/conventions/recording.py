"""The recording rules the dashboards read: per-version rates of the per-pod series, named once here.

At fleet size a dashboard panel that rates the raw per-pod series makes Prometheus read every pod's series
at every refresh; the recorded series hold one row per (namespace, version, model, other labels) instead, and
with observer replicas one replica's rate, not their sum (`canary.prometheus.replica_labels`).
"""

from __future__ import annotations

from observer.conventions import metrics as m

RATE_WINDOW = "1m"
RULE_GROUP_DASHBOARDS = "observer-dashboard-rates"
POD_LABELS = ("pod", "instance")  # what tells one scraped pod (or observer replica) from another

_MEANS = (m.HIST_TTFT, m.HIST_ITL, m.HIST_E2E, m.HIST_QUEUE)  # quantiles and means: buckets, sum, count
_QUANTILES = (m.HIST_PREFILL, m.HIST_DECODE, m.HIST_PROMPT_LENGTH, m.HIST_GENERATION_LENGTH,
              m.HIST_MAX_GENERATION_TOKENS)  # quantiles only: buckets
_COUNTERS = (m.REQUESTS, m.PROMPT_TOKENS, m.GENERATION_TOKENS, m.PREEMPTIONS, m.PREFIX_CACHE_QUERIES,
             m.PREFIX_CACHE_HITS)

# The raw series (as written in PromQL) whose per-version rate is recorded: those the dashboards rate.
RECORDED: tuple[str, ...] = (*(f"{h}{s}" for h in _MEANS for s in ("_bucket", "_sum", "_count")),
                             *(f"{h}_bucket" for h in _QUANTILES), *(f"{c}_total" for c in _COUNTERS))


def recorded(series: str) -> str:
    """The recording rule's name for `series`: level:metric:operation, as Prometheus' naming asks (a
    counter's `_total` dropped, since the rate is no total)."""
    return f"version:{series.removesuffix('_total')}:rate{RATE_WINDOW}"
