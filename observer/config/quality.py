"""Golden sets, rule checks and LLM-as-judge (issue 4). Owned by that area; the root config includes it."""

from __future__ import annotations

from pydantic import Field  # noqa: F401

from observer.config.base import Spec


class QualitySpec(Spec):
    """Golden sets, rule checks and LLM-as-judge (issue 4)."""

    enabled: bool = Field(True, description="Turn this area on or off.")
