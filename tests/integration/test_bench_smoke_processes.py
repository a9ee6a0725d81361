"""The benches that start servers (Prometheus, nginx, HAProxy, LiteLLM, the simulator, observers) run at their
smoke sizes; a file of its own, so the suite's two workers share the smoke runs."""

from __future__ import annotations

import pytest

from tests.support.bench_smoke import SMOKE, in_this_run, run_smoke

pytestmark = [pytest.mark.integration]


@pytest.mark.parametrize("name", sorted(n for n, s in SMOKE.items() if s.processes and in_this_run(s)))
def test_bench_runs_to_its_json_line(name: str) -> None:
    run_smoke(name)

