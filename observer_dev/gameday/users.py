"""The game day's users: some of them answer what the observer sampled, with a thumb, a rating or a regenerate
(`POST /api/v1/feedback`), disliking one version's answers more often than the other's when a scenario says so."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import numpy as np


class GamedayUsersError(RuntimeError):
    """The observer refused the users' feedback."""


def give_feedback(observer_url: str, samples: Sequence[Mapping[str, Any]], *, response_rate: float,
                  negative: float, rng: np.random.Generator, seen: set[str]) -> int:
    """Post feedback on a `response_rate` share of the `samples` (mirrored with a `response_id`) not in `seen`
    (a sample mirrored again in a later round is one answer), each negative with probability `negative`: a thumb,
    a rating (1-2 negative, 4-5 not) or, among the negatives, a regenerate. Returns the events stored."""
    events = []
    for s in samples:
        if s["response_id"] in seen:
            continue
        seen.add(s["response_id"])
        if rng.random() >= response_rate:
            continue
        bad = bool(rng.random() < negative)
        kind = rng.choice(["thumbs", "rating", "regenerate"], p=[0.7, 0.2, 0.1]) if bad else \
            rng.choice(["thumbs", "rating"], p=[0.78, 0.22])
        value = {"thumbs": 0 if bad else 1, "rating": int(rng.integers(1, 3) if bad else rng.integers(4, 6)),
                 "regenerate": None}[str(kind)]
        events.append({"id": f"fb-{s['response_id']}", "response_id": s["response_id"], "kind": str(kind),
                       **({"value": value} if value is not None else {})})
    if not events:
        return 0
    r = httpx.post(f"{observer_url}/api/v1/feedback", json={"events": events}, timeout=30)
    if r.status_code != 200:
        raise GamedayUsersError(f"feedback answered HTTP {r.status_code}: {r.text[:200]}")
    body = r.json()
    if body["rejected"]:
        raise GamedayUsersError(f"feedback events refused: {body['rejected']}")
    return int(body["accepted"])
