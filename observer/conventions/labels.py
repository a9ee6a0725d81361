"""Label names. Every label value is bounded: config names, enum members or histogram edges, never text."""

from __future__ import annotations

VERSION = "version"
MODEL = "model"
QUANTILE = "quantile"
FINISHED_REASON = "finished_reason"
LE = "le"
KIND = "kind"  # target kind: vllm | dcgm
TARGET = "target"  # configured target URL (bounded by config)
REASON = "reason"  # bounded error reason token
STAT = "stat"  # mean | max
GOLDEN_SET = "golden_set"
CHECK = "check"
FIELD = "field"  # drift field: prompts | outputs | <scalar feature>
CANARY = "canary"
BASELINE = "baseline"
METRIC = "metric"
ARM = "arm"  # canary | baseline (canary analysis), current | baseline (drift)
SOURCE = "source"  # proxy | ingest
REDACTION_KIND = "redaction_kind"
SEVERITY = "severity"

QUANTILES: tuple[float, ...] = (0.5, 0.95, 0.99)
FINISHED_REASONS: tuple[str, ...] = ("stop", "length", "abort", "error", "repetition")
"""Finished reasons vLLM emits (error from 0.13, repetition from 0.20). Others are folded into 'other'."""
