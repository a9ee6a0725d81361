"""Service-level objectives and alerting (issue 7). Owned by that area; the root config includes it."""

from __future__ import annotations

from pydantic import Field  # noqa: F401

from observer.config.base import Spec


class SLOSpec(Spec):
    """Service-level objectives and alerting (issue 7)."""

    enabled: bool = Field(True, description="Turn this area on or off.")
