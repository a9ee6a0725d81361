"""The commands that run the dev package (`observer_dev`): `observer sim`, a simulated vLLM + DCGM fleet for
demos and tests (not a model server), and `observer gameday`, the whole chain scenario by scenario.

The dev package is imported inside the commands only, so `observer serve` and `observer proxy` never load it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from observer.cli.common import ConfigOption, fail, load
from observer.errors import ObserverError


def register(app: typer.Typer) -> None:
    """Add `observer sim` and `observer gameday` to `app`."""

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
        from observer_dev.sim.fleet import run_fleet
        from observer_dev.sim.profile import parse_profile_args

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

    @app.command("gameday")
    def gameday_cmd(
        short: Annotated[bool, typer.Option("--short", help="The quick variant the test suite runs.")] = False,
        scenario: Annotated[list[str] | None, typer.Option("--scenario", "-s",
                                                           help="Run only these scenarios.")] = None,
        seed: Annotated[int, typer.Option(help="Simulator seed.")] = 7,
        real: Annotated[bool, typer.Option("--real", help="On real vLLM servers (make real-vllm): healthy, "
                                                          "slow, worse, rejections, killed, idle.")] = False,
        cluster: Annotated[bool, typer.Option(
            "--cluster", help="In the cluster topology: versions discovered from a scripted Argo rollout, two "
                              "`observer serve` replicas on PostgreSQL, the judge reading Prometheus; one replica "
                              "SIGKILLed and the other cut from PostgreSQL mid-step.")] = False,
        primitives: Annotated[bool, typer.Option(
            "--primitives", help="Rollouts through KServe (LLMInferenceService, InferenceService), an HTTPRoute "
                                 "across InferencePools, an llm-d InferenceModelRewrite, OME and Dynamo on the "
                                 "cluster rig: versions discovered from those objects, weights 5 → 25 → 50 → 100 "
                                 "(or the pods' share) and promoted, aborted or held.")] = False,
        json_out: Annotated[bool, typer.Option("--json", help="With --cluster: end with one JSON line.")] = False,
    ) -> None:
        """Drive the simulated fleet (or, with --real, real vLLM servers) through canary scenarios, check the
        chain up to the Argo queries and the web verdict; print a table; exit 1 on any mismatch."""
        from observer_dev.gameday import GamedayError
        from observer_dev.gameday.runner import Kind, play, show

        kind = Kind.PRIMITIVES if primitives else Kind.CLUSTER if cluster else Kind.REAL if real else Kind.SINGLE
        if kind is Kind.REAL:
            from observer_dev.vllmproc import sigterm_stops

            sigterm_stops()  # the servers it starts are stopped by the finally blocks a SIGTERM skips
        try:
            rows = play(kind, short=short, only=scenario or None, seed=seed)
        except GamedayError as e:
            fail(str(e))
        ok = show(kind, rows, Console(width=max(Console().width, 180)), json_line=json_out)
        raise typer.Exit(0 if ok else 1)
