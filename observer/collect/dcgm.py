"""DCGM-exporter parsing: one record per GPU with the fields the observer uses."""

from __future__ import annotations

from observer.collect.model import DcgmScrape


def parse_dcgm(text: str) -> DcgmScrape:
    """Parse one DCGM-exporter /metrics body into per-GPU records."""
    raise NotImplementedError
