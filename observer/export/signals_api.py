"""JSON API of the scraping area: `GET /api/v1/signals` (per-version window signals) and
`GET /api/v1/targets` (per-target scrape health). Strict JSON: unknown values are `null`, never NaN."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from observer import jsonsafe
from observer.analyse.signals import SignalStore
from observer.collect.scraper import TargetHealth


def json_response(payload: Any) -> Response:
    """A JSON response that can never contain NaN or Infinity (observer.jsonsafe)."""
    return Response(jsonsafe.dumps(payload, sort_keys=True), media_type="application/json")


def signals_payload(store: SignalStore) -> dict[str, Any]:
    """The /api/v1/signals document."""
    snap = store.snapshot
    return {
        "generated_at": snap.ts,
        "cycles": snap.cycles,
        "window_seconds": snap.window_seconds,
        "versions": {name: e.signals for name, e in snap.versions.items()},
    }


def targets_payload(health: TargetHealth) -> dict[str, Any]:
    """The /api/v1/targets document."""
    targets = []
    for s in health.statuses():
        doc = jsonsafe.strict(s)
        doc["errors"] = {reason.value: n for reason, n in s.errors}
        targets.append(doc)
    return {"targets": targets}


def router(store: SignalStore, health: TargetHealth) -> APIRouter:
    """Routes serving the snapshot of `store` and the health of every target."""
    api = APIRouter(prefix="/api/v1", tags=["signals"])

    @api.get("/signals", response_class=Response,
             responses={200: {"content": {"application/json": {}},
                              "description": "Window signals per version (null where unknown)."}})
    def signals() -> Response:
        """Per-version signals over the sliding window: latency quantiles, rates, ratios, KV cache, GPUs."""
        return json_response(signals_payload(store))

    @api.get("/targets", response_class=Response,
             responses={200: {"content": {"application/json": {}},
                              "description": "Scrape health of every (version, target)."}})
    def targets() -> Response:
        """Scrape health per target: up, last duration, last success, last failure reason and message."""
        return json_response(targets_payload(health))

    return api
