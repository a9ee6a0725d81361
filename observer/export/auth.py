"""Bearer-token guard for ingest and admin endpoints. /metrics and the health probes stay open.

Fail closed: with no token configured the private routes answer 503 naming the fix, unless the config
says so explicitly (`server.auth.mode: none`)."""

from __future__ import annotations

import hmac
from collections.abc import Callable

from fastapi import Header, HTTPException

NO_TOKEN = ("private routes are disabled: no bearer token is configured; set OBSERVER_AUTH_TOKEN (or "
            "server.auth_token), or server.auth.mode: none to serve them without authentication")


def bearer_guard(token: str | None, *, anonymous: bool = False) -> Callable[[str | None], None]:
    """A FastAPI dependency enforcing `Authorization: Bearer <token>`. Without a token: open when
    `anonymous` (server.auth.mode: none), else every call is refused with 503 and the fix."""

    def check(authorization: str | None = Header(default=None)) -> None:
        if token is None:
            if anonymous:
                return
            raise HTTPException(status_code=503, detail=NO_TOKEN)
        if authorization is None:
            raise HTTPException(status_code=401, detail="missing Authorization: Bearer <token>",
                                headers={"WWW-Authenticate": "Bearer"})
        scheme, _, given = authorization.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
            raise HTTPException(status_code=403, detail="bearer token not accepted")

    return check
