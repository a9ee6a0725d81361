"""Pressure before refusals: the share of a version's prompts that come close to its context limit. vLLM refuses
a prompt over `max_model_len` (a 400 in no finished count); the prompts just under it are the warning, and they
also leave little room for the answer.

vLLM's prompt-length histogram has 1-2-5 edges up to `max_model_len`, so "close" is the largest edge at or
under NEAR_LIMIT of the limit (for 8192: over 5000 tokens; for 2048: over 1000): the threshold is exported with
the share, never implied.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from observer import conventions as names
from observer.collect.model import Histogram

NEAR_LIMIT = 0.9
"""A prompt is near the limit above the largest bucket edge at or under this share of max_model_len."""
MIN_REQUESTS = 20
"""Finished requests in the window below which no share is exported (one long prompt is not a trend)."""


def near_limit(h: Histogram, max_model_len: int) -> tuple[float, float] | None:
    """(threshold tokens, share of prompts over it) of a window's prompt-length histogram; None without an edge
    at or under NEAR_LIMIT × max_model_len, or with fewer than MIN_REQUESTS prompts."""
    edges = [i for i, b in enumerate(h.bounds) if 0 < b <= NEAR_LIMIT * max_model_len]
    total = h.cumulative[-1] if h.cumulative else 0.0
    if not edges or total < MIN_REQUESTS:
        return None
    i = edges[-1]
    return h.bounds[i], max(0.0, total - h.cumulative[i]) / total


class PressureCollector(Collector):
    """observer_window_prompt_near_limit_ratio{version} and its threshold, from the signal store's window."""

    def __init__(self, versions: Callable[[], Sequence[str]],
                 prompts: Callable[[str], Histogram | None], max_len: Callable[[str], int | None]) -> None:
        self.versions, self.prompts, self.max_len = versions, prompts, max_len

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        share = GaugeMetricFamily(names.WIN_PROMPT_NEAR_LIMIT, "Share of the window's prompts longer than "
                                  "observer_prompt_near_limit_threshold_tokens (the largest prompt-length bucket "
                                  f"edge at or under {NEAR_LIMIT:g} × max_model_len).", labels=[names.VERSION])
        threshold = GaugeMetricFamily(names.PROMPT_NEAR_LIMIT_THRESHOLD, "Prompt length (tokens) above which a "
                                      "prompt counts as near the version's max_model_len.", labels=[names.VERSION])
        for version in self.versions():
            h, limit = self.prompts(version), self.max_len(version)
            got = near_limit(h, limit) if h is not None and limit else None
            if got is not None:
                threshold.add_metric([version], got[0])
                share.add_metric([version], got[1])
        yield from (share, threshold)
