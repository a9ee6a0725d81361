"""Generated Grafana dashboards (issue 8). Owned by that area; the root config includes it."""

from __future__ import annotations

from pydantic import Field  # noqa: F401

from observer.config.base import Spec


class DashboardsSpec(Spec):
    """Generated Grafana dashboards (issue 8)."""

    enabled: bool = Field(True, description="Turn this area on or off.")
