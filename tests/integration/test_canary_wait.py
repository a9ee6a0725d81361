"""`observer canary wait`, a pipeline's gate, against a scripted verdict endpoint on loopback: a stand-in that
answers GET /api/v1/canary/verdict with a scripted sequence of the observer's verdict bodies (the body's shape is
the observer's own, tested against a running observer in test_canary_cli.py). Exit 0 only on pass; 1 on fail;
3 undecided at the deadline (inconclusive, nodata, idle); 4 when no observer answered."""

from __future__ import annotations

import time
from typing import Any

import pytest
from typer.testing import CliRunner

from observer.cli.main import app
from tests.support.prom import free_port
from tests.support.verdict_stub import body, scripted

pytestmark = pytest.mark.integration


def wait(url: str, *extra: str, timeout: float = 3.0) -> Any:
    return CliRunner().invoke(app, ["canary", "wait", "--url", url, "--interval", "0.1", "--timeout", str(timeout),
                                    *extra], env={"COLUMNS": "200"})


def test_it_waits_through_undecided_looks_and_exits_0_on_pass_with_the_reason_and_report() -> None:
    with scripted([body("inconclusive", "too few requests"), body("nodata"), body("pass", "all metrics pass")]) \
            as (url, asked):
        res = wait(url, "--canary", "bbb", "--baseline", "aaa", "--weight", "25")
    assert res.exit_code == 0, res.output
    assert "PASS — all metrics pass" in res.output and "Report: http://observer.test/report/canary/bbb" in res.output
    assert "inconclusive: too few requests" in res.output  # each new state is said once as it comes
    assert asked[0] == {"path": "/api/v1/canary/verdict", "canary": "bbb", "baseline": "aaa", "weight": "25"}
    assert len(asked) == 3


def test_fail_exits_1_at_once() -> None:
    with scripted([body("fail", "critical metric failed: ttft")]) as (url, asked):
        t0 = time.monotonic()
        res = wait(url, timeout=60)
    assert res.exit_code == 1 and "FAIL — critical metric failed: ttft" in res.output, res.output
    assert time.monotonic() - t0 < 10 and len(asked) == 1


@pytest.mark.parametrize("verdict", ["inconclusive", "nodata", "idle"])
def test_an_undecided_verdict_at_the_deadline_holds_the_gate_with_3(verdict: str) -> None:
    with scripted([body(verdict)]) as (url, asked):
        t0 = time.monotonic()
        res = wait(url, timeout=1.0)
    assert res.exit_code == 3, res.output
    assert f"{verdict.upper()} after 1 s (the gate holds)" in res.output
    assert time.monotonic() - t0 < 5 and len(asked) >= 3


def test_planned_gives_the_step_its_start_and_end_and_looks_at_the_deadline() -> None:
    # The interval (0.7 s) does not divide the deadline (2 s): the last look still comes at the deadline, where
    # the verdict's final test is made.
    with scripted([body("inconclusive")]) as (url, asked):
        t0, start = time.monotonic(), time.time()
        res = CliRunner().invoke(app, ["canary", "wait", "--url", url, "--interval", "0.7", "--timeout", "2",
                                       "--planned"], env={"COLUMNS": "200"})
        took = time.monotonic() - t0
    assert res.exit_code == 3, res.output
    assert {a["step_seconds"] for a in asked} == {"2"} and len({a["since"] for a in asked}) == 1
    assert abs(float(asked[0]["since"]) - start) < 2
    assert len(asked) == 4 and 2.0 <= took < 5  # 0, 0.7, 1.4 and 2.0 s


def test_an_observer_restarting_mid_wait_is_asked_again_and_never_passes_meanwhile() -> None:
    with scripted([body("inconclusive"), "down", 503, "down", body("inconclusive"), body("pass")]) as (url, asked):
        res = wait(url, timeout=10)
    assert res.exit_code == 0 and len(asked) == 6, res.output
    assert "no verdict: HTTP 503" in res.output
    # Down at the deadline: not a verdict, so 4 (never 0, never 3 from a stale look).
    with scripted([body("inconclusive"), "down"]) as (url, _):
        res = wait(url, timeout=1.0)
    assert res.exit_code == 4, res.output


def test_unreachable_and_wrong_urls_exit_4_within_the_timeout_naming_the_url() -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    res = wait(nowhere, timeout=1.0)
    assert res.exit_code == 4 and f"{nowhere}/api/v1/canary/verdict" in " ".join(res.output.split()), res.output
    assert time.monotonic() - t0 < 10
    with scripted([404]) as (url, _):
        res = wait(url, timeout=1.0)
    assert res.exit_code == 4 and "HTTP 404" in res.output, res.output
    with scripted([{"status": "ok"}]) as (url, _):  # some other service's JSON
        res = wait(url, timeout=1.0)
    assert res.exit_code == 4 and "is it the observer?" in res.output, res.output
