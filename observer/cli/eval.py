"""`observer eval run` (golden replay on demand), `observer eval gate` (a candidate against stable before a
canary starts) and `observer eval calibrate` (judge vs human labels)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import httpx
import numpy as np
import typer
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from observer import jsonsafe
from observer.analyse.quality.calibrate import Agreement, Judged, calibrate, load_labels
from observer.analyse.quality.checks import check_rubrics
from observer.analyse.quality.factory import build_judge
from observer.analyse.quality.gate import EXIT_CODES, gate
from observer.analyse.quality.golden import GoldenItem, discover
from observer.analyse.quality.judge import JudgeStats
from observer.analyse.quality.model import Answer, GoldenRunResult
from observer.analyse.quality.runner import GoldenRunner
from observer.analyse.quality.scorer import Scorer
from observer.analyse.quality.similarity import load_default_embedder
from observer.cli.common import ConfigOption, fail, load
from observer.config.fleet import VersionSpec
from observer.config.quality import QualitySpec
from observer.errors import ObserverError


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def _ms(values: list[float], q: float) -> str:
    if not values:
        return "—"
    return f"{1000 * float(np.quantile(values, q)):.0f}"


def register(app: typer.Typer) -> None:
    """Add the `eval` command group to `app`."""
    group = typer.Typer(name="eval", help="Golden-set evaluation and judge calibration.", no_args_is_help=True)
    app.add_typer(group)

    @group.command("run")
    def run(version: Annotated[str, typer.Option("--version", "-v", help="Version name from the config.")],
            config: ConfigOption = None,
            golden_set: Annotated[list[str] | None, typer.Option("--golden-set", "-g",
                                                                 help="Golden set(s) to run (default: all).")] = None,
            concurrency: Annotated[int | None, typer.Option(help="Requests in flight (default: config).")] = None,
            failures: Annotated[int, typer.Option(help="Failing items to list per set.")] = 10,
            as_json: Annotated[bool, typer.Option("--json", help="Print a JSON summary instead of tables.")] = False,
            ) -> None:
        """Replay golden sets against one version now and print the results (exit 1 if nothing was scored)."""
        cfg = load(config)
        try:
            v = cfg.fleet.version(version)
        except KeyError:
            fail(f"unknown version {version!r}; known: {', '.join(x.name for x in cfg.fleet.versions)}")
        if v.openai is None:
            fail(f"version {version!r} has no openai URL in the config")
        spec = cfg.quality if concurrency is None else cfg.quality.model_copy(update={"concurrency": concurrency})
        try:
            results = asyncio.run(_run(spec, v, golden_set or [], quiet=as_json))
        except ObserverError as e:
            fail(str(e))
        if as_json:
            print(jsonsafe.dumps([{"golden_set": r.golden_set, "set_version": r.set_version, "items": len(r.items),
                               "scored": r.scored, "passed": r.passed, "pass_ratio": r.pass_ratio,
                               "mean_score": r.mean_score, "unscored": r.unscored} for r in results]))
        else:
            _print_results(results, failures)
        if not any(r.scored for r in results):
            raise typer.Exit(1)

    @group.command("gate")
    def gate_cmd(
            candidate: Annotated[str, typer.Option("--candidate", "-c", help="Candidate version name from the "
                                                   "config, or any name with --candidate-url.")],
            baseline: Annotated[str, typer.Option("--baseline", "-b", help="Baseline (stable) version name.")],
            config: ConfigOption = None,
            candidate_url: Annotated[str | None, typer.Option(help="OpenAI base URL (…/v1) of a candidate that "
                                                              "is not in the fleet yet (CI, pre-rollout).")] = None,
            golden_set: Annotated[list[str] | None, typer.Option("--golden-set", "-g",
                                                                 help="Golden set(s) (default: all).")] = None,
            margin: Annotated[float, typer.Option(min=0.0, max=1.0, help="Non-inferiority margin on the pass "
                                                  "rate.")] = 0.05,
            alpha: Annotated[float, typer.Option(min=1e-6, max=0.5, help="False-fail budget of the gate.")] = 0.05,
            report: Annotated[Path | None, typer.Option(help="Write the JSON report here.")] = None,
            as_json: Annotated[bool, typer.Option("--json", help="Print the JSON report instead of a table.")] = False,
    ) -> None:
        """Gate a candidate against stable on the golden sets: exit 0 pass, 1 fail, 3 inconclusive, 4 nothing
        scored (2 is a usage error). Both answer the same items; the test is paired by item."""
        cfg = load(config)
        try:
            base = cfg.fleet.version(baseline)
        except KeyError:
            fail(f"unknown baseline {baseline!r}; known: {', '.join(x.name for x in cfg.fleet.versions)}")
        if candidate_url is not None:
            cand = VersionSpec(name=candidate, openai=candidate_url, vllm=[], model=base.model)
        else:
            try:
                cand = cfg.fleet.version(candidate)
            except KeyError:
                fail(f"unknown candidate {candidate!r}: add it to the fleet or pass --candidate-url")
        for v in (cand, base):
            if v.openai is None:
                fail(f"version {v.name!r} has no openai URL in the config")
        try:
            runs = asyncio.run(_gate_runs(cfg.quality, cand, base, golden_set or [], quiet=as_json))
        except ObserverError as e:
            fail(str(e))
        c_runs, b_runs = runs
        outcome, comparisons = gate(c_runs, b_runs, alpha=alpha, margin=margin)
        body = {"candidate": cand.name, "baseline": base.name, "outcome": str(outcome), "alpha": alpha,
                "margin": margin, "overall": comparisons[0].body(),
                "golden_sets": {c.golden_set: {**c.body(), "set_version": next(
                    (r.set_version for r in b_runs if r.golden_set == c.golden_set), "")} for c in comparisons[1:]},
                "judge": {"model": cfg.quality.judge.model, "prompt_path": cfg.quality.judge.prompt_path}
                if cfg.quality.judge.url else None}
        text = jsonsafe.dumps(body, indent=2)
        if report is not None:
            report.write_text(text + "\n", encoding="utf-8")
        if as_json:
            print(text)
        else:
            _print_gate(body)
        if comparisons[0].pairs == 0:
            raise typer.Exit(4)
        raise typer.Exit(EXIT_CODES[outcome])

    @group.command("calibrate")
    def calibrate_cmd(labels: Annotated[Path, typer.Option("--labels", help="Labelled anchor set (JSONL).")],
                      config: ConfigOption = None) -> None:
        """Judge a human-labelled anchor set and report agreement: TPR, TNR, Cohen's κ, confusion matrix."""
        cfg = load(config)
        if cfg.quality.judge.url is None:
            fail("no judge configured: set quality.judge.url and quality.judge.model")
        try:
            agree, judged = asyncio.run(_calibrate(cfg.quality, labels))
        except ObserverError as e:
            fail(str(e))
        console = Console()
        matrix = Table(title="judge vs human (positive = pass)")
        matrix.add_column("")
        matrix.add_column("judge pass", justify="right")
        matrix.add_column("judge fail", justify="right")
        matrix.add_row("human pass", str(agree.tp), str(agree.fn))
        matrix.add_row("human fail", str(agree.fp), str(agree.tn))
        console.print(matrix)
        kappa = "undefined" if agree.kappa is None else f"{agree.kappa:.3f}"
        console.print(f"items {len(judged)}  judged {agree.n}  judge errors {agree.errors}  "
                      f"TPR {_pct(agree.tpr)}  TNR {_pct(agree.tnr)}  accuracy {_pct(agree.accuracy)}  "
                      f"Cohen's κ {kappa}")
        for j in judged:
            if j.error:
                console.print(f"[yellow]judge error[/yellow] {j.item.id}: {j.error}", highlight=False)
        if agree.n == 0:
            raise typer.Exit(1)


async def _run(spec: QualitySpec, version: VersionSpec, names: list[str], *, quiet: bool
               ) -> list[GoldenRunResult]:
    golden = discover(spec.golden_dirs, names=names or spec.golden_sets)
    async with httpx.AsyncClient() as http:
        judge, rubrics = build_judge(http, spec, JudgeStats())
        if judge is not None:
            check_rubrics(golden, rubrics)
        scorer = Scorer(judge=judge, rubrics=rubrics, similarity_threshold=spec.similarity_threshold,
                        embedder_factory=load_default_embedder if any(g.uses("similarity") for g in golden) else None)
        runner = GoldenRunner(http, spec=spec, scorer=scorer)
        results: list[GoldenRunResult] = []
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      disable=quiet, transient=False) as progress:
            for gs in golden:
                task = progress.add_task(f"{gs.name} on {version.name}", total=len(gs.items))

                def advance(_item: GoldenItem, _answer: Answer, t: TaskID = task) -> None:
                    progress.advance(t)

                results.append(await runner.run(version, gs, progress=advance))
        return results


async def _gate_runs(spec: QualitySpec, candidate: VersionSpec, baseline: VersionSpec, names: list[str], *,
                     quiet: bool) -> tuple[list[GoldenRunResult], list[GoldenRunResult]]:
    c, b = await asyncio.gather(_run(spec, candidate, names, quiet=quiet), _run(spec, baseline, names, quiet=True))
    return c, b


def _print_gate(body: dict[str, Any]) -> None:
    console = Console()
    table = Table(title=f"offline gate: {body['candidate']} vs {body['baseline']} → {body['outcome'].upper()}",
                  box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False)
    for col in ("set", "outcome", "pairs", "cand", "base", "losses", "wins", "diff", "ci", "p"):
        table.add_column(col, justify="left" if col in ("set", "outcome") else "right")
    for c in [body["overall"], *body["golden_sets"].values()]:
        ci = c["ci"]
        table.add_row(c["golden_set"] or "all", c["outcome"], str(c["pairs"]), str(c["candidate_passed"]),
                      str(c["baseline_passed"]), str(c["losses"]), str(c["wins"]),
                      "—" if c["difference"] is None else f"{c['difference']:+.3f}",
                      "—" if ci[0] is None else f"[{ci[0]:+.3f}, {ci[1]:+.3f}]", f"{c['p_value']:.2g}")
    console.print(table)
    console.print(body["overall"]["reason"], highlight=False)


def _print_results(results: list[GoldenRunResult], failures: int) -> None:
    console = Console()
    versions = sorted({r.version for r in results})
    table = Table(title=f"golden-set results: {', '.join(versions)} (latencies in ms)", box=box.SIMPLE_HEAD,
                  collapse_padding=True, pad_edge=False)
    table.add_column("set", overflow="fold")
    for col in ("items", "scored", "passed", "rate", "score", "judge_err", "req_err", "ttft50", "e2e95"):
        table.add_column(col, justify="right", min_width=len(col))
    for r in results:
        table.add_row(r.golden_set, str(len(r.items)), str(r.scored), str(r.passed), _pct(r.pass_ratio),
                      "—" if r.mean_score is None else f"{r.mean_score:.2f}", str(r.judge_errors),
                      str(r.request_errors), _ms(r.latencies("ttft"), 0.5), _ms(r.latencies(), 0.95))
    console.print(table)
    for r in results:
        bad = [i for i in r.items if not i.passed][:failures]
        for item in bad:
            why = item.answer.error or "; ".join(f"{o.check}: {o.reason}" for o in item.outcomes
                                                 if o.passed is False or o.error)
            console.print(f"[red]✗[/red] {r.golden_set}/{item.item_id}: {why[:200]}", highlight=False)


async def _calibrate(spec: QualitySpec, labels: Path) -> tuple[Agreement, list[Judged]]:
    items = load_labels(labels)
    async with httpx.AsyncClient() as http:
        judge, rubrics = build_judge(http, spec, JudgeStats())
        assert judge is not None
        with Progress(TextColumn("judging"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as progress:
            task = progress.add_task("judging", total=len(items))
            agree, judged = await calibrate(judge, rubrics, items, progress=lambda _j: progress.advance(task))
    return agree, list(judged)
