"""A real Prometheus server (Debian package `prometheus`) for integration tests, on 127.0.0.1 only."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


@dataclass
class Prometheus:
    """Handle on a running Prometheus: base URL and a query helper."""

    url: str
    workdir: Path

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query; returns the result vector (raises on a Prometheus error)."""
        params: dict[str, Any] = {"query": promql}
        if at is not None:
            params["time"] = at
        r = httpx.get(f"{self.url}/api/v1/query", params=params, timeout=10.0)
        body = r.json()
        if body.get("status") != "success":
            raise AssertionError(f"query failed: {promql}: {body}")
        return list(body["data"]["result"])

    def alerts(self) -> list[dict[str, Any]]:
        """Active alerts (pending and firing)."""
        return list(httpx.get(f"{self.url}/api/v1/alerts", timeout=10.0).json()["data"]["alerts"])

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
    binary = shutil.which("prometheus")
    if binary is None:
        raise RuntimeError("Debian package `prometheus` is not installed: run `make setup`")
    workdir = Path(tempfile.mkdtemp(prefix="observer-prom-"))
    copied = []
    for i, f in enumerate(rule_files):
        dst = workdir / f"rules_{i}.yaml"
        shutil.copy(f, dst)
        copied.append(str(dst))
    cfg = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": evaluation_interval},
        "rule_files": copied,
        "scrape_configs": [{"job_name": "observer", "metrics_path": metrics_path,
                            "static_configs": [{"targets": list(targets)}]}],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    port = free_port()
    proc = subprocess.Popen(
        [binary, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--web.enable-lifecycle", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=(workdir / "prometheus.log").open("w"),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/-/ready", timeout=20.0)
        yield Prometheus(url=url, workdir=workdir)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(workdir, ignore_errors=True)
