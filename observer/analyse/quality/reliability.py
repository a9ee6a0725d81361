"""Judge reliability, continuously: the anchors re-graded whenever the judge changes and at least daily.

The judge's identity is its model, its prompt's hash and the hashes of the rubrics the anchors use; a
re-grade is due at start, when that identity differs from the last graded one, and when the last grade is
older than `interval_seconds`. The result (κ, TPR, TNR, items, judge errors) is exported per judge, next to
the pairwise judge's position consistency (the share of shadow pairs whose two orders agreed) and the
hourly call budget left; `ObserverJudgeAgreementLow` tickets when κ is under the configured floor.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from observer import conventions as names
from observer.analyse.quality.calibrate import Agreement, LabelledItem, calibrate
from observer.analyse.quality.judge import JudgeClient
from observer.analyse.quality.prompts import Rubric
from observer.analyse.quality.users import UserAgreement
from observer.config.quality import ReliabilitySpec

log = logging.getLogger("observer.quality.reliability")


@dataclass(frozen=True)
class Grade:
    """One re-grade of the anchors."""

    identity: Mapping[str, str]
    agreement: Agreement
    checked_at: float


def judge_identity(judge: JudgeClient, rubrics: Mapping[str, Rubric], items: Sequence[LabelledItem]
                   ) -> dict[str, str]:
    """Model, prompt hash and the hashes of the rubrics the anchors use: a change of any needs a re-grade."""
    used = sorted({i.rubric for i in items} & set(rubrics))
    return {"judge_model": judge.model, "prompt_version": judge.prompt.version, "prompt_hash": judge.prompt.hash,
            "rubric_hash": ",".join(f"{r}={rubrics[r].hash}" for r in used)}


class JudgeReliability:
    """Re-grades the anchors when due; holds the last grade."""

    def __init__(self, judge: JudgeClient, rubrics: Mapping[str, Rubric], items: Sequence[LabelledItem], *,
                 spec: ReliabilitySpec, clock: Callable[[], float] = time.time) -> None:
        self.judge = judge
        self.rubrics = dict(rubrics)
        self.items = list(items)[: spec.max_items]
        self.spec = spec
        self.clock = clock
        self.last: Grade | None = None

    def due(self, now_identity: Mapping[str, str] | None = None) -> str | None:
        """Why a re-grade is due now (for the judge's current identity), or None."""
        if self.last is None:
            return "first grade"
        if now_identity is None:
            now_identity = judge_identity(self.judge, self.rubrics, self.items)
        if dict(self.last.identity) != now_identity:
            changed = sorted(k for k in now_identity if now_identity[k] != self.last.identity.get(k))
            return f"judge identity changed ({', '.join(changed)})"
        if self.clock() - self.last.checked_at >= self.spec.interval_seconds:
            return f"last grade older than {self.spec.interval_seconds:g}s"
        return None

    async def run_once(self) -> Grade | None:
        """Re-grade when due (the calls count against the judge's hourly budget); the new grade or None."""
        identity = judge_identity(self.judge, self.rubrics, self.items)
        why = self.due(identity)
        if why is None:
            return None
        agree, _ = await calibrate(self.judge, self.rubrics, self.items)
        self.last = Grade(identity=identity, agreement=agree, checked_at=self.clock())
        kappa = "undefined" if agree.kappa is None else f"{agree.kappa:.3f}"
        log.info("judge reliability re-graded (%s): κ %s on %d anchors, %d judge error(s); identity %s", why,
                 kappa, agree.n, agree.errors, identity)
        if agree.kappa is not None and agree.kappa < self.spec.kappa_floor:
            log.warning("judge %s agrees with the anchors at κ %.3f, under the floor %.2f: judge-based quality "
                        "results are not trustworthy (runbook judge-agreement)", self.judge.model, agree.kappa,
                        self.spec.kappa_floor)
        return self.last


class ReliabilityCollector(Collector):
    """Exports the judge's agreement, position consistency and budget (label `judge` = the judge model)."""

    def __init__(self, judge: JudgeClient, reliability: JudgeReliability | None,
                 position: Callable[[], tuple[int, int]] | None = None, users: UserAgreement | None = None) -> None:
        self.judge = judge
        self.reliability = reliability
        self.position = position  # (consistent, judged) shadow pairs
        self.users = users

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        j = [self.judge.model]
        budget = GaugeMetricFamily(names.JUDGE_BUDGET, "Judge HTTP calls allowed in any sliding hour.",
                                   labels=[names.JUDGE])
        budget.add_metric(j, self.judge.budget_per_hour)
        left = GaugeMetricFamily(names.JUDGE_BUDGET_REMAINING, "Judge HTTP calls left in the sliding hour.",
                                 labels=[names.JUDGE])
        left.add_metric(j, max(0, self.judge.budget_left()))
        yield from (budget, left)
        grade = self.reliability.last if self.reliability else None
        if grade is not None:
            a = grade.agreement
            items = GaugeMetricFamily(names.JUDGE_AGREEMENT_ITEMS, "Anchors the judge graded at the last re-grade.",
                                      labels=[names.JUDGE])
            items.add_metric(j, a.n)
            errors = GaugeMetricFamily(names.JUDGE_AGREEMENT_ERRORS, "Anchors the judge failed to grade (errors) "
                                       "at the last re-grade.", labels=[names.JUDGE])
            errors.add_metric(j, a.errors)
            checked = GaugeMetricFamily(names.JUDGE_AGREEMENT_CHECKED, "Unix time of the last anchor re-grade.",
                                        labels=[names.JUDGE])
            checked.add_metric(j, grade.checked_at)
            yield from (items, errors, checked)
            if a.kappa is not None:  # undefined (one rater constant): absent, never NaN
                kappa = GaugeMetricFamily(names.JUDGE_AGREEMENT_KAPPA, "Cohen's kappa of the judge against the "
                                          "human-labelled anchors (last re-grade).", labels=[names.JUDGE])
                kappa.add_metric(j, a.kappa)
                yield kappa
        users = self.users.last if self.users is not None else None
        if users is not None:
            answers = GaugeMetricFamily(names.JUDGE_USER_AGREEMENT_ANSWERS, "Sampled answers of the window that "
                                        "the live judge graded and users gave feedback on.", labels=[names.JUDGE])
            answers.add_metric(j, users.agreement.n)
            yield answers
            if users.agreement.kappa is not None:
                kappa = GaugeMetricFamily(names.JUDGE_USER_AGREEMENT_KAPPA, "Cohen's kappa of the live judge's "
                                          "pass against the users' (no negative feedback) on those answers.",
                                          labels=[names.JUDGE])
                kappa.add_metric(j, users.agreement.kappa)
                yield kappa
        if self.position is not None:
            consistent, judged = self.position()
            if judged:
                pc = GaugeMetricFamily(names.JUDGE_POSITION_CONSISTENCY, "Share of judged shadow pairs whose two "
                                       "orders (answer positions swapped) agreed.", labels=[names.JUDGE])
                pc.add_metric(j, consistent / judged)
                yield pc
