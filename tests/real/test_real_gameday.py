"""`observer gameday --real` on the tier's own servers: healthy, slow (queueing), killed, idle."""

from __future__ import annotations

import pytest

from observer.gameday.real import run_real_gameday
from tests.real.conftest import Engines

pytestmark = [pytest.mark.real, pytest.mark.slow]


def test_every_real_scenario_matches(engines: Engines) -> None:
    report = run_real_gameday(servers=lambda: (engines.stable, engines.canary))
    assert {r.scenario for r in report.rows} == {"healthy", "slow", "killed", "idle"}
    assert report.ok, "\n".join(f"{r.scenario}: {r.verdicts} gate={r.web_gate} {r.detail}" for r in report.rows)
