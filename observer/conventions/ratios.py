"""The one table of what a canary ratio metric counts: for each kind, the bad events over which total, the
observer's series that hold them (what fleet mode reads and the report's query shows), and the Argo dimension
it gates in. The judge, both canary sources, the Argo renderer and the report read it here, so a sixth kind is
one row and a `match` that `assert_never` names where it is missing — not five places that drift apart (the
report once queried finished reasons for ratios that count draft tokens)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from observer.conventions import labels as lb
from observer.conventions import metrics as m
from observer.conventions.promql import selector


class RatioCounts(StrEnum):
    """What a ratio metric counts (exactly one per metric; `CanaryMetricSpec.counts`)."""

    FINISHED_REASONS = "finished_reasons"
    HTTP_4XX = "http_4xx"
    LIVE_CHECK = "live_check"
    SPEC_DECODE = "spec_decode"
    CORRUPTED = "corrupted"


@dataclass(frozen=True)
class RatioKind:
    """One kind of ratio: its bad and total series (accumulated counters the observer exports) and where it
    gates. A total of several series is their sum."""

    counts: RatioCounts
    bad: str
    totals: tuple[str, ...]
    argo_dimension: str
    what: str

    def bad_matchers(self, check: str | None) -> dict[str, str]:
        """Exact matchers of the bad series (a finished-reason list is a regex: `ratio_query` adds it)."""
        match self.counts:
            case RatioCounts.FINISHED_REASONS:
                return {}
            case RatioCounts.HTTP_4XX:
                return {lb.HTTP_STATUS_CLASS: "4xx"}
            case RatioCounts.LIVE_CHECK:
                return {lb.CHECK: check or ""}
            case RatioCounts.SPEC_DECODE:
                return {lb.OUTCOME: "rejected"}
            case RatioCounts.CORRUPTED:
                return {}

    def total_matchers(self, series: str, check: str | None) -> dict[str, str]:
        if series == m.HTTP_RESPONSES:
            return {lb.HTTP_STATUS_CLASS: "4xx"}
        return {lb.CHECK: check or ""} if self.counts is RatioCounts.LIVE_CHECK else {}


RATIOS: Mapping[RatioCounts, RatioKind] = MappingProxyType({
    RatioCounts.FINISHED_REASONS: RatioKind(
        RatioCounts.FINISHED_REASONS, m.REQUESTS, (m.REQUESTS,), "errors",
        "finished requests with one of `finished_reasons` over all finished requests (with `http_5xx`, 5xx "
        "responses and admission rejections beyond the `error` finishes are added to both)"),
    RatioCounts.HTTP_4XX: RatioKind(
        RatioCounts.HTTP_4XX, m.HTTP_RESPONSES, (m.REQUESTS, m.HTTP_RESPONSES), "errors",
        "4xx responses (refused before the engine) over finished requests plus those refusals"),
    RatioCounts.LIVE_CHECK: RatioKind(
        RatioCounts.LIVE_CHECK, m.LIVE_CHECK_FAILURES, (m.LIVE_CHECKS,), "quality",
        "sampled requests that failed `live_check` over those it scored"),
    RatioCounts.SPEC_DECODE: RatioKind(
        RatioCounts.SPEC_DECODE, m.SPEC_DECODE_TOKENS, (m.SPEC_DECODE_TOKENS,), "latency",
        "rejected draft tokens over draft tokens (speculative decoding)"),
    RatioCounts.CORRUPTED: RatioKind(
        RatioCounts.CORRUPTED, m.CORRUPTED_REQUESTS, (m.REQUESTS,), "errors",
        "finished requests with NaNs in their logits over finished requests"),
})
assert tuple(RATIOS) == tuple(RatioCounts)


def ratio_query(counts: RatioCounts, *, arms: Mapping[str, str], window: str, reasons: Sequence[str] = (),
                check: str | None = None) -> str:
    """PromQL of a ratio's bad share per version over `window` (e.g. `[600s]`), on the observer's series for the
    arms `arms` selects (label → regex): the evidence the judge compared, as the report links it."""
    kind = RATIOS[counts]
    regex = {lb.VERSION: arms[lb.VERSION]}
    bad_exact = kind.bad_matchers(check)
    bad_regex = {**regex, **({lb.FINISHED_REASON: "|".join(reasons)} if counts is RatioCounts.FINISHED_REASONS
                             else {})}
    bad = f"sum by ({lb.VERSION}) (increase({selector(kind.bad + '_total', bad_exact, regex=bad_regex)}{window}))"
    totals = " + ".join(
        f"sum by ({lb.VERSION}) (increase({selector(t + '_total', kind.total_matchers(t, check), regex=regex)}"
        f"{window}))" for t in kind.totals)
    return f"{bad} / ({totals})" if len(kind.totals) > 1 else f"{bad} / {totals}"
