"""Pytest-friendly simulated fleet: configs on free loopback ports and a started/stopped fleet.

Usage:
    with running_fleet(profiles={"canary": "slow"}, seed=1) as (fleet, config):
        httpx.get(fleet.metrics_url("stable"))
`config` is the ObserverConfig pointing at the fleet; `config_yaml(...)` gives the same as YAML text
for an `observer serve` subprocess. The simulator is a simulator: it serves no model.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from observer.config import ObserverConfig, parse_config
from observer_dev.sim.answers import AnswerBook
from observer_dev.sim.fleet import FleetHandle, ProfileSpec, run_fleet
from tests.support.prom import free_port


@dataclass(frozen=True)
class SimPorts:
    """The ports a simulated fleet config uses."""

    vllm: Mapping[str, int]
    dcgm: int
    observer: int
    extra: Mapping[str, Any] = field(default_factory=dict)


def fleet_dict(versions: Sequence[str] = ("stable", "canary"), *, weights: Sequence[float] | None = None,
               observer_port: int | None = None, interval_seconds: float = 1.0, window_seconds: float = 60.0,
               with_dcgm: bool = True, with_router: bool = False) -> tuple[dict[str, Any], SimPorts]:
    """A config mapping (fleet, scrape, server) for `versions` on fresh free ports."""
    weights = list(weights) if weights is not None else ([0.9, 0.1] if len(versions) == 2 else
                                                          [round(1 / len(versions), 6)] * len(versions))
    ports = {v: free_port() for v in versions}
    dcgm = free_port()
    router = free_port()
    roles = ["stable", "canary"] + ["other"] * max(0, len(versions) - 2)
    items = []
    for i, v in enumerate(versions):
        item: dict[str, Any] = {"name": v, "role": roles[i] if i < len(roles) else "other",
                                "vllm": [f"http://127.0.0.1:{ports[v]}/metrics"],
                                "openai": f"http://127.0.0.1:{ports[v]}/v1",
                                "expected_traffic_weight": weights[i]}
        if with_dcgm:
            item["dcgm"] = [f"http://127.0.0.1:{dcgm}/metrics"]
            item["pods"] = [{"namespace": "llm-serving", "pod": f"sim-{v}-0"}]
        if with_router:  # every version behind one llm-d endpoint picker stand-in, routed by the simulator's names
            item["router"] = {"kind": "llm-d-epp", "urls": [f"http://127.0.0.1:{router}/metrics"],
                              "model": f"sim-{v}"}
        items.append(item)
    port = observer_port or free_port()
    # Each config gets its own sample store: tests never share (or leave) a database in the working tree.
    store = Path(tempfile.mkdtemp(prefix="observer-test-store-")) / "samples.db"
    data = {"fleet": {"versions": items},
            "scrape": {"interval_seconds": interval_seconds, "timeout_seconds": min(2.0, interval_seconds),
                       "window_seconds": window_seconds},
            "server": {"host": "127.0.0.1", "port": port},
            "sampling": {"store": {"path": str(store)}}}
    return data, SimPorts(vllm=ports, dcgm=dcgm, observer=port)


def config_yaml(data: Mapping[str, Any]) -> str:
    """YAML text of a config mapping (for a config file)."""
    return yaml.safe_dump(dict(data), sort_keys=False)


def sim_config(versions: Sequence[str] = ("stable", "canary"), **kwargs: Any) -> ObserverConfig:
    """A validated ObserverConfig for a simulated fleet on free ports."""
    data, _ = fleet_dict(versions, **kwargs)
    return parse_config(config_yaml(data), source="test config", environ={})


def write_answer_book(path: Path, items: Sequence[Mapping[str, Any]]) -> Path:
    """Write a tiny golden-set file (YAML list of {prompt|messages, reference}) and return its path."""
    path.write_text(yaml.safe_dump(list(items), sort_keys=False), encoding="utf-8")
    return path


@contextmanager
def running_fleet(config: ObserverConfig | None = None, *, profiles: Mapping[str, ProfileSpec] | None = None,
                  seed: int = 0, book: AnswerBook | None = None, golden_dir: Path | None = None,
                  total_rps: float = 10.0) -> Iterator[tuple[FleetHandle, ObserverConfig]]:
    """Start a simulated fleet (default: stable + canary on free ports) and stop it afterwards."""
    cfg = config or sim_config()
    with run_fleet(cfg, profiles, seed=seed, book=book, answer_dir=golden_dir, total_rps=total_rps) as fleet:
        yield fleet, cfg
