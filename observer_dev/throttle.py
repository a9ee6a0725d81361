"""Real vLLM engines slowed down on purpose, to reproduce a slower CPU on this one.

A duty cycle of SIGSTOP and SIGCONT on every process of each server (the API server, which tokenizes and
streams, the EngineCore and the worker where the model computes), the way `cpulimit` works: with a factor of
10 a server runs 10 ms of every 100 ms. CPU quotas through cgroups would be the cleaner tool, but on this
machine kind the controller is v1 and a quota set on the test's group does not follow vLLM's children. The
engine slows less than the factor, because it was not busy all the time to begin with (it waits on its own
queues and sockets): the tier's speed probe measures the result, which is what counts. `/health` and
`/metrics` answer within one period, later by at most its paused part, as on a slow CPU.

A server is throttled only once its `/health` has answered since it (re)started, so starting and
restarting are not slowed: a slower CPU of this kind starts the servers in about the same time (model
loading is I/O and Python), it is decoding that is slower. A process a test stops on purpose (a hung engine)
is left alone while `held`.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import httpx
import psutil

from observer_dev.vllmproc import RunningVllm

_HELD: set[int] = set()
_HELD_LOCK = threading.Lock()


@contextlib.contextmanager
def held(pids: Iterable[int]) -> Iterator[None]:
    """Leave these processes out of every throttle's cycle for the block (a test's own SIGSTOP)."""
    chosen = set(pids)
    with _HELD_LOCK:
        _HELD.update(chosen)
    try:
        yield
    finally:
        with _HELD_LOCK:
            _HELD.difference_update(chosen)


def engine_cores(server: RunningVllm) -> list[psutil.Process]:
    """The server's EngineCore processes (empty while it starts, or when it is not running)."""
    out = []
    for p in engine_processes(server):
        with contextlib.suppress(psutil.Error):
            if "EngineCore" in p.name() or "EngineCore" in (p.cmdline() or [""])[0]:  # its process title
                out.append(p)
    return out


def engine_processes(server: RunningVllm) -> list[psutil.Process]:
    """Every process of the server: the API server and everything under it (EngineCore, worker)."""
    if server.proc is None or server.proc.poll() is not None:
        return []
    try:
        root = psutil.Process(server.proc.pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


@dataclass
class _Watched:
    server: RunningVllm
    pid: int | None = None  # the server process the cores below belong to
    cores: list[psutil.Process] = field(default_factory=list)
    next_health: float = 0.0


class EngineThrottle:
    """Slow the watched servers' engines by `factor` (> 1) until stopped; a context manager."""

    def __init__(self, factor: float, *, period_s: float = 0.1) -> None:
        if factor <= 1.0:
            raise ValueError(f"a throttle factor must be above 1 (got {factor})")
        self.factor = factor
        self.period_s = period_s
        self._watched: list[_Watched] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engine-throttle", daemon=True)

    def watch(self, *servers: RunningVllm) -> None:
        with self._lock:
            self._watched.extend(_Watched(s) for s in servers)

    def __enter__(self) -> EngineThrottle:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._signal(signal.SIGCONT)

    def _refresh(self, w: _Watched, now: float) -> None:
        pid = w.server.proc.pid if w.server.proc is not None else None
        if pid != w.pid:  # (re)started or stopped: wait for /health before throttling it again
            w.pid, w.cores, w.next_health = pid, [], 0.0
        if pid is None or w.cores or now < w.next_health:
            return
        w.next_health = now + 1.0
        try:
            healthy = httpx.get(w.server.url + "/health", timeout=0.5).status_code == 200
        except httpx.HTTPError:
            healthy = False
        if healthy:
            w.cores = engine_processes(w.server)

    def _signal(self, sig: signal.Signals) -> None:
        with self._lock, _HELD_LOCK:
            targets = [p for w in self._watched for p in w.cores if p.pid not in _HELD]
        for p in targets:
            with contextlib.suppress(psutil.Error):
                p.send_signal(sig)

    def _run(self) -> None:
        run_s = self.period_s / self.factor
        while not self._stop.is_set():
            now = time.monotonic()
            with self._lock:
                watched = list(self._watched)
            for w in watched:
                self._refresh(w, now)
            self._signal(signal.SIGCONT)
            time.sleep(run_s)
            if self._stop.is_set():
                break
            self._signal(signal.SIGSTOP)
            time.sleep(self.period_s - run_s)
        self._signal(signal.SIGCONT)
