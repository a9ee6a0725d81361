"""A simulated version: its replicas (one engine and one GPU each), profile, answer book and the
ring of recent requests. Shared by the HTTP apps and the fleet's load ticker."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from observer_dev.sim import traffic
from observer_dev.sim.answers import REFUSAL, AnswerBook, generic_answer
from observer_dev.sim.dcgm_exposition import GpuIdentity, SimGpu
from observer_dev.sim.engine import ABORT, ERROR, FloatArray, Requests, SimEngine
from observer_dev.sim.profile import Profile, build_profile
from observer_dev.sim.spans import EngineTracer
from observer_dev.sim.vllm_families import FINISHED_REASONS

MAX_TEXT_SAMPLES_PER_TICK = 50  # keeps a burst of load from costing text generation


@dataclass
class Replica:
    """One simulated vLLM pod: its engine and the GPUs it holds (`profile.gpus_per_replica`, followed live)."""

    index: int
    engine: SimEngine
    gpu: SimGpu
    _more: list[SimGpu] = field(default_factory=list)

    def gpus(self) -> list[SimGpu]:
        """The pod's GPUs now: the first one, then tensor-parallel peers created as the profile asks."""
        n = self.engine.profile.gpus_per_replica
        first = self.gpu.identity
        while len(self._more) < n - 1:
            k = len(self._more) + 1
            ident = GpuIdentity.make(first.index + 16 * k, key=f"{first.uuid}/{k}", hostname=first.hostname,
                                     namespace=first.namespace, pod=first.pod)
            self._more.append(SimGpu(ident, self.engine.snapshot, self.gpu.clock))
        return [self.gpu, *self._more[: n - 1]]


@dataclass
class SimVersion:
    """Everything the simulator knows about one model version."""

    name: str
    model: str
    replicas: list[Replica]
    book: AnswerBook
    seed: int
    max_model_len: int = 8192
    recent: traffic.RecentSamples = field(default_factory=traffic.RecentSamples)
    clock: Callable[[], float] = time.time
    tracer: EngineTracer | None = None  # exports an OTLP span per API request when the fleet is given a target
    # LoRA adapters served on these pods: a request for one of these model names is answered by that version's
    # engine and profile (vLLM counts it under the base model's `model_name`; only the router sees it apart).
    adapters: dict[str, SimVersion] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng([self.seed, 7])

    @classmethod
    def create(cls, name: str, *, model: str, profile: Profile, replicas: int, seed: int, book: AnswerBook,
               pods: Sequence[tuple[str | None, str | None]] | None = None, gpu_offset: int = 0,
               clock: Callable[[], float] = time.time) -> SimVersion:
        """Build `replicas` engines (seeded from `seed`) with a GPU each; pods give (namespace, pod)."""
        out = []
        for i in range(replicas):
            engine = SimEngine(model=model, profile=profile, seed=seed * 1000 + i, clock=clock)
            namespace, pod = (pods[i] if pods and i < len(pods) else (None, None))
            identity = GpuIdentity.make(gpu_offset + i, key=f"{name}/{i}", namespace=namespace, pod=pod)
            out.append(Replica(index=i, engine=engine, gpu=SimGpu(identity, engine.snapshot, clock)))
        return cls(name=name, model=model, replicas=out, book=book, seed=seed, clock=clock)

    @property
    def profile(self) -> Profile:
        return self.replicas[0].engine.profile

    def set_profile(self, changes: Mapping[str, Any] | Profile | str, *, replica: int | None = None) -> Profile:
        """Apply a preset name, a Profile, or overrides (validated) to every replica, or to one (a slow GPU)."""
        chosen = [r for r in self.replicas if replica is None or r.index == replica]
        if not chosen:
            raise ValueError(f"version {self.name} has no replica {replica} (it has {len(self.replicas)})")
        base = chosen[0].engine.profile
        profile = build_profile(changes, base=base) if not isinstance(changes, Profile) else changes
        for r in chosen:
            r.engine.set_profile(profile)
        return profile

    def restart(self, replica: int | None = None) -> None:
        """Restart one replica (or all): its counters and histograms start from zero."""
        for r in self.replicas:
            if replica is None or r.index == replica:
                r.engine.restart()

    def tick(self, dt: float) -> int:
        """Advance the built-in load of every replica by `dt` seconds; returns requests simulated."""
        total = 0
        share = 1.0 / len(self.replicas)
        for r in self.replicas:
            pending: list[tuple[str, str]] = []

            def factors(n: int, pending: list[tuple[str, str]] = pending) -> FloatArray:
                drift = self.profile.drift_fraction
                pending.extend(traffic.draw_prompt(self._rng, drift) for _ in range(n))
                return np.array([traffic.OTHER_LENGTH_FACTOR if d == "other" else 1.0 for _, d in pending])

            reqs = r.engine.tick(dt * share, prompt_factors=factors)
            self._keep_texts(reqs, pending)
            total += reqs.n
        return total

    def _keep_texts(self, reqs: Requests, prompts: list[tuple[str, str]]) -> None:
        now = self.clock()
        refusal = self.profile.refusal_rate
        for i in range(min(reqs.n, len(prompts), MAX_TEXT_SAMPLES_PER_TICK)):
            prompt, domain = prompts[i]
            reason = int(reqs.reasons[i])
            if reason == ERROR:
                output = ""
            elif self._rng.random() < refusal:
                output = REFUSAL
            else:
                output = generic_answer(prompt)
            if reason == ABORT:
                output = " ".join(output.split()[: int(reqs.gen_tokens[i])])
            ttft = float(reqs.ttft[i])
            self.recent.add(traffic.LoadSample(
                ts=now, prompt=prompt, output=output, domain=domain, finish_reason=FINISHED_REASONS[reason],
                prompt_tokens=int(reqs.prompt_tokens[i]), output_tokens=int(reqs.gen_tokens[i]),
                ttft_s=None if np.isnan(ttft) else ttft,
                latency_s=float(reqs.queue[i] + np.nan_to_num(reqs.prefill[i]) + np.nan_to_num(reqs.decode[i]))))
