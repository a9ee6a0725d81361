"""The rendered OME RolloutPolicy (observer/render/ome.py) on a real Prometheus, through OME's step gate as its
controller evaluates it (observer_dev/gameday/ome.py): a passing verdict advances after the bake, a failing one
rolls back at its first sample, an undecided one and an absent series hold and are parked, never promoted."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from observer import conventions as names
from observer.config import parse_config
from observer.render import ome as ome_render
from observer_dev.gameday.ome import ADVANCED, CANARYING, PARKED, ROLLED_BACK, OmeStepGate
from tests.support.prom import free_port, run_prometheus

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs the prometheus binary")]

VERDICTS = {"a1b2c3d4": 1.0, "b2c3d4e5": -1.0, "c3d4e5f6": 0.0}  # canary hash → the verdict exported


@pytest.fixture(scope="module")
def prom_url() -> Iterator[str]:
    registry = CollectorRegistry()
    verdict = Gauge(names.CANARY_VERDICT, "verdict", [names.CANARY, names.BASELINE], registry=registry)
    for canary, value in VERDICTS.items():
        verdict.labels(canary, "0f0f0f0f").set(value)
    verdict.labels("a1b2c3d4", "another").set(-1.0)  # another pair's fail is not this one's
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        with run_prometheus([f"127.0.0.1:{port}"], scrape_interval="1s") as prom:
            prom.wait_for(names.CANARY_VERDICT, min_series=4)
            yield prom.url
    finally:
        server.shutdown()
        thread.join(timeout=5)


def gate(canary: str, *, step: int = 0) -> OmeStepGate:
    config = parse_config("canary: {step_seconds: 600}\n", environ={})
    policy = ome_render.rollout_policy(config)
    return OmeStepGate.for_policy(policy, step=step, canary=canary, stable="0f0f0f0f")


def test_a_passing_verdict_advances_only_after_the_bake(prom_url: str) -> None:
    g = gate("a1b2c3d4")
    assert g.run(prom_url, samples=9) and g.phase == CANARYING  # 9 minutes of a 10-minute bake
    assert g.run(prom_url, samples=5).startswith(ADVANCED) and g.now == 600


def test_a_failing_verdict_rolls_back_at_its_first_sample(prom_url: str) -> None:
    g = gate("b2c3d4e5", step=1)
    g.run(prom_url, samples=30)
    assert g.phase == ROLLED_BACK and g.now == 60 and g.failed_checks == 1


@pytest.mark.parametrize("canary", ["c3d4e5f6", "ffffffff"])  # undecided (0), and no verdict series at all
def test_undecided_or_absent_holds_and_is_parked_never_promoted(prom_url: str, canary: str) -> None:
    g = gate(canary)
    g.run(prom_url, samples=60)
    assert g.phase == CANARYING and g.failed_checks == 0  # an hour: held
    g.run(prom_url, samples=120)
    assert g.phase == PARKED and g.now == 7200  # the stall timeout (canary.end.after_seconds): parked
    assert all("Pass" not in line for line in g.log)


def test_a_template_variable_omes_does_not_know_is_inconclusive(prom_url: str) -> None:
    g = gate("a1b2c3d4")
    g.step["analysis"]["metrics"][0]["query"] = "max(observer_canary_verdict{canary=\"{{.Canary}}\"})"
    g.run(prom_url, samples=20)
    assert g.phase == CANARYING
