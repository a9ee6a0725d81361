"""Wiring of this area into the running service (placeholder until the area is built)."""

from __future__ import annotations

from observer.runtime import Component, Context


def build(ctx: Context) -> Component | None:
    """Return this area's component, or None when it is disabled or not configured."""
    return None
