"""The live judge against the users: on the sampled answers that both the judge graded and users gave feedback
on, how often they agree (Cohen's κ, as against the human-labelled anchors). Users judge the whole answer and
the judge its rubric, so perfect agreement is not the goal; a κ that falls says one of them changed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from observer.analyse.quality.calibrate import Agreement, agreement
from observer.store.feedback import FeedbackStore

USER_WINDOW_SECONDS = 86_400.0
"""The answers whose feedback came in the last day."""

MAX_ANSWERS = 10_000
"""Most answers read per computation (the newest)."""


@dataclass(frozen=True)
class UserGrade:
    """The judge against the users over the window, as of `checked_at`."""

    agreement: Agreement
    checked_at: float


class UserAgreement:
    """Recomputed from the sample store by a periodic job; `last` is what the collector exports."""

    def __init__(self, store: FeedbackStore, scorer: str, *, window_seconds: float,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.scorer = scorer
        self.window_seconds = window_seconds
        self.clock = clock
        self.last: UserGrade | None = None

    def compute(self) -> UserGrade:
        now = self.clock()
        pairs = self.store.judged_feedback(self.scorer, since=now - self.window_seconds, limit=MAX_ANSWERS)
        self.last = UserGrade(agreement(pairs), now)
        return self.last

    async def run_once(self) -> None:
        await asyncio.to_thread(self.compute)
