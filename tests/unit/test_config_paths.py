"""Paths in the config: relative to the config file, defaults shipped in the package, and every shipped config
accepted from an empty working directory (the image's /data), the way the cluster starts it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from observer.config import load_config
from observer.config.base import SHIPPED
from observer.crosscheck import check_references
from observer.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
# An observer config is a YAML file under deploy/ that is no Kubernetes object (no `kind:` at the top).
SHIPPED_CONFIGS = sorted(p for p in (ROOT / "deploy").rglob("observer*.yaml")
                         if not any(line.startswith("kind:") for line in p.read_text().splitlines()))


def _embedded() -> list[tuple[str, str]]:
    """(where, text) of every observer config shipped inside a ConfigMap under deploy/ (sidecars' configs)."""
    out = []
    for path in sorted((ROOT / "deploy").rglob("*.yaml")):
        if "/helm/" in str(path):  # the chart's templates are not YAML until Helm renders them
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "ConfigMap" and "observer.yaml" in doc.get("data", {}):
                out.append((f"{path.relative_to(ROOT)}:{doc['metadata']['name']}", doc["data"]["observer.yaml"]))
    return out


EMBEDDED = _embedded()


def test_every_shipped_config_is_found() -> None:
    names = {str(p.relative_to(ROOT)) for p in SHIPPED_CONFIGS}
    assert {"deploy/observer.yaml", "deploy/k8s/central/observer.yaml", "deploy/k8s/single/observer.yaml"} <= names
    assert {w.split(":")[0] for w, _ in EMBEDDED} >= {"deploy/k8s/sidecar/vllm-with-observer-sidecar.yaml",
                                                      "deploy/argo/rollout-sidecar.yaml"}


@pytest.mark.parametrize(("where", "text"), EMBEDDED, ids=[w for w, _ in EMBEDDED])
def test_a_config_shipped_in_a_configmap_is_accepted_from_an_empty_working_directory(
        where: str, text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    etc = tmp_path / "etc-observer"
    etc.mkdir()
    (etc / "observer.yaml").write_text(text)
    (tmp_path / "data").mkdir()
    monkeypatch.chdir(tmp_path / "data")
    assert check_references(load_config(etc / "observer.yaml")) == []


@pytest.mark.parametrize("config", SHIPPED_CONFIGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_shipped_config_is_accepted_from_an_empty_working_directory(
        config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = load_config(config)
    assert check_references(cfg) == []
    assert all(Path(d).is_absolute() for d in cfg.quality.golden_dirs)


def test_defaults_name_what_the_package_ships(tmp_path: Path) -> None:
    (tmp_path / "observer.yaml").write_text("fleet: {versions: []}\n")
    cfg = load_config(tmp_path / "observer.yaml")
    assert cfg.quality.golden_dirs == [str(SHIPPED / "golden_sets")]
    assert Path(cfg.quality.judge.prompt_path) == SHIPPED / "evals" / "judge_prompt.yaml"
    assert Path(cfg.quality.judge.rubric_dir).is_dir() and Path(cfg.quality.shadow.pairwise.prompt_path).is_file()
    assert sorted(p.stem for p in (SHIPPED / "golden_sets").glob("*.yaml"))  # the examples travel with the code


def test_a_relative_path_is_read_from_the_config_files_directory(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "etc"
    (conf / "sets").mkdir(parents=True)
    (conf / "sets" / "mine.yaml").write_text((SHIPPED / "golden_sets" / "factual.yaml").read_text())
    (conf / "observer.yaml").write_text("fleet: {versions: []}\nquality: {golden_dirs: [sets]}\n")
    elsewhere = tmp_path / "data"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load_config(Path("../etc/observer.yaml"))
    assert cfg.quality.golden_dirs == [str(elsewhere / ".." / "etc" / "sets")]
    assert check_references(cfg) == []


def test_a_configmap_link_resolves_beside_the_link_not_inside_its_target(tmp_path: Path) -> None:
    # The kubelet's layout: /etc/observer/observer.yaml → ..data/observer.yaml → ..2026_12_05/observer.yaml,
    # and a second ConfigMap mounted at /etc/observer/golden_sets.
    mount = tmp_path / "etc-observer"
    stamped = mount / "..2026_12_05_00_00_00.1"
    stamped.mkdir(parents=True)
    (stamped / "observer.yaml").write_text("fleet: {versions: []}\nquality: {golden_dirs: [golden_sets]}\n")
    (mount / "..data").symlink_to(stamped.name)
    (mount / "observer.yaml").symlink_to("..data/observer.yaml")
    (mount / "golden_sets").mkdir()
    (mount / "golden_sets" / "factual.yaml").write_text((SHIPPED / "golden_sets" / "factual.yaml").read_text())
    cfg = load_config(mount / "observer.yaml")
    assert check_references(cfg) == []


def test_a_named_file_missing_is_refused_with_its_key_path_and_fix(tmp_path: Path) -> None:
    (tmp_path / "observer.yaml").write_text(
        "fleet: {versions: []}\n"
        "quality: {judge: {url: 'http://judge:8000/v1', model: j, rubric_dir: rubrics}}\n")
    [problem] = check_references(load_config(tmp_path / "observer.yaml"))
    assert problem.path == "quality.judge.rubric_dir"
    assert str(tmp_path / "rubrics") in str(problem)
    assert "mount it there" in str(problem) and "config file's directory" in str(problem)
    with pytest.raises(ConfigError, match="golden-set directory"):
        from observer.analyse.quality.checks import validate

        validate(load_config(_write(tmp_path, "quality: {golden_dirs: [/nonexistent/sets]}\n")))


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "other.yaml"
    p.write_text("fleet: {versions: []}\n" + text)
    return p
