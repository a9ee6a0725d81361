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


RETRY_AFTER_SECONDS = 5


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
        status = status_for(exc)
        # 503 is transient (a store that is down or busy): say when to come back, as clients and proxies expect.
        headers = {"Retry-After": str(RETRY_AFTER_SECONDS)} if status == 503 else None
        return JSONResponse(body, status_code=status, headers=headers)

    app.add_exception_handler(ObserverError, handle)
