"""A pytest stopped by SIGTERM (a CI time limit, `timeout`, Ctrl-C in a pipeline) leaves no process behind, and
its outcome log names the failed test with its failure text: a real pytest, holding a real PostgreSQL (whose
`pg_ctl` detaches the server), a real Prometheus in a session of its own and a double-forked daemon, with and
without xdist workers, is sent SIGTERM while a test still runs."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from observer_dev import pgserver
from tests.support.suite_guard import alive, become_subreaper

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("prometheus") is None or not pgserver.available(),
                                 reason="needs Debian's prometheus and postgresql (make test installs them)")]

INNER = '''
import json, os, subprocess, time
from pathlib import Path

import psutil

from observer_dev.pgserver import run_postgres
from observer_dev.promserver import run_prometheus

PIDS = Path(os.environ["HOLD_PIDS"])


def test_fails_first():
    assert 1 == 2, "the reason this test failed"


def test_holds_servers():
    with run_prometheus([]) as prom, run_postgres() as pg:
        alone = subprocess.Popen(["sleep", "600"], start_new_session=True)
        daemon = subprocess.run(["bash", "-c", "setsid sleep 601 >/dev/null 2>&1 & echo $!"],
                                capture_output=True, text=True, check=True)
        postmaster = int((pg.root / "data" / "postmaster.pid").read_text().split()[0])
        prometheus = next(p.pid for p in psutil.Process().children(recursive=True) if p.name() == "prometheus")
        PIDS.write_text(json.dumps({"prometheus": prometheus, "sleep": alone.pid,
                                    "daemon": int(daemon.stdout), "postmaster": postmaster}))
        time.sleep(600)
'''


@pytest.mark.timeout(180)
@pytest.mark.parametrize("workers", [0, 1], ids=["one process", "xdist worker"])
def test_sigterm_to_a_running_suite_leaves_no_process_and_a_log_of_what_failed(workers: int, tmp_path: Path) -> None:
    become_subreaper()  # whatever the inner suite leaves re-parents here, where this test can see it
    (tmp_path / "test_hold.py").write_text(INNER)
    pids_file, log = tmp_path / "pids.json", tmp_path / "outcomes.log"
    env = {**os.environ, "HOLD_PIDS": str(pids_file), "OBSERVER_TEST_LOG": str(log), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.support.suite_guard",
           "--rootdir", str(tmp_path), "-o", "timeout=0", *(["-n", str(workers)] if workers else []),
           str(tmp_path / "test_hold.py")]
    inner = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not pids_file.exists() and time.monotonic() < deadline and inner.poll() is None:
            time.sleep(0.2)
        assert pids_file.exists(), (inner.stdout.read() if inner.stdout and inner.poll() is not None else b"").decode()
        time.sleep(0.3)  # the file is written whole before the test sleeps
        held = json.loads(pids_file.read_text())
        assert all(alive(pid) for pid in held.values()), held
        inner.send_signal(signal.SIGTERM)
        out, _ = inner.communicate(timeout=60)
    finally:
        if inner.poll() is None:
            inner.kill()
    text = out.decode(errors="replace")
    assert inner.returncode != 0, text
    deadline = time.monotonic() + 15
    while any(alive(pid) for pid in held.values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert {name: pid for name, pid in held.items() if alive(pid)} == {}, text
    assert "SIGTERM: stopped" in text, text
    written = log.read_text()
    assert "FAILED test_hold.py::test_fails_first" in written
    assert "the reason this test failed" in written
