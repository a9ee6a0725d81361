"""Shared CLI plumbing: the --config option and friendly config errors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from observer import env
from observer.config import ObserverConfig, load_config
from observer.errors import ObserverError

err_console = Console(stderr=True)

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help=f"YAML config file (default: ${env.CONFIG_PATH}).", show_default=False),
]


def load(path: Path | None) -> ObserverConfig:
    """Load the config named on the command line or in the environment; exit 2 with the reason if invalid."""
    chosen = path or (Path(os.environ[env.CONFIG_PATH]) if env.CONFIG_PATH in os.environ else None)
    if chosen is None:
        fail(f"no config: pass --config FILE or set {env.CONFIG_PATH}")
    try:
        return load_config(chosen)
    except ObserverError as e:
        fail(str(e))


def fail(message: str, code: int = 2) -> NoReturn:
    """Print `message` in red on stderr and exit with `code`."""
    # Escaped: messages quote extras (`observer[render]`) and paths that rich would read as markup.
    err_console.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)
