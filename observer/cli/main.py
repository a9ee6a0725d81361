"""The `observer` command line. Each area registers its own commands from its own module."""

from __future__ import annotations

import typer

from observer.cli import canary, core, dev, drift, eval, render, sampling, scrape

app = typer.Typer(name="observer", no_args_is_help=True, add_completion=False,
                  help="Observability, drift and canary analysis for LLM serving.")

for module in (core, scrape, dev, sampling, eval, drift, canary, render):
    module.register(app)


def main() -> None:
    """Console-script entry point."""
    app()
