"""A local Prometheus process (Debian package `prometheus`) on 127.0.0.1, for `make demo`, the game day
and the integration tests: one place that writes its config, starts it, waits for it and stops it."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from observer.errors import ObserverError


class PrometheusError(ObserverError):
    """The local Prometheus could not be started or queried."""


# The last ports this process was given: the kernel may offer a just-closed one again at once. Bounded: a
# long test session must not run out of ports, and a clash needs two asks close together.
_RECENT: deque[int] = deque(maxlen=512)


def free_port() -> int:
    """An unused TCP port on 127.0.0.1, none of the last 512 this process was given (a config asking for
    several ports at once must get distinct ones)."""
    for _ in range(1000):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _RECENT:
            _RECENT.append(port)
            return port
    raise RuntimeError("no TCP port on 127.0.0.1 other than the ones this process was just given")


def port_free(port: int) -> bool:
    """True when nothing listens on 127.0.0.1:`port`."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def log_tail(path: Path, lines: int = 15) -> str:
    """The last `lines` lines of a child process's log ('' when unreadable), for error messages."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """Terminate a child process, killing it if it has not exited within 10 s."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


@dataclass
class LocalPrometheus:
    """A running Prometheus: its URL, working directory and query helpers."""

    url: str
    workdir: Path

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query; the result vector (PrometheusError on a query error)."""
        params: dict[str, Any] = {"query": promql}
        if at is not None:
            params["time"] = at
        body = httpx.get(f"{self.url}/api/v1/query", params=params, timeout=10.0).json()
        if body.get("status") != "success":
            raise PrometheusError(f"query failed: {promql}: {body.get('error', body)}")
        return list(body["data"]["result"])

    def alerts(self) -> list[dict[str, Any]]:
        """Active alerts (pending and firing)."""
        return list(httpx.get(f"{self.url}/api/v1/alerts", timeout=10.0).json()["data"]["alerts"])


@contextmanager
def run_prometheus(targets: Sequence[str], *, port: int | None = None, scrape_interval: str = "1s",
                   evaluation_interval: str | None = None, rule_files: Sequence[Path] = (),
                   metrics_path: str = "/metrics", workdir: Path | None = None,
                   ready_timeout: float = 30.0) -> Iterator[LocalPrometheus]:
    """Start Prometheus scraping `targets` (host:port) and evaluating `rule_files`; stop it on exit.

    With `workdir` given, its data and log stay there; otherwise a temporary folder is removed after."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise PrometheusError("Prometheus is not installed: run `make setup` (Debian package `prometheus`)")
    own_dir = workdir is None
    work = Path(tempfile.mkdtemp(prefix="observer-prom-")) if workdir is None else workdir
    copied = []
    for i, f in enumerate(rule_files):
        dst = work / f"rules_{i}.yaml"
        shutil.copy(f, dst)
        copied.append(str(dst))
    cfg = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": evaluation_interval or scrape_interval},
        "rule_files": copied,
        "scrape_configs": [{"job_name": "observer", "metrics_path": metrics_path,
                            "static_configs": [{"targets": list(targets)}]}],
    }
    (work / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    port = port or free_port()
    log_path = work / "prometheus.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [binary, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--web.enable-lifecycle", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            if proc.poll() is not None:
                raise PrometheusError(f"Prometheus exited with code {proc.returncode}; its log ends:\n"
                                      f"{log_tail(log_path)}")
            try:
                if httpx.get(f"{url}/-/ready", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise PrometheusError(f"Prometheus not ready at {url} after {ready_timeout:.0f}s; its log ends:\n"
                                      f"{log_tail(log_path)}")
            time.sleep(0.05)
        yield LocalPrometheus(url=url, workdir=work)
    finally:
        stop_process(proc)
        if own_dir:
            shutil.rmtree(work, ignore_errors=True)
