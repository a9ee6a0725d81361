"""Quality state from the store: every replica reads the committed scores and golden runs in commit order
and records them, so replicas export the same totals and a restarted replica rebuilds its state.

The store is the one place results go (live checks, judge verdicts, golden runs); `QualityState` is a cache
of it for the collector and the canary judge. Live events are only *decided* checks (a judge error or an
undecided rule is never a pass or a fail), as before.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from observer.analyse.quality.live import JUDGE_CHECK
from observer.analyse.quality.model import decode_run, parse_scorer
from observer.analyse.quality.state import QualityState
from observer.store.jobs import SharedWork

log = logging.getLogger("observer.quality")

PAGE = 5000  # rows read per query; a pass reads pages until the feed is drained


@dataclass
class QualitySync:
    """Feeds a QualityState from the store's score feed and golden runs; one cursor of each."""

    store: SharedWork
    state: QualityState
    live_checks: tuple[str, ...] = ()
    judge_rubric: str | None = None
    scores_after: tuple[int, int] = (0, 0)
    runs_after: tuple[int, int] = (0, 0)
    undecodable_runs: int = 0
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def check_of(self, scorer: str) -> str | None:
        """The live check a stored scorer name feeds (`rule:refusal` → refusal), or None."""
        match parse_scorer(scorer):
            case ("rule", check) if check in self.live_checks:
                return check
            case ("judge", rubric) if rubric == self.judge_rubric:
                return JUDGE_CHECK
        return None

    async def run_once(self) -> int:
        """Record everything committed since the last pass; return how many rows were read."""
        async with self._lock:  # the live pass and the periodic sync may both call: one cursor, one reader
            return await asyncio.to_thread(self._drain)

    def _drain(self) -> int:
        read = 0
        while events := self.store.score_events(after=self.scores_after, limit=PAGE):
            batch: dict[tuple[str, str], list[tuple[float, bool]]] = {}
            for e in events:
                check = self.check_of(e.scorer)
                if check is not None and e.passed is not None:
                    batch.setdefault((e.version, check), []).append((e.sample_ts, not e.passed))
            for (version, check), ev in batch.items():
                self.state.record_live(version, check, ev)
            self.scores_after = events[-1].cursor
            read += len(events)
        while runs := self.store.golden_runs(after=self.runs_after, limit=PAGE):
            for cursor, record in runs:
                try:
                    self.state.record_golden(decode_run(record.body))
                except (KeyError, TypeError, ValueError) as e:
                    self.undecodable_runs += 1
                    log.error("stored golden run %s of %s on %s could not be read back (%r); skipped",
                              cursor, record.golden_set, record.version, e)
            self.runs_after = runs[-1][0]
            read += len(runs)
        return read
