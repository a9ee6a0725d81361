"""`observer canary judge` (the verdict now, as a table) and `observer canary wait` (a pipeline's gate: block
until the pair's verdict is decided or a deadline passes)."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from observer import jsonsafe
from observer.cli.common import ConfigOption, err_console, fail, load

EXIT_CODES = {"pass": 0, "fail": 1, "inconclusive": 3, "nodata": 4, "idle": 5}
WAIT_UNDECIDED = 3
"""`canary wait` at its deadline with a verdict that is not pass or fail (inconclusive, nodata, idle): the gate
holds, as Argo's inconclusive measurement does; never 0."""
WAIT_UNREACHABLE = 4
"""`canary wait` at its deadline without an observer's answer (down, wrong URL, not an observer)."""
VERDICTS = frozenset(EXIT_CODES)


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
    """Add `canary judge` and `canary wait` to `app`."""
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


    @canary_app.command("wait")
    def wait_cmd(
        url: Annotated[str | None, typer.Option(help="The observer (default: server.host:port of --config).")] = None,
        config: ConfigOption = None,
        canary: Annotated[str, typer.Option(help="Canary version, or a role (canary) or group:role.")] = "canary",
        baseline: Annotated[str, typer.Option(help="Baseline version, or a role.")] = "stable",
        weight: Annotated[str | None, typer.Option(help="The canary's expected traffic share now (0-100, or "
                                                         "`any`), for the split check; default: what the "
                                                         "observer knows (discovery's weight).")] = None,
        timeout: Annotated[float, typer.Option(min=1, help="Seconds to wait for a decided verdict.")] = 1800.0,
        interval: Annotated[float, typer.Option(min=0.1, help="Seconds between looks.")] = 30.0,
        planned: Annotated[bool, typer.Option(
            "--planned", help="The step starts now and is planned to end at --timeout: the verdict spends most of "
                              "its α there (a last look is made at the deadline), and judges only the data since "
                              "the start.")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="Print the last verdict body as JSON.")] = False,
    ) -> None:
        """Wait until the pair's verdict is pass or fail; print the reason and the report URL. Exit 0 pass, 1
        fail, 3 still undecided at --timeout (inconclusive, nodata, idle: the gate holds), 4 no observer
        answered (unreachable, a wrong URL, not an observer). An observer that restarts in the middle is
        asked again; nothing but a pass exits 0."""
        cfg = load(config) if url is None or config is not None else None  # the config gives the report URL
        if url is None:
            assert cfg is not None
            url = f"http://{cfg.server.host}:{cfg.server.port}"
        verdict_url = f"{url.rstrip('/')}/api/v1/canary/verdict"
        params = {"canary": canary, "baseline": baseline, **({"weight": weight} if weight is not None else {})}
        if planned:
            params |= {"since": f"{time.time():.3f}", "step_seconds": f"{timeout:g}"}
        deadline = time.monotonic() + timeout
        body: dict[str, Any] | None = None
        problem: str | None = None
        said = ""
        while True:
            body, problem = _look(verdict_url, params, min(15.0, max(1.0, deadline - time.monotonic())))
            if body is not None:
                line = f"{body['verdict']}: {body.get('reason', '')}"
                if line != said:
                    err_console.print(f"{canary} vs {baseline}: {escape(line)}", highlight=False, soft_wrap=True)
                    said = line
                if body["verdict"] in ("pass", "fail"):
                    break
            else:
                err_console.print(f"[yellow]no verdict:[/yellow] {escape(str(problem))}", highlight=False,
                                  soft_wrap=True)
            left = deadline - time.monotonic()
            if planned and left > 0:  # the planned end gets its look: the final test is made there
                time.sleep(min(interval, left))
                continue
            if time.monotonic() + interval > deadline:
                break
            time.sleep(interval)
        if body is None:
            fail(f"no observer answered at {verdict_url} within {timeout:.0f} s: {problem}", WAIT_UNREACHABLE)
        if as_json:
            typer.echo(jsonsafe.dumps(body))
        report = body.get("report") or (cfg.canary.report_url(body["canary"], body["baseline"])
                                        if cfg is not None and body.get("canary") and body.get("baseline") else None)
        verdict = str(body["verdict"])
        Console(stderr=as_json).print(
            f"{body.get('canary', canary)} vs {body.get('baseline', baseline)}: {verdict.upper()}"
            + ("" if verdict in ("pass", "fail") else f" after {timeout:.0f} s (the gate holds)")
            + f" — {escape(str(body.get('reason', '')))}" + (f"\nReport: {report}" if report else ""),
            highlight=False, soft_wrap=True)
        raise typer.Exit({"pass": 0, "fail": 1}.get(verdict, WAIT_UNDECIDED))


def _look(url: str, params: dict[str, str], timeout: float) -> tuple[dict[str, Any] | None, str | None]:
    """One verdict: (body, None), or (None, what went wrong) when no observer's verdict came back."""
    try:
        r = httpx.get(url, params=params, timeout=timeout)
    except httpx.HTTPError as e:
        return None, f"{type(e).__name__} reaching {url}: {e}"
    if r.status_code != 200:
        return None, f"HTTP {r.status_code} from {url}: {r.text[:200]}"
    try:
        body = r.json()
    except ValueError:
        return None, f"{url} answered something that is not JSON: is it the observer?"
    if not isinstance(body, dict) or body.get("verdict") not in VERDICTS:
        return None, f"{url} answered JSON without a verdict: is it the observer?"
    return body, None


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
