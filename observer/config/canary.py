"""Canary-vs-baseline judge and Argo templates (issue 6). Owned by that area; the root config includes it."""

from __future__ import annotations

from pydantic import Field  # noqa: F401

from observer.config.base import Spec


class CanarySpec(Spec):
    """Canary-vs-baseline judge and Argo templates (issue 6)."""

    enabled: bool = Field(True, description="Turn this area on or off.")
