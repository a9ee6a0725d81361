"""`observer sim`: serve a simulated vLLM + DCGM fleet for demos and tests (not a model server)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from observer.cli.common import ConfigOption, fail, load
from observer.errors import ObserverError


def register(app: typer.Typer) -> None:
    """Add `observer sim` to `app`."""

    @app.command("sim")
    def sim(
        config: ConfigOption = None,
        profile: Annotated[list[str] | None, typer.Option(
            "--profile", "-p", help="VERSION=PRESET[,key=value...], e.g. canary=slow or canary=healthy,error_rate=0.05."
            " Presets: healthy, slow, flaky, worse, drifted, idle.")] = None,
        seed: Annotated[int, typer.Option(help="Seed of every simulated random draw.")] = 0,
        golden_sets: Annotated[Path, typer.Option(
            help="Directory of golden-set files whose references the simulator knows.")] = Path("golden_sets"),
        duration: Annotated[float | None, typer.Option(
            help="Stop after this many seconds (default: run until Ctrl-C).", show_default=False)] = None,
    ) -> None:
        """Serve the fleet of the config as simulated vLLM pods and DCGM exporters until Ctrl-C."""
        from observer.sim.fleet import run_fleet
        from observer.sim.profile import parse_profile_args

        cfg = load(config)
        console = Console()
        try:
            profiles = parse_profile_args(profile or [])
            with run_fleet(cfg, profiles, seed=seed, answer_dir=golden_sets) as fleet:
                console.print("[bold]observer simulator[/bold] (simulated vLLM 0.33 + DCGM, for demos and tests)")
                for name, version in fleet.versions.items():
                    p = version.profile
                    console.print(f"  {name}: model {version.model}, {len(version.replicas)} replica(s), "
                                  f"load {p.load_rps:g} req/s, ttft x{p.ttft_scale:g}, errors {p.error_rate:g}")
                    for i in range(len(version.replicas)):
                        console.print(f"    metrics {fleet.metrics_url(name, i)}")
                    console.print(f"    openai  {fleet.openai_url(name)}   admin {fleet.url(name)}/sim/profile")
                for url in fleet.dcgm_urls():
                    console.print(f"  dcgm-exporter: {url}")
                book = next(iter(fleet.versions.values())).book if fleet.versions else None
                if book is not None:
                    console.print(f"  answer book: {len(book)} golden-set prompt(s) from {golden_sets}")
                    for error in book.errors:
                        console.print(f"  [yellow]warning[/yellow]: {error}")
                console.print("Ctrl-C to stop.")
                stopped = threading.Event()
                try:
                    stopped.wait(duration)
                except KeyboardInterrupt:
                    console.print("stopping")
        except ObserverError as e:
            fail(str(e))
