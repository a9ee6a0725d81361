"""A real Prometheus server (Debian package `prometheus`) for integration tests, on 127.0.0.1 only.

`free_port` and `run_prometheus` are re-exported for the tests; the process handling lives in
observer_dev/promserver.py, shared with the demo and the game day."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from observer_dev import promserver
from observer_dev.promserver import LocalPrometheus, free_port

__all__ = ["Prometheus", "free_port", "run_prometheus", "wait_http"]


def wait_http(url: str, *, timeout: float = 15.0) -> None:
    """Wait until `url` answers 200, or raise TimeoutError naming it."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError as e:
            last = e
        time.sleep(0.05)
    raise TimeoutError(f"{url} not ready after {timeout}s: {last}")


class Prometheus(LocalPrometheus):
    """Handle on a running Prometheus with test helpers (observer_dev.promserver starts it)."""

    def targets_up(self) -> bool:
        """True when every active target has been scraped successfully."""
        data = httpx.get(f"{self.url}/api/v1/targets", timeout=10.0).json()["data"]["activeTargets"]
        return bool(data) and all(t["health"] == "up" for t in data)

    def wait_for(self, promql: str, *, timeout: float = 30.0, min_series: int = 1) -> list[dict[str, Any]]:
        """Poll `promql` until it returns at least `min_series` series."""
        deadline = time.monotonic() + timeout
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            result = self.query(promql)
            if len(result) >= min_series:
                return result
            time.sleep(0.25)
        raise AssertionError(f"{promql!r} returned {len(result)} series after {timeout}s (wanted {min_series})")


@contextmanager
def run_prometheus(targets: Sequence[str], *, scrape_interval: str = "1s", rule_files: Sequence[Path] = (),
                   evaluation_interval: str = "1s", metrics_path: str = "/metrics") -> Iterator[Prometheus]:
    """Start Prometheus scraping `targets` (host:port) and evaluating `rule_files`; stop it on exit."""
    with promserver.run_prometheus(targets, scrape_interval=scrape_interval, rule_files=rule_files,
                                   evaluation_interval=evaluation_interval, metrics_path=metrics_path) as p:
        yield Prometheus(url=p.url, workdir=p.workdir)


def metric(url: str, name: str, *, path: str = "/metrics", **labels: str) -> float:
    """The sum of the samples of `name` on `url + path` whose labels include `labels` (0 when none)."""
    text = httpx.get(url + path, timeout=5).text
    return sum(float(s.value) for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))
