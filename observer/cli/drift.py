"""`observer baseline pin|list|show|promote` and `observer drift check|test|report`."""

from __future__ import annotations

import getpass
import json
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table

from observer import jsonsafe
from observer.cli.common import ConfigOption, fail, load
from observer.errors import ConfigError, ObserverError

if TYPE_CHECKING:
    from observer.analyse.drift.check import Checker
    from observer.config.spec import ObserverConfig

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_time(value: str | None, *, now: float) -> float | None:
    """Unix seconds, an ISO 8601 time (UTC unless it says otherwise), or an age such as 2h / 7d before now."""
    if value is None or value == "":
        return None
    v = value.strip()
    m = _RELATIVE.match(v)
    if m:
        return now - float(m.group(1)) * _UNITS[m.group(2)]
    try:
        return float(v)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError as e:
        raise typer.BadParameter(f"{value!r} is not unix seconds, ISO 8601 or an age like 2h / 7d") from e
    if dt.tzinfo is None:

        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def read_texts(path: Path) -> list[str]:
    """Texts of a JSONL file, one `{"text": ...}` object per line (blank lines skipped)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        fail(f"could not read {path}: {e}")
    texts: list[str] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            fail(f"{path}:{n}: not valid JSON: {e}")
        if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
            fail(f"{path}:{n}: each line must be a JSON object with a string field \"text\"")
        texts.append(obj["text"])
    if len(texts) < 2:
        fail(f"{path}: need at least 2 texts, found {len(texts)}")
    return texts


def _checker(cfg: ObserverConfig) -> Checker:
    from observer.analyse.drift.pinning import open_checker

    return open_checker(cfg)


def _known(cfg: ObserverConfig, version: str) -> None:
    from observer.analyse.drift.pinning import known_version

    try:
        known_version(cfg, version)
    except ConfigError as e:
        fail(str(e))


def _dump(obj: Any) -> None:
    typer.echo(jsonsafe.dumps(obj, indent=2, sort_keys=True))


def register(app: typer.Typer) -> None:
    """Add this area's commands to `app`."""
    baseline_app = typer.Typer(no_args_is_help=True, help="Pin, list, show and promote drift baselines.")
    drift_app = typer.Typer(no_args_is_help=True, help="Embedding drift checks, ad-hoc tests and reports.")
    app.add_typer(baseline_app, name="baseline")
    app.add_typer(drift_app, name="drift")

    @baseline_app.command("pin")
    def pin(version: str = typer.Option(..., "--version", help="Version whose stored samples are pinned."),
            since: str | None = typer.Option(None, help="Start: unix s, ISO 8601 or an age (7d)."),
            until: str | None = typer.Option(None, help="End (exclusive): unix s, ISO 8601 or an age."),
            source: str | None = typer.Option(
                None, help="Only samples of this source (proxy|ingest|golden); default: drift.sources."),
            model: str | None = typer.Option(None, help="Baseline model key (default: from config/samples)."),
            promote: bool = typer.Option(False, "--promote", help="Also make it the model's active baseline."),
            by: str | None = typer.Option(None, help="Who pins it (default: the OS user)."),
            note: str = typer.Option("", help="Free-text note stored in the metadata."),
            config: ConfigOption = None) -> None:
        """Capture an immutable baseline from a version's stored samples."""
        from observer.analyse.drift.pinning import pin_baseline

        cfg = load(config)
        _known(cfg, version)
        now = time.time()
        try:
            p = pin_baseline(cfg, version, now=now, created_by=by or _user(), since=parse_time(since, now=now),
                             until=parse_time(until, now=now), source=source, model=model, promote=promote,
                             note=note)
        except ObserverError as e:
            fail(str(e))
        typer.echo(f"pinned baseline {p.hash} for model {p.model} ({p.n} samples of {version}, {p.units})"
                   + ("; now active" if promote else f"; activate it with `observer baseline promote {p.short}`"))
        typer.echo(p.calibration)

    @baseline_app.command("list")
    def list_(as_json: bool = typer.Option(False, "--json", help="Print JSON."), config: ConfigOption = None) -> None:
        """List pinned baselines, newest first, marking the active one of each model."""
        from observer.analyse.drift.baseline import BaselineRepo

        cfg = load(config)
        repo = BaselineRepo(cfg.drift.baseline_dir)
        try:
            active = repo.active_map()
            items = repo.all()
        except ObserverError as e:
            fail(str(e))
        if as_json:
            _dump([{"hash": b.hash, "active": active.get(b.meta.model) == b.hash, **_meta(b.meta)} for b in items])
            return
        table = Table("hash", "model", "version", "n", "created", "by", "active")
        for b in items:
            table.add_row(b.short(), b.meta.model, b.meta.source_version, str(b.meta.n),
                          datetime.fromtimestamp(b.meta.created_at).isoformat(timespec="seconds"),
                          b.meta.created_by, "*" if active.get(b.meta.model) == b.hash else "")
        Console().print(table)

    @baseline_app.command("show")
    def show(ref: str = typer.Argument(..., help="Baseline hash or unique prefix."),
             config: ConfigOption = None) -> None:
        """Show a baseline's metadata (verifying its content hash)."""
        from observer.analyse.drift.baseline import BaselineRepo

        cfg = load(config)
        repo = BaselineRepo(cfg.drift.baseline_dir)
        try:
            b = repo.load(ref)
            active = repo.active_map().get(b.meta.model) == b.hash
        except ObserverError as e:
            fail(str(e))
        from observer.analyse.drift.calibrate import Calibration
        from observer.analyse.drift.pinning import describe

        calibration = Calibration.from_json(b.meta.calibration)
        _dump({"hash": b.hash, "active": active, "verified": True, **_meta(b.meta),
               "fields": sorted(b.embeddings), "features": sorted(b.features),
               "own_false_alarms": describe(calibration) if calibration is not None else
               "not measured: pinned before baselines measured their own noise; pin it again"})

    @baseline_app.command("promote")
    def promote_(ref: str = typer.Argument(..., help="Baseline hash or unique prefix."),
                 by: str | None = typer.Option(None, help="Who promotes it (default: the OS user)."),
                 reason: str = typer.Option("", help="Why (kept in history.jsonl)."),
                 config: ConfigOption = None) -> None:
        """Make a baseline the active one of its model (logged in history.jsonl)."""
        from observer.analyse.drift.baseline import BaselineRepo

        cfg = load(config)
        repo = BaselineRepo(cfg.drift.baseline_dir)
        try:
            previous = None
            b = repo.load(ref)
            previous = repo.active_map().get(b.meta.model)
            repo.promote(b.hash, by=by or _user(), at=time.time(), reason=reason)
        except ObserverError as e:
            fail(str(e))
        typer.echo(f"model {b.meta.model}: active baseline {(previous or 'none')[:12]} -> {b.short()}")

    @drift_app.command("check")
    def check(version: str = typer.Option(..., "--version", help="Version to check."),
              as_json: bool = typer.Option(False, "--json", help="Print the full JSON report."),
              fail_on_drift: bool = typer.Option(False, help="Exit 1 when any field shifted."),
              config: ConfigOption = None) -> None:
        """Check a version's current window against its model's active baseline (one window, ungated)."""
        cfg = load(config)
        _known(cfg, version)
        try:
            report = _checker(cfg).run(version, now=time.time())
        except ObserverError as e:
            fail(str(e))
        shifted = sorted(k for k, r in report.results.items() if r.shifted)
        if as_json:
            _dump(report.as_json() | {"shifted": shifted})
        else:
            _print_report(report, shifted)
        if fail_on_drift and shifted:
            raise typer.Exit(1)

    @drift_app.command("test")
    def test(reference: Path = typer.Option(..., "--reference", help="JSONL of {\"text\": ...} (reference)."),
             current: Path = typer.Option(..., "--current", help="JSONL of {\"text\": ...} (current)."),
             as_json: bool = typer.Option(False, "--json", help="Print the JSON result only."),
             alpha: float = typer.Option(0.05, min=1e-6, max=0.5, help="Significance level."),
             permutations: int = typer.Option(1000, min=99, max=100_000, help="Permutations."),
             method: str = typer.Option("mmd_rbf", help="mmd_rbf (default) or centroid."),
             seed: int = typer.Option(0, help="Permutation seed."),
             fail_on_drift: bool = typer.Option(False, help="Exit 1 when drift is detected."),
             config: ConfigOption = None) -> None:
        """Two-sample embedding test on two files of texts."""
        from observer.analyse.drift.embedder import make_embedder
        from observer.analyse.drift.mmd import METHODS, permutation_test
        from observer.config.drift import EmbedderSpec

        if method not in METHODS:
            fail(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
        ref_texts, cur_texts = read_texts(reference), read_texts(current)
        spec = load(config).drift.embedder if config else EmbedderSpec(cache_dir=None)
        try:
            embedder = make_embedder(spec)
            result = permutation_test(embedder.embed(ref_texts), embedder.embed(cur_texts),
                                      method=method, permutations=permutations, alpha=alpha,
                                      seed=seed)
        except ObserverError as e:
            fail(str(e))
        if as_json:
            typer.echo(jsonsafe.dumps(result.as_json()))
        else:
            verdict = "[red]drift[/red]" if result.drift else "[green]no drift[/green]"
            Console().print(f"{verdict}: {result.method} statistic {result.statistic:.5g}, p = {result.p_value:.4g} "
                            f"(α {alpha}, {permutations} permutations), n {result.n_reference} vs {result.n_current}")
        if fail_on_drift and result.drift:
            raise typer.Exit(1)

    @drift_app.command("report")
    def report_(version: str = typer.Option(..., "--version", help="Version to report on."),
                out: Path = typer.Option(..., "--out", help="HTML file to write."),
                config: ConfigOption = None) -> None:
        """Write an HTML report (Evidently view of the scalar features + our embedding tests)."""
        from observer.analyse.drift.features import extract
        from observer.analyse.drift.report import write_report

        cfg = load(config)
        _known(cfg, version)
        now = time.time()
        try:
            checker = _checker(cfg)
            report = checker.run(version, now=now)
            if report.baseline_hash is None:
                fail(report.message)
            baseline = checker.repo.load(report.baseline_hash)
            current = extract(checker.window(version, now=now), names=cfg.drift.features)
            write_report(report, baseline_features=baseline.features, current_features=current, out=out)
        except ObserverError as e:
            fail(str(e))
        typer.echo(f"wrote {out} ({report.status}: {report.message})")


def _user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "unknown"


def _meta(meta: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return dict(asdict(meta))


def _print_report(report: Any, shifted: list[str]) -> None:
    console = Console()
    console.print(f"version [b]{report.version}[/b] (model {report.model}): {report.status} — {report.message}")
    if report.baseline_hash:
        console.print(f"baseline {report.baseline_hash[:12]}, embedder {report.embedder}")
    table = Table("field", "method", "status", "statistic", "p-value", "BH p", "effect", "shifted", "n cur", "n base")
    for name, r in sorted(report.results.items()):
        table.add_row(name, r.method, r.status, f"{r.statistic:.4g}", f"{r.p_value:.4g}",
                      "" if r.p_adjusted is None else f"{r.p_adjusted:.4g}",
                      "" if r.effect_size is None else f"{r.effect_size:.3f} {r.effect}",
                      "yes" if name in shifted else "", str(r.n_current), str(r.n_baseline))
    console.print(table)
    for name, items in sorted(report.examples.items()):
        if items:
            console.print(f"most shifted {name}:")
            for x in items:
                console.print(f"  {x.score:+.3f}  {x.text}", highlight=False, markup=False)
