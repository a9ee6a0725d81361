"""Embedding drift against pinned baselines (issue 5). Owned by that area; the root config includes it."""

from __future__ import annotations

from pydantic import Field  # noqa: F401

from observer.config.base import Spec


class DriftSpec(Spec):
    """Embedding drift against pinned baselines (issue 5)."""

    enabled: bool = Field(True, description="Turn this area on or off.")
