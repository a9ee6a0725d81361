"""Bearer-token guard for ingest and admin endpoints. /metrics and the health probes stay open."""

from __future__ import annotations

import hmac
from collections.abc import Callable

from fastapi import Header, HTTPException


def bearer_guard(token: str | None) -> Callable[[str | None], None]:
    """A FastAPI dependency enforcing `Authorization: Bearer <token>` (no-op when token is None)."""

    def check(authorization: str | None = Header(default=None)) -> None:
        if token is None:
            return
        if authorization is None:
            raise HTTPException(status_code=401, detail="missing Authorization: Bearer <token>",
                                headers={"WWW-Authenticate": "Bearer"})
        scheme, _, given = authorization.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
            raise HTTPException(status_code=403, detail="bearer token not accepted")

    return check
