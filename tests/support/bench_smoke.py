"""Every bench's smoke mode: the tiny sizes each one runs at in the suite, to its last line (one JSON object).

A figure in docs/benchmarks.md is only as good as the bench that made it still running: a refactor that
breaks one (a helper renamed, an import moved into a function) fails its smoke test, not the next person who
wants to re-measure. The sizes prove the bench runs end to end; its figures at these sizes mean nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HELPERS = frozenset({"__init__", "engine_tap", "fleet_prom"})
"""Modules of bench/ that benches import and that run nothing themselves."""


@dataclass(frozen=True)
class Smoke:
    args: tuple[str, ...] = ()
    processes: bool = False
    """Starts servers (Prometheus, nginx, the simulator, an observer): the second smoke file runs these."""
    slow: str = ""
    """Why it runs in `make bench-smoke` and not in `make test`: CPU the suite's 45 minutes cannot spare."""
    real: str = ""
    """Why it runs in neither: it needs what no suite can give it beside the real tier."""


EMBEDS_ITS_CORPUS = ("embeds its whole corpus with MiniLM before the first trial (no embedding cache in a fresh "
                     "clone), whatever the trial counts")


SMOKE: dict[str, Smoke] = {
    "alerts": Smoke(("--months", "1", "--rps", "0.1")),
    "canary": Smoke(("--runs", "1", "--aa-runs", "2", "--errors-runs", "1", "--horizon-min", "10",
                     "--step-min", "10")),
    "canary_pods": Smoke(("--quick", "--steps", "2")),
    "canary_score_budget": Smoke(("--steps", "5",)),
    "canary_slo": Smoke(("--quick",)),
    "corrupted": Smoke(("--trials", "5")),
    "drift": Smoke(("--null-trials", "3", "--shift-trials", "2", "--evidently-null-trials", "1",
                    "--evidently-shift-trials", "1", "--permutations", "19"),
                   slow=EMBEDS_ITS_CORPUS),
    "drift_gate": Smoke(("--trials", "3", "--shift-trials", "2", "--permutations", "19", "--checks", "10"),
                        slow=EMBEDS_ITS_CORPUS),
    "drift_sessions": Smoke(("--trials", "2", "--power-trials", "2", "--days", "1", "--permutations", "19"),
                            slow=EMBEDS_ITS_CORPUS),
    "feedback": Smoke(("--aa-runs", "4", "--runs", "2", "--step-min", "10")),
    "paired": Smoke(("--trials", "5", "--aa-steps", "5", "--aa-pairs", "20")),
    "replicas": Smoke(("--trials", "10",)),
    "sim": Smoke(("--requests", "500")),
    "spec_decode": Smoke(("--trials", "5",)),
    "upstream_client": Smoke(("--requests", "100", "--concurrency", "4")),
    "scrape": Smoke(("--targets", "5", "--cycles", "1", "--parse-seconds", "0.5")),
    "report": Smoke(("--renders", "3"), processes=True),
    "eval": Smoke(("--rounds", "1", "--similarity-items", "8", "--concurrency", "4"), processes=True,
                  slow="loads the embedder and replays every golden set against the simulator, whatever its sizes"),
    "proxy_idle": Smoke(("--seconds", "2"), processes=True),
    "proxy": Smoke(("--phase-seconds", "1", "--soak-seconds", "2"), processes=True),
    "proxy_profile": Smoke(("--seconds", "2"), processes=True),
    "dashboards": Smoke(("--collect", "5", "--repeat", "1"), processes=True),
    # Its game-day parts are the game days' own tests (the serial tier): the rest run here.
    "topology": Smoke(("--only", "check_config,parity,budget,drift,dashboards", "--pods", "20", "--repeats", "1"),
                      processes=True),
    "scale": Smoke(("--pods", "20", "--repeats", "2", "--seconds", "1", "--clients", "2", "--jobs", "60"),
                   processes=True),
    "gateways": Smoke(("--rounds", "1", "--per-slice", "10", "--concurrency", "16"), processes=True,
                      slow="starts nginx, HAProxy and the LiteLLM proxy (its own virtualenv) and loads each arm"),
    "real_vllm": Smoke(real="starts two real vLLM generators and the embedder of its own, which the suite's "
                            "real tier already holds (memory: one real-engine session at a time)"),
    "engine_tracing": Smoke(real="starts two real vLLM generators of its own, beside the suite's real tier"),
}


def in_this_run(smoke: Smoke) -> bool:
    """Whether a row runs here: never a real one; a slow one only in `make bench-smoke` (BENCH_SMOKE=all)."""
    return not smoke.real and (not smoke.slow or os.environ.get("BENCH_SMOKE") == "all")


def benches() -> set[str]:
    return {p.stem for p in (ROOT / "bench").glob("*.py")} - HELPERS


def run_smoke(name: str, *, timeout: float = 240.0) -> dict[str, Any]:
    """Run `python -m bench.NAME` at its smoke sizes; its last line of output, parsed (AssertionError else)."""
    # One thread for BLAS and torch: the suite's other worker keeps its core.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "OPENBLAS_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", f"bench.{name}", *SMOKE[name].args], capture_output=True,
                         text=True, timeout=timeout, cwd=ROOT, env=env)
    assert out.returncode == 0, f"bench.{name} exited {out.returncode}:\n{out.stderr[-3000:]}"
    lines = out.stdout.strip().splitlines()
    assert lines, f"bench.{name} printed nothing:\n{out.stderr[-2000:]}"
    try:
        result = json.loads(lines[-1], parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    except ValueError as e:
        raise AssertionError(f"bench.{name}'s last line is not strict JSON ({e}): {lines[-1][:300]}") from e
    assert isinstance(result, dict) and result, f"bench.{name}'s last line is not a JSON object: {lines[-1][:300]}"
    return result
