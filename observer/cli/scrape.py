"""`observer scrape SOURCE... --json`: one-shot scrape of URLs or files, per model and per GPU."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from observer import jsonsafe
from observer.analyse.histogram import quantile
from observer.cli.common import fail
from observer.collect.dcgm import parse_dcgm
from observer.collect.model import DcgmScrape, VllmScrape
from observer.collect.promtext import parse
from observer.collect.scraper import Scraper
from observer.collect.vllm import normalise, parse_vllm
from observer.errors import ObserverError, ParseError
from observer.jsonsafe import finite

MAX_BODY_BYTES = 64 * 1024 * 1024


def vllm_json(scrape: VllmScrape) -> dict[str, Any]:
    """The `models` object of `observer scrape --json` for one vLLM scrape."""
    models: dict[str, Any] = {}
    for name, m in sorted(scrape.models.items()):
        counters: dict[str, Any] = dict(sorted(m.counters.items()))
        for fam, by_label in sorted(m.labelled_counters.items()):
            counters[fam] = dict(sorted(by_label.items()))
        models[name] = {
            "histograms": {
                fam: {"count": h.count, "sum": h.sum,
                      **{f"p{round(q * 100)}": finite(quantile(q, h)) for q in (0.5, 0.95, 0.99)}}
                for fam, h in sorted(m.histograms.items())
            },
            "gauges": dict(sorted(m.gauges.items())),
            "counters": counters,
            "engines": m.engines,
        }
    return models


def dcgm_json(scrape: DcgmScrape) -> list[dict[str, Any]]:
    """The `gpus` list of `observer scrape --json` for one DCGM-exporter scrape."""
    return [{"uuid": g.uuid, "gpu": g.gpu, "hostname": g.hostname, "pod": g.pod, "namespace": g.namespace,
             "gpu_util_percent": g.gpu_util_percent, "fb_used_mib": g.fb_used_mib, "fb_free_mib": g.fb_free_mib,
             "temperature_c": g.temperature_c, "power_w": g.power_w, "xid": g.xid} for g in scrape.gpus]


def read_source(source: str, *, timeout: float = 10.0) -> str:
    """Return the body of a URL (through the service's Scraper: same limits, headers and checks) or a file."""
    if source.startswith(("http://", "https://")):
        async def fetch() -> str:
            async with httpx.AsyncClient() as client:
                scraper = Scraper(client=client, parse_vllm=parse_vllm, parse_dcgm=parse_dcgm,
                                  timeout_seconds=timeout, max_body_bytes=MAX_BODY_BYTES)
                return await scraper.fetch_text(source)

        return asyncio.run(fetch())
    try:
        return Path(source).read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise ObserverError(f"could not read {source}: {e.strerror}") from e


def scrape_sources(sources: list[str]) -> dict[str, Any]:
    """Scrape every source; vLLM models are merged by model name, DCGM GPUs listed."""
    out: dict[str, Any] = {"models": {}}
    for source in sources:
        text = read_source(source)
        try:
            families = parse(text)
        except ParseError as e:
            raise ObserverError(f"could not parse {source}: {e}") from e
        if any(f.name.startswith("DCGM_FI_") for f in families):
            out.setdefault("gpus", []).extend(dcgm_json(parse_dcgm(text)))
        else:
            out["models"].update(vllm_json(normalise(families)))
    return out


def register(app: typer.Typer) -> None:
    """Add `observer scrape` to `app`."""

    @app.command("scrape")
    def scrape(sources: Annotated[list[str], typer.Argument(help="vLLM or DCGM /metrics URLs or files.")],
               as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
        """Scrape vLLM / DCGM-exporter metrics once and print per-model signals (aggregated over engine)."""
        try:
            result = scrape_sources(sources)
        except ObserverError as e:
            fail(str(e), code=1)
        if as_json:
            typer.echo(jsonsafe.dumps(result, indent=1))
            return
        from rich.console import Console
        from rich.table import Table

        console = Console()
        for model, m in result["models"].items():
            table = Table(title=f"{model} ({m['engines']} engine(s))")
            for col in ("histogram", "count", "p50", "p95", "p99"):
                table.add_column(col)
            for fam, h in m["histograms"].items():
                table.add_row(fam, f"{h['count']:.0f}", *(f"{h[p]:.4g}" if h[p] is not None else "-"
                                                         for p in ("p50", "p95", "p99")))
            console.print(table)
            console.print({"gauges": m["gauges"], "counters": m["counters"]})
        for gpu in result.get("gpus", []):
            console.print(gpu)
