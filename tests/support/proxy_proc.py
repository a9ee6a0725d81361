"""`observer proxy` as its own process, as the sidecar runs: started on a free loopback port, waited on until
`/healthz` answers, stopped with SIGTERM (it flushes its open window and drains what is queued) and killed if
it does not exit, also when the test fails."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.prom import free_port, wait_http


@dataclass
class ProxyProcess:
    """A started `observer proxy`; `output` holds what it printed once stopped."""

    proc: subprocess.Popen[str]
    url: str
    output: str = ""

    def stop(self) -> int:
        """SIGTERM, then wait up to 30 s (SIGKILL after); the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate(timeout=10)
        self.output += out or ""
        return self.proc.returncode


@contextmanager
def run_proxy(config: Path, *args: str, env: Mapping[str, str] | None = None, log_level: str = "WARNING",
              quiet: bool = False, ready_timeout: float = 30.0) -> Iterator[ProxyProcess]:
    """`observer proxy --config config --listen 127.0.0.1:PORT *args`; `env` is added to this environment.
    `quiet` discards its output (a benchmark's long run would fill an unread pipe)."""
    port = free_port()
    sink = subprocess.DEVNULL if quiet else subprocess.PIPE
    proc = subprocess.Popen(
        [sys.executable, "-m", "observer", "proxy", "--config", str(config), "--listen", f"127.0.0.1:{port}",
         "--log-level", log_level, *args],
        env={**os.environ, **(env or {})}, stdout=sink, stderr=subprocess.STDOUT, text=True)
    running = ProxyProcess(proc, f"http://127.0.0.1:{port}")
    try:
        wait_http(running.url + "/healthz", timeout=ready_timeout)
        yield running
    finally:
        running.stop()
