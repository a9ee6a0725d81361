"""deploy/gitops/httproute-canary.sh, the shipped pipeline example, run for real with `observer canary wait` (the
installed CLI) against a scripted verdict endpoint (tests/support/verdict_stub.py) and a stand-in `kubectl` that
records each patch and checks it is a JSON patch of the route's two weights: promoted on passes, rolled back
on a fail, held where it is when undecided or when no observer answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.verdict_stub import body, scripted

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "gitops" / "httproute-canary.sh"
KUBECTL = """#!/usr/bin/env python3
import json, sys
args = sys.argv[1:]
assert args[:5] == ["-n", "llm-serving", "patch", "httproute", "gemma"], args
assert args[5:7] == ["--type=json", "-p"], args
ops = json.loads(args[7])
assert [o["path"] for o in ops] == ["/spec/rules/0/backendRefs/0/weight", "/spec/rules/0/backendRefs/1/weight"]
with open(sys.argv[0] + ".log", "a") as f:
    f.write(json.dumps([o["value"] for o in ops]) + "\\n")
"""


def run(tmp: Path, url: str, *steps: str) -> tuple[int, list[list[int]], str]:
    kubectl = tmp / "kubectl"
    kubectl.write_text(KUBECTL)
    kubectl.chmod(0o755)
    env = {**os.environ, "OBSERVER_URL": url, "KUBECTL": str(kubectl), "STEP_TIMEOUT": "2", "INTERVAL": "0.1",
           "OBSERVER": str(Path(sys.executable).parent / "observer"), "COLUMNS": "200"}
    p = subprocess.run(["bash", str(SCRIPT), "gemma", "gemma-v1", "gemma-v2", *steps], env=env,
                       capture_output=True, text=True, timeout=120)
    log = tmp / "kubectl.log"
    patches = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return p.returncode, patches, p.stdout + p.stderr


def test_passing_steps_promote_the_canary(tmp_path: Path) -> None:
    with scripted([body("pass")]) as (url, asked):
        rc, patches, out = run(tmp_path, url)
    assert rc == 0, out
    assert patches == [[95, 5], [75, 25], [50, 50], [0, 100]]
    assert [a["weight"] for a in asked] == ["5", "25", "50"]
    assert {(a["canary"], a["baseline"]) for a in asked} == {("gemma-v2", "gemma-v1")}


def test_a_fail_rolls_back_and_an_undecided_step_holds(tmp_path: Path) -> None:
    answers: list[Any] = [body("pass"), body("inconclusive"), body("fail", "critical metric failed: golden")]
    for case in ("fail", "hold", "down"):
        (tmp_path / case).mkdir()
    with scripted(answers) as (url, _):
        rc, patches, out = run(tmp_path / "fail", url)
    assert rc == 1 and patches == [[95, 5], [75, 25], [100, 0]], out
    assert "golden" in out and "rolling back" in out
    with scripted([body("inconclusive")]) as (url, _):
        rc, patches, out = run(tmp_path / "hold", url, "10", "50")
    assert rc == 3 and patches == [[90, 10]], out  # never raised further, never promoted
    nowhere = "http://127.0.0.1:9"
    rc, patches, out = run(tmp_path / "down", nowhere, "10")
    assert rc == 4 and patches == [[90, 10]] and "unreachable" in out, out
