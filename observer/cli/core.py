"""`observer check-config` and `observer serve`."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.console import Console

from observer.cli.common import ConfigOption, fail, load
from observer.config import ObserverConfig
from observer.crosscheck import check_references
from observer.errors import ObserverError
from observer.logs import configure as configure_logs


def load_checked(config: ConfigOption) -> ObserverConfig:
    """Load the config and refuse it (exit 2) when a section references something that does not exist."""
    cfg = load(config)
    problems = check_references(cfg)
    if problems:
        fail("\n".join(str(p) for p in problems))
    return cfg


def _edge_problems(cfg: ObserverConfig, urls: list[str]) -> list[str]:
    import httpx

    from observer.collect import edges
    from observer.collect.vllm import parse_vllm

    ths = edges.thresholds(cfg.slo) if cfg.slo.enabled else []
    out: list[str] = []
    for url in urls:
        try:
            resp = httpx.get(url, timeout=10.0)
            resp.raise_for_status()
        except httpx.HTTPError as e:
            out.append(f"{url}: could not read the exposition ({e})")
            continue
        out += edges.problems(ths, edges.exposed_edges(parse_vllm(resp.text)), where=url)
    return out


def register(app: typer.Typer) -> None:
    """Add the core commands to `app`."""

    @app.command("check-config")
    def check_config(config: ConfigOption = None,
                     edges_from: Annotated[list[str] | None, typer.Option(
                         "--edges-from", help="A live vLLM /metrics URL: check every latency SLO threshold "
                                              "against the bucket edges it exposes (repeatable).")] = None,
                     ) -> None:
        """Validate the config file and print a summary; exit 2 naming the key and line if invalid."""
        cfg = load_checked(config)
        console = Console()
        console.print(f"[green]ok[/green]: {len(cfg.fleet.versions)} version(s)")
        for v in cfg.fleet.versions:
            console.print(f"  {v.name} ({v.role}): {len(v.vllm)} vLLM target(s), {len(v.dcgm)} DCGM target(s)"
                          f"{', openai ' + v.openai if v.openai else ''}")
        if edges_from:
            found = _edge_problems(cfg, edges_from)
            if found:
                fail("\n".join(found))
            console.print(f"[green]ok[/green]: every latency SLO threshold is a bucket edge of {len(edges_from)} "
                          f"live target(s)")

    @app.command("serve")
    def serve(config: ConfigOption = None,
              log_level: str = typer.Option("INFO", help="Logging level."),
              log_format: str | None = typer.Option(None, help="Log format: text (default) or json (one object "
                                                              "per line); default from OBSERVER_LOG_FORMAT.")
              ) -> None:
        """Run the observer: scrape, analyse, and serve /metrics and the API."""
        from observer.service import serve as run

        try:
            configure_logs(log_level, log_format)
        except ObserverError as e:
            fail(str(e))
        cfg = load_checked(config)
        try:
            asyncio.run(run(cfg))
        except ObserverError as e:  # a config problem found while building (a golden set, a store): one line
            fail(str(e))
        except OSError as e:
            fail(f"could not serve on {cfg.server.host}:{cfg.server.port}: {e.strerror or e}")
