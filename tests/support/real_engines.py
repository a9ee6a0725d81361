"""The real tier's running servers (tests/real/conftest.py starts them; bench/real_vllm.py too)."""

from __future__ import annotations

from dataclasses import dataclass, field

from observer_dev.gameday.pace import EngineSpeed, Pace
from observer_dev.vllmproc import RunningVllm, VllmSpec

TOKEN = "real-tier"  # the observers' bearer token in this tier (their /v1/traces is a private route)
START_TIMEOUT = 420.0  # generous: a busy 2-core machine starts two generators and an embedder in 1–2 min


@dataclass
class Engines:
    """The running servers of the session."""

    stable: RunningVllm
    canary: RunningVllm
    embedder: RunningVllm
    version: str
    otlp_port: int  # where stable and canary send their OTLP spans: an observer listens there only when a test
    # runs one on this port; otherwise the exporter's batch fails to connect and is dropped (both alike)
    speed: EngineSpeed | None = None  # measured when the tier starts
    pace: Pace = field(default_factory=Pace)  # the rounds' scale chosen from `speed`

    def respec_canary(self, spec: VllmSpec) -> None:
        """Restart the canary with other flags on the same port (a new canary revision)."""
        self.canary.stop()
        self.canary.spec = spec
        self.canary.start()
        self.canary.wait_healthy(timeout=START_TIMEOUT)
