"""A fleet-sized Prometheus for `bench/scale.py`: the per-pod observer series of ≥ 1,000 pods, written as
OpenMetrics with timestamps and loaded with `promtool tsdb create-blocks-from openmetrics`, then served by a
real Prometheus (Debian's package) for the canary judge and the dashboards' queries.

Which series: per pod, what a per-pod observer exports and the judge and the fleet/canary dashboards read —
`observer_requests_total{finished_reason}`, the TTFT, ITL, e2e and queue-time histograms (the observer's
bucket edges), prompt/generation token counters, running requests and KV-cache usage — with the labels a
ServiceMonitor adds (namespace, pod, instance, job). Traffic is synthetic and stationary (Poisson counts,
fixed latency mixtures, the canary's TTFT slightly slower): the point is the query cost at fleet size, not
a verdict.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np

from observer.conventions import metrics as names
from observer.conventions.vllm import DEFAULT_EDGES

FAMILIES = {"ttft": names.HIST_TTFT, "itl": names.HIST_ITL, "e2e": names.HIST_E2E, "queue": names.HIST_QUEUE}
SCALE = {"ttft": 0.12, "itl": 0.03, "e2e": 2.0, "queue": 0.05}  # median seconds of each family (stable)
REASONS = ("stop", "length", "abort", "error", "repetition")
REASON_P = (0.93, 0.04, 0.02, 0.005, 0.005)


def _edges(fam: str) -> list[float]:
    return list(DEFAULT_EDGES[fam])  # type: ignore[index]


def write_openmetrics(path: Path, *, pods: int, canary_share: float, start: float, end: float, step: float,
                      rps_per_pod: float = 1.0, seed: int = 5) -> int:
    """Write the fleet's series to `path`; return the number of samples written."""
    rng = np.random.default_rng(seed)
    ts = np.arange(start, end + 1e-9, step)
    n_canary = max(1, round(pods * canary_share))
    pod_names = [(("canary" if i < n_canary else "stable"), f"llm-{'c' if i < n_canary else 's'}-{i:05d}")
                 for i in range(pods)]
    counts = rng.poisson(rps_per_pod * step, size=(pods, len(ts))).cumsum(axis=1)  # requests per pod
    written = 0
    with path.open("w") as out:
        def labels(version: str, pod: str) -> str:
            return (f'namespace="llm-serving",pod="{pod}",instance="{pod}:9464",job="observer",'
                    f'model="llm",version="{version}"')

        out.write(f"# TYPE {names.REQUESTS} counter\n")
        for (version, pod), c in zip(pod_names, counts, strict=True):
            base = labels(version, pod)
            for reason, p in zip(REASONS, REASON_P, strict=True):
                lines = [f'{names.REQUESTS}_total{{{base},finished_reason="{reason}"}} {int(v * p)} {t:.0f}\n'
                         for v, t in zip(c, ts, strict=True)]
                out.writelines(lines)
                written += len(lines)
        for fam, name in FAMILIES.items():
            edges = _edges(fam)
            out.write(f"# TYPE {name} histogram\n")
            for (version, pod), c in zip(pod_names, counts, strict=True):
                median = SCALE[fam] * (1.15 if version == "canary" and fam == "ttft" else 1.0)
                draws = rng.lognormal(np.log(median), 0.6, size=4000)
                cdf = np.searchsorted(np.sort(draws), edges, side="right") / len(draws)
                mean = float(draws.mean())
                base = labels(version, pod)
                buf: list[str] = []
                for v, t in zip(c, ts, strict=True):
                    for le, share in zip(edges, cdf, strict=True):
                        buf.append(f'{name}_bucket{{{base},le="{le}"}} {int(v * share)} {t:.0f}\n')
                    buf.append(f'{name}_bucket{{{base},le="+Inf"}} {int(v)} {t:.0f}\n')
                    buf.append(f"{name}_count{{{base}}} {int(v)} {t:.0f}\n")
                    buf.append(f"{name}_sum{{{base}}} {v * mean:.3f} {t:.0f}\n")
                out.writelines(buf)
                written += len(buf)
        for name, per_request in ((names.PROMPT_TOKENS, 400), (names.GENERATION_TOKENS, 180)):
            out.write(f"# TYPE {name} counter\n")
            for (version, pod), c in zip(pod_names, counts, strict=True):
                base = labels(version, pod)
                lines = [f"{name}_total{{{base}}} {int(v * per_request)} {t:.0f}\n" for v, t in zip(c, ts, strict=True)]
                out.writelines(lines)
                written += len(lines)
        for name, extra, lo, hi in ((names.RUNNING_REQUESTS, "", 0, 16),
                                    (names.KV_CACHE_USAGE, ',stat="mean"', 0.1, 0.9)):
            out.write(f"# TYPE {name} gauge\n")
            for version, pod in pod_names:
                base = labels(version, pod) + extra
                vals = rng.uniform(lo, hi, size=len(ts))
                lines = [f"{name}{{{base}}} {v:.4f} {t:.0f}\n" for v, t in zip(vals, ts, strict=True)]
                out.writelines(lines)
                written += len(lines)
        out.write("# EOF\n")
    return written


def create_blocks(openmetrics: Path, data_dir: Path) -> None:
    """promtool's backfill into a Prometheus data directory; a precise error with promtool's own words."""
    data_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(data_dir)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"promtool could not create blocks from {openmetrics}: {proc.stderr[-2000:]}")
