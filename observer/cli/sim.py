"""CLI commands of this area (placeholder until the area is built)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this area's commands to `app`."""
