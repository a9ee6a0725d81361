"""`/quality/latest`: the latest completed golden run per version and golden set."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fastapi import APIRouter

from observer.analyse.quality.state import QualityState


def router(state: QualityState, *, versions: Callable[[], Sequence[str]]) -> APIRouter:
    """The quality routes; `versions` gives the fleet's version names now."""
    r = APIRouter(tags=["quality"])

    @r.get("/quality/latest")
    def latest() -> dict[str, Any]:
        """Latest completed golden run per version and golden set."""
        return {v: {g: {"pass_ratio": res.pass_ratio, "mean_score": res.mean_score, "scored": res.scored,
                        "passed": res.passed, "judge_errors": res.judge_errors, "unscored": res.unscored,
                        "set_version": res.set_version, "finished": res.finished}
                    for g, res in state.latest(v).items()}
                for v in versions()}

    return r
