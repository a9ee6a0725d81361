"""`observer canary judge`: the verdict as a table."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.table import Table

from observer import jsonsafe
from observer.cli.common import ConfigOption, fail, load

EXIT_CODES = {"pass": 0, "fail": 1, "inconclusive": 3, "nodata": 4, "idle": 5}


def verdict_table(body: dict[str, Any]) -> Table:
    """A rich table of a verdict body (the API's JSON)."""
    t = Table(title=f"canary {body['canary']} vs {body['baseline']}: {body['verdict'].upper()} "
                    f"(score {body['score']:.0f}, n {body['n']['canary']}/{body['n']['baseline']})",
              caption=body.get("reason", ""))
    for col in ("metric", "result", "canary", "baseline", "ratio [CI]", "p", "n canary/baseline", "min n"):
        t.add_column(col)
    colour = {"pass": "green", "fail": "red", "inconclusive": "yellow", "nodata": "dim", "idle": "dim"}
    for name, m in body["metrics"].items():
        flags = " (critical)" if m.get("critical") else " (advisory)" if m.get("advisory") else ""
        ci = m.get("ci")
        ratio = "" if m.get("ratio") is None else f"{m['ratio']:.3g}"
        if ci:
            ratio += f" [{ci[0]:.3g}, {ci[1]:.3g}]"
        n = m.get("n")
        t.add_row(name + flags, f"[{colour.get(m['result'], '')}]{m['result']}[/]",
                  "" if m.get("canary") is None else f"{m['canary']:.4g}",
                  "" if m.get("baseline") is None else f"{m['baseline']:.4g}", ratio,
                  "" if m.get("p") is None else f"{m['p']:.2g}", "" if not n else f"{n[0]}/{n[1]}",
                  "" if m.get("min_n") is None else str(m["min_n"]))
    return t


def register(app: typer.Typer) -> None:
    """Add `canary judge` to `app`."""
    canary_app = typer.Typer(no_args_is_help=True, help="Canary-vs-baseline analysis.")
    app.add_typer(canary_app, name="canary")

    @canary_app.command("judge")
    def judge_cmd(
        config: ConfigOption = None,
        canary: Annotated[str | None, typer.Option(help="Canary version (default: the configured pair).")] = None,
        baseline: Annotated[str | None, typer.Option(help="Baseline version.")] = None,
        url: Annotated[str | None, typer.Option(help="A running observer to ask (default: server.host:port "
                                                     "of the config).")] = None,
        prometheus: Annotated[str | None, typer.Option(help="Judge here from this Prometheus (fleet mode) "
                                                            "instead of asking an observer.")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the JSON body instead of a table.")] = False,
    ) -> None:
        """Judge the canary now and print the verdict; exit 0 pass, 1 fail, 3 inconclusive, 4 nodata, 5 idle."""
        cfg = load(config)
        if prometheus is not None:
            body = asyncio.run(_judge_from_prometheus(cfg, prometheus, canary, baseline))
        else:
            base = url or f"http://{cfg.server.host}:{cfg.server.port}"
            params = {k: v for k, v in (("canary", canary), ("baseline", baseline)) if v is not None}
            try:
                r = httpx.get(f"{base.rstrip('/')}/api/v1/canary/verdict", params=params, timeout=15.0)
            except httpx.HTTPError as e:
                fail(f"could not ask the observer at {base} for a verdict: {e}; is `observer serve` running?")
            if r.status_code != 200:
                fail(f"the observer at {base} answered HTTP {r.status_code}: {r.text[:300]}")
            body = r.json()
        if as_json:
            typer.echo(jsonsafe.dumps(body))
        else:
            Console().print(verdict_table(body))
            report = body.get("report") or (cfg.canary.report_url(body["canary"], body["baseline"])
                                            if body.get("canary") and body.get("baseline") else None)
            if report:
                Console().print(f"Report: {report}", soft_wrap=True)
        raise typer.Exit(EXIT_CODES.get(str(body.get("verdict")), 2))


async def _judge_from_prometheus(cfg: Any, url: str, canary: str | None, baseline: str | None
                                 ) -> dict[str, Any]:
    from observer.analyse.canary.service import CanaryService
    from observer.analyse.canary.sources import PrometheusSource
    from observer.export.canary_api import verdict_body

    async with httpx.AsyncClient() as http:
        import time

        service = CanaryService(cfg, PrometheusSource(url=url, http=http, slice_seconds=cfg.canary.slice_seconds),
                                clock=time.time)
        v = await service.verdict_for(canary, baseline, since=None, weight=None)
    return verdict_body(v)
