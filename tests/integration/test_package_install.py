"""`pip install .` from pyproject.toml alone gives a working proxy, service and renderer; the wheel with its
dev extra runs the game day.

The package is copied without tests, lock file or dev tools into a temporary folder and installed into a
fresh virtualenv, as a user or a Dockerfile would. Without the `render` extra, `render --check` must fail
and name the extra (a check that cannot check is not a pass); with it, the committed artefacts check clean.
The dev package (simulator, game day) travels in the same wheel with the golden sets it reads as package
data, so the short game day passes from a folder that is not the repository (two of its scenarios here: the
healthy one and the one that replays a golden set; tests/integration/test_gameday.py runs them all).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Modules on the light path: each must import with the base dependencies alone.
LIGHT = ("observer.cli.main", "observer.service", "observer.wiring.root", "observer.wiring.sidecar",
         "observer.sample.upstream", "observer.sample.proxy")


def _run(cmd: list[str], *, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _source(tmp_path: Path) -> Path:
    """The package as a user gets it: pyproject, README and the two packages (links followed)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for package in ("observer", "observer_dev"):
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    return src


def test_wheel_from_pyproject_alone(tmp_path: Path) -> None:
    src = _source(tmp_path)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = str(env_dir / "bin" / "python")
    observer = str(env_dir / "bin" / "observer")
    # torch never comes in: the base install is the sidecar path.
    r = _run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(src)], cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]

    r = _run([py, "-c", "import sys, " + ", ".join(LIGHT) + "; print('torch' in sys.modules)"], cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr[-3000:]
    for cmd in (["proxy", "--help"], ["serve", "--help"]):
        r = _run([observer, *cmd], cwd=tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr
    # The shipped cluster configs start from an empty working directory: the golden sets, prompts and rubrics
    # they default to travel in the wheel (package data), not in the repository beside it.
    empty = tmp_path / "data"
    empty.mkdir()
    for shipped in ("deploy/k8s/central/observer.yaml", "deploy/k8s/single/observer.yaml"):
        r = _run([observer, "check-config", "--config", str(ROOT / shipped)], cwd=empty)
        assert r.returncode == 0, shipped + ": " + r.stdout + r.stderr

    check = [observer, "render", "--check", "--config", "deploy/observer.yaml"]
    r = _run(check, cwd=ROOT)
    assert r.returncode != 0, "render --check passed without the renderer's dependency"
    assert "observer[render]" in " ".join((r.stdout + r.stderr).split())

    r = _run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", f"{src}[render]"], cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    r = _run(check, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.timeout(900)
@pytest.mark.skipif(shutil.which("prometheus") is None, reason="the game day needs the prometheus binary")
def test_wheel_with_dev_extra_runs_the_short_gameday(tmp_path: Path) -> None:
    src = _source(tmp_path)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = str(env_dir / "bin" / "python")
    r = _run([py, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps", "-w", str(tmp_path / "dist"),
              str(src)], cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("observer-*.whl")
    r = _run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", f"{wheel}[dev]"], cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    away = tmp_path / "elsewhere"  # not the repository: the golden sets must come from the wheel
    away.mkdir()
    r = _run([str(env_dir / "bin" / "observer"), "gameday", "--short", "-s", "healthy", "-s", "worse"], cwd=away)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
