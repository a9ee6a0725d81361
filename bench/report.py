"""What the canary report costs to render: a pair page and the index, at 10 and at 1,000 pods of fleet state.

    .venv/bin/python -m bench.report                  # ~1 min
    .venv/bin/python -m bench.report --renders 200

The fleet is simulated (tests/support/report_app.py): one (canary, stable) pair per 20 pods, the canary on a
quarter of them, each arm's data from the canary-stream simulator (30 minutes at 20 requests a second, 20
slices; latency histograms on vLLM's bucket edges), every pair judged once, as the judge job leaves them. Each
render is a full GET through the ASGI app (routing, the page model, five pygal plots, the template), the worst
answers included (token sent), with nothing cached between renders: every pair page draws its plots anew.
Render time is the process's CPU time per request (`time.process_time`), which the machine's other load does
not stretch, and wall time beside it. The last line is JSON: `report_render_ms_p95` {page: {pods: ms}}, the
CPU figures, and `report_bytes` {page: {pods: bytes}}.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
from fastapi.testclient import TestClient

from tests.support import report_app as ra

ROOT = Path(__file__).resolve().parents[1]

PODS = (10, 1000)


def measure(pods: int, renders: int) -> dict[str, dict[str, float]]:
    pairs = max(1, pods // ra.PODS_PER_PAIR)
    app, _, _ = ra.build(pairs)
    client = TestClient(app)
    headers = {"Authorization": f"Bearer {ra.TOKEN}"}
    last = pairs - 1
    paths = {"pair": f"/report/canary/m{last}-canary?baseline=m{last}-stable", "index": "/report"}
    out: dict[str, dict[str, float]] = {}
    for page, path in paths.items():
        client.get(path, headers=headers)  # first request: imports, template compilation
        wall, cpu = [], []
        size = 0
        for _ in range(renders):
            w0, c0 = time.perf_counter(), time.process_time()
            r = client.get(path, headers=headers)
            cpu.append((time.process_time() - c0) * 1000)
            wall.append((time.perf_counter() - w0) * 1000)
            assert r.status_code == 200, r.text[:300]
            size = len(r.content)
        out[page] = {"cpu_p50": float(np.percentile(cpu, 50)), "cpu_p95": float(np.percentile(cpu, 95)),
                     "wall_p50": float(np.percentile(wall, 50)), "wall_p95": float(np.percentile(wall, 95)),
                     "bytes": size, "pairs": pairs}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--renders", type=int, default=100, help="renders of each page at each fleet size")
    args = parser.parse_args()
    logging.getLogger("observer.canary").setLevel(logging.ERROR)  # every simulated canary fails: no log per pair
    results: dict[int, dict[str, dict[str, float]]] = {}
    for pods in PODS:
        results[pods] = measure(pods, args.renders)
        for page, m in results[pods].items():
            print(f"{pods:>5} pods ({m['pairs']:.0f} pairs) {page:<6} CPU p50 {m['cpu_p50']:6.1f} ms  p95 "
                  f"{m['cpu_p95']:6.1f} ms   wall p50 {m['wall_p50']:6.1f} ms  p95 {m['wall_p95']:6.1f} ms   "
                  f"{m['bytes'] / 1024:6.1f} KiB", flush=True)
    pages = ("pair", "index")

    def pick(key: str, digits: int = 1) -> dict[str, dict[str, float]]:
        return {page: {str(pods): round(results[pods][page][key], digits) for pods in PODS} for page in pages}

    out: dict[str, Any] = {"report_render_ms_p95": pick("wall_p95"), "report_render_cpu_ms_p95": pick("cpu_p95"),
                           "report_render_ms_p50": pick("wall_p50"), "report_bytes": pick("bytes", 0),
                           "renders": args.renders}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
