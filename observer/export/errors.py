"""The one place where observer errors become HTTP responses."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from observer.errors import BaselineError, ConfigError, NotFoundError, ObserverError, StoreError
from observer.export.contract import ErrorBody

_STATUS: dict[type[ObserverError], int] = {
    ConfigError: 400,
    NotFoundError: 404,
    BaselineError: 409,
    StoreError: 503,
}


def status_for(exc: ObserverError) -> int:
    """HTTP status for an observer error (500 for anything not listed)."""
    for cls in type(exc).__mro__:
        if cls in _STATUS:
            return _STATUS[cls]
    return 500


def install(app: FastAPI) -> None:
    """Register the observer-error handler on `app`."""

    async def handle(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ObserverError)
        body = ErrorBody(error=type(exc).__name__, detail=str(exc)).model_dump(exclude_none=True)
        return JSONResponse(body, status_code=status_for(exc))

    app.add_exception_handler(ObserverError, handle)
