"""`/api/v1/drift`: the latest drift status of every version and each version's full report."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends

from observer.analyse.drift.state import DriftState
from observer.errors import NotFoundError
from observer.export import contract


def router(state: DriftState, *, guard: Callable[..., None]) -> APIRouter:
    """The drift routes; reports quote sample texts, so they sit behind the private-route guard."""
    r = APIRouter(prefix="/api/v1/drift", tags=["drift"], dependencies=[Depends(guard)])

    @r.get("", summary="Latest drift status of every version.", responses=contract.PRIVATE)
    def summary() -> dict[str, Any]:
        return {v: {"status": rep.status, "moved": rep.moved(), "checked_at": rep.checked_at,
                    "baseline_hash": rep.baseline_hash}
                for v in state.versions() if (rep := state.report(v)) is not None}

    @r.get("/{version}", summary="Latest drift report of a version: fields, features, examples.",
           responses={**contract.PRIVATE, 404: contract.error("No drift check of this version yet.")})
    def report(version: str) -> dict[str, Any]:
        rep = state.report(version)
        if rep is None:
            raise NotFoundError(f"no drift check of version {version!r} yet")
        return rep.as_json()

    return r
