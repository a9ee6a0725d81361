"""The version inventory reads max_model_len from each version's /v1/models (the simulator's, here)."""

from __future__ import annotations

import time

import pytest

from tests.support.observer_proc import run_observer
from tests.support.sim import running_fleet

pytestmark = pytest.mark.integration


def test_version_info_carries_max_model_len_from_the_openai_endpoint() -> None:
    with running_fleet() as (_fleet, cfg):
        cfg = cfg.model_copy(update={"scrape": cfg.scrape.model_copy(
            update={"interval_seconds": 1.0, "timeout_seconds": 1.0})})
        with run_observer(cfg, areas=["scrape", "canary"]) as obs:
            obs.wait_ready()
            deadline = time.monotonic() + 30
            lines: list[str] = []
            while time.monotonic() < deadline:
                lines = [ln for ln in obs.get("/metrics").text.splitlines()
                         if ln.startswith("observer_version_info{")]
                if len(lines) == 2 and all('max_model_len="8192"' in ln for ln in lines):
                    break
                time.sleep(0.2)
            assert len(lines) == 2, lines
            assert all('max_model_len="8192"' in ln for ln in lines), lines
            assert {ln.split('version="')[1].split('"')[0] for ln in lines} == {"stable", "canary"}
