"""`observer render [alerts|dashboards|argo|flagger|ome|helm|all] --config FILE [--check]`: write or check generated
files."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from observer.cli.common import ConfigOption, err_console, fail, load
from observer.config.spec import ObserverConfig
from observer.errors import MissingDependencyError, ObserverError
from observer.render.writer import write_files

Renderer = Callable[[ObserverConfig], dict[str, str]]


class Target(StrEnum):
    """What to render."""

    ALERTS = "alerts"
    DASHBOARDS = "dashboards"
    ARGO = "argo"
    FLAGGER = "flagger"
    OME = "ome"
    HELM = "helm"
    ALL = "all"


MODULES: dict[Target, str] = {
    Target.ALERTS: "observer.render.alerts",
    Target.DASHBOARDS: "observer.render.dashboards",
    Target.ARGO: "observer.render.argo",
    Target.FLAGGER: "observer.render.flagger",
    Target.OME: "observer.render.ome",
    Target.HELM: "observer.render.helm",
}


def _renderer(target: Target) -> Renderer:
    """The `render` function of a target, imported lazily (the dashboards need the `render` extra)."""
    try:
        module = importlib.import_module(MODULES[target])
    except ImportError as e:
        if e.name and e.name.startswith("grafana_foundation_sdk"):
            raise MissingDependencyError("grafana-foundation-sdk", "render") from e
        raise ObserverError(f"could not load the {target} renderer: {e}") from e
    func: Renderer = module.render
    return func


def render_files(config: ObserverConfig, targets: list[Target]) -> dict[str, str]:
    """Render every target into one path → text map; a renderer that cannot run is an error, never a skip."""
    files: dict[str, str] = {}
    for target in targets:
        out = _renderer(target)(config)
        for path in out:
            if path in files:
                raise ObserverError(f"could not render {target}: {path} is also written by another renderer")
        files.update(out)
    return files


def register(app: typer.Typer) -> None:
    """Add `observer render` to `app`."""

    @app.command("render")
    def render(
        target: Annotated[Target, typer.Argument(help="What to render.")] = Target.ALL,
        config: ConfigOption = None,
        check: Annotated[bool, typer.Option("--check", help="Write nothing; exit 1 listing files that "
                                                             "differ from what the config generates.")] = False,
        root: Annotated[Path, typer.Option("--root", help="Directory the generated paths are relative to.")
                        ] = Path("."),
    ) -> None:
        """Generate alert rules, dashboards, Argo and Flagger templates, OME's RolloutPolicy and the Helm chart's
        generated parts from the config (or check them)."""
        cfg = load(config)
        targets: list[Target] = list(MODULES) if target is Target.ALL else [target]
        try:
            files = render_files(cfg, targets)
            result = write_files(files, root=root, check=check)
        except ObserverError as e:
            fail(str(e))
        console = Console()
        if check:
            if result.changed:
                for path in result.changed:
                    err_console.print(f"[red]differs:[/red] {path}", highlight=False)
                fail(f"{len(result.changed)} generated file(s) differ from the config: run "
                     f"`observer render {target} --config {config}`", code=1)
            console.print(f"[green]ok[/green]: {len(result.unchanged)} generated file(s) up to date")
            return
        for path in result.changed:
            console.print(f"wrote {path}", highlight=False)
        console.print(f"{len(result.changed)} written, {len(result.unchanged)} unchanged")
