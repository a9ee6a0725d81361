"""Two data sources, one judge: the observer's own SignalStore, or the Prometheus HTTP API (fleet mode).

Both return ArmData for one version over [since, now]: finished requests by reason, histogram increases,
golden-set and live-check totals, and the drift area's latest results. Missing data is None/absent
(the judge turns it into Nodata), never zero, so "no traffic" and "no source" stay distinguishable.
"""

from observer.analyse.canary.sources.base import (
    ENVIRONMENT_KEYS,
    CanarySource,
    CostReader,
    DriftReader,
    FeedbackReader,
    PairsReader,
    QualityReader,
    SignalsReader,
    SourceError,
    needs,
    paired_counts,
)
from observer.analyse.canary.sources.feedback import StoreFeedback
from observer.analyse.canary.sources.own import OwnSource, environment
from observer.analyse.canary.sources.prometheus import PrometheusSource, histogram_from_vector

__all__ = [
    "ENVIRONMENT_KEYS",
    "CanarySource",
    "CostReader",
    "DriftReader",
    "FeedbackReader",
    "OwnSource",
    "PairsReader",
    "PrometheusSource",
    "QualityReader",
    "SignalsReader",
    "SourceError",
    "StoreFeedback",
    "environment",
    "histogram_from_vector",
    "needs",
    "paired_counts",
]
