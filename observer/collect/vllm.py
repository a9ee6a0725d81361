"""vLLM metrics normalisation: `vllm:`/`vllm_` spellings, renamed families mapped to today's names
(never double-counted), `engine` aggregated, unknown families ignored."""

from __future__ import annotations

from observer.collect.model import VllmScrape
from observer.collect.promtext import Family


def normalise(families: list[Family]) -> VllmScrape:
    """Map parsed families of one vLLM target to per-model metrics under today's names."""
    raise NotImplementedError


def parse_vllm(text: str) -> VllmScrape:
    """Parse and normalise one vLLM /metrics body."""
    raise NotImplementedError
