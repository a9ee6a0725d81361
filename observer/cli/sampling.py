"""`observer proxy`: the sampling reverse proxy of one version (sidecar or in front of a Service)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import typer

from observer.cli.common import ConfigOption, fail, load
from observer.errors import ObserverError
from observer.logs import configure as configure_logs


def register(app: typer.Typer) -> None:
    """Add this area's commands to `app`."""

    @app.command("fingerprint")
    def fingerprint_cmd(
        system_file: list[Path] | None = typer.Option(None, "--system-file", help="A system (or developer) "
                                                      "prompt, as the gateway sends it; repeat in message order."),
        sampling: str = typer.Option("{}", help="The request's sampling parameters as a JSON object."),
        chat_template: Path | None = typer.Option(None, help="A per-request chat template, if requests send one."),
    ) -> None:
        """Print the template and sampling hashes the observer computes for these inputs: the values to
        declare as prompt_template_hash / sampling_defaults_hash in fleet.versions."""
        import json

        from observer.conventions import fingerprint

        try:
            params = json.loads(sampling)
            texts = [p.read_text(encoding="utf-8") for p in system_file or []]
            template = chat_template.read_text(encoding="utf-8") if chat_template else None
        except (OSError, UnicodeDecodeError) as e:
            fail(f"could not read a prompt file: {e}")
        except ValueError as e:
            fail(f"--sampling is not JSON: {e}")
        if not isinstance(params, dict):
            fail("--sampling must be a JSON object, e.g. '{\"temperature\": 0.2}'")
        typer.echo(f"prompt_template_hash: {fingerprint.template_hash(texts, template)}")
        typer.echo(f"sampling_defaults_hash: {fingerprint.sampling_hash(params)}")

    @app.command("proxy")
    def proxy(
        version: str | None = typer.Option(None, "--version", help="Fleet version this proxy fronts."),
        version_from: Path | None = typer.Option(
            None, "--version-from", help="Read the version (and role) from this downward-API labels file, and "
                                         "follow it: for pods of an Argo Rollout. Instead of --version."),
        version_label: str = typer.Option("rollouts-pod-template-hash", help="Pod label naming the version "
                                                                              "(with --version-from)."),
        version_prefix: str = typer.Option("", help="Put before the label's value (as discovery's "
                                                    "version_prefix)."),
        version_refresh_seconds: float = typer.Option(5.0, min=0.1, help="How often the labels file is re-read."),
        config: ConfigOption = None,
        listen: str | None = typer.Option(None, help="HOST:PORT to listen on (default: from the config)."),
        upstream: str | None = typer.Option(None, help="Base URL of the vLLM server (default: its openai URL)."),
        ingest_url: str | None = typer.Option(
            None, help="Observer base URL to post samples to (default: sampling.proxy.ingest_url, else the "
                       "local store)."),
        log_level: str = typer.Option("INFO", help="Logging level."),
        log_format: str | None = typer.Option(None, help="Log format: text (default) or json (one object per "
                                                        "line); default from OBSERVER_LOG_FORMAT."),
    ) -> None:
        """Forward OpenAI-compatible traffic to one version and sample its replies."""
        from observer.sample.podlabels import VersionFile
        from observer.wiring.sidecar import run_proxy

        try:
            configure_logs(log_level, log_format)
        except ObserverError as e:
            fail(str(e))
        cfg = load(config)
        try:
            vf = (VersionFile(version_from, label=version_label, prefix=version_prefix,
                              refresh_seconds=version_refresh_seconds) if version_from else None)
            _run(run_proxy(cfg, version=version, listen=listen, upstream=upstream, ingest_url=ingest_url,
                           version_file=vf))
        except ObserverError as e:
            fail(str(e))
        except OSError as e:
            fail(f"could not start the proxy: {e}")


def _run(main: Coroutine[Any, Any, None]) -> None:
    """Run on uvloop when it is installed (fewer syscalls per forwarded chunk), else on asyncio."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    uvloop.run(main)
