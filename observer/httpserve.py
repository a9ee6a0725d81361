"""One place for uvicorn's settings: every server the observer runs (service, proxy, simulator) starts here."""

from __future__ import annotations

from typing import Any

import uvicorn


def uvicorn_config(app: Any, *, host: str = "127.0.0.1", port: int = 0, lifespan: str = "off",
                   **overrides: Any) -> uvicorn.Config:
    """uvicorn settings: quiet (warnings only, no access log), lifespan off unless asked; `overrides` win."""
    settings: dict[str, Any] = {"log_level": "warning", "access_log": False, "lifespan": lifespan}
    settings.update(overrides)
    return uvicorn.Config(app, host=host, port=port, **settings)
