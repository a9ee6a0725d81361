"""The real scenarios' wall-clock scale, sized from the engine's measured speed.

Real rounds are paced: each slice of the canary judge holds one round of bursts, and golden replays run beside
them. Their sizes were tuned on one CPU; on a slower one the same load overruns its rounds, replays pile up
behind it, and the scenarios time out. So the engine is measured first (`measure_speed` in
observer_dev.gameday.load: a burst on both generators, one request's decode rate, one embedding batch) and the
pace is chosen from the measurement (`pace_for`): the number of rounds (the slices the judge needs) stays, the
requests per round shrink and the rounds lengthen so that the load takes the same share of a round as on the
reference machine. An engine too slow for the smallest honest design within the budget is refused with its
figures (`TooSlow`), never skipped.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

PROBE_REQUESTS = 12
"""Per generator in the probe's burst: half a reference round, so the probe costs little on a slow engine."""
PROBE_TRIES = 3
"""Bursts at most, while they read slower than SLACK: the fastest counts. The burst is the noisiest figure (two
servers share one core), and one busy moment (a neighbour, the previous tier's processes exiting) must not size
or refuse the whole tier."""
REFERENCE_PROBE_S = 4.4
"""The probe's burst (PROBE_REQUESTS of 8 tokens to each of the two generators sharing a core, 6 in flight
each) on the reference machine, unslowed: the machine the sizes below were tuned on (2 cores, AVX-512),
measured 2026-12-05 (a whole round of 24 took 7.1 s: the load fills 70 % of a 10 s round)."""
REFERENCE_DECODE_TOKENS_S = 13.6
"""One request's decode rate alone on the reference machine (the same day)."""
BASE_ROUND_S = 10.0
BASE_REQUESTS = 24
MIN_REQUESTS = 8
"""Per arm and round: fewer and a slice's TTFT quantile and error share rest on a handful of requests."""
BASE_REQUEST_TIMEOUT_S = 120.0
SLACK = 1.5
"""Below this stretch the reference sizes are kept: a busy moment on the same machine is not a slower one."""
ROUND_FIXED_S = 1.7
ROUND_PER_REQUEST_S = 0.225
"""A round's burst on the reference machine as fixed part plus per-request part (per arm): 12 requests took
4.4 s and 24 took 7.1 s. On an engine `stretch` times slower both parts stretch."""
LOAD_SHARE = 7.1 / BASE_ROUND_S
"""The share of a round the load takes on the reference machine; the rest is for golden replays, the
observer's cycles and a slow request's tail. A slower engine's rounds keep it."""
TIER_ROUNDS = 50
TIER_FIXED_S = 100.0
"""The tier's time as a fixed part plus a number of rounds (with the judge's decoding beside them), fitted
on this machine, 2026-12-05: 608 s at the reference pace (10 s rounds) and about 1,150 s at a measured stretch
of 2.6 (19 s rounds). More than the rounds the scenarios play stretches with a slow engine: warm-ups,
restarts' first bursts, the demo's load, the streams of the hung and killed canaries."""
JUDGE_REFERENCE_S = 20.0
"""The judge test's 16 verdicts on the reference machine (19 s measured 2026-12-02): it scales with decoding."""
TIER_BUDGET_S = 1800.0
"""What the tier may take: beyond it `make test` would run close to an hour (set-up, the parallel tier and the
two game days take about 25 minutes on the reference machine), and the tier refuses to start instead."""


def stretch_of(probe_s: float) -> float:
    """How many times slower than the reference machine a probe burst of `probe_s` reads (never below 1)."""
    return max(1.0, probe_s / REFERENCE_PROBE_S)


@dataclass(frozen=True)
class EngineSpeed:
    """What the probe measured."""

    probe_s: float  # the probe's burst on both generators (the fastest of `probes`)
    decode_tokens_s: float  # one request alone, tokens per second after the first
    embed_batch_s: float  # 32 texts through /v1/embeddings
    probes: tuple[float, ...] = ()  # every burst on both generators, in order
    alone_s: float | None = None  # the same burst on the first generator alone, measured when the probe read slow

    @property
    def stretch(self) -> float:
        """How many times slower than the reference machine (never below 1)."""
        return stretch_of(self.probe_s)

    def describe(self) -> str:
        tries = f" (fastest of {', '.join(f'{p:.1f}' for p in self.probes)} s)" if len(self.probes) > 1 else ""
        alone = ""
        if self.alone_s is not None:
            # Two servers on one core should take about twice one alone; far more is contention between them
            # (the scheduler, the engines' waits), not a slow CPU.
            alone = (f", one generator alone {self.alone_s:.1f} s ({self.probe_s / max(self.alone_s, 1e-3):.1f}x "
                     f"slower with both on its core)")
        return (f"probe burst {self.probe_s:.1f} s{tries} (reference {REFERENCE_PROBE_S} s){alone}, decode "
                f"{self.decode_tokens_s:.1f} tokens/s alone (reference {REFERENCE_DECODE_TOKENS_S}), embedding "
                f"batch of 32 {self.embed_batch_s:.2f} s: {self.stretch:.1f}x the reference")


@dataclass(frozen=True)
class Pace:
    """The wall-clock scale of real rounds: the defaults are the reference machine's."""

    round_seconds: float = BASE_ROUND_S
    requests: int = BASE_REQUESTS
    concurrency: int = 6
    request_timeout_s: float = BASE_REQUEST_TIMEOUT_S
    stretch: float = 1.0

    @property
    def judge_concurrency(self) -> int:
        """Judge calls in flight on the real judge: more on a slow engine, whose batches then fill (a verdict
        decodes token by token, and a batch of four costs little more than one)."""
        return 2 if self.stretch <= SLACK else 4

    @property
    def golden_interval_s(self) -> float:
        """Golden replays once a round: more would queue behind the rounds' load on a slow engine."""
        return self.round_seconds

    def sleep_out(self, round_start: float) -> None:
        """Sleep until a round after `round_start` (time.monotonic()), so each slice holds one round."""
        time.sleep(max(0.0, self.round_seconds - (time.monotonic() - round_start)))

    def describe(self) -> str:
        return (f"{self.requests} requests per arm and round, {self.concurrency} in flight, rounds of "
                f"{self.round_seconds:.0f} s, requests time out after {self.request_timeout_s:.0f} s")


class TooSlow(Exception):
    """The engine cannot run the smallest honest design within the budget."""


def estimate_tier_s(pace: Pace, speed: EngineSpeed) -> float:
    """The tier's wall-clock time at this pace (an estimate: fixed costs, rounds, the judge's decoding)."""
    judge_s = JUDGE_REFERENCE_S * REFERENCE_DECODE_TOKENS_S / max(speed.decode_tokens_s, 1e-3)
    return TIER_FIXED_S + TIER_ROUNDS * pace.round_seconds + judge_s


def pace_for(speed: EngineSpeed, *, budget_s: float = TIER_BUDGET_S) -> Pace:
    """The pace for an engine this fast: the reference sizes up to SLACK; beyond it the requests per round
    shrink by the square root of the stretch (to MIN_REQUESTS) and the rounds lengthen so that the load keeps
    its share of a round (LOAD_SHARE). TooSlow, naming the figures, when the tier would not fit `budget_s`."""
    s = speed.stretch
    if s <= SLACK:
        pace = Pace()
    else:
        requests = max(MIN_REQUESTS, round(BASE_REQUESTS / math.sqrt(s)))
        load_s = s * (ROUND_FIXED_S + ROUND_PER_REQUEST_S * requests)
        pace = Pace(round_seconds=math.ceil(load_s / LOAD_SHARE), requests=requests, concurrency=min(6, requests),
                    request_timeout_s=BASE_REQUEST_TIMEOUT_S * s, stretch=s)
    need = estimate_tier_s(pace, speed)
    if need > budget_s:
        raise TooSlow(f"the real engine is too slow for the real tier: {speed.describe()}. At the design for it "
                      f"({pace.describe()}) the tier needs about {need / 60:.0f} min, over its budget of "
                      f"{budget_s / 60:.0f} min (TIER_BUDGET_S in observer_dev/gameday/pace.py). Run the tier on "
                      f"a faster machine, or with fewer busy neighbours")
    return pace
