"""The observer's HTTP surface: /metrics, /healthz, /readyz, OpenAPI docs, plus each area's routers."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fastapi import APIRouter, FastAPI, Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from observer import __version__
from observer.export import errors


def create_app(*, registry: CollectorRegistry, routers: Sequence[APIRouter],
               not_ready: Callable[[], str | None]) -> FastAPI:
    """Build the FastAPI app; `not_ready` answers /readyz: None when ready (first scrape cycle done,
    discovery synced), else why not."""
    app = FastAPI(title="observer", version=__version__,
                  description="Observability, drift and canary analysis for LLM serving.")
    errors.install(app)

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        """Liveness: cheap, never touches a target."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], responses={503: {"description": "Not ready yet, and why (the first "
                                                                        "scrape cycle, discovery not synced).",
                                                         "content": {"application/json": {}}}})
    def readyz(response: Response) -> dict[str, str]:
        """Readiness: config loaded, the first scrape cycle done, discovery (if any) synced."""
        reason = not_ready()
        if reason is None:
            return {"status": "ready"}
        response.status_code = 503
        return {"status": "starting", "reason": reason}

    for router in routers:
        app.include_router(router)
    return app
