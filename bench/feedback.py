"""Users' feedback as a canary signal (observer/analyse/canary/userfeedback.py) on simulated chat traffic: how
often a healthy canary fails on it, and how often a canary whose users dislike more of its answers fails within
a step.

Traffic: --rps answers a second over both arms. Conversations arrive at random and stick to one arm (chosen by
the weight as they start), 1 + Geometric(mean --turns) turns 20-120 s apart. Feedback depends within a user's
conversation: each conversation's user has a propensity to answer at all (Beta, mean --response-rate, most users
never answer, a few often) and a propensity to dislike (Beta, mean 10 %, concentration 4: some users dislike
most answers); a canary worse by r multiplies the second by r (negative share 10 % → 15 %, 20 %). An event is
a thumb (70 %), a regenerate (20 %) or a rating (10 %), given Exp(30 s) after its answer. Sampling keeps every
answer, so the response rate is events per answer.

Each step lasts --step-min minutes; the metric is judged every minute on the window since the step start (one-
minute slices, the step's planned end given, as the rendered gates do) at the α a critical metric of the default
config gets (0.01) and, for comparison, at a non-critical one's. A/A steps fail at most 1 % asked.

    .venv/bin/python -m bench.feedback            # 400 A/A steps per weight and response rate, 200 per regression
    .venv/bin/python -m bench.feedback --quick    # smoke run

Last line: JSON with feedback_aa_false_fail (the largest over weights and response rates, critical α),
feedback_aa_false_fail_by_case, feedback_power_within_step ({"1.5x@5pct", "2x@5pct", "1.5x@25pct",
"2x@25pct"} at the 10 % response rate), feedback_power_by_case, feedback_nodata_share_by_case,
feedback_worse_passed (worse canaries that passed at some look: the pass bound holds a 2× one to ≤ 20 %),
tenant_series_at_100k_keys (tenant label values exported after 100,000 distinct keys through the default bound),
tenant_label_cap, tenant_label_us_per_request.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time
from dataclasses import dataclass

import numpy as np

from observer.analyse.canary import planned
from observer.analyse.canary.judge import judge_metric, metric_alpha
from observer.analyse.canary.results import ArmData, FeedbackWindow, Outcome
from observer.config.canary import CanaryMetricSpec, CanarySpec

SLICE = 60
METRIC = CanaryMetricSpec(name="feedback", kind="feedback", effect_ratio=2.0, base_rate=0.1)
CRITICAL_ALPHA = metric_alpha(CanarySpec(metrics=[*CanarySpec().metrics, METRIC.model_copy(update={"critical": True})]),
                              METRIC.model_copy(update={"critical": True}))
SCORED_ALPHA = metric_alpha(CanarySpec(metrics=[*CanarySpec().metrics, METRIC]), METRIC)
WEIGHTS = (0.05, 0.25)
RATES = (0.02, 0.10)
EFFECTS = (1.5, 2.0)


@dataclass(frozen=True)
class Case:
    weight: float
    response_rate: float
    effect: float  # 1.0: A/A
    seed: int


@dataclass(frozen=True)
class Outcomes:
    """First look (seconds) each outcome was reached, per α; None when never."""

    fail: dict[str, int | None]
    passed: dict[str, int | None]
    nodata_at_end: bool


def _arm_events(rng: np.random.Generator, *, n_conv: int, starts: np.ndarray, turns: int, response_rate: float,
                effect: float, horizon: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Answer times, and per event: time, negative, conversation."""
    answers, ev_t, ev_neg, ev_conv = [], [], [], []
    k = 1 + rng.geometric(1.0 / turns, size=n_conv)
    # Heterogeneous users: most almost never answer, a few answer most turns (Beta of concentration 1).
    respond = rng.beta(response_rate, 1.0 - response_rate, size=n_conv)
    dislike = np.minimum(1.0, rng.beta(0.4, 3.6, size=n_conv) * effect)
    for i in range(n_conv):
        t = starts[i] + np.cumsum(np.concatenate(([0.0], rng.uniform(20, 120, size=k[i] - 1))))
        t = t[t < horizon]
        answers.append(t)
        gives = rng.random(t.size) < respond[i]
        if gives.any():
            at = t[gives] + rng.exponential(30.0, size=int(gives.sum()))
            ev_t.append(at)
            ev_neg.append(rng.random(at.size) < dislike[i])
            ev_conv.append(np.full(at.size, i))
    return _cat(answers, float), _cat(ev_t, float), _cat(ev_neg, bool), _cat(ev_conv, int)


def _cat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def _window(answers: np.ndarray, ev_t: np.ndarray, ev_neg: np.ndarray, ev_conv: np.ndarray, t: int
            ) -> FeedbackWindow:
    seen = ev_t < t
    tt, neg, conv = ev_t[seen], ev_neg[seen], ev_conv[seen]
    k = t // SLICE
    idx = (tt // SLICE).astype(int)
    events = np.bincount(idx, minlength=k)[:k]
    negs = np.bincount(idx, weights=neg.astype(float), minlength=k)[:k]
    return FeedbackWindow(events=int(tt.size), negatives=int(neg.sum()), responses=int((answers < t).sum()),
                          units=int(np.unique(conv).size),
                          slices=tuple((int(a), int(b)) for a, b in zip(negs, events, strict=True)))


def run(case: Case, *, rps: float, turns: float, step_s: int) -> Outcomes:
    rng = np.random.default_rng(case.seed)
    conv_rate = rps / (1 + turns)  # conversations a second: each carries 1 + mean(Geometric) answers on average
    # Conversations from a warm-up before the step, so the step starts mid-traffic.
    n = rng.poisson(conv_rate * (step_s + 600))
    starts = rng.uniform(-600, step_s, size=n)
    canary = rng.random(n) < case.weight
    arms = {}
    for name, mask, effect in (("canary", canary, case.effect), ("stable", ~canary, 1.0)):
        a, et, en, ec = _arm_events(rng, n_conv=int(mask.sum()), starts=starts[mask], turns=int(turns),
                                    response_rate=case.response_rate, effect=effect, horizon=float(step_s))
        keep = a >= 0  # the step's window starts at 0: earlier answers and their events are not in it
        answered_in = a[keep]
        ev_keep = et >= 0
        arms[name] = (answered_in, et[ev_keep], en[ev_keep], ec[ev_keep])
    fail: dict[str, int | None] = {"critical": None, "scored": None}
    passed: dict[str, int | None] = {"critical": None, "scored": None}
    nodata = False
    for t in range(SLICE, step_s + 1, SLICE):
        c = ArmData(feedback=_window(*arms["canary"], t))
        b = ArmData(feedback=_window(*arms["stable"], t))
        plan, _ = planned.plan(step_seconds=float(step_s), elapsed_seconds=float(t), slice_seconds=SLICE,
                               window_seconds=float(step_s) + SLICE)
        for key, alpha in (("critical", CRITICAL_ALPHA), ("scored", SCORED_ALPHA)):
            r = judge_metric(METRIC, c, b, alpha=alpha, power=0.8, plan=plan)
            if r.outcome is Outcome.FAIL and fail[key] is None:
                fail[key] = t
            if r.outcome is Outcome.PASS and passed[key] is None:
                passed[key] = t
            if t == step_s and key == "critical":
                nodata = r.outcome is Outcome.NODATA
    return Outcomes(fail=fail, passed=passed, nodata_at_end=nodata)


def _task(args: tuple[Case, float, float, int]) -> tuple[Case, Outcomes]:
    case, rps, turns, step_s = args
    return case, run(case, rps=rps, turns=turns, step_s=step_s)


def tenant_flood(keys: int = 100_000, seed: int = 3) -> dict[str, float]:
    """An hour of one version's traffic from `keys` distinct tenant keys through the default tenant bound (no
    allow-list, top_n 20): 40 real tenants with Zipf-shaped traffic carry 60 % of 300,000 requests, the rest
    one key each (a client minting keys). The series exported per tenant, and the label set's size."""
    from observer.config.sampling import TenantSpec
    from observer.sample.metrics import families
    from observer.sample.tenants import Tenants

    rng = np.random.default_rng(seed)
    spec = TenantSpec()
    tenants = Tenants(spec)
    real = rng.zipf(1.3, size=180_000)
    stream = [f"tenant-{min(int(k), 40)}" for k in real] + [f"minted-{i}" for i in range(keys - 40)]
    order = rng.permutation(len(stream))
    t0 = time.process_time()
    for i in order:
        tenants.metrics.observe("stable", tenants.labels.label(stream[i]), code=200, ttft_s=0.1)
    cpu = time.process_time() - t0
    series = {s.labels["tenant"] for f in families(tenants.collector()) for s in f.samples
              if s.name == "observer_tenant_requests_total"}
    return {"tenant_series_at_100k_keys": len(series), "tenant_label_cap": len(spec.allow) + spec.top_n + 2,
            "tenant_keys": len(set(stream)), "tenant_label_us_per_request": round(cpu / len(stream) * 1e6, 2)}


def name(case: Case) -> str:
    return f"{'aa' if case.effect == 1.0 else f'{case.effect:g}x'}@{round(case.weight * 100)}pct" \
           f"/{round(case.response_rate * 100)}pct_respond"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--aa-runs", type=int, default=400, help="A/A steps per weight and response rate")
    ap.add_argument("--runs", type=int, default=200, help="steps per regression, weight and response rate")
    ap.add_argument("--rps", type=float, default=20.0, help="answers a second over both arms")
    ap.add_argument("--turns", type=float, default=5.0, help="mean extra turns of a conversation")
    ap.add_argument("--step-min", type=int, default=30)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="40 A/A steps, 20 per regression")
    args = ap.parse_args()
    if args.quick:
        args.aa_runs, args.runs = 40, 20
    t0 = time.monotonic()
    cases = [Case(w, r, 1.0, 10_000 + i) for w in WEIGHTS for r in RATES for i in range(args.aa_runs)]
    cases += [Case(w, r, e, 20_000 + i) for w in WEIGHTS for r in RATES for e in EFFECTS for i in range(args.runs)]
    with mp.Pool(args.workers) as pool:
        results = pool.map(_task, [(c, args.rps, args.turns, args.step_min * 60) for c in cases], chunksize=8)
    by: dict[str, list[Outcomes]] = {}
    for case, out in results:
        by.setdefault(name(case), []).append(out)

    def share(outs: list[Outcomes], pick: str) -> float:
        return round(sum(o.fail[pick] is not None for o in outs) / len(outs), 4)

    aa = {k: share(v, "critical") for k, v in by.items() if k.startswith("aa@")}
    aa_scored = {k: share(v, "scored") for k, v in by.items() if k.startswith("aa@")}
    aa_pass = {k: round(sum(o.passed["critical"] is not None for o in v) / len(v), 4)
               for k, v in by.items() if k.startswith("aa@")}
    power = {k: share(v, "critical") for k, v in by.items() if not k.startswith("aa@")}
    bad_passed = {k: round(sum(o.passed["critical"] is not None for o in v) / len(v), 4)
                  for k, v in by.items() if not k.startswith("aa@")}
    power_scored = {k: share(v, "scored") for k, v in by.items() if not k.startswith("aa@")}
    nodata = {k: round(sum(o.nodata_at_end for o in v) / len(v), 4) for k, v in by.items()}
    headline = {f"{e:g}x@{round(w * 100)}pct": power[f"{e:g}x@{round(w * 100)}pct/10pct_respond"]
                for w in WEIGHTS for e in EFFECTS}
    for k in sorted(by):
        print(f"{k:32s} fail {share(by[k], 'critical'):.3f} (α {CRITICAL_ALPHA:.3g}), "
              f"{share(by[k], 'scored'):.3f} (α {SCORED_ALPHA:.3g}); nodata at the end {nodata[k]:.3f}"
              + f"; passed within the step {aa_pass.get(k, bad_passed.get(k, 0.0)):.3f}")
    print(f"{len(cases)} steps in {time.monotonic() - t0:.0f} s")
    flood = tenant_flood()
    print(f"tenants: {flood['tenant_keys']} distinct keys → {flood['tenant_series_at_100k_keys']} tenant series "
          f"(cap {flood['tenant_label_cap']}), {flood['tenant_label_us_per_request']} µs CPU per request")
    print(json.dumps({"feedback_aa_false_fail": max(aa.values()), "feedback_aa_false_fail_by_case": aa,
                      "feedback_aa_false_fail_scored_alpha": aa_scored, "feedback_aa_pass_within_step": aa_pass,
                      "feedback_power_within_step": headline, "feedback_power_by_case": power,
                      "feedback_power_scored_alpha": power_scored, "feedback_worse_passed": bad_passed,
                      "feedback_nodata_share_by_case": nodata,
                      "critical_alpha": CRITICAL_ALPHA, "scored_alpha": SCORED_ALPHA,
                      **flood, "aa_runs": args.aa_runs, "runs": args.runs,
                      "rps": args.rps, "step_min": args.step_min}))


if __name__ == "__main__":
    main()
