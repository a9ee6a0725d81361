"""Docs that run: the README's config example validates and every command it lists exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from observer.cli.main import app
from observer.config import parse_config
from observer.crosscheck import check_references

README = (Path(__file__).parent.parent.parent / "README.md").read_text()


def test_readme_config_example_is_a_valid_config() -> None:
    block = re.search(r"```yaml\n(.*?)```", README, re.S)
    assert block is not None
    cfg = parse_config(block.group(1), source="README.md", environ={})
    assert [v.name for v in cfg.fleet.versions] == ["stable", "canary"]
    assert check_references(cfg) == []


COMMANDS = sorted({m.split()[0] for m in re.findall(r"^\| `observer ([a-z-]+(?: [a-z-]+)?)", README, re.M)})


@pytest.mark.parametrize("command", COMMANDS)
def test_every_listed_command_exists(command: str) -> None:
    result = CliRunner().invoke(app, [*command.split(), "--help"])
    assert result.exit_code == 0, result.output


def test_the_table_lists_every_top_level_command() -> None:
    registered = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}
    assert set(COMMANDS) >= {n for n in registered if n}
    assert len(COMMANDS) >= 10


def test_install_and_quick_start_are_on_the_first_screen() -> None:
    headings = {line: n for n, line in enumerate(README.splitlines(), start=1) if line.startswith("## ")}
    assert headings["## Install"] < headings["## Quick start"] <= 40
    install = README.split("## Install", 1)[1].split("## ", 1)[0]
    assert "helm install observer" in install and "kubectl apply -k" in install


def test_the_code_map_names_every_area_and_nothing_that_is_gone() -> None:
    root = Path(__file__).parent.parent.parent
    section = README.split("## Code map", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`((?:observer|observer_dev|deploy)/[\w/.]*)`", section))
    assert sorted(n for n in named if not (root / n).exists()) == []
    areas = {f"observer/{p.name}/" for p in (root / "observer").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert areas - named == set()


def test_every_relative_link_in_the_readme_resolves() -> None:
    root = Path(__file__).parent.parent.parent
    links = re.findall(r"\]\(((?!https?://|#)[^)#]+)(?:#[^)]*)?\)", README)
    assert links
    assert [link for link in links if not (root / link).exists()] == []
