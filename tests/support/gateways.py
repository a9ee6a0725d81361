"""The gateways users put in front of vLLM, started for real on free loopback ports: nginx and HAProxy (Debian
packages), the LiteLLM proxy (its own virtualenv, `tools/gateways/setup.sh`), and the constant-delay upstream
they forward to. Each runs in the foreground as a child of the test, is waited on until it answers, and is
stopped (SIGTERM, then SIGKILL) on the way out, also when the test fails.

Each gateway runs one worker process or thread, as `observer proxy` does, so CPU per request compares like
with like; `Gateway.cpu_seconds()` is the CPU time of its process tree.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.support.prom import free_port, wait_http

ROOT = Path(__file__).resolve().parents[2]
LITELLM_HOME = Path(os.environ.get("OBSERVER_LITELLM_HOME", ROOT / ".cache" / "litellm"))
LITELLM_BIN = LITELLM_HOME / "venv" / "bin" / "litellm"
LITELLM_KEY = "sk-observer-test-0123456789abcdef0123456789abcdef"
"""The master key of LiteLLM proxies started here (it refuses to start without one): send it as a bearer."""


@dataclass
class Gateway:
    """A started server: its name, base URL and process (with the workers it forks)."""

    name: str
    url: str
    proc: subprocess.Popen[bytes]
    log: Path | None = None
    _procs: list[psutil.Process] = field(default_factory=list)

    def processes(self) -> list[psutil.Process]:
        """The process and its children, remembered: a child's CPU is read while it lives."""
        try:
            root = psutil.Process(self.proc.pid)
            found = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return self._procs
        known = {p.pid for p in self._procs}
        self._procs += [p for p in found if p.pid not in known]
        return self._procs

    def cpu_seconds(self) -> float:
        """User + system CPU of the process tree so far, to the nanosecond where the kernel allows it."""
        return sum(process_cpu_seconds(p) for p in self.processes())

    def log_tail(self, chars: int = 2000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log is not None and self.log.exists() else ""


def process_cpu_seconds(p: psutil.Process) -> float:
    """A process's CPU time (all threads). Linux's per-process CPU clock (`clock_gettime` on the clock id of
    the pid, as `clock_getcpuclockid` makes it) counts nanoseconds; /proc's user and system times, which
    psutil reads, count 10 ms ticks: 0.1 ms requests would need thousands of them per figure."""
    try:
        return time.clock_gettime(((~p.pid) << 3) | 2)
    except OSError:
        try:
            t = p.cpu_times()
        except psutil.NoSuchProcess:
            return 0.0
        return t.user + t.system


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@contextmanager
def _running(name: str, args: list[str], url: str, ready: str, workdir: Path, *, timeout: float = 30.0,
             env: Mapping[str, str] | None = None) -> Iterator[Gateway]:
    log = workdir / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=workdir,
                                env={**os.environ, **(env or {})}, start_new_session=True)
    gateway = Gateway(name, url, proc, log)
    try:
        try:
            wait_http(url + ready, timeout=timeout)
        except Exception as e:
            raise RuntimeError(f"{name} did not answer {url + ready} within {timeout:.0f} s: {e}\n"
                               f"{gateway.log_tail()}") from e
        gateway.processes()
        yield gateway
    finally:
        _stop(proc)


@contextmanager
def constant_upstream(workdir: Path, *, delay_ms: float = 20.0, chunk_gap_ms: float = 5.0, chunks: int = 4
                      ) -> Iterator[Gateway]:
    """`tests.support.constant_upstream` in its own process."""
    port = free_port()
    with _running("upstream", [sys.executable, "-m", "tests.support.constant_upstream", "--port", str(port),
                               "--delay-ms", str(delay_ms), "--chunk-gap-ms", str(chunk_gap_ms),
                               "--chunks", str(chunks)],
                  f"http://127.0.0.1:{port}", "/v1/models", workdir, env={"PYTHONPATH": str(ROOT)}) as g:
        yield g


def binary(name: str) -> str | None:
    """A Debian package's server binary (in /usr/sbin, which a non-login PATH may lack)."""
    return shutil.which(name) or (path if os.path.exists(path := f"/usr/sbin/{name}") else None)


def _configured(name: str, template: str, workdir: Path, upstream: str, ready: str,
                args: Callable[[str, Path], list[str]]) -> AbstractContextManager[Gateway]:
    """A server started from a config `template` whose `{port}`, `{workdir}` and `{upstream}` are filled in."""
    found = binary(name)
    if found is None:
        raise RuntimeError(f"{name} is not installed (Debian package {name}; `make setup` installs it)")
    port = free_port()
    path = workdir / f"{name}-{port}.conf"
    path.write_text(template.format(port=port, workdir=workdir, upstream=upstream.removeprefix("http://")))
    return _running(name, args(found, path), f"http://127.0.0.1:{port}", ready, workdir)


NGINX_PLAIN = """
worker_processes 1;
pid {workdir}/nginx.pid;
error_log {workdir}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {workdir}/nginx-body;
  proxy_temp_path {workdir}/nginx-proxy;
  fastcgi_temp_path {workdir}/nginx-fastcgi;
  uwsgi_temp_path {workdir}/nginx-uwsgi;
  scgi_temp_path {workdir}/nginx-scgi;
  upstream vllm {{ server {upstream}; keepalive 128; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://vllm;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 600s;
    }}
  }}
}}
"""


def nginx(workdir: Path, upstream: str, *, conf: str | None = None, ready: str = "/v1/models"
          ) -> AbstractContextManager[Gateway]:
    """nginx as a plain reverse proxy (one worker, keep-alive upstream, no buffering), or with `conf`: a full
    nginx.conf whose `{port}`, `{workdir}` and `{upstream}` are filled in."""
    return _configured("nginx", conf or NGINX_PLAIN, workdir, upstream, ready,
                       lambda exe, path: [exe, "-c", str(path), "-p", str(workdir), "-g", "daemon off;"])


HAPROXY_PLAIN = """
global
  nbthread 1
  maxconn 4096
defaults
  mode http
  timeout connect 5s
  timeout client 600s
  timeout server 600s
  http-reuse always
  option http-no-delay
frontend gateway
  bind 127.0.0.1:{port}
  default_backend vllm
backend vllm
  server s1 {upstream}
"""


def haproxy(workdir: Path, upstream: str, *, conf: str | None = None, ready: str = "/v1/models"
            ) -> AbstractContextManager[Gateway]:
    """HAProxy in HTTP mode (one thread, connection reuse, `http-no-delay`: without it a streamed reply's
    first chunk waited for the whole reply), or with `conf`, filled in as for `nginx`."""
    return _configured("haproxy", conf or HAPROXY_PLAIN, workdir, upstream, ready,
                       lambda exe, path: [exe, "-f", str(path), "-db"])


def litellm_config(upstream: str, *, model: str = "stable", callbacks: str | None = None,
                   extra: str = "") -> str:
    """A LiteLLM proxy config: `model` served by an OpenAI-compatible `upstream`."""
    lines = ["model_list:", f"  - model_name: {model}", "    litellm_params:", f"      model: openai/{model}",
             f"      api_base: {upstream.rstrip('/')}/v1", "      api_key: none", "litellm_settings:",
             "  telemetry: false", "  drop_params: true",
             "general_settings:", f"  master_key: {LITELLM_KEY}"]
    if callbacks:
        lines.insert(lines.index("general_settings:"), f"  callbacks: {callbacks}")
    return "\n".join(lines) + "\n" + extra


@contextmanager
def litellm(workdir: Path, config: str, *, env: Mapping[str, str] | None = None, timeout: float = 120.0
            ) -> Iterator[Gateway]:
    """The LiteLLM proxy (one worker) with `config` (its text) written into `workdir`."""
    if not LITELLM_BIN.exists():
        raise RuntimeError(f"the LiteLLM proxy is not installed at {LITELLM_BIN} (run tools/gateways/setup.sh, "
                           "which `make setup` calls)")
    port = free_port()
    path = workdir / "litellm.yaml"
    path.write_text(config)
    quiet = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR", "LITELLM_TELEMETRY": "False",
             "NO_DOCS": "True", "DISABLE_ADMIN_UI": "True", "PYTHONPATH": str(workdir)}
    with _running("litellm", [str(LITELLM_BIN), "--config", str(path), "--host", "127.0.0.1", "--port", str(port),
                              "--num_workers", "1"],
                  f"http://127.0.0.1:{port}", "/health/liveliness", workdir, timeout=timeout,
                  env={**quiet, **(env or {})}) as g:
        yield g


@contextmanager
def observer_proxy(workdir: Path, upstream: str, *, version: str = "stable", fraction: float | None = None,
                   env: Mapping[str, str] | None = None, args: tuple[str, ...] = ()) -> Iterator[Gateway]:
    """`observer proxy` (the sidecar) for `version` in front of `upstream`, samples to a local SQLite store."""
    port = free_port()
    config = workdir / f"observer-proxy-{port}.yaml"
    config.write_text(f"fleet:\n  versions:\n    - {{name: {version}, vllm: [\"{upstream}/metrics\"], "
                      f"openai: \"{upstream}/v1\"}}\n"
                      f"sampling:\n  store: {{path: \"{workdir / f'proxy-{port}.db'}\"}}\n")
    extra = {"OBSERVER__SAMPLING__FRACTION": str(fraction)} if fraction is not None else {}
    with _running("observer-proxy", [sys.executable, "-m", "observer", "proxy", "--config", str(config),
                                     "--version", version, "--listen", f"127.0.0.1:{port}", "--log-level",
                                     "WARNING", *args],
                  f"http://127.0.0.1:{port}", "/healthz", workdir, env={**extra, **(env or {})}) as g:
        yield g
