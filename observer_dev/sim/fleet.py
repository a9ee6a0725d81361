"""Run a simulated fleet from an observer config: one uvicorn server per vLLM replica URL, one per DCGM
exporter URL, all in one background thread with its own event loop, plus a built-in load ticker.

This is a simulator for demos and tests: it imitates vLLM's metrics, OpenAI API and a DCGM exporter
closely enough to exercise the observer end to end; it serves no model.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import uvicorn
from fastapi import FastAPI

from observer.config.spec import ObserverConfig
from observer.errors import ConfigError, ObserverError
from observer.httpserve import uvicorn_config
from observer_dev.sim.answers import AnswerBook
from observer_dev.sim.engine import EngineSnapshot
from observer_dev.sim.openai_api import create_dcgm_app, create_replica_app, create_router_app
from observer_dev.sim.profile import Profile, build_profile
from observer_dev.sim.replica import SimVersion
from observer_dev.sim.router_exposition import Routed
from observer_dev.sim.spans import EngineTracer, TraceTarget
from observer_dev.sim.traffic import LoadSample

log = logging.getLogger("observer_dev.sim")

DEFAULT_TOTAL_RPS = 10.0
"""Built-in load split by `expected_traffic_weight` when a profile does not set `load_rps`."""
TICK_SECONDS = 0.2
MAX_TICK_SECONDS = 10.0  # after a stall, catch up at most this much load at once
LOCAL_HOSTS = {"127.0.0.1", "localhost", "0.0.0.0", "::1"}

ProfileSpec = Profile | str | Mapping[str, Any]


class SimError(ObserverError):
    """The simulated fleet could not start or was asked for something it does not have."""


@dataclass
class _Server:
    host: str
    port: int
    app: FastAPI
    label: str
    sock: socket.socket | None = None
    server: uvicorn.Server | None = None


@dataclass
class FleetHandle:
    """A running simulated fleet: URLs, live profile changes, restarts, and instant load."""

    versions: dict[str, SimVersion]
    _urls: dict[str, list[str]]
    _dcgm: list[str]
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _servers: list[_Server] = field(default_factory=list)

    def version(self, name: str) -> SimVersion:
        """The simulated version `name` (SimError if the fleet has none)."""
        try:
            return self.versions[name]
        except KeyError:
            raise SimError(f"the simulated fleet has no version {name!r}; it has {sorted(self.versions)}") from None

    def url(self, version: str, replica: int = 0) -> str:
        """Root URL (scheme://host:port) of a replica of `version`."""
        self.version(version)
        return self._urls[version][replica]

    def openai_url(self, version: str) -> str:
        """OpenAI base URL (…/v1) of `version`."""
        return self.url(version) + "/v1"

    def metrics_url(self, version: str, replica: int = 0) -> str:
        """vLLM /metrics URL of a replica of `version`."""
        return self.url(version, replica) + "/metrics"

    def dcgm_urls(self) -> list[str]:
        """/metrics URLs of the simulated DCGM exporters."""
        return list(self._dcgm)

    def profile(self, version: str) -> Profile:
        """The current profile of `version`."""
        return self.version(version).profile

    def set_profile(self, version: str, preset: str | None = None, *, replica: int | None = None,
                    **changes: Any) -> Profile:
        """Change `version`'s behaviour now (of every replica, or of `replica` only): optionally from a
        preset, then field overrides."""
        spec: dict[str, Any] = dict(changes)
        if preset is not None:
            spec["preset"] = preset
        try:
            return self.version(version).set_profile(spec, replica=replica)
        except ValueError as e:
            raise SimError(str(e)) from e

    def serve_adapter(self, on: str, model: str, version: str | None) -> None:
        """Serve model name `model` on `on`'s pods as a LoRA adapter whose engine and profile are `version`'s (the
        adapter's own traffic is `version`'s built-in load); None stops serving it."""
        pods = self.version(on)
        if version is None:
            pods.adapters.pop(model, None)
        else:
            pods.adapters[model] = self.version(version)

    def restart(self, version: str, replica: int | None = None) -> None:
        """Simulate a pod restart of `version` (all replicas, or one): counters reset."""
        self.version(version).restart(replica)

    def advance(self, version: str, seconds: float) -> int:
        """Simulate `seconds` of built-in load at once (no waiting); returns the requests simulated."""
        v = self.version(version)
        done, left = 0, seconds
        while left > 0:
            step = min(left, MAX_TICK_SECONDS)
            done += v.tick(step)
            left -= step
        return done

    def recent(self, version: str, limit: int = 100) -> list[LoadSample]:
        """The newest requests (load and API) of `version`, newest first."""
        return self.version(version).recent.latest(limit)

    def stop(self) -> None:
        """Stop the servers and the load ticker; wait for the background thread."""
        self._stop.set()  # the ticker sees it within one tick and shuts the servers down
        if self._thread is not None:
            self._thread.join(timeout=15)
            if self._thread.is_alive():
                log.error("simulator: background thread did not stop within 15 s")
        for s in self._servers:
            if s.sock is not None:
                s.sock.close()
        for v in self.versions.values():
            if v.tracer is not None:
                v.tracer.shutdown()
                v.tracer = None


def _endpoint(url: str, what: str) -> tuple[str, int, str]:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if host not in LOCAL_HOSTS:
        raise ConfigError(f"the simulator serves on local addresses only, not {host!r} ({url})", path=what,
                          source="simulator")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return ("127.0.0.1" if host == "localhost" else host), port, parts.path or "/metrics"


def build_versions(config: ObserverConfig, profiles: Mapping[str, ProfileSpec] | None = None, *, seed: int = 0,
                   book: AnswerBook | None = None, total_rps: float = DEFAULT_TOTAL_RPS
                   ) -> dict[str, SimVersion]:
    """Create the simulated versions of `config` (no servers); profiles are keyed by version name."""
    profiles = dict(profiles or {})
    unknown = set(profiles) - {v.name for v in config.fleet.versions}
    if unknown:
        raise ConfigError(f"profile for unknown version(s) {sorted(unknown)}; the config has "
                          f"{[v.name for v in config.fleet.versions]}", source="simulator")
    book = book if book is not None else AnswerBook()
    out: dict[str, SimVersion] = {}
    gpu_index: dict[tuple[str, int], int] = {}
    for i, spec in enumerate(config.fleet.versions):
        if not spec.vllm:
            continue
        profile = build_profile(profiles.get(spec.name))
        if "load_rps" not in profile.model_fields_set and spec.expected_traffic_weight is not None:
            profile = build_profile({"load_rps": round(total_rps * spec.expected_traffic_weight, 6)}, base=profile)
        pods = [(p.namespace, p.pod) for p in spec.pods]
        first_dcgm = _endpoint(spec.dcgm[0], f"fleet.versions.{spec.name}.dcgm")[:2] if spec.dcgm else ("", 0)
        offset = gpu_index.get(first_dcgm, 0)
        gpu_index[first_dcgm] = offset + len(spec.vllm)
        out[spec.name] = SimVersion.create(spec.name, model=spec.model or f"sim-{spec.name}", profile=profile,
                                           replicas=len(spec.vllm), seed=seed * 100 + i, book=book, pods=pods,
                                           gpu_offset=offset)
    return out


def _plan(config: ObserverConfig, versions: Mapping[str, SimVersion]) -> tuple[list[_Server], dict[str, list[str]],
                                                                          list[str]]:
    servers: dict[tuple[str, int], _Server] = {}
    urls: dict[str, list[str]] = {}

    def add(host: str, port: int, app: FastAPI, label: str) -> None:
        if (host, port) in servers:
            raise ConfigError(f"{label} and {servers[host, port].label} both want {host}:{port}",
                              source="simulator")
        servers[host, port] = _Server(host=host, port=port, app=app, label=label)

    dcgm_gpus: dict[tuple[str, int, str], list[Any]] = {}
    for spec in config.fleet.versions:
        if spec.name not in versions:
            continue
        v = versions[spec.name]
        urls[spec.name] = []
        for r, url in enumerate(spec.vllm):
            host, port, path = _endpoint(url, f"fleet.versions.{spec.name}.vllm")
            add(host, port, create_replica_app(v, v.replicas[r], metrics_paths=(path,)), f"{spec.name}/{r}")
            urls[spec.name].append(f"http://{host}:{port}")
            if spec.dcgm:
                dhost, dport, dpath = _endpoint(spec.dcgm[r % len(spec.dcgm)], f"fleet.versions.{spec.name}.dcgm")
                dcgm_gpus.setdefault((dhost, dport, dpath), []).append(v.replicas[r])
        if spec.openai:
            host, port, _ = _endpoint(spec.openai, f"fleet.versions.{spec.name}.openai")
            if (host, port) not in servers:
                add(host, port, create_replica_app(v, v.replicas[0]), f"{spec.name}/openai")
    routed: dict[tuple[str, int, str, str], list[Routed]] = {}
    for spec in config.fleet.versions:
        if spec.router is None or spec.name not in versions:
            continue
        sim = versions[spec.name]
        for url in spec.router.urls:
            host, port, path = _endpoint(url, f"fleet.versions.{spec.name}.router")
            routed.setdefault((host, port, path, spec.router.kind), []).append(
                Routed(spec.router_model or sim.model, partial(_snapshots, sim)))
    for (host, port, path, kind), behind in routed.items():
        add(host, port, create_router_app(kind, behind, path=path), f"{kind} router")
    dcgm_urls = []
    for (host, port, path), gpus in dcgm_gpus.items():
        add(host, port, create_dcgm_app(gpus, path=path), "dcgm-exporter")
        dcgm_urls.append(f"http://{host}:{port}{path}")
    return list(servers.values()), urls, dcgm_urls


def _snapshots(version: SimVersion) -> list[EngineSnapshot]:
    return [r.engine.snapshot() for r in version.replicas]


def _bind(s: _Server) -> socket.socket:
    family = socket.AF_INET6 if ":" in s.host else socket.AF_INET
    # proto=IPPROTO_TCP so asyncio sets TCP_NODELAY on accepted connections (else Nagle adds ~40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((s.host, s.port))
    except OSError as e:
        sock.close()
        raise SimError(f"could not listen on {s.host}:{s.port} for {s.label}: {e.strerror}; is another "
                       "simulator or service running there?") from e
    sock.listen(128)
    sock.setblocking(False)
    return sock


@contextmanager
def run_fleet(config: ObserverConfig, profiles: Mapping[str, ProfileSpec] | None = None, seed: int = 0, *,
              answer_dir: Path | None = Path("golden_sets"), book: AnswerBook | None = None,
              total_rps: float = DEFAULT_TOTAL_RPS, tick_seconds: float = TICK_SECONDS,
              ready_timeout: float = 20.0, traces: TraceTarget | None = None) -> Iterator[FleetHandle]:
    """Serve the simulated fleet of `config` until the block exits (then stop everything). With `traces`,
    every version exports one OTLP `llm_request` span per API request there, as vLLM with
    `--otlp-traces-endpoint` does (observer_dev/sim/spans.py); the built-in load sends none (it has no HTTP)."""
    if book is None:
        book = AnswerBook.from_dir(answer_dir) if answer_dir is not None else AnswerBook()
    versions = build_versions(config, profiles, seed=seed, book=book, total_rps=total_rps)
    for name, v in versions.items():
        v.tracer = EngineTracer(traces, version=name) if traces is not None else None
    servers, urls, dcgm = _plan(config, versions)
    handle = FleetHandle(versions=versions, _urls=urls, _dcgm=dcgm, _servers=servers)
    try:
        for s in servers:
            s.sock = _bind(s)
        _start(handle, tick_seconds=tick_seconds, ready_timeout=ready_timeout)
        yield handle
    finally:
        handle.stop()


def _start(handle: FleetHandle, *, tick_seconds: float, ready_timeout: float) -> None:
    ready = threading.Event()
    failure: list[BaseException] = []

    async def main() -> None:
        handle._loop = asyncio.get_running_loop()
        tasks = []
        for s in handle._servers:
            s.server = uvicorn.Server(uvicorn_config(s.app, ws="none", timeout_graceful_shutdown=2))
            assert s.sock is not None
            tasks.append(asyncio.create_task(s.server.serve(sockets=[s.sock])))
        deadline = time.monotonic() + ready_timeout
        while not all(s.server is not None and s.server.started for s in handle._servers):
            done = [t for t in tasks if t.done()]
            if done or time.monotonic() > deadline:
                failure.append(SimError(f"simulated servers did not start within {ready_timeout}s"))
                break
            await asyncio.sleep(0.01)
        ready.set()
        last = time.monotonic()
        while not handle._stop.is_set() and not failure:
            await asyncio.sleep(tick_seconds)
            now = time.monotonic()
            for v in handle.versions.values():
                v.tick(min(now - last, MAX_TICK_SECONDS))
            last = now
        for s in handle._servers:
            if s.server is not None:
                s.server.should_exit = True
        await asyncio.gather(*tasks, return_exceptions=True)

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as e:  # report any start failure to the caller, never die silently
            failure.append(e)
            ready.set()

    handle._thread = threading.Thread(target=run, name="observer-sim", daemon=True)
    handle._thread.start()
    if not ready.wait(ready_timeout + 5) or failure:
        handle.stop()
        cause = failure[0] if failure else None
        raise SimError(f"the simulated fleet did not start: {cause}") from cause
